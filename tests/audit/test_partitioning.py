"""The fold split by producer key (as a Spark engine runs it) gives what the single fold gives."""

from __future__ import annotations

from conftest import APP2, Wire

from ksniff.audit import (
    CONTEXT_KEY,
    AuditConfig,
    Auditor,
    is_context,
    merge_outputs,
    producer_key,
    producer_keys,
)


def story() -> Wire:
    wire = Wire(timeout_ms=5000)
    wire.init("a", 1, 0)
    wire.init(None, 9, 0, conn=3)
    wire.add_partitions("a", 1, 0, [("orders", 0)])
    wire.produce("a", 1, 0, [("orders", 0, 0, 5, 0, 0)])
    wire.produce(None, 9, 0, [("events", 0, 0, 5, 0, 0), ("events", 1, 0, 5, 0, 0)], conn=3)
    wire.end_txn("a", 1, 0)
    wire.markers(1, 0, True, [("orders", 0)])
    wire.init("b", 2, 0, conn=2, client=APP2, timeout_ms=5000)
    wire.add_partitions("b", 2, 0, [("orders", 1)], conn=2, client=APP2)
    wire.produce("b", 2, 0, [("orders", 1, 0, 5, 0, 0)], conn=2, client=APP2)
    wire.lost(conn=2, client=APP2)
    wire.produce(None, 9, 0, [("events", 0, 9, 5, 0, 5)], conn=3)
    wire.offset_commit("g", {("events", 0): 10})
    wire.offset_commit("g", {("events", 0): 3})
    wire.init("a", 1, 1, conn=4)
    wire.add_partitions("a", 1, 0, [("orders", 2)], err=90)
    wire.produce(None, 9, 0, [("events", 1, 5, 5, None, None)], conn=3)
    wire.ended(conn=3, reason="rst")
    wire.tick(10)
    return wire


def partitioned(events: list, end_ts: float):
    keys = sorted({k for e in events for k in producer_keys(e)})
    outputs = []
    for key in [*keys, CONTEXT_KEY]:
        auditor = Auditor(AuditConfig(txn_timeout_ms=5000), key=key)
        for e in events:
            if is_context(e) or key in producer_keys(e):
                auditor.feed(e)
        outputs.append(auditor.finish(end_ts))
    return merge_outputs(outputs)


def test_partitioned_run_equals_the_single_fold():
    wire = story()
    single = wire.finish()
    split = partitioned(wire.events, wire.ts)
    assert split.transactions == single.transactions
    assert split.findings == single.findings
    assert split.producers == single.producers
    kinds = {f.kind for f in single.findings}
    assert {"sequence_gap", "producer_fenced", "hanging_transaction", "capture_gap",
            "offset_commit_backwards", "unanswered_request"} <= kinds


def test_producer_keys():
    wire = story()
    keys = [producer_key(e) for e in wire.events]
    assert keys[:4] == ["a", "pid:9", "a", "a"]
    assert "group:g" in keys
    assert producer_key(wire.events[-1]) is None  # ConnectionEnded: context
