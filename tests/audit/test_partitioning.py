"""The fold split by producer key (as a Spark engine runs it) gives what the single fold gives."""

from __future__ import annotations

from conftest import APP2, Wire

from ksniff.audit import (
    CONTEXT_KEY,
    AuditConfig,
    Auditor,
    fold_groups,
    is_context,
    merge_outputs,
    producer_key,
    producer_keys,
    touched_keys,
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
    assert {
        "sequence_gap",
        "producer_fenced",
        "hanging_transaction",
        "capture_gap",
        "offset_commit_backwards",
        "unanswered_request",
    } <= kinds


def test_producer_keys():
    wire = story()
    keys = [producer_key(e) for e in wire.events]
    assert keys[:4] == ["a", "pid:9", "a", "a"]
    assert "group:g" in keys
    assert producer_key(wire.events[-1]) is None  # ConnectionEnded: context


def grouped(events: list, end_ts: float):
    """The fold per group of keys that share state (`touched_keys`, `fold_groups`), as Spark runs it."""
    group_of = fold_groups(touched_keys(e) for e in events)
    groups: dict[str, set[str]] = {}
    for key, group in group_of.items():
        groups.setdefault(group, set()).add(key)
    outputs = []
    for group, keys in [*sorted(groups.items()), (CONTEXT_KEY, {CONTEXT_KEY})]:
        auditor = Auditor(AuditConfig(txn_timeout_ms=5000), key=group, keys=frozenset(keys))
        for e in events:
            if is_context(e) or keys & set(producer_keys(e)):
                auditor.feed(e)
        outputs.append(auditor.finish(end_ts))
    return merge_outputs(outputs), group_of


def test_keys_sharing_a_producer_id_or_group_fold_together():
    wire = story()
    wire.produce(None, 1, 1, [("orders", 3, 0, 5, 0, 0)])  # "a"'s producer id, written idempotently
    wire.txn_offset_commit("b", 2, 0, "g", {("orders", 1): 1}, conn=2, client=APP2)  # "b" commits to g too
    single = wire.finish()
    split, group_of = grouped(wire.events, wire.ts)
    assert group_of["a"] == group_of["pid:1"]
    assert group_of["b"] == group_of["group:g"]
    assert len({group_of["a"], group_of["b"], group_of["pid:9"]}) == 3
    assert all(g.startswith("@") for g in group_of.values())
    assert split.transactions == single.transactions
    assert split.findings == single.findings
    assert split.producers == single.producers


def test_touched_keys():
    wire = story()
    assert touched_keys(wire.events[0]) == {"a", "pid:1"}  # InitProducerId: the id it was handed
    assert touched_keys(wire.events[-1]) == frozenset()  # context: every group sees it
    assert fold_groups([{"x"}, {"y", "z"}, {"z", "w"}]) == {"x": "@x", "y": "@w", "z": "@w", "w": "@w"}
