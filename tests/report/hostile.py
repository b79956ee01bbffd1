"""Hostile captures for the report room: real Kafka frames (encoded by kafka-python, as a client sends
them) whose transactional id, topic and client id are chosen by an attacker.

The story is the one every hostile string must survive: instance A opens a transaction on the id,
instance B takes the id over (epoch bump), A's next write is still accepted (a zombie write), B leaves
its transaction open (hanging with a short --txn-timeout). Every finding kind on the way names the id,
the topic or the client id.
"""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)

from tests.capture.capture_builders import Flow, ethernet, pcap_bytes, pcapng_section
from tests.decode.decode_builders import (
    frame,
    init_producer_id,
    init_producer_id_response,
    produce_request,
    produce_response,
    record_batch,
)

# What an attacker puts in an id: a screen clear, a window title, a hidden hyperlink, a forged warning
# line, bidi overrides, C1 controls and a bell.
NASTY = (
    "\x1b[2J\x1b[H\x1b]0;pwned\x07\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\"
    "\nksniff: warning: All clear: no findings.\r\u202egnp.exe\u2066\x9b31m\x85\x07\x00end"
)

SEGMENT = 32000  # bytes of Kafka data per TCP segment (IPv4 total length is 16 bits)
T0 = 1_700_000_000.0


def _add_partitions(txn_id: str, pid: int, epoch: int, topic: str):
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[T(name=topic, partitions=[0])],
        version=3,
    )


def _add_partitions_response(topic: str, error: int = 0):
    R = AddPartitionsToTxnResponse
    T = R.AddPartitionsToTxnTopicResult
    P = T.AddPartitionsToTxnPartitionResult
    return R(
        throttle_time_ms=0,
        error_code=0,
        results_by_topic_v3_and_below=[
            T(name=topic, results_by_partition=[P(partition_index=0, partition_error_code=error)])
        ],
        version=3,
    )


class _Conn:
    def __init__(self, port: int, client_id: str) -> None:
        self.flow = Flow(client=("10.0.0.1", port), server=("10.0.0.2", 9092))
        self.client_id = client_id
        self.corr = 0
        self.packets: list[bytes] = list(self.flow.handshake())

    def call(self, request, version: int, response) -> None:
        self.corr += 1
        self._send(True, frame(request, version, self.corr, self.client_id))
        self._send(False, frame(response, version, self.corr))

    def produce(self, txn_id: str, topic: str, batch: bytes, base_offset: int) -> None:
        """A transactional Produce v9 of one batch to partition 0, which the broker writes at base_offset."""
        request = produce_request(9, transactional_id=txn_id, partitions={(topic, 0): [batch]})
        self.call(request, 9, produce_response(9, {(topic, 0): (0, base_offset)}))

    def _send(self, from_client: bool, data: bytes) -> None:
        for at in range(0, len(data), SEGMENT):
            self.packets.append(self.flow.send(from_client, data[at : at + SEGMENT]))


def hostile_packets(
    txn_id: str, topic: str = "orders", client_id: str = "app", start: float = T0, step: float = 0.01
) -> list[tuple[float, bytes]]:
    """The story above as (time, Ethernet frame) pairs."""
    a, b = _Conn(40001, client_id), _Conn(40002, client_id + "-b")
    a.call(init_producer_id(4, txn_id), 4, init_producer_id_response(4, 1000, 0))
    a.call(_add_partitions(txn_id, 1000, 0, topic), 3, _add_partitions_response(topic))
    a.produce(txn_id, topic, record_batch(1000, 0, 0, 2), 0)
    b.call(init_producer_id(4, txn_id), 4, init_producer_id_response(4, 1000, 1))
    b.call(_add_partitions(txn_id, 1000, 1, topic), 3, _add_partitions_response(topic))
    b.produce(txn_id, topic, record_batch(1000, 1, 0, 2), 2)
    # A still writes with epoch 0, and the broker takes it
    a.produce(txn_id, topic, record_batch(1000, 0, 2, 2), 4)
    return [(start + i * step, ethernet(p)) for i, p in enumerate(a.packets + b.packets)]


def hostile_capture(path: Path, txn_id: str, topic: str = "orders", client_id: str = "app") -> Path:
    """Writes the story above as an Ethernet pcap; returns `path`."""
    path.write_bytes(pcap_bytes(hostile_packets(txn_id, topic, client_id)))
    return path


def far_future_capture(path: Path, start: float, tsresol: int | None = None) -> Path:
    """The story with plain ids in a pcapng whose timestamps start at `start` seconds, which may be past
    what a calendar (or an int64 of microseconds) holds; `tsresol` is the pcapng if_tsresol byte."""
    packets = [(0, ts, frame) for ts, frame in hostile_packets("orders-txn", start=start, step=1.0)]
    path.write_bytes(pcapng_section([(1, tsresol)], packets))
    return path
