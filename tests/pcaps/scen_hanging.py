"""Scenario 10: a transaction its producer abandons, and what read_committed consumers see of it.

Over a plain socket (kafka-python's protocol classes, `raw.py`), a transactional producer asks for a
1000 ms transaction timeout, adds partition 0 of 'stuck' to its transaction, writes two records and goes
away without EndTxn; an idempotent producer then writes two more records after them. A confluent-kafka
read_committed consumer reads the partition from offset 0 for four seconds, four times the timeout, and
logs what it was given. Kafka's coordinator would abort the transaction once its timeout passed and write
ABORT markers, letting the consumer past it. Tansu writes no marker: its Fetch answers keep the last stable
offset at 0 below a high watermark of 4 to the end, and the consumer is given nothing (a hanging
transaction as the partition leader shows it, KIP-664). librdkafka's mock gives the consumer all four
records at once, the open transaction's included (its last stable offset is the high watermark).
"""

from __future__ import annotations

import time
from pathlib import Path

from harness import Ledger, scenario_ledger, tcpdump, write_expectations
from raw import record_batch
from raw_steps import BROKER_NAMES, RAW_CLIENT, against, begin, session
from registry import on_tansu_and_mock

TOPIC = "stuck"
TID = "tx-stuck"
TIMEOUT_MS = 1000
READ_S = 4.0


def abandon(host: str, port: int, ledger: Ledger) -> int:
    """The abandoned transaction, then an idempotent write after it; returns the producer id."""
    with session(host, port, "corpus-stuck", TOPIC) as conn:
        what = f"{TID}: InitProducerId (transaction timeout {TIMEOUT_MS} ms)"
        err, pid, epoch = begin(conn, TID, ledger, what, TIMEOUT_MS)
        (err,) = conn.add_partitions(TID, pid, epoch, TOPIC, [0])
        ledger.answer(f"{TID}: AddPartitionsToTxn {TOPIC}-0", "AddPartitionsToTxn", err)
        batch = record_batch(pid, epoch, 0, 2, True, "stuck")
        err, offset = conn.produce(TOPIC, 0, batch, transactional_id=TID)
        ledger.answer(f"{TID}: two records, then the producer goes away", "Produce", err, base_offset=offset)
        ledger.records_produced += 2
        err, idem, idem_epoch = conn.init_producer_id(None)
        ledger.answer("an idempotent producer: InitProducerId", "InitProducerId", err, producer_id=idem)
        err, offset = conn.produce(TOPIC, 0, record_batch(idem, idem_epoch, 0, 2, False, "after"))
        ledger.answer(
            "the idempotent producer writes two records after them", "Produce", err, base_offset=offset
        )
        ledger.records_produced += 2
        ledger.txn(TID, "open")
        return pid


def read_committed(bootstrap: str, ledger: Ledger) -> list[tuple[int, bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g-stuck",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "client.id": "corpus-stuck-reader",
            "fetch.wait.max.ms": 200,
        }
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = []
    end = time.time() + READ_S
    while time.time() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append((m.offset(), m.value()))
    c.close()
    ledger.note(
        f"the read_committed consumer was given {len(got)} records in {READ_S:.0f} s: "
        + (", ".join(f"{o}: {v.decode()}" for o, v in got) or "none")
    )
    return got


def record(out: Path, name: str, broker: str) -> None:
    capture, ledger = scenario_ledger(
        out,
        name,
        BROKER_NAMES[broker],
        RAW_CLIENT + " and confluent-kafka (read_committed)",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
    )
    with against(broker, {TOPIC: 1}) as (host, port):
        with tcpdump(capture, [port]):
            pid = abandon(host, port, ledger)
            got = read_committed(f"{host}:{port}", ledger)
    where = {"transactional_id": TID, "producer_id": pid, "topic": TOPIC, "partition": 0}
    # The transaction is open to the end of the capture, four times its timeout: hanging as the
    # coordinator's side shows it, whatever the broker.
    ledger.finding("hanging_transaction", "warning", transactional_id=TID, producer_id=pid)
    if any(v.startswith(b"stuck") for _, v in got):
        # Given the open transaction's records: isolation broken (they never commit in this capture).
        ledger.finding("uncommitted_read", "warning", **where)
    elif not got:
        # Given nothing at all, the idempotent records behind the open transaction included: held back.
        ledger.finding("hanging_partition", "warning", **where)
    write_expectations(ledger, capture, [port])


on_tansu_and_mock(
    "hanging",
    record,
    tansu="a transaction abandoned past its 1 s timeout, read by a read_committed consumer; tansu",
    mock="the same against librdkafka's mock cluster (1 broker)",
)
