"""`-P ID` shows every step of a transactional producer, with what it asked and what the broker answered
(issue 15), and the exchange rows behind it carry the same (the export of AddPartitionsToTxn v0-3 had no
ids and said NONE where the broker fenced a partition). Real captures of real clients and brokers."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.robustness.robustness_support import cli

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"


def timeline(capture: str, producer: str) -> list[str]:
    r = cli("audit", PCAPS / capture, "-q", "-P", producer, "--exit-zero", env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"Producer {producer}"))
    return [re.sub(r"\s+", " ", line).strip() for line in lines[start:]]


def steps(lines: list[str]) -> list[str]:
    """The rows of the timeline (time, instance, API and the rest), without the findings set in."""
    return [line.split(" ", 2)[2] for line in lines if re.match(r"\d\d:\d\d:\d\d\.\d{3} #\d ", line)]


def test_a_consume_transform_produce_transaction_shows_every_step():
    rows = steps(timeline("ctp_confluent_tansu.pcap", "tx-ctp"))
    assert rows[:6] == [
        "InitProducerId 0 ok",
        "AddOffsetsToTxn group ctp-group 0 ok",
        "TxnOffsetCommit group ctp-group ctp-in-1 0 ok",
        "AddPartitionsToTxn ctp-out-1 0 ok",
        "Produce ctp-out-1 0-2 0 ok @0",
        "EndTxn commit 0 ok",
    ]


def test_commit_and_abort_and_the_fenced_add_partitions_are_told_apart():
    lines = timeline("txn_confluent_tansu.pcap", "tx-A")
    rows = steps(lines)
    assert [r for r in rows if r.startswith("EndTxn")] == [
        "EndTxn commit 0 ok",
        "EndTxn abort 0 ok",
        "EndTxn commit 0 ok",
        "EndTxn commit 1 ok",
    ]
    # The zombie's AddPartitionsToTxn, refused per partition, is a row of its own with the partition.
    assert "AddPartitionsToTxn txn-out-0 0 PRODUCER_FENCED on txn-out-0" in rows
    assert "AddPartitionsToTxn txn-out-0, txn-out-1 1 ok" in rows


def test_exchange_rows_carry_the_ids_the_request_carries_and_every_answer(tmp_path):
    r = cli("audit", PCAPS / "anomalies_tansu.pcap", "--csv", tmp_path, "--exit-zero")
    assert r.exit_code == 0, r.output
    with open(tmp_path / "exchanges.csv", newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row["api"] == "AddPartitionsToTxn"]
    fenced = [row for row in rows if row["worst_error"] == "PRODUCER_FENCED"]
    assert len(fenced) == 1
    row = fenced[0]
    assert (row["transactional_id"], row["producer_id"], row["producer_epoch"]) == ("tx-zombie", "2", "0")
    assert json.loads(row["partitions"]) == ["raw-1"]
    assert json.loads(row["partition_errors"]) == ["raw-1 PRODUCER_FENCED"]
    assert all(row["transactional_id"] and row["producer_id"] for row in rows)
    assert {row["worst_error"] for row in rows} == {"NONE", "PRODUCER_FENCED"}


@pytest.mark.parametrize(
    "asked, expected",
    [
        ("tx-zombi", ["Closest: tx-zombie"]),
        ("nosuch", ["Transactional ids: tx-hang, tx-zombie", "Producer ids: 1, 2, 3"]),
    ],
)
def test_an_unknown_producer_lists_the_closest_or_the_known_ids(asked, expected):
    r = cli("audit", PCAPS / "anomalies_tansu.pcap", "-q", "-P", asked, "--exit-zero")
    lines = r.stdout.splitlines()
    at = lines.index(f"No producer matches '{asked}'.")
    assert lines[at + 1 : at + 1 + len(expected)] == expected


def test_the_story_of_a_transactional_id_across_its_instances():
    import ksniff
    from ksniff.report.producers import transactional_stories

    result = ksniff.audit(str(PCAPS / "txn_confluent_tansu.pcap")).result
    (story,) = transactional_stories(result.producers, result.account())
    assert story.transactional_id == "tx-A"
    assert story.instances == [(1, 0), (1, 1)]  # in the order they appeared
    (takeover,) = story.takeovers
    assert (takeover.producer_id, takeover.producer_epoch) == (1, 0)
    assert (takeover.evidence["new_producer_id"], takeover.evidence["new_epoch"]) == (1, 1)
    assert takeover.evidence["client_id"] == "corpus-confluent-2"  # who took over
    assert dict(story.outcomes) == {"commit": 3, "abort": 1}
    assert dict(story.severities) == {"warning": 2, "info": 1}
    r = cli("audit", PCAPS / "txn_confluent_tansu.pcap", "--exit-zero", env={"COLUMNS": "120"})
    row = next(line for line in r.stdout.splitlines() if line.startswith("tx-A "))
    assert "1/0 -> 1/1" in row and "1/0 -> 1/1 by 127.0.0.1:49586" in row and "3 committed" in row
