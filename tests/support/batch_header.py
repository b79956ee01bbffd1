"""A decoded record batch header (ksniff.decode.events.RecordBatchHeader) for tests that build events by
hand: a plain magic-2 data batch, with any field overridden by keyword."""

from __future__ import annotations

from ksniff.decode.events import RecordBatchHeader

# The fields of a plain data batch that do not depend on the producer or the records.
PLAIN = {
    "base_offset": 0,
    "batch_length": 100,
    "partition_leader_epoch": 0,
    "magic": 2,
    "crc": 0,
    "crc_ok": True,
    "base_timestamp": 0,
    "max_timestamp": 0,
    "codec": "none",
    "control": False,
    "control_type": None,
    "coordinator_epoch": None,
}


def batch_header(
    pid: int, epoch: int, seq: int, count: int, *, transactional: bool, **fields
) -> RecordBatchHeader:
    """`count` records from base sequence `seq` of producer `pid`/`epoch`; `fields` override the rest."""
    producer = {
        "producer_id": pid,
        "producer_epoch": epoch,
        "base_sequence": seq,
        "records_count": count,
        "last_offset_delta": count - 1,
        "transactional": transactional,
        "attributes": 0x10 if transactional else 0,
    }
    return RecordBatchHeader(**{**PLAIN, **producer, **fields})
