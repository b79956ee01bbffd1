"""Scenario 9: a transaction torn by a delayed Produce (Jepsen's Bufstream analysis; KIP-890's case).

Over plain sockets (kafka-python's protocol classes, `raw.py`), versions before transaction.version 2:
the producer opens a transaction (InitProducerId, AddPartitionsToTxn for partition 0), writes sequences
0-1 (answered), then starts sending its next Produce (sequences 2-3) on one connection and stalls half-way
through the frame, as a slow network would; on a second connection it commits the transaction (EndTxn
answered); only then does the rest of the Produce frame go out. The broker's answer to that Produce says
where the late batch went: its request began before the EndTxn, it was written after it.
"""

from __future__ import annotations

import time

from harness import Ledger, at, error_name
from raw import RawConnection, record_batch
from raw_steps import raw_scenarios
from scen_misuse import TOPIC, add_partition, init

TID = "tx-torn"


def delayed_produce(conn: RawConnection, pid: int, epoch: int, sequence: int, meanwhile) -> tuple[int, int]:
    """A Produce whose frame goes out in two halves with `meanwhile()` run between them."""

    def stalled() -> None:
        time.sleep(0.2)
        meanwhile()
        time.sleep(0.2)

    batch = record_batch(pid, epoch, sequence, 2, True, "late")
    return conn.produce(TOPIC, 0, batch, TID, version=8, halfway=stalled)


def torn(host: str, port: int, ledger: Ledger) -> None:
    with RawConnection(host, port, "corpus-torn") as conn, RawConnection(host, port, "corpus-torn") as other:
        conn.api_versions()
        conn.metadata([TOPIC])
        pid, epoch = init(conn, TID, ledger)
        add_partition(conn, TID, pid, epoch, 0, ledger)
        err, offset = conn.produce(
            TOPIC, 0, record_batch(pid, epoch, 0, 2, True, "first"), transactional_id=TID
        )
        ledger.answer(f"{TID}: write sequence 0-1", "Produce", err, base_offset=offset)
        ledger.records_produced += 0 if err else 2
        ended = {}

        def commit() -> None:
            ended["err"] = other.end_txn(TID, pid, epoch, commit=True)
            ledger.answer(
                f"{TID}: EndTxn(commit), sent while the next Produce is half-way out", "EndTxn", ended["err"]
            )

        err, offset = delayed_produce(conn, pid, epoch, 2, commit)
        ledger.answer(
            f"{TID}: the delayed Produce of sequence 2-3, finished after the EndTxn answer",
            "Produce",
            err,
            base_offset=offset,
        )
        if ended["err"]:
            raise RuntimeError(f"EndTxn answered {error_name(ended['err'])}")
        ledger.txn(TID, "commit")
        ledger.records_produced += 0 if err else 2
        ledger.finding("torn_transaction", "critical" if err == 0 else "warning", **at(TID, pid, TOPIC, 0))
        if err == 0:
            ledger.note(
                f"{ledger.broker} wrote the late batch at offset {offset}, after the transaction it was "
                "sent in had committed: it belongs to no transaction of the producer."
            )
            ledger.may_also_find.append({"kind": "write_outside_transaction", "max_severity": "critical"})
            ledger.may_also_find.append({"kind": "hanging_transaction", "max_severity": "warning"})


raw_scenarios(
    "torn",
    torn,
    __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
    {TOPIC: 2},
    keeper_note=False,
    tansu="a Produce sent before its transaction's EndTxn and finished after it; tansu",
    mock="the same against librdkafka's mock cluster (1 broker)",
)
