"""What the CSV tables of real captures say, checked as an incident reviewer would: every
AddPartitionsToTxn row names its transactional id, producer id and epoch and the broker's per-partition
answer; findings and transactions name their client; times are ISO 8601 UTC to the microsecond."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from ksniff.cli import main
from tests.capture.capture_builders import Flow, ethernet, pcap_bytes
from tests.decode.decode_builders import frame

PCAPS = Path(__file__).parent.parent / "pcaps"
FENCED_BY_PARTITION = ("txn_confluent_tansu", "anomalies_tansu")  # AddPartitionsToTxn v0 / v1


def _export(tmp_path: Path, *captures: Path, extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    out = tmp_path / "csv"
    run = CliRunner().invoke(
        main,
        [
            "audit",
            *map(str, captures),
            "--csv",
            str(out),
            "--json",
            str(tmp_path / "r.json"),
            "--exit-zero",
            "-q",
            "--no-color",
            *extra,
        ],
    )
    assert run.exit_code == 0, run.output
    tables = {}
    for path in out.glob("*.csv"):
        with open(path, encoding="utf-8", newline="") as fh:
            tables[path.stem] = list(csv.DictReader(fh))
    return tables, json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("name", FENCED_BY_PARTITION)
def test_add_partitions_rows_carry_the_ids_and_the_per_partition_answer(name, tmp_path):
    tables, _doc = _export(tmp_path, PCAPS / f"{name}.pcap")
    expect = json.loads((PCAPS / f"{name}.expect.json").read_text())
    rows = [r for r in tables["exchanges"] if r["api"] == "AddPartitionsToTxn"]
    assert len(rows) == expect["exchanges_by_api"]["AddPartitionsToTxn"]
    assert all(r["transactional_id"] and r["producer_id"] and r["producer_epoch"] for r in rows)
    fenced = [r for r in rows if r["worst_error"] == "PRODUCER_FENCED"]
    assert {r["transactional_id"] for r in fenced} == {f["transactional_id"] for f in expect["fenced"]}
    for row in fenced:
        # v0-3 answers have no top-level error: the cell is empty, not a NONE the broker never said
        assert row["error_code"] == "" and row["error"] == ""
        items = json.loads(row["partition_errors"])
        assert items and all(i.endswith(" PRODUCER_FENCED") for i in items)
        assert {i.split(" ")[0] for i in items} <= set(json.loads(row["partitions"]))
        # the zombie's epoch is the older one: a reviewer sees who was fenced
        epochs = {int(r["producer_epoch"]) for r in rows if r["transactional_id"] == row["transactional_id"]}
        assert int(row["producer_epoch"]) < max(epochs)
    accepted = [r for r in rows if r["worst_error"] == "NONE"]
    assert accepted and all(r["partition_errors"] == "" and r["error"] == "" for r in accepted)


def test_findings_and_transactions_name_their_client(tmp_path):
    tables, doc = _export(tmp_path, PCAPS / "txn_confluent_tansu.pcap")
    for row, finding in zip(tables["findings"], doc["findings"], strict=True):
        assert row["client"] == finding["evidence"]["client"]
        assert row["unverified"] == "False"
    clients = {c for p in doc["producers"] for c in p["clients"]}
    assert tables["transactions"] and all(r["client"] in clients for r in tables["transactions"])
    # the first instance ran the first three transactions, the one that took over the last
    assert len({r["client"] for r in tables["transactions"]}) == 2
    assert [t["client"] for t in doc["transactions"]] == [r["client"] for r in tables["transactions"]]


def test_findings_that_rest_on_lost_bytes_say_unverified(tmp_path):
    tables, doc = _export(tmp_path, PCAPS / "txn_confluent_tansu_loss.pcap")
    flags = [r["unverified"] == "True" for r in tables["findings"]]
    assert flags == [bool(f["evidence"].get("unverified")) for f in doc["findings"]]
    assert any(flags)


def test_time_text_is_iso_8601_utc_with_microseconds(tmp_path):
    tables, _doc = _export(tmp_path, PCAPS / "txn_confluent_tansu.pcap")
    for table, column in (
        ("exchanges", "ts"),
        ("exchanges", "response_ts"),
        ("batches", "ts"),
        ("transactions", "start_ts"),
        ("findings", "ts"),
    ):
        for row in tables[table]:
            if not row[column]:
                assert row[column + "_utc"] == ""
                continue
            text = row[column + "_utc"]
            assert len(text) == 27 and text[10] == "T" and text.endswith("Z"), text
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
            assert when.tzinfo == timezone.utc
            assert abs(when.timestamp() - float(row[column])) < 1e-6


def _add_partitions_v4_capture(path: Path) -> Path:
    """AddPartitionsToTxn v4 as a broker sends it to the coordinator: one request for one transaction
    answered PRODUCER_FENCED on a partition, one for two transactions."""
    req, resp = AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
    topic = req.AddPartitionsToTxnTopic
    result = resp.AddPartitionsToTxnResult
    topic_result = result.AddPartitionsToTxnTopicResult
    part = topic_result.AddPartitionsToTxnPartitionResult

    def txn(tid, pid, epoch):
        return req.AddPartitionsToTxnTransaction(
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            verify_only=True,
            topics=[topic(name="orders", partitions=[0, 1])],
        )

    def answer(tid, errors):
        return result(
            transactional_id=tid,
            topic_results=[
                topic_result(
                    name="orders",
                    results_by_partition=[
                        part(partition_index=i, partition_error_code=e) for i, e in enumerate(errors)
                    ],
                )
            ],
        )

    flow = Flow(client=("10.0.0.1", 40001), server=("10.0.0.2", 9092))
    packets = list(flow.handshake())
    calls = [
        (
            req(transactions=[txn("tx-one", 7, 3)], version=4),
            resp(
                throttle_time_ms=0,
                error_code=0,
                results_by_transaction=[answer("tx-one", [55, 90])],
                version=4,
            ),
        ),
        (
            req(transactions=[txn("tx-a", 8, 0), txn("tx-b", 9, 0)], version=4),
            resp(
                throttle_time_ms=0,
                error_code=0,
                results_by_transaction=[answer("tx-a", [0, 0]), answer("tx-b", [0, 48])],
                version=4,
            ),
        ),
    ]
    for corr, (request, response) in enumerate(calls, 1):
        packets.append(flow.send(True, frame(request, 4, corr, "broker-1")))
        packets.append(flow.send(False, frame(response, 4, corr)))
    path.write_bytes(pcap_bytes([(1_700_000_000.0 + i * 0.01, ethernet(p)) for i, p in enumerate(packets)]))
    return path


def test_add_partitions_v4_rows(tmp_path):
    tables, _doc = _export(tmp_path, _add_partitions_v4_capture(tmp_path / "v4.pcap"))
    one, two = [r for r in tables["exchanges"] if r["api"] == "AddPartitionsToTxn"]
    assert (one["transactional_id"], one["producer_id"], one["producer_epoch"]) == ("tx-one", "7", "3")
    # the worst error, not OPERATION_NOT_ATTEMPTED (which only says another partition failed first)
    assert one["error"] == "NONE" and one["worst_error"] == "PRODUCER_FENCED"
    assert json.loads(one["partition_errors"]) == [
        "orders-0 OPERATION_NOT_ATTEMPTED",
        "orders-1 PRODUCER_FENCED",
    ]
    # a batch of two transactions: no one id for the row
    assert two["transactional_id"] == "" and two["worst_error"] == "INVALID_TXN_STATE"
    assert json.loads(two["partition_errors"]) == ["orders-1 INVALID_TXN_STATE"]


def test_produce_rows_carry_the_worst_of_their_partitions_answers(tmp_path):
    tables, _doc = _export(tmp_path, PCAPS / "anomalies_tansu.pcap")
    answers: dict[tuple[str, str], list[str]] = {}
    for b in tables["batches"]:
        answers.setdefault((b["correlation_id"], b["conn"]), []).append(b["error"])
    produce = [r for r in tables["exchanges"] if r["api"] == "Produce"]
    assert {r["worst_error"] for r in produce} >= {"NONE", "PRODUCER_FENCED", "DUPLICATE_SEQUENCE_NUMBER"}
    for row in produce:
        errors = [e for e in answers[(row["correlation_id"], row["conn"])] if e != "NONE"]
        assert row["worst_error"] == (errors[0] if errors else "NONE")
        assert [e.rsplit(" ", 1)[1] for e in json.loads(row["partition_errors"] or "[]")] == errors
