"""Scenario 8: what consumers were given while a transactional producer committed and aborted.

A confluent-kafka transactional producer writes to 'reads' (2 partitions, 2 records per partition per
transaction): txn 1 commits, txn 2 aborts (flushed first, so its records reached the broker), txn 3
commits, txn 4 is left open with its records flushed. Consumers then read both partitions from the
beginning until nothing new comes (round 1); the producer aborts txn 4; the consumers read on until
nothing new comes (round 2: the abort marker). The consumers:

- confluent-kafka (librdkafka), isolation.level=read_committed;
- confluent-kafka, read_uncommitted, subscribed as a group member, which then commits offset 1000 on
  partition 0, far past the end of the log (the broker accepts it);
- kafka-python read_committed (tansu; kafka-python 3 cannot bootstrap from the mock), aiokafka
  read_committed (librdkafka's mock) with check_crcs=False: the mock's control batches carry a CRC that
  does not match their bytes, and aiokafka stops on them (CorruptRecordException) otherwise.

Each consumer logs every record it delivered to the application (partition, offset, value); the values
say which transaction wrote them, so the expectations come from what the consumers themselves reported:
an `aborted_read` for each read_committed consumer that delivered records of an aborted transaction
(per partition; txn 4 counts too: it was open when read and aborted afterwards). Read_uncommitted
consumers are allowed both.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import clients
from harness import Ledger, log, mock_cluster, scenario_ledger, tansu, tcpdump, write_expectations
from registry import scenario

TOPIC = "reads"
PARTITIONS = (0, 1)
# One transactional id per broker: the corpus is also audited as one folder, where a shared id would join
# the two captures' producers.
TID_BY_BROKER = {"tansu": "tx-reads-tansu", "librdkafka-mock": "tx-reads-mock"}
GROUP = "reads-ahead"
AHEAD = 1000  # the offset the group member commits on partition 0
PER_PARTITION = 2
OUTCOMES = {1: "commit", 2: "abort", 3: "commit", 4: "abort"}  # txn 4: open while round 1 reads
IDLE_S = 2.0
GROUP_TIMING = {"session.timeout.ms": 6000, "max.poll.interval.ms": 6000, "heartbeat.interval.ms": 1000}


def value(txn: int, partition: int, i: int) -> bytes:
    return f"txn{txn} p{partition} r{i}".encode()


def txn_of(raw: bytes) -> int:
    return int(raw.split()[0][3:])


# --------------------------------------------------------------------------- the producer


def producer_story(bootstrap: str, ledger: Ledger, tid: str):
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "client.id": "corpus-reads-producer",
            "linger.ms": 0,
        }
    )
    p.init_transactions(15)
    for txn in (1, 2, 3, 4):
        p.begin_transaction()
        for part in PARTITIONS:
            for i in range(PER_PARTITION):
                p.produce(TOPIC, value(txn, part, i), f"k{i}".encode(), partition=part)
            p.flush(15)  # one batch per partition and transaction
        ledger.records_produced += PER_PARTITION * len(PARTITIONS)
        if txn == 4:
            return p  # left open while the consumers read
        if OUTCOMES[txn] == "commit":
            p.commit_transaction(15)
        else:
            p.abort_transaction(15)
        ledger.txn(tid, OUTCOMES[txn])
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- the consumers


class Log:
    """What one consumer delivered to the application: (partition, offset, value)."""

    def __init__(self, name: str, isolation: str) -> None:
        self.name, self.isolation = name, isolation
        self.rounds: list[list[tuple[int, int, bytes]]] = []

    def add_round(self, got: list[tuple[int, int, bytes]]) -> None:
        self.rounds.append(got)
        log(
            f"{self.name} ({self.isolation}) round {len(self.rounds)}: "
            f"{[(p, o, v.decode()) for p, o, v in got]}"
        )


def confluent_consumer(bootstrap: str, name: str, isolation: str, group: str | None = None):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group or f"{name}-unused",
        "client.id": name,
        "isolation.level": isolation,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    }
    c = Consumer({**conf, **GROUP_TIMING} if group else conf)
    if group:
        c.subscribe([TOPIC])
    else:
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in PARTITIONS])
    return c


def confluent_round(c) -> list[tuple[int, int, bytes]]:
    got, idle_until = [], time.monotonic() + IDLE_S
    while time.monotonic() < idle_until:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append((msg.partition(), msg.offset(), msg.value()))
            idle_until = time.monotonic() + IDLE_S
    return got


# kafka-python's and aiokafka's consumers take the same settings: read_committed from the start of each
# assigned partition, no group, no automatic commits.
READ_COMMITTED_FROM_START = {
    "isolation_level": "read_committed",
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "fetch_max_wait_ms": 100,
    "group_id": None,
}


def kafka_python_consumer(bootstrap: str, name: str):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=name, **READ_COMMITTED_FROM_START)
    c.assign([TopicPartition(TOPIC, p) for p in PARTITIONS])
    c.seek_to_beginning()
    return c


def kafka_python_round(c) -> list[tuple[int, int, bytes]]:
    got, idle_until = [], time.monotonic() + IDLE_S
    while time.monotonic() < idle_until:
        for records in c.poll(timeout_ms=200).values():
            for r in records:
                got.append((r.partition, r.offset, r.value))
                idle_until = time.monotonic() + IDLE_S
    return got


class AiokafkaReader:
    """aiokafka's consumer, driven from this thread through its own event loop."""

    def __init__(self, bootstrap: str, name: str) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def start():
            # check_crcs: it refuses the mock's control batches otherwise
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, client_id=name, check_crcs=False, **READ_COMMITTED_FROM_START
            )
            await c.start()
            c.assign([TopicPartition(TOPIC, p) for p in PARTITIONS])
            await c.seek_to_beginning()
            return c

        self.loop = asyncio.new_event_loop()
        self.c = self.loop.run_until_complete(start())

    def round(self) -> list[tuple[int, int, bytes]]:
        async def go():
            got, idle_until = [], time.monotonic() + IDLE_S
            while time.monotonic() < idle_until:
                for records in (await self.c.getmany(timeout_ms=200)).values():
                    for r in records:
                        got.append((r.partition, r.offset, r.value))
                        idle_until = time.monotonic() + IDLE_S
            return got

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        self.loop.run_until_complete(self.c.stop())
        self.loop.close()


# --------------------------------------------------------------------------- the story and its expectations


def story(bootstrap: str, broker: str, ledger: Ledger) -> list[Log]:
    from confluent_kafka import TopicPartition

    tid = TID_BY_BROKER[broker]
    producer = producer_story(bootstrap, ledger, tid)
    readers: list[tuple[Log, object, object, object]] = []  # (log, consumer, round, close)
    rc = confluent_consumer(bootstrap, "corpus-rc-confluent", "read_committed")
    readers.append((Log("corpus-rc-confluent", "read_committed"), rc, confluent_round, rc.close))
    ru = confluent_consumer(bootstrap, "corpus-ru-confluent", "read_uncommitted", group=GROUP)
    readers.append((Log("corpus-ru-confluent", "read_uncommitted"), ru, confluent_round, None))
    if broker == "tansu":
        kp = kafka_python_consumer(bootstrap, "corpus-rc-kafka-python")
        readers.append((Log("corpus-rc-kafka-python", "read_committed"), kp, kafka_python_round, kp.close))
    else:
        aio = AiokafkaReader(bootstrap, "corpus-rc-aiokafka")
        readers.append((Log("corpus-rc-aiokafka", "read_committed"), aio, lambda r: r.round(), aio.close))
    for lg, consumer, read, _ in readers:
        lg.add_round(read(consumer))
    producer.abort_transaction(15)
    ledger.txn(tid, OUTCOMES[4])
    for lg, consumer, read, _ in readers:
        lg.add_round(read(consumer))
    ru.commit(offsets=[TopicPartition(TOPIC, 0, AHEAD)], asynchronous=False)
    ru.close()
    for _, _, _, close in readers:
        if close is not None:
            close()
    producer.flush(5)
    del producer
    return [lg for lg, _, _, _ in readers]


def expect_from_logs(logs: list[Log], ledger: Ledger, tid: str) -> None:
    """Findings from what the consumers delivered: per read_committed consumer, partition and
    transaction, an aborted read where the transaction aborted (txn 4 also counts: it aborted later)."""
    delivered: dict[str, dict] = {}
    for lg in logs:
        for got in lg.rounds:
            for part, _offset, raw in got:
                if lg.isolation == "read_committed" and OUTCOMES[txn_of(raw)] == "abort":
                    where = {"transactional_id": tid, "topic": TOPIC, "partition": part}
                    wanted = {"kind": "aborted_read", "severity": "critical", **where}
                    if wanted not in ledger.findings:
                        ledger.findings.append(wanted)
        delivered[lg.name] = {
            "isolation": lg.isolation,
            "rounds": [[[p, o, v.decode()] for p, o, v in got] for got in lg.rounds],
        }
    ledger.extra["delivered"] = delivered


def record(out: Path, broker: str) -> None:
    name = f"consume_{'tansu' if broker == 'tansu' else 'mock'}"
    second = "kafka-python" if broker == "tansu" else "aiokafka"
    capture, ledger = scenario_ledger(
        out,
        name,
        broker,
        "confluent-kafka, " + second,
        f"Transactional producer {TID_BY_BROKER[broker]} (confluent-kafka) writes {PER_PARTITION} records "
        f"to each partition of '{TOPIC}' per transaction: txn 1 commits, txn 2 aborts, txn 3 commits, "
        "txn 4 stays open while the consumers read (round 1) and aborts afterwards; the consumers read on "
        "(round 2). Consumers: read_committed confluent-kafka, read_uncommitted confluent-kafka (group "
        f"member, commits offset {AHEAD} on partition 0 past the end of the log, accepted), read_committed "
        f"{second}. `delivered` is each consumer's own log of the records it handed to the application; "
        "expectations come from it.",
    )
    ledger.findings.append(
        {
            "kind": "offset_commit_past_end",
            "severity": "critical",
            "group": GROUP,
            "topic": TOPIC,
            "partition": 0,
        }
    )
    if broker == "tansu":
        with tansu() as bootstrap:
            clients.create_topics(bootstrap, {TOPIC: len(PARTITIONS)})
            ports = [int(bootstrap.rsplit(":", 1)[1])]
            with tcpdump(capture, ports):
                logs = story(bootstrap, broker, ledger)
    else:
        with mock_cluster(1) as cluster:
            # The mock creates the topic (4 partitions) when a client first asks for it; its CreateTopics
            # times out.
            ports = cluster.ports
            with tcpdump(capture, ports):
                logs = story(cluster.bootstrap, broker, ledger)
    expect_from_logs(logs, ledger, TID_BY_BROKER[broker])
    write_expectations(ledger, capture, ports)


@scenario(
    "consume_tansu",
    "read_committed and read_uncommitted consumers while a transactional producer "
    "commits and aborts; a group commits past the end of the log; tansu",
)
def consume_tansu(out: Path) -> None:
    record(out, "tansu")


@scenario(
    "consume_mock",
    "the same against librdkafka's mock cluster (1 broker), aiokafka as the second read_committed consumer",
)
def consume_mock(out: Path) -> None:
    record(out, "librdkafka-mock")


def uncommitted_story(bootstrap: str, ledger: Ledger, tid: str) -> list[Log]:
    """One transaction left open while a read_committed consumer reads, then committed."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "client.id": "corpus-uncommitted-producer",
            "linger.ms": 0,
        }
    )
    p.init_transactions(15)
    p.begin_transaction()
    for part in PARTITIONS:
        for i in range(PER_PARTITION):
            p.produce(TOPIC, value(1, part, i), f"k{i}".encode(), partition=part)
        p.flush(15)
    ledger.records_produced += PER_PARTITION * len(PARTITIONS)
    rc = confluent_consumer(bootstrap, "corpus-rc-confluent", "read_committed")
    lg = Log("corpus-rc-confluent", "read_committed")
    lg.add_round(confluent_round(rc))
    p.commit_transaction(15)
    ledger.txn(tid, "commit")
    lg.add_round(confluent_round(rc))
    rc.close()
    p.flush(5)
    return [lg]


@scenario(
    "uncommitted_mock",
    "a read_committed consumer given a transaction's records while it is open "
    "(the mock's LSO is the end of the log), committed afterwards",
)
def uncommitted_mock(out: Path) -> None:
    name, tid = "uncommitted_mock", "tx-uncommitted-mock"
    capture, ledger = scenario_ledger(
        out,
        name,
        "librdkafka-mock",
        "confluent-kafka",
        f"Transactional producer {tid} (confluent-kafka) writes {PER_PARTITION} records to each partition of "
        f"'{TOPIC}' and leaves its transaction open; a read_committed consumer reads (round 1); the "
        "transaction commits; the consumer reads on (round 2). `delivered` is the consumer's own log.",
    )
    with mock_cluster(1) as cluster:
        ports = cluster.ports
        with tcpdump(capture, ports):
            logs = uncommitted_story(cluster.bootstrap, ledger, tid)
    early = {part for part, _o, _v in logs[0].rounds[0]}
    for part in sorted(early):
        ledger.finding("uncommitted_read", "warning", transactional_id=tid, topic=TOPIC, partition=part)
    ledger.extra["delivered"] = {
        lg.name: {
            "isolation": lg.isolation,
            "rounds": [[[p, o, v.decode()] for p, o, v in got] for got in lg.rounds],
        }
        for lg in logs
    }
    write_expectations(ledger, capture, ports)
