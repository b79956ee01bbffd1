"""Scenario 9: a transaction torn by a delayed Produce (Jepsen's Bufstream analysis; KIP-890's case).

Over plain sockets (kafka-python's protocol classes, `raw.py`), versions before transaction.version 2:
the producer opens a transaction (InitProducerId, AddPartitionsToTxn for partition 0), writes sequences
0-1 (answered), then starts sending its next Produce (sequences 2-3) on one connection and stalls half-way
through the frame, as a slow network would; on a second connection it commits the transaction (EndTxn
answered); only then does the rest of the Produce frame go out. The broker's answer to that Produce says
where the late batch went: its request began before the EndTxn, it was written after it.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from harness import Ledger, error_name, tcpdump, write_expectations
from kafka.protocol.producer import ProduceRequest
from raw import RawConnection, record_batch
from registry import scenario
from scen_misuse import BROKER_NAMES, RAW_CLIENT, TOPIC, _against, add_partition, init

TID = "tx-torn"


def delayed_produce(conn: RawConnection, pid: int, epoch: int, sequence: int, meanwhile) -> tuple[int, int]:
    """A Produce whose frame goes out in two halves with `meanwhile()` run between them."""
    request = ProduceRequest(
        transactional_id=TID,
        acks=-1,
        timeout_ms=10000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=0, records=record_batch(pid, epoch, sequence, 2, True, "late")
                    )
                ],
            )
        ],
    )
    request.API_VERSION = 8
    conn.correlation_id += 1
    request.with_header(correlation_id=conn.correlation_id, client_id=conn.client_id)
    data = bytes(request.encode(header=True, framed=True))
    half = len(data) // 2
    conn.sock.sendall(data[:half])
    time.sleep(0.2)
    meanwhile()
    time.sleep(0.2)
    conn.sock.sendall(data[half:])
    (size,) = struct.unpack(">i", conn._read(4))
    response = request.header.get_response_class().decode(conn._read(size), header=True)
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


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
        ledger.finding(
            "torn_transaction",
            "critical" if err == 0 else "warning",
            transactional_id=TID,
            producer_id=pid,
            topic=TOPIC,
            partition=0,
        )
        if err == 0:
            ledger.note(
                f"{ledger.broker} wrote the late batch at offset {offset}, after the transaction it was "
                "sent in had committed: it belongs to no transaction of the producer."
            )
            ledger.may_also_find.append({"kind": "write_outside_transaction", "max_severity": "critical"})
            ledger.may_also_find.append({"kind": "hanging_transaction", "max_severity": "warning"})


def record(out: Path, broker: str) -> None:
    name = f"torn_{broker}"
    capture = out / f"{name}.pcap"
    ledger = Ledger(name, BROKER_NAMES[broker], RAW_CLIENT)
    ledger.note(__doc__.split("\n\n", 1)[1].replace("\n", " ").strip())
    with _against(broker, {TOPIC: 2}) as (host, port):
        with tcpdump(capture, [port]):
            torn(host, port, ledger)
    write_expectations(ledger, capture, [port])


@scenario("torn_tansu", "a Produce sent before its transaction's EndTxn and finished after it; tansu")
def torn_tansu(out: Path) -> None:
    record(out, "tansu")


@scenario("torn_mock", "the same against librdkafka's mock cluster (1 broker)")
def torn_mock(out: Path) -> None:
    record(out, "mock")
