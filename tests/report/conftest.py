"""A realistic AuditResult built from the rooms' real types, for the report room's tests.

The story: `orders-app-1` runs transactional id `orders-txn` (producer id 4001, epoch 0) and commits a
transaction; `orders-app-2` starts with the same transactional id, bumps the epoch to 1 and fences it. The
fenced instance's next write is rejected, a later one slips through (a zombie write), the new instance skips
sequence numbers on orders-1 and leaves its transaction open. An idempotent producer (5002) retries a
batch, `payments-txn` commits twenty transactions, and the capture lost bytes on one connection.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from batch_header import batch_header

from ksniff.audit.model import Finding, ProducerSummary, Transaction
from ksniff.capture.events import CaptureStats, InputInfo
from ksniff.decode.events import ApiCounts, DecodeStats, Exchange, ProducedBatch, RecordBatchHeader
from ksniff.decode.rows import batch_row, exchange_row
from ksniff.result import AuditResult

T0 = 1714564800.0  # 2024-05-01 12:00:00 UTC
BROKER = "10.0.0.5:9092"
APP1 = ("10.0.0.11:53422", "orders-app-1")
APP2 = ("10.0.0.12:40110", "orders-app-2")
METRICS = ("10.0.0.13:51000", "metrics-app")
PAYMENTS = ("10.0.0.14:33000", "payments-app")
CONNS = {APP1: 1, APP2: 2, METRICS: 3, PAYMENTS: 4}

INVALID_PRODUCER_EPOCH = 47
DUPLICATE_SEQUENCE_NUMBER = 46
PRODUCER_FENCED = 90

SNAPSHOTS = Path(__file__).parent / "snapshots"


def body(**fields) -> SimpleNamespace:
    """A decoded message body: the decode room's Struct reads the same way, by attribute."""
    return SimpleNamespace(**fields)


def header(pid: int, epoch: int, seq: int, count: int, *, transactional: bool = True) -> RecordBatchHeader:
    """An lz4 batch of `count` records written at T0, as a client sends them."""
    return batch_header(
        pid,
        epoch,
        seq,
        count,
        transactional=transactional,
        batch_length=61 + 40 * count,
        partition_leader_epoch=3,
        crc=0x1234ABCD,
        base_timestamp=int(T0 * 1000),
        max_timestamp=int(T0 * 1000) + 5,
        codec="lz4",
    )


def exchange(
    who,
    api: str,
    key: int,
    version: int,
    corr: int,
    ts: float,
    *,
    req=None,
    resp=None,
    latency: float | None = 0.004,
    status: str = "ok",
    unverified: bool = False,
    batches: tuple[ProducedBatch, ...] = (),
) -> Exchange:
    client, client_id = who
    return Exchange(
        conn=CONNS[who],
        client=client,
        broker=BROKER,
        api_key=key,
        api_name=api,
        api_version=version,
        correlation_id=corr,
        client_id=client_id,
        request=req,
        response=resp,
        request_ts=ts,
        request_end_ts=ts + 0.0001,
        response_ts=None if latency is None else ts + latency,
        status=status,
        unverified=unverified,
        decode_error=None,
        batches=batches,
    )


def produce(
    who,
    corr: int,
    ts: float,
    txn: str | None,
    writes: list[tuple],
    *,
    latency: float = 0.006,
    unverified: bool = False,
) -> Exchange:
    """`writes`: (topic, partition, pid, epoch, base_sequence, records, error_code, base_offset)."""
    # The same ProducedBatch call as tests/audit/conftest.py's Wire.produce, with this story's values: 15
    # of its 16 fields come from the caller (6 of them differently in the two fixtures, and the header
    # from each fixture's own batch), so a shared builder would be the constructor with another name.
    client, client_id = who
    batches = tuple(
        ProducedBatch(
            ts=ts,
            response_ts=ts + latency,
            conn=CONNS[who],
            client=client,
            broker=BROKER,
            client_id=client_id,
            correlation_id=corr,
            api_version=9,
            transactional_id=txn,
            acks=-1,
            topic=topic,
            partition=part,
            header=header(pid, epoch, seq, n, transactional=txn is not None),
            error_code=err,
            base_offset=offset,
            unverified=unverified,
        )
        for topic, part, pid, epoch, seq, n, err, offset in writes
    )
    return exchange(
        who,
        "Produce",
        0,
        9,
        corr,
        ts,
        req=body(transactional_id=txn, acks=-1),
        resp=body(throttle_time_ms=0),
        latency=latency,
        unverified=unverified,
        batches=batches,
    )


def init_pid(who, corr: int, ts: float, txn: str, pid: int, epoch: int) -> Exchange:
    return exchange(
        who,
        "InitProducerId",
        22,
        4,
        corr,
        ts,
        req=body(transactional_id=txn, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
        resp=body(error_code=0, producer_id=pid, producer_epoch=epoch),
        latency=0.012,
    )


def add_partitions(who, corr: int, ts: float, txn: str, pid: int, epoch: int) -> Exchange:
    return exchange(
        who,
        "AddPartitionsToTxn",
        24,
        3,
        corr,
        ts,
        req=body(transactional_id=txn, producer_id=pid, producer_epoch=epoch),
        resp=body(throttle_time_ms=0),
    )


def end_txn(who, corr: int, ts: float, txn: str, pid: int, epoch: int, error: int = 0) -> Exchange:
    return exchange(
        who,
        "EndTxn",
        26,
        3,
        corr,
        ts,
        req=body(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True),
        resp=body(error_code=error),
        latency=0.009,
    )


def sample_exchanges() -> list[Exchange]:
    ex = [
        init_pid(APP1, 1, T0 + 0.000, "orders-txn", 4001, 0),
        add_partitions(APP1, 2, T0 + 0.010, "orders-txn", 4001, 0),
        produce(
            APP1,
            3,
            T0 + 0.020,
            "orders-txn",
            [("orders", 0, 4001, 0, 0, 10, 0, 100), ("orders", 1, 4001, 0, 0, 5, 0, 200)],
        ),
        end_txn(APP1, 4, T0 + 0.050, "orders-txn", 4001, 0),
        add_partitions(APP1, 5, T0 + 1.000, "orders-txn", 4001, 0),
        produce(APP1, 6, T0 + 1.010, "orders-txn", [("orders", 0, 4001, 0, 10, 10, 0, 112)]),
        init_pid(APP2, 1, T0 + 2.000, "orders-txn", 4001, 1),
        produce(
            APP1, 7, T0 + 2.100, "orders-txn", [("orders", 0, 4001, 0, 20, 10, INVALID_PRODUCER_EPOCH, None)]
        ),
        produce(APP1, 8, T0 + 2.150, "orders-txn", [("orders", 2, 4001, 0, 0, 3, 0, 350)]),
        end_txn(APP1, 9, T0 + 2.200, "orders-txn", 4001, 0, error=PRODUCER_FENCED),
        add_partitions(APP2, 2, T0 + 3.000, "orders-txn", 4001, 1),
        produce(APP2, 3, T0 + 3.100, "orders-txn", [("orders", 1, 4001, 1, 0, 5, 0, 210)]),
        produce(APP2, 4, T0 + 3.200, "orders-txn", [("orders", 1, 4001, 1, 15, 5, 0, 215)]),
        produce(METRICS, 10, T0 + 4.000, None, [("metrics", 0, 5002, 0, 40, 20, 0, 9000)]),
        produce(
            METRICS,
            11,
            T0 + 4.300,
            None,
            [("metrics", 0, 5002, 0, 40, 20, DUPLICATE_SEQUENCE_NUMBER, None)],
            unverified=True,
        ),
        exchange(
            METRICS, "Metadata", 3, 12, 12, T0 + 5.000, status="unanswered", latency=None, unverified=True
        ),
    ]
    for i in range(20):
        ts = T0 + 10 + i * 2
        write = ("payments", i % 3, 6001, 2, i * 4, 4, 0, i * 4)
        ex.append(produce(PAYMENTS, 100 + i, ts, "payments-txn", [write]))
    return ex


def sample_transactions() -> list[Transaction]:
    txns = [
        Transaction(
            "orders-txn", 4001, 0, T0 + 0.010, T0 + 0.059, "commit", ("orders-0", "orders-1"), 15, ()
        ),
        Transaction("orders-txn", 4001, 0, T0 + 1.000, None, "unknown", ("orders-0", "orders-2"), 13, ()),
        Transaction("orders-txn", 4001, 1, T0 + 3.000, None, "open", ("orders-1",), 10, ()),
    ]
    for i in range(20):
        start = T0 + 10 + i * 2
        duration = 0.020 + 0.005 * i + (1.2 if i == 13 else 0.0)
        outcome = "abort" if i == 7 else "commit"
        txns.append(
            Transaction(
                "payments-txn",
                6001,
                2,
                start,
                start + duration,
                outcome,
                (f"payments-{i % 3}",),
                4,
                ("payments-ledger",),
            )
        )
    return txns


def sample_producers() -> list[ProducerSummary]:
    # transactional id, producer id, epochs, instances, batches, records, (commit, abort, open, unknown)
    rows = [
        ("orders-txn", 4001, (0, 1), (APP1, APP2), 7, 48, (1, 0, 1, 1)),
        ("payments-txn", 6001, (2,), (PAYMENTS,), 20, 80, (19, 1, 0, 0)),
        (None, 5002, (0,), (METRICS,), 2, 40, (0, 0, 0, 0)),
    ]
    return [
        ProducerSummary(
            tid,
            pid,
            epochs,
            tuple(client for client, _ in who),
            tuple(client_id for _, client_id in who),
            batches,
            records,
            *outcomes,
        )
        for tid, pid, epochs, who, batches, records, outcomes in rows
    ]


def evidence(who, api: str, corr: int, answer: str | None, **more) -> dict:
    """Evidence shaped as the audit room builds it for a finding about one exchange."""
    client, client_id = who
    return {
        "api": api,
        "client": client,
        "broker": BROKER,
        "client_id": client_id,
        "correlation_id": corr,
        "conn": CONNS[who],
        "broker_error": answer,
        **more,
    }


def sample_findings() -> list[Finding]:
    orders = {"transactional_id": "orders-txn", "producer_id": 4001}
    return [
        Finding(
            "producer_fenced",
            "info",
            T0 + 2.000,
            "orders-app-2 took over 'orders-txn': epoch 0 -> 1; 10.0.0.11:53422 is fenced",
            **orders,
            producer_epoch=1,
            evidence=evidence(
                APP2,
                "InitProducerId v4",
                1,
                "NONE",
                previous_producer_id=4001,
                previous_epoch=0,
                previous_client=APP1[0],
            ),
        ),
        Finding(
            "producer_fenced",
            "warning",
            T0 + 2.100,
            "the broker rejected a write from fenced epoch 0 with INVALID_PRODUCER_EPOCH",
            **orders,
            producer_epoch=0,
            topic="orders",
            partition=0,
            evidence=evidence(
                APP1,
                "Produce v9",
                7,
                "INVALID_PRODUCER_EPOCH",
                base_sequence=20,
                records=10,
                base_offset=None,
            ),
        ),
        Finding(
            "zombie_write_accepted",
            "critical",
            T0 + 2.156,
            "the broker accepted 3 records from fenced epoch 0 (current epoch 1)",
            **orders,
            producer_epoch=0,
            topic="orders",
            partition=2,
            evidence=evidence(
                APP1,
                "Produce v9",
                8,
                "NONE",
                base_sequence=0,
                records=3,
                base_offset=350,
                fenced_at=T0 + 2.012,
            ),
        ),
        Finding(
            "sequence_gap",
            "critical",
            T0 + 3.200,
            "base sequence 15, expected 5: 10 records never written",
            **orders,
            producer_epoch=1,
            topic="orders",
            partition=1,
            evidence=evidence(
                APP2,
                "Produce v9",
                4,
                "NONE",
                expected_sequence=5,
                base_sequence=15,
                records=5,
                base_offset=215,
            ),
        ),
        Finding(
            "sequence_duplicate",
            "warning",
            T0 + 4.300,
            "sequences 40-59 sent again; the broker refused",
            producer_id=5002,
            producer_epoch=0,
            topic="metrics",
            partition=0,
            evidence=evidence(
                METRICS,
                "Produce v9",
                11,
                None,
                error_code=DUPLICATE_SEQUENCE_NUMBER,
                base_sequence=40,
                records=20,
                unverified=True,
            ),
        ),
        Finding(
            "unanswered_request",
            "info",
            T0 + 5.000,
            "Metadata v12: no answer before the capture ended",
            evidence=evidence(METRICS, "Metadata v12", 12, None),
        ),
        Finding(
            "capture_gap",
            "info",
            T0 + 4.200,
            "1448 bytes missing from 10.0.0.13:51000 -> broker",
            evidence={"conn": 3, "client": METRICS[0], "bytes": 1448, "to_broker": True},
        ),
        Finding(
            "hanging_transaction",
            "warning",
            T0 + 63.0,
            "open for 60.0 s, past transaction.timeout.ms 60000; blocks read_committed consumers",
            **orders,
            producer_epoch=1,
            topic="orders",
            partition=1,
            evidence={"start_ts": T0 + 3.0, "timeout_ms": 60000, "partitions": ["orders-1"]},
        ),
    ]


def sample_result() -> AuditResult:
    # Responses arrive out of request order; the result holds its rows sorted by time (stably).
    late_first = list(reversed(sample_exchanges()))
    exchanges = sorted((exchange_row(ex) for ex in late_first), key=lambda r: r["ts"])
    batches = sorted((batch_row(b) for ex in late_first for b in ex.batches), key=lambda r: r["ts"])
    by_api = {
        "Produce": ApiCounts(requests=26, responses=26, exchanges=26, versions={9}),
        "InitProducerId": ApiCounts(requests=2, responses=2, exchanges=2, versions={4}),
        "AddPartitionsToTxn": ApiCounts(requests=3, responses=3, exchanges=3, versions={3}),
        "EndTxn": ApiCounts(requests=2, responses=2, exchanges=2, versions={3}),
        "Metadata": ApiCounts(requests=1, responses=0, exchanges=0, versions={12}),
    }
    return AuditResult(
        inputs=[InputInfo("captures/broker-1.pcapng", "pcapng", "EN10MB", 1200, 480_000)],
        capture=CaptureStats(
            packets=1200,
            tcp_segments=1180,
            connections=5,
            kafka_connections=4,
            gaps=1,
            gap_bytes=1448,
            first_ts=T0 - 0.5,
            last_ts=T0 + 63.5,
        ),
        decode=DecodeStats(
            requests=34, responses=33, exchanges=33, unmatched_requests=1, errors=0, by_api=by_api
        ),
        producers=sample_producers(),
        transactions=sample_transactions(),
        findings=sorted(sample_findings(), key=lambda f: f.ts),
        exchanges=exchanges,
        batches=batches,
        engine="local",
        version="0.1.0",
    )


def empty_result() -> AuditResult:
    return AuditResult(
        inputs=[],
        capture=CaptureStats(),
        decode=DecodeStats(),
        producers=[],
        transactions=[],
        findings=[],
        version="0.1.0",
    )


@pytest.fixture
def result() -> AuditResult:
    return sample_result()


@pytest.fixture
def empty() -> AuditResult:
    return empty_result()


@pytest.fixture
def exchanges() -> list[Exchange]:
    return sample_exchanges()


@pytest.fixture
def snapshot():
    return assert_snapshot


def assert_snapshot(name: str, text: str) -> None:
    """Compares with tests/report/snapshots/NAME.txt; KSNIFF_UPDATE_SNAPSHOTS=1 rewrites it instead."""
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("KSNIFF_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path.name}; run with KSNIFF_UPDATE_SNAPSHOTS=1 to create it"
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} differs; if intended, rerun with KSNIFF_UPDATE_SNAPSHOTS=1 and review the diff"
    )
