"""Idempotence: where a batch's base sequence stands against the next one expected.

Per producer id, epoch and partition, each batch must start at last sequence + 1; sequences are int32 and
wrap from 2^31-1 to 0, and a new epoch starts again at 0. A batch ahead of the expected sequence leaves a
gap; one whose whole range was already written is a duplicate; one that starts behind but runs past it
overlaps what was written and is out of order.
"""

from __future__ import annotations

from enum import Enum

from ksniff.decode.events import SEQUENCE_MODULUS as SEQ_MOD
from ksniff.decode.events import last_sequence as _batch_last_sequence


class Placement(str, Enum):
    IN_ORDER = "in_order"
    GAP = "gap"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"


def last_sequence(base: int, records: int) -> int:
    """The last sequence of `records` records from `base` (at least one: an empty batch still takes one)."""
    return _batch_last_sequence(base, max(records, 1) - 1)


def next_sequence(last: int) -> int:
    return (last + 1) % SEQ_MOD


def place(expected: int, base: int, records: int) -> Placement:
    ahead = (base - expected) % SEQ_MOD
    if ahead == 0:
        return Placement.IN_ORDER
    # Half the sequence space either way: ahead means skipped, behind means already written.
    if ahead < SEQ_MOD // 2:
        return Placement.GAP
    behind = SEQ_MOD - ahead
    return Placement.DUPLICATE if max(records, 1) <= behind else Placement.OUT_OF_ORDER


def distance(expected: int, base: int) -> int:
    """How many sequence numbers lie from `expected` up to `base` (the size of a gap)."""
    return (base - expected) % SEQ_MOD
