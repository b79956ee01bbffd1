"""Scenario 4: an idempotent bulk producer over several partitions, once per compression codec; and two
brokers on two ports, one idempotent producer each (a -p naming one port leaves Kafka on the other)."""

from __future__ import annotations

from pathlib import Path

import clients
from harness import Ledger, log, scenario_ledger, tansu, tcpdump, write_expectations
from registry import scenario

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 4
RECORDS = 240  # per capture; batches of at most 30 records
TOPIC = "bulk"


def bulk(bootstrap: str, codec: str, ledger: Ledger) -> None:
    from confluent_kafka import Producer

    acked, failed = [], []

    def on_delivery(err, msg) -> None:
        (acked if err is None else failed).append(err or msg.offset())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": codec,
            "linger.ms": 20,
            "batch.num.messages": 30,
            "client.id": f"corpus-bulk-{codec}",
        }
    )
    for i in range(RECORDS):
        # Repetitive values so that compression has something to do.
        value = f"reading {i:05d} sensor=alpha status=ok status=ok status=ok".encode()
        producer.produce(
            TOPIC, value, f"k{i % 16}".encode(), partition=i % PARTITIONS, on_delivery=on_delivery
        )
        if i % 60 == 59:
            producer.flush(15)  # a few rounds of batches per partition, so sequences advance
    producer.flush(15)
    if failed:
        raise RuntimeError(f"{codec}: the broker rejected {len(failed)} records: {failed[0]}")
    ledger.records_produced += len(acked)


def record_codec(out: Path, codec: str) -> None:
    name = f"idempotent_{codec}_tansu"
    capture, ledger = scenario_ledger(
        out,
        name,
        "tansu",
        "confluent-kafka",
        f"Idempotent (non-transactional) producer, compression {codec}, {RECORDS} records over "
        f"{PARTITIONS} partitions of '{TOPIC}', flushed every 60 records so that each partition "
        "gets several batches with advancing sequences. Nothing wrong happens: the audit is clean.",
    )
    ledger.extra["compression"] = codec
    with tansu() as bootstrap:
        clients.create_topics(bootstrap, {TOPIC: PARTITIONS})
        ports = [int(bootstrap.rsplit(":", 1)[1])]
        with tcpdump(capture, ports):
            bulk(bootstrap, codec, ledger)
    write_expectations(ledger, capture, ports)
    log(f"{codec}: {ledger.records_produced} records acknowledged")


def _register(codec: str) -> None:
    summary = f"idempotent bulk producer, 4 partitions, compression {codec}; tansu"
    scenario(f"idempotent_{codec}_tansu", summary)(lambda out: record_codec(out, codec))


for _codec in CODECS:
    _register(_codec)


TWO_PORTS_RECORDS = 60  # per broker


@scenario("two_ports_tansu", "two tansu brokers on two ports, an idempotent producer on each")
def two_ports(out: Path) -> None:
    """Two unrelated tansu brokers, each on its own free port, each written by its own idempotent producer
    (no compression), one after the other: a run told only one port (`-p`) audits half of the capture."""
    name = "two_ports_tansu"
    capture, ledger = scenario_ledger(
        out,
        name,
        "tansu",
        "confluent-kafka",
        f"Two tansu brokers on two ports; an idempotent producer writes {TWO_PORTS_RECORDS} records "
        f"over {PARTITIONS} partitions of 'bulk-a' to the first, then another {TWO_PORTS_RECORDS} to "
        "'bulk-b' on the second (each broker gives its producer id 1). Nothing wrong happens: "
        "audited on both ports (or with auto-detection) it is clean; with -p naming one port, the "
        "other port's connections are Kafka not audited.",
    )
    with tansu() as first, tansu() as second:
        ports = [int(b.rsplit(":", 1)[1]) for b in (first, second)]
        for bootstrap, topic in ((first, "bulk-a"), (second, "bulk-b")):
            clients.create_topics(bootstrap, {topic: PARTITIONS})
        with tcpdump(capture, ports):
            for n, (bootstrap, topic) in enumerate(((first, "bulk-a"), (second, "bulk-b"))):
                _small_bulk(bootstrap, topic, f"corpus-two-ports-{n}", ledger)
    ledger.extra["broker_ports"] = {"first": ports[0], "second": ports[1]}
    write_expectations(ledger, capture, ports)
    log(f"{name}: {ledger.records_produced} records acknowledged on ports {ports}")


def _small_bulk(bootstrap: str, topic: str, client_id: str, ledger: Ledger) -> None:
    from confluent_kafka import Producer

    acked, failed = [], []

    def on_delivery(err, msg) -> None:
        (acked if err is None else failed).append(err or msg.offset())

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20, "client.id": client_id}
    )
    for i in range(TWO_PORTS_RECORDS):
        producer.produce(
            topic,
            f"reading {i:05d}".encode(),
            f"k{i % 16}".encode(),
            partition=i % PARTITIONS,
            on_delivery=on_delivery,
        )
    producer.flush(15)
    if failed:
        raise RuntimeError(f"{client_id}: the broker rejected {len(failed)} records: {failed[0]}")
    ledger.records_produced += len(acked)
