"""A plain-socket Kafka client built on kafka-python's protocol classes, for deliberately wrong traffic.

Real clients refuse to skip a sequence number or write with a stale epoch; this one sends exactly the
record batches it is told to, at fixed API versions, and hands back the broker's decoded answer.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

# Versions that both brokers accept and tshark 4.0 decodes (Produce <= 8, tansu 0.6 answers
# InitProducerId below v3 with UNKNOWN_SERVER_ERROR; AddPartitionsToTxn <= 1, EndTxn <= 1).
VERSIONS = {
    "ApiVersions": 0,
    "Metadata": 4,
    "FindCoordinator": 1,
    "InitProducerId": 3,
    "AddPartitionsToTxn": 1,
    "EndTxn": 1,
    "Produce": 8,
    "AddOffsetsToTxn": 1,
    "TxnOffsetCommit": 2,
}

NO_PRODUCER_ID = -1
NO_EPOCH = -1


def record_batch(
    producer_id: int, epoch: int, base_sequence: int, count: int, transactional: bool, label: str
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    now_ms = int(time.time() * 1000)
    for i in range(count):
        builder.append(
            i, timestamp=now_ms, key=f"{label}-{i}".encode(), value=f"{label} record {i}".encode(), headers=[]
        )
    return bytes(builder.build())


class RawConnection:
    """One TCP connection; requests go out one at a time and each waits for its response."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.address = (host, port)
        self.sock = socket.create_connection(self.address, timeout=15)
        self.client_id = client_id
        self.correlation_id = 0

    def reconnect(self) -> None:
        """After the broker hung up: a new connection (new client port) from the same client."""
        self.sock.close()
        self.sock = socket.create_connection(self.address, timeout=15)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def send(
        self, request, api: str, version: int | None = None, halfway: Callable[[], None] | None = None
    ) -> None:
        """Send one request and do not wait for its answer; with `halfway`, the frame goes out in two
        halves with `halfway()` run between them (a request stalled on the network)."""
        request.API_VERSION = VERSIONS[api] if version is None else version
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        data = request.encode(header=True, framed=True)
        if halfway is None:
            self.sock.sendall(data)
            return
        half = len(data) // 2
        self.sock.sendall(data[:half])
        halfway()
        self.sock.sendall(data[half:])

    def call(self, request, api: str, version: int | None = None, halfway: Callable[[], None] | None = None):
        """Send one request and wait for its answer; ConnectionError when the broker hangs up."""
        self.send(request, api, version, halfway)
        (size,) = struct.unpack(">i", self._read(4))
        response_class = request.header.get_response_class()
        response = response_class.decode(self._read(size), header=True)
        if response.header.correlation_id != self.correlation_id:
            raise RuntimeError(
                f"{api}: correlation id {response.header.correlation_id}, expected {self.correlation_id}"
            )
        return response

    # ------------------------------------------------------------------- the requests the scenarios use

    def api_versions(self):
        return self.call(ApiVersionsRequest(), "ApiVersions")

    def metadata(self, topics: list[str]):
        wanted = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        return self.call(MetadataRequest(topics=wanted, allow_auto_topic_creation=True), "Metadata")

    def find_coordinator(self, key: str, key_type: int = 1):
        """The coordinator of a transactional id (key_type 1) or of a consumer group (0)."""
        return self.call(FindCoordinatorRequest(key=key, key_type=key_type), "FindCoordinator")

    def init_producer_id(self, transactional_id: str | None, timeout_ms: int = 60000) -> tuple[int, int, int]:
        request = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms)
        r = self.call(request, "InitProducerId")
        return r.error_code, r.producer_id, r.producer_epoch

    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partitions: list[int]
    ) -> list[int]:
        r = self.call(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=transactional_id,
                v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=partitions)
                ],
            ),
            "AddPartitionsToTxn",
        )
        topics = r.results_by_topic_v3_and_below
        return [p.partition_error_code for t in topics for p in t.results_by_partition]

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, version: int | None = None
    ) -> int:
        r = self.call(
            EndTxnRequest(**_txn(transactional_id, producer_id, epoch), committed=commit), "EndTxn", version
        )
        return r.error_code

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group: str) -> int:
        request = AddOffsetsToTxnRequest(**_txn(transactional_id, producer_id, epoch), group_id=group)
        r = self.call(request, "AddOffsetsToTxn")
        return r.error_code

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group: str,
        topic: str,
        offsets: dict[int, int],
    ) -> list[int]:
        """TxnOffsetCommit (a version below 5: the group must have been added); per-partition errors."""
        part = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
        r = self.call(
            TxnOffsetCommitRequest(
                **_txn(transactional_id, producer_id, epoch),
                group_id=group,
                topics=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            part(
                                partition_index=p,
                                committed_offset=o,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            )
                            for p, o in sorted(offsets.items())
                        ],
                    )
                ],
            ),
            "TxnOffsetCommit",
        )
        return [p.error_code for t in r.topics for p in t.partitions]

    def produce(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        transactional_id: str | None = None,
        version: int | None = None,
        halfway: Callable[[], None] | None = None,
    ) -> tuple[int, int]:
        """Returns (error_code, base_offset) of the one partition written."""
        r = self.call(produce_request(topic, partition, batch, transactional_id), "Produce", version, halfway)
        p = r.responses[0].partition_responses[0]
        return p.error_code, p.base_offset


def _txn(transactional_id: str, producer_id: int, epoch: int) -> dict:
    """The fields that name a transaction in every transactional request."""
    return {"transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch}


def produce_request(topic: str, partition: int, batch: bytes, transactional_id: str | None) -> ProduceRequest:
    """A Produce (acks=all) of one batch to one partition."""
    data = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )
