"""Scenario 3: consume-transform-produce, plus a plain consumer group committing offsets."""

from __future__ import annotations

import time
from pathlib import Path

import clients
from harness import Ledger, scenario_ledger, tansu, tcpdump, write_expectations
from registry import scenario

SOURCE, SINK = "ctp-in", "ctp-out"
TID = "tx-ctp"
CTP_GROUP, PLAIN_GROUP = "ctp-group", "plain-group"
SEED = 6
PER_TXN = 3
# Tansu answers a JoinGroup only when the rebalance timeout (max.poll.interval.ms) has passed.
GROUP_TIMING = {"session.timeout.ms": 6000, "max.poll.interval.ms": 6000, "heartbeat.interval.ms": 1000}


def _consume(consumer, want: int, deadline_s: float = 20.0) -> list:
    got, deadline = [], time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    if len(got) < want:
        raise RuntimeError(f"consumed {len(got)} of {want} records")
    return got


def consume_transform_produce(bootstrap: str, ledger: Ledger) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    seed = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "client.id": "corpus-seed"})
    for i in range(SEED):
        seed.produce(SOURCE, f"order {i}".encode(), f"o{i}".encode(), partition=i % 2)
    if seed.flush(15):
        raise RuntimeError("seed records not acknowledged")
    ledger.records_produced += SEED

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": CTP_GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": "corpus-ctp-consumer",
            **GROUP_TIMING,
        }
    )
    consumer.subscribe([SOURCE])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TID, "client.id": "corpus-ctp"})
    producer.init_transactions(15)
    for _ in range(SEED // PER_TXN):
        batch = _consume(consumer, PER_TXN)
        producer.begin_transaction()
        for msg in batch:
            producer.produce(SINK, msg.value().upper(), msg.key(), partition=msg.partition())
        positions = [TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in batch]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 15)
        producer.commit_transaction(15)
        ledger.txn(TID, "commit")
        ledger.records_produced += len(batch)
    consumer.close()

    plain = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": PLAIN_GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": "corpus-plain-consumer",
            **GROUP_TIMING,
        }
    )
    plain.subscribe([SINK])
    for msg in _consume(plain, SEED):
        plain.commit(message=msg, asynchronous=False)
    plain.close()


@scenario(
    "ctp_confluent_tansu",
    "consume-transform-produce (read_committed group, "
    "send_offsets_to_transaction) and a plain group committing offsets; confluent-kafka on tansu",
)
def ctp_confluent_tansu(out: Path) -> None:
    name = "ctp_confluent_tansu"
    capture, ledger = scenario_ledger(
        out,
        name,
        "tansu",
        "confluent-kafka",
        f"An idempotent producer seeds {SEED} records into '{SOURCE}'. A read_committed consumer in group "
        f"'{CTP_GROUP}' reads them; transactional producer {TID} writes them upper-cased to '{SINK}' in "
        f"{SEED // PER_TXN} transactions of {PER_TXN}, each with send_offsets_to_transaction "
        f"(AddOffsetsToTxn, TxnOffsetCommit for group {CTP_GROUP}) and a commit. Then a plain consumer in "
        f"group '{PLAIN_GROUP}' reads '{SINK}' and commits each offset synchronously (OffsetCommit). "
        "records_produced = seeded + transformed.",
    )
    ledger.extra["groups"] = {
        CTP_GROUP: {"transactional_id": TID, "offsets_via": "TxnOffsetCommit"},
        PLAIN_GROUP: {"transactional_id": None, "offsets_via": "OffsetCommit"},
    }
    with tansu() as bootstrap:
        clients.create_topics(bootstrap, {SOURCE: 2, SINK: 2})
        ports = [int(bootstrap.rsplit(":", 1)[1])]
        with tcpdump(capture, ports):
            consume_transform_produce(bootstrap, ledger)
    write_expectations(ledger, capture, ports)
