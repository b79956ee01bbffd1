"""Scenario 5: deliberately wrong traffic over a plain socket, and what each broker answers.

Against one broker: an idempotent producer that repeats a batch and skips sequence numbers; a
transactional producer that keeps writing with its old epoch after a second instance took its
transactional id over; and a transaction that writes and never ends (short transaction timeout,
capture kept open well past it). Expectations follow the broker's answers, since brokers differ.
"""

from __future__ import annotations

import time

from harness import Ledger, error_name
from raw import RawConnection, record_batch
from raw_steps import add_and_write, begin, first_error, init_producer, raw_scenarios, session

TOPIC = "raw"
ZOMBIE_TID = "tx-zombie"
HANG_TID = "tx-hang"
HANG_TIMEOUT_MS = 1500
HANG_WAIT_S = 4.0  # the capture runs this long past the hanging transaction's last write
REJECTED_MEANS = "warning"  # the broker caught it
ACCEPTED_MEANS = "critical"  # the broker let it through


def duplicate_and_gap(conn: RawConnection, ledger: Ledger) -> None:
    """Partition 0: seq 0-2, the same batch again, seq 3-5, then a batch at seq 10 (6-9 skipped)."""
    err, producer_id, epoch = conn.init_producer_id(None)
    if err:
        raise RuntimeError(f"InitProducerId for the idempotent producer: {error_name(err)}")
    where = {"transactional_id": None, "producer_id": producer_id, "topic": TOPIC, "partition": 0}

    first = record_batch(producer_id, epoch, 0, 3, False, "idem-a")
    err, offset = conn.produce(TOPIC, 0, first)
    ledger.answer("in-order batch, sequence 0-2", "Produce", err, base_offset=offset)
    ledger.records_produced += 0 if err else 3

    err, dup_offset = conn.produce(TOPIC, 0, first)
    deduplicated = err == 0 and dup_offset == offset
    ledger.answer(
        "duplicate batch, sequence 0-2 again",
        "Produce",
        err,
        base_offset=dup_offset,
        original_base_offset=offset,
        deduplicated=deduplicated,
    )
    written_twice = err == 0 and not deduplicated
    ledger.finding("sequence_duplicate", ACCEPTED_MEANS if written_twice else REJECTED_MEANS, **where)
    ledger.records_produced += 3 if written_twice else 0

    err, offset = conn.produce(TOPIC, 0, record_batch(producer_id, epoch, 3, 3, False, "idem-b"))
    ledger.answer("in-order batch, sequence 3-5", "Produce", err, base_offset=offset)
    ledger.records_produced += 0 if err else 3

    err, offset = conn.produce(TOPIC, 0, record_batch(producer_id, epoch, 10, 2, False, "idem-gap"))
    ledger.answer("batch at sequence 10, 6-9 skipped", "Produce", err, base_offset=offset)
    ledger.finding("sequence_gap", REJECTED_MEANS if err else ACCEPTED_MEANS, **where)
    ledger.records_produced += 0 if err else 2


def _hung_up(conn: RawConnection, ledger: Ledger, what: str, api: str, **detail: object) -> None:
    ledger.answer(what, api, None, **detail)
    ledger.may_also_find.append({"kind": "unanswered_request", "max_severity": "warning"})
    ledger.note(
        f"{ledger.broker} closed the connection instead of answering '{what}' ({api}); "
        "the client reconnected from a new port."
    )
    conn.reconnect()


def _transaction(
    conn: RawConnection,
    tid: str,
    producer_id: int,
    epoch: int,
    partition: int,
    sequence: int,
    label: str,
    ledger: Ledger,
    what: str,
) -> tuple[int | None, int | None, int | None]:
    """AddPartitionsToTxn, one transactional batch of 2 records, EndTxn(commit): the three error codes,
    None where the broker hung up instead of answering."""
    add_err = prod_err = end_err = None
    try:
        added = conn.add_partitions(tid, producer_id, epoch, TOPIC, [partition])
        add_err = first_error(added)
        ledger.answer(f"{what}: AddPartitionsToTxn", "AddPartitionsToTxn", add_err, epoch=epoch)
    except ConnectionError:
        _hung_up(conn, ledger, f"{what}: AddPartitionsToTxn", "AddPartitionsToTxn", epoch=epoch)
    try:
        batch = record_batch(producer_id, epoch, sequence, 2, True, label)
        prod_err, offset = conn.produce(TOPIC, partition, batch, transactional_id=tid)
        ledger.answer(f"{what}: transactional Produce", "Produce", prod_err, epoch=epoch, base_offset=offset)
    except ConnectionError:
        _hung_up(conn, ledger, f"{what}: transactional Produce", "Produce", epoch=epoch)
    try:
        end_err = conn.end_txn(tid, producer_id, epoch, commit=True)
        ledger.answer(f"{what}: EndTxn(commit)", "EndTxn", end_err, epoch=epoch)
    except ConnectionError:
        _hung_up(conn, ledger, f"{what}: EndTxn(commit)", "EndTxn", epoch=epoch)
    return add_err, prod_err, end_err


def stale_epoch(conn: RawConnection, ledger: Ledger) -> None:
    """tx-zombie commits once, a second InitProducerId takes the id over, the old instance goes on."""
    tid = ZOMBIE_TID
    err, old_pid, old_epoch = begin(conn, tid, ledger, "first instance: InitProducerId")
    errors = _transaction(conn, tid, old_pid, old_epoch, 1, 0, "zombie-before", ledger, "first instance")
    if any(errors):
        raise RuntimeError(f"{tid}: the first instance's own transaction failed: {errors}")
    ledger.txn(tid, "commit")
    ledger.records_produced += 2

    _, new_pid, new_epoch = init_producer(conn, tid, ledger, "second instance: InitProducerId (takeover)")
    same_pid = new_pid == old_pid
    ledger.note(
        f"{ledger.broker} answered the takeover of {tid} with "
        + (
            f"the same producer id and epoch {old_epoch} -> {new_epoch}."
            if same_pid
            else f"a new producer id ({old_pid} -> {new_pid}, epoch {new_epoch})."
        )
    )

    add_err, prod_err, end_err = _transaction(
        conn,
        tid,
        old_pid,
        old_epoch,
        1,
        2,
        "zombie-after",
        ledger,
        "first instance after the takeover (stale epoch)",
    )
    where = {"transactional_id": tid, "producer_id": old_pid, "topic": None, "partition": None}
    rejected = [e for e in (add_err, prod_err, end_err) if e != 0]
    if same_pid:
        # The same producer id with a lower epoch than the broker already handed out.
        ledger.finding("epoch_regression", ACCEPTED_MEANS if not rejected else REJECTED_MEANS, **where)
    ledger.finding("producer_fenced", "info", **where)  # the takeover itself
    if rejected:
        ledger.fence(tid, error_name(rejected[0]))
        ledger.finding("producer_fenced", REJECTED_MEANS, **where)
    else:
        ledger.fence(tid, None)
    if prod_err == 0 or end_err == 0:
        ledger.finding("zombie_write_accepted", ACCEPTED_MEANS, **{**where, "topic": TOPIC, "partition": 1})
    if prod_err == 0:
        ledger.records_produced += 2
    if end_err == 0:
        ledger.txn(tid, "commit")
    elif prod_err == 0 or add_err == 0:
        ledger.txn(tid, "open")  # the zombie began a transaction the broker let it into, and never ended it

    # A new producer id or a new epoch starts its sequences at 0.
    errors = _transaction(conn, tid, new_pid, new_epoch, 1, 0, "new-instance", ledger, "second instance")
    if any(errors):
        raise RuntimeError(f"{tid}: the second instance's transaction failed: {errors}")
    ledger.txn(tid, "commit")
    ledger.records_produced += 2


def hanging(conn: RawConnection, ledger: Ledger) -> None:
    """tx-hang writes inside a transaction with a 1.5 s timeout and never sends EndTxn."""
    tid = HANG_TID
    what = f"InitProducerId with TransactionTimeoutMs={HANG_TIMEOUT_MS}"
    _, pid, epoch = begin(conn, tid, ledger, what, HANG_TIMEOUT_MS)
    what = ("hanging transaction: AddPartitionsToTxn", "hanging transaction: Produce")
    add_and_write(conn, tid, pid, epoch, ledger, TOPIC, "hang", what)
    ledger.txn(tid, "open")
    ledger.finding(
        "hanging_transaction", "warning", transactional_id=tid, producer_id=pid, topic=TOPIC, partition=0
    )
    time.sleep(HANG_WAIT_S)
    conn.metadata([TOPIC])  # traffic after the deadline, so the capture visibly runs past it


def wrong_traffic(host: str, port: int, ledger: Ledger) -> None:
    with session(host, port, "corpus-raw", TOPIC) as conn:
        duplicate_and_gap(conn, ledger)
        stale_epoch(conn, ledger)
        hanging(conn, ledger)


NOTES = (
    "One connection, fixed API versions (ApiVersions v0, Metadata v4, FindCoordinator v1, "
    "InitProducerId v3, AddPartitionsToTxn v1, EndTxn v1, Produce v8). Partition 0: an idempotent "
    "producer writes sequence 0-2, repeats that batch, writes 3-5, then 10-11 (6-9 skipped). "
    f"{ZOMBIE_TID}: commits a transaction, a second InitProducerId takes the id over, the first "
    "instance goes on with its old producer id and epoch (AddPartitionsToTxn, Produce, EndTxn), then "
    f"the second instance commits. {HANG_TID}: InitProducerId with a {HANG_TIMEOUT_MS} ms timeout, "
    f"writes 2 records and never ends; the capture runs {HANG_WAIT_S}s past the write. Severities "
    "follow the broker's answers (broker_answers): warning where it rejected, critical where it "
    "accepted. records_produced counts records the broker acknowledged as new writes (a duplicate "
    "answered with the original offset is not new)."
)

raw_scenarios(
    "anomalies",
    wrong_traffic,
    NOTES,
    {TOPIC: 2},
    tansu="skipped sequence, duplicate batch, stale epoch after fencing, hanging "
    "transaction, over a plain socket to tansu",
    mock="the same wrong traffic to librdkafka's mock cluster (1 broker)",
)
