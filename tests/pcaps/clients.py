"""The same transactional story told by each client library.

commit, abort (after its records reached the broker), commit; then a second instance with the same
transactional id takes over (InitProducerId fences the first), the first tries to go on and is
rejected, and the second commits one transaction of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys

from harness import Ledger, log

STORY = ("commit", "abort", "commit")
RECORDS_PER_TXN = 4
PARTITIONS_WRITTEN = 2  # of the topic's 3
TIMEOUT_S = 15
VALUE_SIZE = 0  # pad record values to this many bytes (segments in the MTU 1500 capture)


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create topics before the capture starts (keeps the captures about the scenario)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()], operation_timeout=10)
    for future in futures.values():
        try:
            future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            # The admin client retries a CreateTopics whose answer was slow; the retry then finds the
            # topic its first try made (seen once in the suite): the topic is there, as wanted.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _record(txn: int, i: int) -> tuple[bytes, bytes]:
    return f"k{txn}-{i}".encode(), f"value {txn}-{i} ".ljust(VALUE_SIZE, ".").encode()


# --------------------------------------------------------------------------- confluent-kafka


def confluent_story(bootstrap: str, topic: str, tid: str, ledger: Ledger) -> str:
    """Returns the error the zombie's client reported, "" when the broker let the zombie commit."""
    from confluent_kafka import KafkaException, Producer

    acked = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append(msg.offset())

    def producer(n: int) -> Producer:
        return Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": tid,
                "linger.ms": 5,
                "client.id": f"corpus-confluent-{n}",
            }
        )

    first = producer(1)
    first.init_transactions(TIMEOUT_S)
    for txn, outcome in enumerate(STORY):
        first.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            key, value = _record(txn, i)
            first.produce(topic, value, key, partition=i % PARTITIONS_WRITTEN, on_delivery=on_delivery)
        first.flush(TIMEOUT_S)  # the records reach the broker before the transaction ends
        if outcome == "commit":
            first.commit_transaction(TIMEOUT_S)
        else:
            first.abort_transaction(TIMEOUT_S)
        ledger.txn(tid, outcome)

    second = producer(2)
    second.init_transactions(TIMEOUT_S)

    zombie_error = ""
    try:
        first.begin_transaction()
        first.produce(topic, b"zombie", b"zombie", partition=0, on_delivery=on_delivery)
        first.flush(5)
        first.commit_transaction(5)
        ledger.txn(tid, "commit")
    except KafkaException as exc:
        zombie_error = exc.args[0].name()
    log(f"confluent zombie: {zombie_error or 'NOT REJECTED'}")

    second.begin_transaction()
    for i in range(RECORDS_PER_TXN):
        key, value = _record(9, i)
        second.produce(topic, value, key, partition=i % PARTITIONS_WRITTEN, on_delivery=on_delivery)
    second.commit_transaction(TIMEOUT_S)
    ledger.txn(tid, "commit")
    ledger.records_produced += len(acked)
    return zombie_error


# --------------------------------------------------------------------------- kafka-python


def kafka_python_story(bootstrap: str, topic: str, tid: str, ledger: Ledger) -> str:
    from kafka import KafkaProducer

    acked = 0

    def producer(n: int) -> KafkaProducer:
        return KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=tid,
            linger_ms=5,
            client_id=f"corpus-kafka-python-{n}",
            request_timeout_ms=10000,
        )

    def send_all(p: KafkaProducer, txn: int) -> int:
        futures = [
            p.send(topic, key=k, value=v, partition=i % PARTITIONS_WRITTEN)
            for i, (k, v) in ((i, _record(txn, i)) for i in range(RECORDS_PER_TXN))
        ]
        p.flush(TIMEOUT_S)
        return sum(1 for f in futures if f.succeeded())

    first = producer(1)
    first.init_transactions()
    for txn, outcome in enumerate(STORY):
        first.begin_transaction()
        acked += send_all(first, txn)
        if outcome == "commit":
            first.commit_transaction()
        else:
            first.abort_transaction()
        ledger.txn(tid, outcome)

    second = producer(2)
    second.init_transactions()

    zombie_error = ""
    try:
        first.begin_transaction()
        future = first.send(topic, key=b"zombie", value=b"zombie", partition=0)
        first.flush(5)
        if future.failed():
            zombie_error = type(future.exception).__name__
        first.commit_transaction()
        if not zombie_error:
            acked += 1
            ledger.txn(tid, "commit")
    except Exception as exc:  # the client raises its own wrapper of the broker's error
        zombie_error = zombie_error or type(exc).__name__
    log(f"kafka-python zombie: {zombie_error or 'NOT REJECTED'}")
    with contextlib.suppress(Exception):
        first.close(timeout=2)

    second.begin_transaction()
    acked += send_all(second, 9)
    second.commit_transaction()
    ledger.txn(tid, "commit")
    second.close(timeout=5)
    ledger.records_produced += acked
    return zombie_error


# --------------------------------------------------------------------------- aiokafka


def aiokafka_story(bootstrap: str, topic: str, tid: str, ledger: Ledger) -> str:
    return asyncio.run(_aiokafka_story(bootstrap, topic, tid, ledger))


async def _aiokafka_story(bootstrap: str, topic: str, tid: str, ledger: Ledger) -> str:
    from aiokafka import AIOKafkaProducer

    acked = 0

    def producer(n: int) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=tid, linger_ms=5, client_id=f"corpus-aiokafka-{n}"
        )

    async def send_all(p: AIOKafkaProducer, txn: int) -> int:
        futures = [
            await p.send(topic, key=k, value=v, partition=i % PARTITIONS_WRITTEN)
            for i, (k, v) in ((i, _record(txn, i)) for i in range(RECORDS_PER_TXN))
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        return sum(1 for r in results if not isinstance(r, BaseException))

    first = producer(1)
    await first.start()
    for txn, outcome in enumerate(STORY):
        await first.begin_transaction()
        acked += await send_all(first, txn)
        if outcome == "commit":
            await first.commit_transaction()
        else:
            await first.abort_transaction()
        ledger.txn(tid, outcome)

    second = producer(2)
    await second.start()

    zombie_error = ""
    try:
        await first.begin_transaction()
        future = await first.send(topic, key=b"zombie", value=b"zombie", partition=0)
        await asyncio.wait_for(future, 5)
        await first.commit_transaction()
        acked += 1
        ledger.txn(tid, "commit")
    except Exception as exc:  # the client raises its own wrapper of the broker's error
        zombie_error = type(exc).__name__
    log(f"aiokafka zombie: {zombie_error or 'NOT REJECTED'}")
    with contextlib.suppress(Exception):
        await asyncio.wait_for(first.stop(), 3)

    await second.begin_transaction()
    acked += await send_all(second, 9)
    await second.commit_transaction()
    ledger.txn(tid, "commit")
    await second.stop()
    ledger.records_produced += acked
    return zombie_error


STORIES = {"confluent": confluent_story, "kafka-python": kafka_python_story, "aiokafka": aiokafka_story}


def main() -> None:
    """Tell a story from another network namespace; prints what happened as JSON on stdout."""
    global VALUE_SIZE
    parser = argparse.ArgumentParser()
    parser.add_argument("story", choices=sorted(STORIES))
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("tid")
    parser.add_argument("--value-size", type=int, default=0)
    parser.add_argument("--create-only", action="store_true", help="only create the topic (3 partitions)")
    args = parser.parse_args()
    if args.create_only:
        create_topics(args.bootstrap, {args.topic: 3})
        return
    VALUE_SIZE = args.value_size
    ledger = Ledger("", "", args.story)
    zombie_error = STORIES[args.story](args.bootstrap, args.topic, args.tid, ledger)
    json.dump(
        {
            "transactions": {t: dict(c) for t, c in ledger.transactions.items()},
            "records_produced": ledger.records_produced,
            "zombie_error": zombie_error,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
