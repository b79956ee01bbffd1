"""The partition logs (ksniff.audit.partlog) on real captures of consumers: what each read_committed
consumer was given, against what its own log says it delivered (the expectations' `delivered`)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from test_corpus import audit, fed_auditor

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


def delivered_aborted(name: str) -> dict[str, set[tuple[int, int]]]:
    """Per read_committed consumer (client id): (partition, transaction) of aborted records it delivered."""
    doc = json.loads((PCAPS / f"{name}.expect.json").read_text())
    out: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for client_id, log in doc["delivered"].items():
        if log["isolation"] != "read_committed":
            continue
        for rnd in log["rounds"]:
            for partition, _offset, value in rnd:
                txn = int(value.split()[0][3:])
                if txn in (2, 4):  # the scenario's aborted transactions
                    out[client_id].add((partition, txn))
    return out


@pytest.mark.parametrize("name", ["consume_tansu", "consume_mock"])
def test_aborted_reads_are_what_the_consumers_delivered(name):
    found: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for f in audit(name).findings:
        if f.kind == "aborted_read":
            assert f.severity == "critical" and f.topic == "reads"
            txn = 2 if f.evidence["first_offset"] == 3 else 4
            found[f.evidence["client_id"]].add((f.partition, txn))
    assert found == delivered_aborted(name)


def test_open_when_read_only_on_the_mock():
    # tansu holds read_committed fetches at the LSO until txn 4 ends; the mock reports the end of the log
    # as the LSO while it is open and hands its records out
    def open_reads(name):
        return {
            (f.evidence["client_id"], f.partition)
            for f in audit(name).findings
            if f.kind == "aborted_read" and f.evidence["open_when_read"]
        }

    assert open_reads("consume_tansu") == set()
    assert open_reads("consume_mock") == {
        (c, p) for c in ("corpus-rc-confluent", "corpus-rc-aiokafka") for p in (0, 1)
    }


@pytest.mark.parametrize("name", ["consume_tansu", "consume_mock"])
def test_the_log_as_seen(name):
    parts = {(p.topic, p.partition): p for p in audit(name).partitions}
    for partition in (0, 1):
        p = parts[("reads", partition)]
        kinds = [(row["first_offset"], row["kind"], row["outcome"]) for row in p.log]
        # 4 transactions of 2 records, each followed by its marker
        assert kinds == [
            (0, "transactional", "commit"),
            (2, "COMMIT", None),
            (3, "transactional", "abort"),
            (5, "ABORT", None),
            (6, "transactional", "commit"),
            (8, "COMMIT", None),
            (9, "transactional", "abort"),
            (11, "ABORT", None),
        ]
        assert all(row["acked"] for row in p.log if row["kind"] == "transactional")
        assert (p.acked_batches, p.acked_records, p.commit_markers, p.abort_markers) == (4, 8, 2, 2)
        assert p.high_watermark == p.end_offset == 12
        (producer,) = p.producers
        assert (producer["records"], producer["first_sequence"], producer["last_sequence"]) == (8, 0, 7)
        readers = {r["client_id"]: r for r in p.readers}
        assert readers["corpus-ru-confluent"]["isolation_level"] == "read_uncommitted"
        assert all(r["next_offset"] == 12 for r in readers.values())


def test_clean_corpus_has_none_of_these_findings():
    from ksniff.audit.partlog import KINDS

    for exp in sorted(PCAPS.glob("*.expect.json")):
        name = exp.name.removesuffix(".expect.json")
        doc = json.loads(exp.read_text())
        expected = {w["kind"] for w in doc["findings"]}
        unexpected = [f for f in audit(name).findings if f.kind in KINDS and f.kind not in expected]
        assert unexpected == [], name


@pytest.mark.parametrize("name", ["idempotent_none_tansu", "consume_tansu"])
def test_what_each_partition_remembers_stays_within_its_bound(name, monkeypatch):
    """A long capture cannot grow a partition's memory without bound: past MAX_BATCHES placed batches the
    oldest are forgotten (and counted), and so are their entries in the sequence index, whether the batches
    were acknowledged (a producer-only capture) or fetched."""
    from ksniff.audit import partlog

    monkeypatch.setattr(partlog, "MAX_BATCHES", 3)
    auditor, last_ts = fed_auditor(name)
    logs = list(auditor.state.logs.logs.values())
    assert sum(lg.forgotten for lg in logs) > 0  # the capture placed more than the bound
    for lg in logs:
        assert len(lg.at) <= 3
        assert len(lg.by_sequence) <= 3
    summaries = auditor.finish(last_ts).partitions
    assert sum(s.forgotten for s in summaries) == sum(lg.forgotten for lg in logs)
