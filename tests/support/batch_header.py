"""A decoded record batch header (ksniff.decode.events.RecordBatchHeader) for tests that build events by
hand: a plain magic-2 data batch, with any field overridden by keyword."""

from __future__ import annotations

from ksniff.decode.events import RecordBatchHeader


def batch_header(
    pid: int, epoch: int, seq: int, count: int, *, transactional: bool, **fields
) -> RecordBatchHeader:
    """`count` records from base sequence `seq` of producer `pid`/`epoch`; `fields` override the rest."""
    plain = dict(
        base_offset=0,
        batch_length=100,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        crc_ok=True,
        attributes=0x10 if transactional else 0,
        last_offset_delta=count - 1,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
        codec="none",
        transactional=transactional,
        control=False,
        control_type=None,
        coordinator_epoch=None,
    )
    return RecordBatchHeader(**{**plain, **fields})
