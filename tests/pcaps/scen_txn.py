"""Scenarios 1 and 2: the transactional story (clients.py) per client library and broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import clients
from harness import (
    LOOPBACK,
    Ledger,
    error_name,
    mock_cluster,
    tansu,
    tcpdump,
    tshark_view,
    write_expectations,
)
from registry import scenario

TOPIC = "txn-out"
TID = "tx-A"

# What each client reports when the broker fences it, when tshark cannot show the broker's answer.
CLIENT_FENCE_ERRORS = {
    "ProducerFencedError": "PRODUCER_FENCED",
    "ProducerFenced": "PRODUCER_FENCED",
    "ProducerFencedException": "PRODUCER_FENCED",  # kafka-clients (Java)
    "InvalidProducerEpochError": "INVALID_PRODUCER_EPOCH",
    "InvalidProducerEpoch": "INVALID_PRODUCER_EPOCH",
}

STORY_NOTES = (
    "Transactions of {tid}: commit, abort (flushed before the abort, so its records reached the broker), "
    "commit by the first instance; a second instance's InitProducerId takes over {tid} (epoch bump or new "
    "producer id), the first instance then begins another transaction and is rejected, and the second "
    "instance commits one transaction. records_produced counts every record the broker acknowledged, "
    "aborted ones included ({per} per transaction)."
)


def story_ledger(name: str, broker: str, client: str) -> Ledger:
    ledger = Ledger(name, broker, client)
    ledger.note(STORY_NOTES.format(tid=TID, per=clients.RECORDS_PER_TXN))
    return ledger


def settle_fence(ledger: Ledger, capture: Path, ports: list[int], zombie_error: str) -> None:
    """Findings of the takeover and of the zombie's attempt, from what the broker answered."""
    view = tshark_view(capture, ports)
    where = {"transactional_id": TID, "producer_id": None, "topic": None, "partition": None}
    # The first two InitProducerId answers are the two instances' (the mock's keeper sends none).
    (old_pid, old_epoch), (new_pid, new_epoch) = view.producer_ids[:2]
    same_pid = old_pid == new_pid
    ledger.extra["takeover"] = {"same_producer_id": same_pid, "epochs": [old_epoch, new_epoch]}
    ledger.note(
        f"{ledger.broker} answered the takeover with "
        + ("the same producer id and a bumped epoch." if same_pid else "a new producer id.")
    )
    ledger.finding("producer_fenced", "info", **where)  # the takeover itself
    if not zombie_error:
        # The broker let the old instance write and commit after the takeover.
        ledger.fence(TID, None)
        if same_pid:
            ledger.finding("epoch_regression", "critical", **where)
        ledger.finding("zombie_write_accepted", "critical", **where)
        ledger.note(
            "The broker did NOT fence the first instance: its AddPartitionsToTxn, Produce and "
            "EndTxn(commit) after the takeover all succeeded (counted as a commit of "
            f"{TID} and in records_produced)."
        )
        return
    wire = [e for api in ("AddPartitionsToTxn", "Produce", "EndTxn") for e in view.errors.get(api, []) if e]
    broker_error = error_name(wire[0]) if wire else CLIENT_FENCE_ERRORS.get(zombie_error, zombie_error)
    source = "the capture (tshark)" if wire else f"the client's error ({zombie_error})"
    ledger.fence(TID, broker_error)
    ledger.finding("producer_fenced", "warning", **where)
    if same_pid:
        # The zombie's requests carry the old epoch of a producer id that already has a newer one.
        ledger.finding("epoch_regression", "warning", **where)
    ledger.note(f"The broker answered the zombie with {broker_error} (read from {source}).")


def record_story(
    out: Path,
    name: str,
    client: str,
    story: Callable,
    broker: str = "tansu",
    port: int | None = None,
    host: str = "127.0.0.1",
    iface: str = LOOPBACK,
) -> tuple[Ledger, list[int]]:
    capture = out / f"{name}.pcap"
    ledger = story_ledger(name, broker, client)
    if broker == "tansu":
        with tansu(host, port) as bootstrap:
            clients.create_topics(bootstrap, {TOPIC: 3})
            ports = [int(bootstrap.rsplit(":", 1)[1])]
            with tcpdump(capture, ports, iface):
                zombie_error = story(bootstrap, TOPIC, TID, ledger)
    else:
        with mock_cluster(3) as cluster:
            ports = cluster.ports
            with tcpdump(capture, ports, iface):
                zombie_error = story(cluster.bootstrap, TOPIC, TID, ledger)
            ledger.note("The mock cluster's own keeper client also talks to its brokers.")
    settle_fence(ledger, capture, ports, zombie_error)
    write_expectations(ledger, capture, ports)
    return ledger, ports


@scenario(
    "txn_confluent_tansu", "confluent-kafka transactions (commit, abort, commit), fencing, zombie; tansu:9092"
)
def txn_confluent_tansu(out: Path) -> None:
    record_story(out, "txn_confluent_tansu", "confluent-kafka", clients.confluent_story, port=9092)


@scenario("txn_kafka_python_tansu", "the same story with kafka-python on tansu:9092")
def txn_kafka_python_tansu(out: Path) -> None:
    record_story(out, "txn_kafka_python_tansu", "kafka-python", clients.kafka_python_story, port=9092)


@scenario("txn_aiokafka_mock", "the same story with aiokafka on librdkafka's 3-broker mock cluster")
def txn_aiokafka_mock(out: Path) -> None:
    # Not on tansu: aiokafka only speaks InitProducerId v0, which tansu 0.6 answers with UNKNOWN_SERVER_ERROR.
    record_story(out, "txn_aiokafka_mock", "aiokafka", clients.aiokafka_story, broker="librdkafka-mock")


@scenario("txn_confluent_mock", "the same story with confluent-kafka on librdkafka's 3-broker mock cluster")
def txn_confluent_mock(out: Path) -> None:
    record_story(
        out, "txn_confluent_mock", "confluent-kafka", clients.confluent_story, broker="librdkafka-mock"
    )
