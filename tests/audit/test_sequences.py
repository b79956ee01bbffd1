"""Idempotence: sequence gaps, duplicates, retries, wrap-around and epochs."""

from __future__ import annotations

from conftest import Wire
from hypothesis import given
from hypothesis import strategies as st

from ksniff.audit.codes import DUPLICATE_SEQUENCE_NUMBER, OUT_OF_ORDER_SEQUENCE_NUMBER
from ksniff.audit.sequences import SEQ_MOD, Placement, place

P = 9


def started(wire: Wire) -> None:
    wire.init(None, P, 0)
    wire.produce(None, P, 0, [("events", 0, 0, 5, 0, 0)])


def test_in_order_batches_are_clean(wire: Wire):
    started(wire)
    wire.produce(None, P, 0, [("events", 0, 5, 5, 0, 5), ("events", 1, 0, 3, 0, 0)])
    assert wire.findings == []
    row = wire.finish().producers[0]
    assert (row.transactional_id, row.batches, row.records) == (None, 3, 13)


def test_gap_accepted_is_critical_and_rejected_a_warning(wire: Wire):
    started(wire)
    got = wire.produce(None, P, 0, [("events", 0, 8, 2, OUT_OF_ORDER_SEQUENCE_NUMBER, None)])
    assert wire.kinds(got) == [("sequence_gap", "warning")]
    ev = got[0].evidence
    assert (ev["expected_sequence"], ev["got_sequence"], ev["missing"], ev["broker_error"]) == (
        5,
        8,
        3,
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
    )
    # Rejected batches do not move the expected sequence.
    assert wire.produce(None, P, 0, [("events", 0, 5, 3, 0, 5)]) == []
    got = wire.produce(None, P, 0, [("events", 0, 10, 2, 0, 8)])
    assert wire.kinds(got) == [("sequence_gap", "critical")]
    # Accepted ones do.
    assert wire.produce(None, P, 0, [("events", 0, 12, 1, 0, 10)]) == []


def test_duplicate_written_twice_is_critical(wire: Wire):
    started(wire)
    got = wire.produce(None, P, 0, [("events", 0, 0, 5, 0, 77)])
    assert wire.kinds(got) == [("sequence_duplicate", "critical")]
    assert wire.finish().producers[0].records == 10


def test_duplicate_rejected_is_a_warning(wire: Wire):
    started(wire)
    wire.produce(None, P, 0, [("events", 0, 5, 5, 0, 5)])
    got = wire.produce(None, P, 0, [("events", 0, 2, 3, DUPLICATE_SEQUENCE_NUMBER, None)])
    assert wire.kinds(got) == [("sequence_duplicate", "warning")]


def test_retries_answered_as_duplicates_are_normal(wire: Wire):
    """The client retries on a new connection (its first one broke or timed out)."""
    started(wire)
    assert wire.produce(None, P, 0, [("events", 0, 0, 5, 0, 0)], conn=2) == []  # the original offset
    assert wire.produce(None, P, 0, [("events", 0, 0, 5, DUPLICATE_SEQUENCE_NUMBER, None)], conn=3) == []
    assert wire.finish().producers[0].records == 5


def test_a_resend_after_the_answer_on_the_same_connection_is_a_duplicate(wire: Wire):
    """The client had the answer and sent the batch again: deduplicated by the broker -> warning."""
    started(wire)
    got = wire.produce(None, P, 0, [("events", 0, 0, 5, DUPLICATE_SEQUENCE_NUMBER, None)])
    assert wire.kinds(got) == [("sequence_duplicate", "warning")]
    got = wire.produce(None, P, 0, [("events", 0, 0, 5, 0, 0)])
    assert wire.kinds(got) == [("sequence_duplicate", "warning")]
    assert got[0].evidence["deduplicated"] is True
    assert wire.finish().producers[0].records == 5


def test_retry_of_an_unanswered_batch(wire: Wire):
    started(wire)
    wire.produce(None, P, 0, [("events", 0, 5, 5, None, None)])  # the connection died first
    assert wire.produce(None, P, 0, [("events", 0, 5, 5, DUPLICATE_SEQUENCE_NUMBER, None)], conn=2) == []
    assert wire.produce(None, P, 0, [("events", 0, 10, 5, 0, 10)], conn=2) == []
    assert wire.finish().producers[0].records == 15


def test_unanswered_batches_explain_a_gap(wire: Wire):
    started(wire)
    wire.produce(None, P, 0, [("events", 0, 5, 5, None, None)])
    assert wire.produce(None, P, 0, [("events", 0, 10, 5, 0, 10)], conn=2) == []


def test_out_of_order_overlap(wire: Wire):
    started(wire)
    got = wire.produce(None, P, 0, [("events", 0, 3, 5, 0, 5)])
    assert wire.kinds(got) == [("sequence_out_of_order", "critical")]


def test_sequences_wrap_to_zero(wire: Wire):
    wire.produce(None, P, 0, [("events", 0, SEQ_MOD - 3, 3, 0, 0)])
    assert wire.produce(None, P, 0, [("events", 0, 0, 5, 0, 3)]) == []
    got = wire.produce(None, P, 0, [("events", 0, SEQ_MOD - 3, 3, 0, 8)])
    assert wire.kinds(got) == [("sequence_duplicate", "critical")]


def test_a_new_epoch_starts_at_zero(wire: Wire):
    started(wire)
    assert wire.produce(None, P, 1, [("events", 0, 0, 5, 0, 5)]) == []
    got = wire.produce(None, P, 2, [("events", 0, 4, 5, 0, 10)])
    assert wire.kinds(got) == [("sequence_gap", "critical")]
    assert got[0].evidence["new_epoch"] is True


def test_first_batch_mid_stream_sets_the_pace(wire: Wire):
    assert wire.produce(None, P, 3, [("events", 0, 1234, 5, 0, 0)]) == []
    assert wire.produce(None, P, 3, [("events", 0, 1239, 5, 0, 5)]) == []


def test_gap_after_capture_loss_is_info(wire: Wire):
    started(wire)
    wire.lost()
    got = wire.produce(None, P, 0, [("events", 0, 10, 5, 0, 10)], unverified=True)
    assert wire.kinds(got) == [("sequence_gap", "info")]
    assert got[0].evidence["unverified"] is True


def test_duplicate_after_capture_loss_is_never_critical(wire: Wire):
    started(wire)
    wire.lost()
    got = wire.produce(None, P, 0, [("events", 0, 0, 5, 0, 50)])
    assert wire.kinds(got) == [("sequence_duplicate", "warning")]


def test_acks_zero_batches_count_as_written(wire: Wire):
    wire.produce(None, P, 0, [("events", 0, 0, 5, None, None)], acks=0)
    assert wire.produce(None, P, 0, [("events", 0, 5, 5, None, None)], acks=0) == []
    assert wire.finish().producers[0].records == 10


@given(st.integers(0, SEQ_MOD - 1), st.lists(st.integers(1, 500), min_size=1, max_size=30))
def test_consecutive_batches_are_always_in_order(start: int, sizes: list[int]):
    expected = start
    for n in sizes:
        assert place(expected, expected, n) is Placement.IN_ORDER
        after = (expected + n) % SEQ_MOD
        assert place(after, expected, n) is Placement.DUPLICATE
        assert place(expected, after, n) is Placement.GAP
        expected = after
