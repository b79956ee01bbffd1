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

import time
from pathlib import Path

import scen_formats
import scen_txn
from harness import Ledger, error_name, run, tshark_fields, write_expectations
from raw import RawConnection, record_batch
from raw_steps import add_and_write, begin, first_error, init_producer, raw_scenarios, session
from registry import scenario

TOPIC = "raw"
TID = "tx-open"


def takeover_open(conn: RawConnection, ledger: Ledger) -> None:
    _, old_pid, old_epoch = begin(conn, TID, ledger, "first instance: InitProducerId")
    what = ("first instance: AddPartitionsToTxn", "first instance: Produce, transaction open")
    add_and_write(conn, TID, old_pid, old_epoch, ledger, TOPIC, "open-1", what)

    what = "second instance: InitProducerId while the first one's transaction is open"
    _, new_pid, new_epoch = init_producer(conn, TID, ledger, what)
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
    ledger.answer("second instance: AddPartitionsToTxn", "AddPartitionsToTxn", first_error(added))
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


def takeover_traffic(host: str, port: int, ledger: Ledger) -> None:
    with session(host, port, "corpus-takeover", TOPIC) as conn:
        takeover_open(conn, ledger)


TAKEOVER_NOTES = (
    f"One connection. {TID}: InitProducerId, AddPartitionsToTxn, a transactional batch of 2 records; a "
    "second InitProducerId takes the transactional id over while that transaction is open; the first "
    "instance writes 2 more records and asks EndTxn(commit); the second instance commits 2 records on "
    "another partition. Kafka's coordinator aborts a transaction open at a takeover (KIP-98); the "
    "outcome expected is what the broker's answers to the first instance show."
)


raw_scenarios(
    "takeover_open",
    takeover_traffic,
    TAKEOVER_NOTES,
    {TOPIC: 2},
    tansu="a takeover while a transaction is open, then the old instance commits, over a plain socket to "
    "tansu",
    mock="the same takeover to librdkafka's mock cluster (1 broker)",
)


@scenario("txn_confluent_tansu_lost_answer", "the story with the first EndTxn answer deleted (editcap)")
def lost_answer(out: Path) -> None:
    name = "txn_confluent_tansu_lost_answer"
    with scen_formats._base_capture() as (base, ledger, ports):
        answers = tshark_fields(base, ports, "kafka.api_key == 26 && kafka.request_frame", "frame.number")
        first = int(answers[0][0])
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
    what = f"InitProducerId with TransactionTimeoutMs={LATE_TIMEOUT_MS}"
    _, pid, epoch = begin(conn, LATE_TID, ledger, what, LATE_TIMEOUT_MS)
    add_and_write(conn, LATE_TID, pid, epoch, ledger, TOPIC, "late", ("AddPartitionsToTxn", "Produce"))
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


def late_traffic(host: str, port: int, ledger: Ledger) -> None:
    with session(host, port, "corpus-late", TOPIC) as conn:
        late_commit(conn, ledger)


LATE_NOTES = (
    f"One connection. {LATE_TID}: InitProducerId with TransactionTimeoutMs={LATE_TIMEOUT_MS}, "
    f"AddPartitionsToTxn, a transactional batch of 2 records, {LATE_WAIT_S}s of nothing, then "
    "EndTxn(commit)."
)


raw_scenarios(
    "late_commit",
    late_traffic,
    LATE_NOTES,
    {TOPIC: 2},
    keeper_note=False,
    tansu="the same late commit to tansu",
    mock="a commit 2.5 s into a transaction with a 1 s timeout, librdkafka's mock",
)
