"""Scenario 7: transactional protocol misuse, and consumer-group offsets that move backwards.

Wrong traffic over a plain socket (kafka-python's protocol classes, `raw.py`), at versions before
transaction.version 2 (Produce v8, AddPartitionsToTxn v1, TxnOffsetCommit v2, EndTxn v1), so that the
client is the one who must register partitions and groups:

- an idempotent batch whose sequences overlap what was written (behind the next expected sequence,
  running past it: neither a gap nor a duplicate);
- a transactional write to a partition AddPartitionsToTxn did not add;
- a transactional write (transactional batch, transactional id set) with no transaction open;
- TxnOffsetCommit for a group AddOffsetsToTxn did not add (beside one for a group it did add);
- a request the broker never answers because it closes the connection (tansu hangs up on a fenced
  instance's EndTxn; librdkafka's mock on an EndTxn version it does not support).

EndTxn without a transaction has its own capture (`endtxn_empty_*`), and so do the backwards offset
commits of a real consumer-group member (`offsets_back_*`, kafka-python's consumer). Expectations follow
what each broker answered, recorded in `broker_answers`.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness import Ledger, at, error_name, log, scenario_ledger, tcpdump, write_expectations
from raw import RawConnection, record_batch
from raw_steps import BROKER_NAMES, KEEPER_NOTE, against, begin, first_error, raw_scenarios, session
from registry import scenario

TOPIC = "misuse"
REJECTED_MEANS = "warning"  # the broker caught it
ACCEPTED_MEANS = "critical"  # the broker let it through
UNREG_TID, OUTSIDE_TID, OFFSETS_TID, HANGUP_TID, EMPTY_TID = (
    "tx-unregistered",
    "tx-outside",
    "tx-offsets",
    "tx-hangup",
    "tx-empty-end",
)
GROUP_ADDED, GROUP_NOT_ADDED = "g-added", "g-not-added"
MOCK_UNSUPPORTED_END_TXN = 3  # the mock answers EndTxn v0-1 and hangs up on anything newer


def severity(err: int | None) -> str:
    return ACCEPTED_MEANS if err == 0 else REJECTED_MEANS


def init(conn: RawConnection, tid: str, ledger: Ledger) -> tuple[int, int]:
    err, pid, epoch = begin(conn, tid, ledger, f"{tid}: InitProducerId")
    if err:
        raise RuntimeError(f"{tid}: InitProducerId answered {error_name(err)}")
    return pid, epoch


def add_partition(
    conn: RawConnection, tid: str, pid: int, epoch: int, partition: int, ledger: Ledger
) -> None:
    err = first_error(conn.add_partitions(tid, pid, epoch, TOPIC, [partition]))
    ledger.answer(f"{tid}: AddPartitionsToTxn {TOPIC}-{partition}", "AddPartitionsToTxn", err)
    if err:
        raise RuntimeError(f"{tid}: AddPartitionsToTxn answered {error_name(err)}")


def write(
    conn: RawConnection,
    tid: str | None,
    pid: int,
    epoch: int,
    partition: int,
    sequence: int,
    count: int,
    ledger: Ledger,
    what: str,
) -> int:
    batch = record_batch(pid, epoch, sequence, count, tid is not None, (tid or "idem") + f"-{partition}")
    err, offset = conn.produce(TOPIC, partition, batch, transactional_id=tid)
    ledger.answer(
        what, "Produce", err, partition=partition, base_sequence=sequence, records=count, base_offset=offset
    )
    ledger.records_produced += 0 if err else count
    return err


def end(conn: RawConnection, tid: str, pid: int, epoch: int, ledger: Ledger, what: str) -> int:
    err = conn.end_txn(tid, pid, epoch, commit=True)
    ledger.answer(what, "EndTxn", err)
    return err


def commit(conn: RawConnection, tid: str, pid: int, epoch: int, ledger: Ledger, what: str) -> None:
    """EndTxn(commit) the broker must accept: the transaction is then a commit."""
    if end(conn, tid, pid, epoch, ledger, what):
        raise RuntimeError(f"{tid}: {what} was rejected")
    ledger.txn(tid, "commit")


# --------------------------------------------------------------------------- the misuse steps


def out_of_order(conn: RawConnection, ledger: Ledger) -> None:
    """Partition 0: sequence 0-2, 3-5, then 4-7: behind the expected 6 and running past it."""
    err, pid, epoch = conn.init_producer_id(None)
    ledger.answer("idempotent producer: InitProducerId", "InitProducerId", err, producer_id=pid, epoch=epoch)
    write(conn, None, pid, epoch, 0, 0, 3, ledger, "in-order batch, sequence 0-2")
    write(conn, None, pid, epoch, 0, 3, 3, ledger, "in-order batch, sequence 3-5")
    err = write(conn, None, pid, epoch, 0, 4, 4, ledger, "overlapping batch, sequence 4-7 (6 expected)")
    ledger.finding("sequence_out_of_order", severity(err), **at(None, pid, TOPIC, 0))


def unregistered_partition(conn: RawConnection, ledger: Ledger) -> None:
    """Adds partition 0, writes to 0 and to 1 (never added), commits."""
    tid = UNREG_TID
    pid, epoch = init(conn, tid, ledger)
    add_partition(conn, tid, pid, epoch, 0, ledger)
    write(conn, tid, pid, epoch, 0, 0, 2, ledger, f"{tid}: write to the added {TOPIC}-0")
    err = write(conn, tid, pid, epoch, 1, 0, 2, ledger, f"{tid}: write to {TOPIC}-1, never added")
    ledger.finding("write_to_unregistered_partition", severity(err), **at(tid, pid, TOPIC, 1))
    commit(conn, tid, pid, epoch, ledger, f"{tid}: EndTxn(commit)")


def outside_transaction(conn: RawConnection, ledger: Ledger) -> None:
    """A transactional batch right after InitProducerId: no AddPartitionsToTxn, no transaction."""
    tid = OUTSIDE_TID
    pid, epoch = init(conn, tid, ledger)
    err = write(conn, tid, pid, epoch, 0, 0, 2, ledger, f"{tid}: transactional write, no transaction open")
    ledger.finding("write_outside_transaction", severity(err), **at(tid, pid, TOPIC, 0))
    if err == 0:
        ledger.note(
            f"{ledger.broker} wrote {tid}'s transactional batch although no transaction was open; "
            "nothing ever commits or aborts it."
        )


def unregistered_group(conn: RawConnection, ledger: Ledger) -> None:
    """AddOffsetsToTxn for one group, TxnOffsetCommit for it and for another group never added."""
    tid = OFFSETS_TID
    pid, epoch = init(conn, tid, ledger)
    add_partition(conn, tid, pid, epoch, 0, ledger)
    write(conn, tid, pid, epoch, 0, 0, 2, ledger, f"{tid}: write to {TOPIC}-0")
    err = conn.add_offsets(tid, pid, epoch, GROUP_ADDED)
    ledger.answer(f"{tid}: AddOffsetsToTxn {GROUP_ADDED}", "AddOffsetsToTxn", err)
    if err:
        raise RuntimeError(f"{tid}: AddOffsetsToTxn answered {error_name(err)}")
    for group in (GROUP_ADDED, GROUP_NOT_ADDED):
        conn.find_coordinator(group, key_type=0)
        err = first_error(conn.txn_offset_commit(tid, pid, epoch, group, TOPIC, {1: 5}))
        ledger.answer(f"{tid}: TxnOffsetCommit for {group}", "TxnOffsetCommit", err, group=group)
    ledger.finding(
        "txn_offset_commit_unregistered_group",
        severity(err),
        **at(tid, pid, None, None, group=GROUP_NOT_ADDED),
    )
    commit(conn, tid, pid, epoch, ledger, f"{tid}: EndTxn(commit)")


def _hung_up(conn: RawConnection, ledger: Ledger, what: str, api: str, tid: str, pid: int) -> None:
    ledger.answer(what, api, None)
    ledger.finding("unanswered_request", "warning", **at(tid, None))
    ledger.note(
        f"{ledger.broker} closed the connection instead of answering '{what}'; the client "
        "reconnected from a new port."
    )
    conn.reconnect()


def hang_up_tansu(conn: RawConnection, ledger: Ledger) -> None:
    """tansu closes the connection on a fenced instance's EndTxn."""
    tid = HANGUP_TID
    pid, epoch = init(conn, tid, ledger)
    add_partition(conn, tid, pid, epoch, 1, ledger)
    write(conn, tid, pid, epoch, 1, 0, 2, ledger, f"{tid}: write to {TOPIC}-1")
    commit(conn, tid, pid, epoch, ledger, f"{tid}: EndTxn(commit)")
    new_pid, new_epoch = init(conn, tid, ledger)  # a second instance takes the id over
    where = {"transactional_id": tid, "producer_id": pid, "topic": None, "partition": None}
    ledger.finding("producer_fenced", "info", **where)
    what = f"{tid}: EndTxn(commit) from the fenced first instance (epoch {epoch})"
    try:
        err = end(conn, tid, pid, epoch, ledger, what)
    except ConnectionError:
        _hung_up(conn, ledger, what, "EndTxn", tid, pid)
        err = None
    else:
        raise RuntimeError(
            f"{tid}: tansu answered the zombie's EndTxn ({error_name(err)}) instead of hanging up"
        )
    if new_pid == pid:
        ledger.finding("epoch_regression", REJECTED_MEANS, **where)  # no answer: the broker did not accept it
    add_partition(conn, tid, new_pid, new_epoch, 1, ledger)
    write(conn, tid, new_pid, new_epoch, 1, 0, 2, ledger, f"{tid}: second instance writes to {TOPIC}-1")
    commit(conn, tid, new_pid, new_epoch, ledger, f"{tid}: second instance EndTxn(commit)")


def hang_up_mock(conn: RawConnection, ledger: Ledger) -> None:
    """The mock closes the connection on an EndTxn version it does not support; the client retries."""
    tid = HANGUP_TID
    pid, epoch = init(conn, tid, ledger)
    add_partition(conn, tid, pid, epoch, 1, ledger)
    write(conn, tid, pid, epoch, 1, 0, 2, ledger, f"{tid}: write to {TOPIC}-1")
    what = f"{tid}: EndTxn v{MOCK_UNSUPPORTED_END_TXN}(commit)"
    try:
        err = conn.end_txn(tid, pid, epoch, commit=True, version=MOCK_UNSUPPORTED_END_TXN)
    except ConnectionError:
        _hung_up(conn, ledger, what, "EndTxn", tid, pid)
    else:
        raise RuntimeError(f"the mock answered EndTxn v{MOCK_UNSUPPORTED_END_TXN} ({error_name(err)})")
    commit(conn, tid, pid, epoch, ledger, f"{tid}: EndTxn v1(commit), retried on a new connection")


def misuse(host: str, port: int, ledger: Ledger) -> None:
    with session(host, port, "corpus-misuse", TOPIC) as conn:
        out_of_order(conn, ledger)
        unregistered_partition(conn, ledger)
        outside_transaction(conn, ledger)
        unregistered_group(conn, ledger)
        (hang_up_tansu if ledger.broker == "tansu" else hang_up_mock)(conn, ledger)


def end_without_transaction(host: str, port: int, ledger: Ledger) -> None:
    """InitProducerId, then EndTxn(commit) with nothing written and no transaction begun."""
    with RawConnection(host, port, "corpus-misuse") as conn:
        conn.api_versions()
        tid = EMPTY_TID
        pid, epoch = init(conn, tid, ledger)
        end(conn, tid, pid, epoch, ledger, f"{tid}: EndTxn(commit) with no transaction")
        # The broker acknowledged (or refused) a commit it had no transaction for. Nothing was written,
        # so no data can be lost or duplicated: a warning whatever the answer, never critical.
        ledger.finding("end_txn_without_transaction", "warning", **at(tid, pid))


# --------------------------------------------------------------------------- recording


MISUSE_NOTES = (
    "One connection (a second after a hang-up), fixed API versions before transaction.version 2 "
    "(ApiVersions v0, Metadata v4, FindCoordinator v1, InitProducerId v3, AddPartitionsToTxn v1, "
    "AddOffsetsToTxn v1, TxnOffsetCommit v2, EndTxn v1, Produce v8). Partition 0: an idempotent producer "
    "writes sequence 0-2, 3-5, then 4-7 (overlapping: neither gap nor duplicate). "
    f"{UNREG_TID}: adds {TOPIC}-0, writes to {TOPIC}-0 and to {TOPIC}-1 (never added), commits. "
    f"{OUTSIDE_TID}: a transactional batch right after InitProducerId, no transaction open. "
    f"{OFFSETS_TID}: adds {TOPIC}-0 and writes, AddOffsetsToTxn for {GROUP_ADDED}, TxnOffsetCommit for "
    f"{GROUP_ADDED} and for {GROUP_NOT_ADDED} (never added), commits. {HANGUP_TID}: a request the broker "
    "never answers because it closes the connection. Severities follow the broker's answers "
    "(broker_answers): warning where it rejected, critical where it accepted; a request left without an "
    "answer by a closed connection is a warning."
)


def misuse_notes(broker: str) -> str:
    if broker == "tansu":
        hang_up = (
            f" tansu: {HANGUP_TID} commits, a second InitProducerId takes the id over, the first instance's "
            "EndTxn(commit) with its old epoch makes tansu close the connection; the second instance commits."
        )
    else:
        hang_up = (
            f" librdkafka-mock: {HANGUP_TID} writes, sends EndTxn v{MOCK_UNSUPPORTED_END_TXN}(commit), which "
            "the mock does not support: it closes the connection; the client sends EndTxn v1 on a new one."
        )
    return MISUSE_NOTES + hang_up


raw_scenarios(
    "misuse",
    misuse,
    misuse_notes,
    {TOPIC: 2},
    tansu="overlapping sequences, unregistered partition and group, transactional write "
    "outside a transaction, a hang-up (fenced EndTxn), over a plain socket to tansu",
    mock="the same misuse to librdkafka's mock cluster (1 broker); the hang-up is an "
    "EndTxn version the mock does not support",
)


ENDTXN_NOTES = (
    f"{EMPTY_TID}: InitProducerId v3, then EndTxn v1(commit) with nothing written and no transaction "
    "begun. A broker that follows Kafka's coordinator answers INVALID_TXN_STATE; the severity follows the "
    "broker's answer (broker_answers): critical where it acknowledged the commit, warning where it "
    "rejected it."
)


raw_scenarios(
    "endtxn_empty",
    end_without_transaction,
    ENDTXN_NOTES,
    {TOPIC: 2},
    tansu="EndTxn(commit) with no transaction open, over a plain socket to tansu",
    mock="EndTxn(commit) with no transaction open, to librdkafka's mock cluster",
)


# --------------------------------------------------------------------------- offsets that go back

OFFSETS_TOPIC = "offsets-in"
OFFSETS_GROUP = "g-back"
SEED = 10
SEEK_BACK_TO = 4
# Tansu answers a JoinGroup only when the rebalance timeout (max.poll.interval.ms) has passed.
GROUP_TIMING = {"session_timeout_ms": 6000, "max_poll_interval_ms": 6000, "heartbeat_interval_ms": 1000}


def seed(bootstrap: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "client.id": "corpus-seed"})
    for i in range(SEED):
        p.produce(OFFSETS_TOPIC, f"event {i}".encode(), f"e{i}".encode(), partition=0)
    if p.flush(15):
        raise RuntimeError("seed records not acknowledged")


def _committed(ledger: Ledger, what: str, err: int, offset: int, stored: int | None) -> None:
    ledger.answer(what, "OffsetCommit", err, committed_offset=offset, broker_stored=stored)


def commit_back_kafka_python(bootstrap: str, ledger: Ledger) -> int:
    """A kafka-python group member reads every record, commits its position, seeks back, commits again.
    Returns the broker's answer to the backwards commit."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    tp = TopicPartition(OFFSETS_TOPIC, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=OFFSETS_GROUP,
        client_id="corpus-offsets",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **GROUP_TIMING,
    )
    err = -1
    try:
        consumer.subscribe([OFFSETS_TOPIC])
        got, deadline = 0, time.monotonic() + 30
        while got < SEED and time.monotonic() < deadline:
            got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
        if got < SEED:
            raise RuntimeError(f"consumed {got} of {SEED} records")
        for what, offset in (
            (f"commit the position after {SEED} records", SEED),
            (f"seek back to {SEEK_BACK_TO}, commit the position", SEEK_BACK_TO),
        ):
            if offset != consumer.position(tp):
                consumer.seek(tp, offset)
            try:
                consumer.commit()
                err = 0
            except KafkaError as exc:
                err = getattr(exc, "errno", -1)
                log(f"commit {offset}: {exc!r}")
            stored = consumer.committed(tp)
            _committed(ledger, what, err, offset, getattr(stored, "offset", stored))
    finally:
        consumer.close(autocommit=False)
    return err


def commit_back_confluent(bootstrap: str, ledger: Ledger) -> int:
    """The same with confluent-kafka (kafka-python 3 cannot bootstrap from the mock: it fails to read
    the mock's answer to its ApiVersions probe)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": OFFSETS_GROUP,
            "client.id": "corpus-offsets",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    err = -1
    try:
        consumer.subscribe([OFFSETS_TOPIC])
        got, deadline = 0, time.monotonic() + 30
        while got < SEED and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            got += msg is not None and msg.error() is None
        if got < SEED:
            raise RuntimeError(f"consumed {got} of {SEED} records")
        for what, offset in (
            (f"commit the position after {SEED} records", SEED),
            (f"seek back to {SEEK_BACK_TO}, commit offset {SEEK_BACK_TO}", SEEK_BACK_TO),
        ):
            try:
                done = consumer.commit(offsets=[TopicPartition(OFFSETS_TOPIC, 0, offset)], asynchronous=False)
                err = next((tp.error.code() for tp in done if tp.error is not None), 0)
            except KafkaException as exc:
                err = exc.args[0].code()
                log(f"commit {offset}: {exc!r}")
            if offset == SEEK_BACK_TO:
                consumer.seek(TopicPartition(OFFSETS_TOPIC, 0, offset))
            stored = consumer.committed([TopicPartition(OFFSETS_TOPIC, 0)], timeout=10)[0].offset
            _committed(ledger, what, err, offset, stored)
    finally:
        consumer.close()
    return err


def record_offsets(out: Path, name: str, broker: str, client: str) -> None:
    capture, ledger = scenario_ledger(
        out,
        name,
        BROKER_NAMES[broker],
        client,
        f"Before the capture: {SEED} records written to {OFFSETS_TOPIC}-0. In the capture: a {client} "
        f"consumer joins group {OFFSETS_GROUP} (auto commit off), reads the {SEED} records, commits offset "
        f"{SEED} (OffsetCommit), seeks back to {SEEK_BACK_TO} and commits offset {SEEK_BACK_TO}, reading the "
        "committed offset back each time (OffsetFetch), then leaves the group.",
    )
    with against(broker, {OFFSETS_TOPIC: 1}) as (host, port):
        bootstrap = f"{host}:{port}"
        seed(bootstrap)
        with tcpdump(capture, [port]):
            err = (commit_back_kafka_python if client == "kafka-python" else commit_back_confluent)(
                bootstrap, ledger
            )
    ledger.finding(
        "offset_commit_backwards", severity(err), **at(None, None, OFFSETS_TOPIC, 0, group=OFFSETS_GROUP)
    )
    if err == 0:
        ledger.note(
            f"{ledger.broker} accepted the commit that moved the group's offset back: the group "
            f"will read records {SEEK_BACK_TO}-{SEED - 1} again (accepted -> critical)."
        )
    else:
        ledger.note(
            f"{ledger.broker} rejected the backwards commit with {error_name(err)} (rejected -> warning)."
        )
    if broker == "mock":
        ledger.note(KEEPER_NOTE)
    write_expectations(ledger, capture, [port])


@scenario("offsets_back_tansu", "a consumer-group member commits offset 10, then 4 (kafka-python, tansu)")
def offsets_back_tansu(out: Path) -> None:
    record_offsets(out, "offsets_back_tansu", "tansu", "kafka-python")


@scenario(
    "offsets_back_mock",
    "the same backwards commit with confluent-kafka to librdkafka's mock cluster (1 broker)",
)
def offsets_back_mock(out: Path) -> None:
    record_offsets(out, "offsets_back_mock", "mock", "confluent-kafka")
