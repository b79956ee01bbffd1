"""Capture loss, unanswered requests, consumer offsets, and exchanges captured twice."""

from __future__ import annotations

import dataclasses

from conftest import Wire

from ksniff.audit import CONTEXT_KEY


def test_capture_gap_is_info(wire: Wire):
    (gap,) = wire.lost(length=1582)
    assert (gap.kind, gap.severity) == ("capture_gap", "info")
    assert gap.evidence["length"] == 1582 and gap.evidence["direction"] == "to_broker"


def test_capture_gap_is_reported_by_the_context_group_only():
    assert Wire(key="orders-txn").lost() == []
    assert len(Wire(key=CONTEXT_KEY).lost()) == 1


def test_requests_left_unanswered_by_a_close(wire: Wire):
    wire.init("t", 7, 0)
    wire.add_partitions("t", 7, 0, [("orders", 0)])
    wire.produce("t", 7, 0, [("orders", 0, 0, 5, None, None)])
    got = wire.ended(reason="rst")
    assert wire.kinds(got) == [("unanswered_request", "warning")]
    assert got[0].transactional_id == "t" and got[0].evidence["close_reason"] == "rst"


def test_unanswered_at_the_end_of_the_capture_is_not_a_finding(wire: Wire):
    wire.produce(None, 9, 0, [("events", 0, 0, 5, None, None)])
    assert wire.ended(reason="end_of_capture") == []


def test_unanswered_on_an_evicted_connection_is_info(wire: Wire):
    wire.produce(None, 9, 0, [("events", 0, 0, 5, None, None)])
    assert wire.kinds(wire.ended(reason="idle")) == [("unanswered_request", "info")]


def test_unanswered_after_capture_loss_is_info(wire: Wire):
    wire.produce(None, 9, 0, [("events", 0, 0, 5, None, None)])
    wire.lost()
    got = wire.ended(reason="fin")
    assert wire.kinds(got) == [("unanswered_request", "info")] and got[0].evidence["unverified"]


def test_offset_commit_moving_backwards(wire: Wire):
    assert wire.offset_commit("g", {("in", 0): 100}) == []
    assert wire.offset_commit("g", {("in", 0): 120}) == []
    got = wire.offset_commit("g", {("in", 0): 90})
    assert wire.kinds(got) == [("offset_commit_backwards", "critical")]  # stored: the group reads again
    assert (got[0].group, got[0].topic, got[0].partition) == ("g", "in", 0)
    assert got[0].evidence["previous_offset"] == 120
    got = wire.offset_commit("g", {("in", 0): 0}, generation=-1, member="")
    assert wire.kinds(got) == [("offset_commit_backwards", "info")]
    assert wire.offset_commit("g", {("in", 0): 5}, err=22) == []  # rejected: nothing moved


def test_an_exchange_captured_at_both_ends_counts_once(wire: Wire):
    wire.init(None, 9, 0)
    wire.produce(None, 9, 0, [("events", 0, 0, 5, 0, 0)])
    batch_ex = wire.events[-1]
    wire.feed(dataclasses.replace(batch_ex, conn=50, request_ts=batch_ex.request_ts + 0.0005))
    assert wire.findings == []
    assert wire.finish().producers[0].records == 5


def test_the_fold_is_deterministic():
    def run() -> tuple:
        wire = Wire()
        wire.init("t", 7, 0)
        wire.add_partitions("t", 7, 0, [("orders", 0)])
        wire.produce("t", 7, 0, [("orders", 0, 3, 5, 0, 1), ("orders", 1, 0, 5, 0, 1)])
        wire.lost()
        wire.init("t", 7, 1, conn=2)
        wire.produce("t", 7, 0, [("orders", 0, 8, 5, 0, 9)])
        out = wire.finish(after=100)
        return out.producers, out.transactions, out.findings

    assert run() == run()
