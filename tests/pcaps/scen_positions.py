"""Scenario 10: a consumer whose position jumps, over a plain socket (kafka-python's protocol classes).

An idempotent producer writes three batches of 3 records to partition 0 (offsets 0-8). A consumer on one
connection, read_committed, with no group and no ListOffsets or OffsetFetch: Fetch from 0 with a small
partition_max_bytes (the broker answers with what fits, at least one batch); its next Fetch asks from 7
(past what it was given: a skip), the next from 1 (before it: backwards). The expectations follow from
the requests themselves and the end of each answer as the broker sent it (`broker_answers`).
"""

from __future__ import annotations

from pathlib import Path

from harness import Ledger
from kafka.protocol.consumer import FetchRequest
from raw import RawConnection, record_batch
from raw_steps import record_raw, session
from registry import scenario
from scen_misuse import TOPIC

FETCH_VERSION = 11


def fetch(conn: RawConnection, offset: int, max_bytes: int) -> tuple[int, int | None]:
    """(error code, one past the last whole batch's last offset) of a Fetch of partition 0."""
    FT = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            FT(
                topic=TOPIC,
                partitions=[
                    FT.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    response = conn.call(request, "Fetch", FETCH_VERSION)
    part = response.responses[0].partitions[0]
    records = part.records or b""
    end, pos = None, 0
    while pos + 61 <= len(records):
        base = int.from_bytes(records[pos : pos + 8], "big", signed=True)
        length = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True)
        if pos + 12 + length > len(records):
            break
        delta = int.from_bytes(records[pos + 23 : pos + 27], "big", signed=True)
        end = base + delta + 1
        pos += 12 + length
    return part.error_code, end


def positions(host: str, port: int, ledger: Ledger) -> None:
    with session(host, port, "corpus-positions", TOPIC) as conn:
        err, pid, epoch = conn.init_producer_id(None)
        for i in range(3):
            err, offset = conn.produce(TOPIC, 0, record_batch(pid, epoch, 3 * i, 3, False, f"pos{i}"))
            ledger.answer(f"write sequence {3 * i}-{3 * i + 2}", "Produce", err, base_offset=offset)
            ledger.records_produced += 0 if err else 3
    with RawConnection(host, port, "corpus-positions") as conn:
        conn.api_versions()
        err, end = fetch(conn, 0, 1)  # at least one whole batch, whatever the limit
        ledger.answer("Fetch from 0", "Fetch", err, next_offset=end)
        if err or end is None or end >= 7:
            raise RuntimeError(f"first Fetch answered {err}, up to {end}")
        err, end2 = fetch(conn, 7, 1)
        ledger.answer(f"Fetch from 7 (given up to {end})", "Fetch", err, next_offset=end2)
        ledger.finding("fetch_position_skip", "warning", topic=TOPIC, partition=0)
        err, _ = fetch(conn, 1, 1)
        ledger.answer(f"Fetch from 1 (given up to {end2})", "Fetch", err)
        ledger.finding("fetch_position_backwards", "warning", topic=TOPIC, partition=0)


def record(out: Path, broker: str) -> None:
    notes = __doc__.split("\n\n", 1)[1].replace("\n", " ").strip()
    record_raw(out, f"positions_{broker}", broker, positions, notes, {TOPIC: 2}, keeper_note=False)


@scenario("positions_tansu", "a consumer's Fetch position skips forward, then goes back; tansu")
def positions_tansu(out: Path) -> None:
    record(out, "tansu")
