"""Scenario 7: how a transaction's outcome is known when its EndTxn answer is not on the wire.

- takeover_open_*: a transactional producer (plain socket, kafka-python's protocol classes) writes inside
  a transaction, then a second InitProducerId takes its transactional id over while that transaction is
  open; the first instance then writes again and asks to commit; the second instance commits one
  transaction of its own. Kafka's coordinator aborts the open transaction on the takeover (KIP-98);
  what each broker actually did is read from its answers to the first instance afterwards.
- txn_confluent_tansu_lost_answer: the confluent-kafka story on tansu with the frame carrying the first
  EndTxn answer (a commit) deleted with editcap: the request said commit, the answer is lost, and the
  same producer id and epoch then began its next transaction normally.

Each expectations file says, in `outcome_sources`, the outcome and how the capture proves it, per
transaction of each transactional id in time order.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import clients
import scen_formats
import scen_txn
from harness import Ledger, error_name, mock_cluster, run, tansu, tcpdump, write_expectations
from raw import RawConnection, record_batch
from registry import scenario

TOPIC = "raw"
TID = "tx-open"


def _first_error(codes: list[int]) -> int:
    return next((e for e in codes if e), 0)


def takeover_open(conn: RawConnection, ledger: Ledger) -> None:
    conn.find_coordinator(TID)
    err, old_pid, old_epoch = conn.init_producer_id(TID)
    ledger.answer(
        "first instance: InitProducerId", "InitProducerId", err, producer_id=old_pid, epoch=old_epoch
    )
    added = conn.add_partitions(TID, old_pid, old_epoch, TOPIC, [0])
    ledger.answer("first instance: AddPartitionsToTxn", "AddPartitionsToTxn", _first_error(added))
    err, offset = conn.produce(
        TOPIC, 0, record_batch(old_pid, old_epoch, 0, 2, True, "open-1"), transactional_id=TID
    )
    ledger.answer("first instance: Produce, transaction open", "Produce", err, base_offset=offset)
    if err:
        raise RuntimeError(f"{TID}: the first write was rejected: {error_name(err)}")
    ledger.records_produced += 2

    err, new_pid, new_epoch = conn.init_producer_id(TID)
    ledger.answer(
        "second instance: InitProducerId while the first one's transaction is open",
        "InitProducerId",
        err,
        producer_id=new_pid,
        epoch=new_epoch,
    )
    where = {"transactional_id": TID, "producer_id": old_pid, "topic": None, "partition": None}
    ledger.finding("producer_fenced", "info", **where)

    prod_err, offset = conn.produce(
        TOPIC, 0, record_batch(old_pid, old_epoch, 2, 2, True, "open-2"), transactional_id=TID
    )
    ledger.answer("first instance after the takeover: Produce", "Produce", prod_err, base_offset=offset)
    try:
        end_err = conn.end_txn(TID, old_pid, old_epoch, commit=True)
        ledger.answer("first instance after the takeover: EndTxn(commit)", "EndTxn", end_err)
    except ConnectionError:  # tansu hangs up on a fenced EndTxn instead of answering it
        end_err = None
        ledger.answer("first instance after the takeover: EndTxn(commit)", "EndTxn", None)
        ledger.may_also_find.append({"kind": "unanswered_request", "max_severity": "warning"})
        ledger.note(
            f"{ledger.broker} closed the connection instead of answering the first instance's "
            "EndTxn(commit); the client reconnected from a new port."
        )
        conn.reconnect()
    sources = []
    if end_err == 0:
        # The broker let the superseded instance finish: its one transaction is committed.
        ledger.txn(TID, "commit")
        sources.append(["commit", "end_txn"])
        ledger.fence(TID, None)
        ledger.finding("zombie_write_accepted", "critical", **{**where, "topic": TOPIC, "partition": 0})
    else:
        ledger.txn(TID, "abort")
        sources.append(["abort", "takeover"])
        ledger.fence(TID, error_name(prod_err or end_err or 0) if (prod_err or end_err) else None)
        ledger.finding("producer_fenced", "warning", **where)
        if new_pid == old_pid:
            ledger.finding("epoch_regression", "warning", **where)
    if prod_err == 0:
        ledger.records_produced += 2
    ledger.note(
        f"{ledger.broker} answered the takeover with "
        + (
            f"the same producer id and epoch {old_epoch} -> {new_epoch}"
            if new_pid == old_pid
            else f"a new producer id ({old_pid} -> {new_pid})"
        )
        + "; the first instance's Produce after it: "
        + (error_name(prod_err) if prod_err else "accepted")
        + ", "
        + "its EndTxn(commit): "
        + ("no answer" if end_err is None else error_name(end_err) if end_err else "accepted")
        + "."
    )

    added = conn.add_partitions(TID, new_pid, new_epoch, TOPIC, [1])
    ledger.answer("second instance: AddPartitionsToTxn", "AddPartitionsToTxn", _first_error(added))
    err, offset = conn.produce(
        TOPIC, 1, record_batch(new_pid, new_epoch, 0, 2, True, "second"), transactional_id=TID
    )
    ledger.answer("second instance: Produce", "Produce", err, base_offset=offset)
    end = conn.end_txn(TID, new_pid, new_epoch, commit=True)
    ledger.answer("second instance: EndTxn(commit)", "EndTxn", end)
    if err or end:
        raise RuntimeError(f"{TID}: the second instance's transaction failed: {err} {end}")
    ledger.records_produced += 2
    ledger.txn(TID, "commit")
    sources.append(["commit", "end_txn"])
    ledger.extra["outcome_sources"] = {TID: sources}


def record_takeover(out: Path, name: str, broker: str) -> None:
    capture = out / f"{name}.pcap"
    ledger = Ledger(name, broker, "kafka-python protocol classes over a plain socket")
    ledger.note(
        f"One connection. {TID}: InitProducerId, AddPartitionsToTxn, a transactional batch of 2 records; a "
        "second InitProducerId takes the transactional id over while that transaction is open; the first "
        "instance writes 2 more records and asks EndTxn(commit); the second instance commits 2 records on "
        "another partition. Kafka's coordinator aborts a transaction open at a takeover (KIP-98); the "
        "outcome expected is what the broker's answers to the first instance show."
    )
    if broker == "tansu":
        with tansu() as bootstrap:
            clients.create_topics(bootstrap, {TOPIC: 2})
            host, port = bootstrap.rsplit(":", 1)
            ports = [int(port)]
            with tcpdump(capture, ports), RawConnection(host, int(port), "corpus-takeover") as conn:
                conn.api_versions()
                conn.metadata([TOPIC])
                takeover_open(conn, ledger)
    else:
        with mock_cluster(1) as cluster:
            ((host, port),) = cluster.brokers.values()
            ports = [port]
            with tcpdump(capture, ports), RawConnection(host, port, "corpus-takeover") as conn:
                conn.api_versions()
                conn.metadata([TOPIC])
                takeover_open(conn, ledger)
            ledger.note("The mock cluster's keeper client may also appear on the broker port.")
    write_expectations(ledger, capture, ports)


@scenario(
    "takeover_open_tansu",
    "a takeover while a transaction is open, then the old instance commits, over a plain socket to tansu",
)
def takeover_open_tansu(out: Path) -> None:
    record_takeover(out, "takeover_open_tansu", "tansu")


@scenario("takeover_open_mock", "the same takeover to librdkafka's mock cluster (1 broker)")
def takeover_open_mock(out: Path) -> None:
    record_takeover(out, "takeover_open_mock", "librdkafka-mock")


@scenario("txn_confluent_tansu_lost_answer", "the story with the first EndTxn answer deleted (editcap)")
def lost_answer(out: Path) -> None:
    name = "txn_confluent_tansu_lost_answer"
    with scen_formats._base_capture() as (base, ledger, ports):
        decode_as = [a for p in ports for a in ("-d", f"tcp.port=={p},kafka")]
        answers = run(
            [
                "tshark",
                "-n",
                "-r",
                str(base),
                *decode_as,
                "-Y",
                "kafka.api_key == 26 && kafka.request_frame",
                "-T",
                "fields",
                "-e",
                "frame.number",
            ]
        )
        first = int(answers.split()[0])
        target = out / f"{name}.pcap"
        run(["editcap", "-F", "pcap", str(base), str(target), str(first)])
        ledger.scenario = name
        ledger.finding(
            "capture_gap", "info", transactional_id=None, producer_id=None, topic=None, partition=None
        )
        ledger.may_also_find.append({"kind": "unanswered_request", "max_severity": "warning"})
        ledger.extra["deleted_frames"] = [first]
        ledger.extra["outcome_sources"] = {
            scen_txn.TID: [
                ["commit", "next_transaction"],
                ["abort", "end_txn"],
                ["commit", "end_txn"],
                ["commit", "end_txn"],
            ]
        }
        ledger.note(
            f"Derived from a capture of the same scenario by deleting frame {first} (the answer to the first "
            "EndTxn, a commit) with editcap. The request said commit and the same producer id and epoch "
            "then began its next transaction, which the coordinator refuses while the previous one is "
            "still completing: the first transaction is a commit whose source is the next transaction."
        )
        write_expectations(ledger, target, ports)


LATE_TID = "tx-late"
LATE_TIMEOUT_MS = 1000
LATE_WAIT_S = 2.5


def late_commit(conn: RawConnection, ledger: Ledger) -> None:
    """A transaction with a 1 s timeout writes, waits 2.5 s, then asks to commit."""
    conn.find_coordinator(LATE_TID)
    err, pid, epoch = conn.init_producer_id(LATE_TID, timeout_ms=LATE_TIMEOUT_MS)
    ledger.answer(
        f"InitProducerId with TransactionTimeoutMs={LATE_TIMEOUT_MS}",
        "InitProducerId",
        err,
        producer_id=pid,
        epoch=epoch,
    )
    added = conn.add_partitions(LATE_TID, pid, epoch, TOPIC, [0])
    ledger.answer("AddPartitionsToTxn", "AddPartitionsToTxn", _first_error(added))
    err, offset = conn.produce(
        TOPIC, 0, record_batch(pid, epoch, 0, 2, True, "late"), transactional_id=LATE_TID
    )
    ledger.answer("Produce", "Produce", err, base_offset=offset)
    if err:
        raise RuntimeError(f"{LATE_TID}: the write was rejected: {error_name(err)}")
    ledger.records_produced += 2
    time.sleep(LATE_WAIT_S)
    try:
        end_err = conn.end_txn(LATE_TID, pid, epoch, commit=True)
    except ConnectionError:
        end_err = None
        conn.reconnect()
    ledger.answer(f"EndTxn(commit) {LATE_WAIT_S}s after the write", "EndTxn", end_err)
    where = {"transactional_id": LATE_TID, "producer_id": pid, "topic": None, "partition": None}
    if end_err == 0:
        ledger.txn(LATE_TID, "commit")
        ledger.finding("transaction_ended_after_timeout", "warning", **where)
        ledger.extra["outcome_sources"] = {LATE_TID: [["commit", "end_txn"]]}
        ledger.note(
            f"{ledger.broker} accepted the commit {LATE_WAIT_S}s into a transaction whose timeout "
            f"was {LATE_TIMEOUT_MS} ms."
        )
    else:
        # The broker enforced the timeout: the transaction never ended on the wire as asked.
        ledger.txn(LATE_TID, "open")
        ledger.finding("hanging_transaction", "warning", **{**where, "topic": TOPIC, "partition": 0})
        ledger.may_also_find.append({"kind": "producer_fenced", "max_severity": "warning"})
        ledger.may_also_find.append({"kind": "unanswered_request", "max_severity": "warning"})
        ledger.note(
            f"{ledger.broker} refused the late commit: "
            + ("no answer" if end_err is None else error_name(end_err))
            + "."
        )


def record_late(out: Path, name: str, broker: str) -> None:
    capture = out / f"{name}.pcap"
    ledger = Ledger(name, broker, "kafka-python protocol classes over a plain socket")
    ledger.note(
        f"One connection. {LATE_TID}: InitProducerId with TransactionTimeoutMs={LATE_TIMEOUT_MS}, "
        f"AddPartitionsToTxn, a transactional batch of 2 records, {LATE_WAIT_S}s of nothing, then "
        "EndTxn(commit)."
    )
    with _tansu_bootstrap() if broker == "tansu" else _mock_bootstrap() as where:
        host, port = where
        with tcpdump(capture, [port]), RawConnection(host, port, "corpus-late") as conn:
            conn.api_versions()
            conn.metadata([TOPIC])
            late_commit(conn, ledger)
    write_expectations(ledger, capture, [port])


@contextlib.contextmanager
def _tansu_bootstrap():
    with tansu() as bootstrap:
        clients.create_topics(bootstrap, {TOPIC: 2})
        host, port = bootstrap.rsplit(":", 1)
        yield host, int(port)


@contextlib.contextmanager
def _mock_bootstrap():
    with mock_cluster(1) as cluster:
        ((host, port),) = cluster.brokers.values()
        yield host, port


@scenario("late_commit_mock", "a commit 2.5 s into a transaction with a 1 s timeout, librdkafka's mock")
def late_commit_mock(out: Path) -> None:
    record_late(out, "late_commit_mock", "librdkafka-mock")


@scenario("late_commit_tansu", "the same late commit to tansu")
def late_commit_tansu(out: Path) -> None:
    record_late(out, "late_commit_tansu", "tansu")
