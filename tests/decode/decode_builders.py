"""Test helpers for the decode room: frames encoded by kafka-python, stream events as capture emits them."""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import (
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from ksniff.capture.events import ConnectionClosed, ConnectionOpened, Endpoint, StreamChunk, StreamGap

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def record_batch(
    producer_id: int = 1000,
    epoch: int = 0,
    sequence: int = 0,
    records: int = 2,
    *,
    codec: str = "none",
    transactional: bool = True,
    value_size: int = 10,
    base_offset: int = 0,
) -> bytes:
    """One magic-2 batch built by kafka-python's record encoder (what a real client writes)."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[codec],
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    for i in range(records):
        value = bytes([65 + i % 26]) * value_size
        b.append(i, timestamp=1_700_000_000_000 + i, key=b"key-%d" % i, value=value, headers=[("h", b"x")])
    raw = bytearray(b.build())
    raw[0:8] = base_offset.to_bytes(8, "big", signed=True)  # the CRC starts after base offset
    return bytes(raw)


def frame(message, version: int, correlation_id: int, client_id: str | None = "ksniff-test") -> bytes:
    """A whole frame (size, header, body) as kafka-python sends it."""
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    assert message.API_VERSION == version
    return bytes(message.encode(header=True, framed=True))


def _per_topic(
    topic_class, field: str, parts: dict[tuple[str, int], object], version: int, topic_ids
) -> list:
    """Partitions grouped under their topic, named by its id from Produce v13 on (KIP-516)."""
    topics: dict[str, list] = {}
    for (topic, _), part in parts.items():
        topics.setdefault(topic, []).append(part)
    named = (lambda t: {"topic_id": (topic_ids or {})[t]}) if version >= 13 else (lambda t: {"name": t})
    return [topic_class(**named(t), **{field: ps}) for t, ps in topics.items()]


def produce_request(
    version: int = 9,
    *,
    transactional_id: str | None = "tx-1",
    acks: int = -1,
    partitions: dict[tuple[str, int], list[bytes]] | None = None,
    topic_ids=None,
):
    """A ProduceRequest; `partitions` maps (topic, partition) to the batches written there."""
    partitions = partitions or {("orders", 0): [record_batch()]}
    T = ProduceRequest.TopicProduceData
    P = T.PartitionProduceData
    parts = {tp: P(index=tp[1], records=b"".join(batches)) for tp, batches in partitions.items()}
    data = _per_topic(T, "partition_data", parts, version, topic_ids)
    return ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=30000, topic_data=data, version=version
    )


def produce_response(
    version: int = 9, answers: dict[tuple[str, int], tuple[int, int]] | None = None, topic_ids=None
):
    """A ProduceResponse; `answers` maps (topic, partition) to (error_code, base_offset)."""
    answers = answers or {("orders", 0): (0, 100)}
    R = ProduceResponse.TopicProduceResponse
    P = R.PartitionProduceResponse
    parts = {
        tp: P(index=tp[1], error_code=error, base_offset=offset) for tp, (error, offset) in answers.items()
    }
    data = _per_topic(R, "partition_responses", parts, version, topic_ids)
    return ProduceResponse(responses=data, throttle_time_ms=0, version=version)


def mutations(data: bytes, seed: str, count: int = 30):
    """`count` copies of `data` with one to three bytes set at random (the same ones for one `seed`)."""
    import random

    rnd = random.Random(seed)
    for _ in range(count):
        mutated = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            mutated[rnd.randrange(len(mutated))] = rnd.getrandbits(8)
        yield bytes(mutated)


def produce_bodies(version: int) -> tuple[bytes, bytes]:
    """A real client's Produce request body (three batches: none, gzip and zstd; transactional from v3;
    the topic by id where the version names topics so) and its answer's body, without their headers."""
    import uuid

    from ksniff.decode.apis import ALL_APIS

    batches = [record_batch(sequence=i, codec=c) for i, c in enumerate(("none", "gzip", "zstd"))]
    ids = {"orders": uuid.UUID(int=5)}
    req = frame(
        produce_request(
            version,
            transactional_id="tx" if version >= 3 else None,
            partitions={("orders", 0): batches},
            topic_ids=ids,
        ),
        version,
        1,
    )
    resp = frame(produce_response(version, topic_ids=ids), version, 1)
    flexible = 1 if ALL_APIS[0].flexible.contains(version) else 0
    return req[4 + 10 + len("ksniff-test") + flexible :], resp[8 + flexible :]


def fetch_request(
    version: int = 12,
    *,
    isolation_level: int = 1,
    offsets: dict[tuple[str, int], int] | None = None,
    topic_ids=None,
    session_id: int = 0,
    session_epoch: int = -1,
):
    """A consumer's FetchRequest; `offsets` maps (topic, partition) to the offset asked from."""
    offsets = offsets if offsets is not None else {("orders", 0): 0}
    T = FetchRequest.FetchTopic
    P = T.FetchPartition
    topics: dict[str, list] = {}
    for (topic, part), offset in offsets.items():
        topics.setdefault(topic, []).append(
            P(
                partition=part,
                current_leader_epoch=0,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
        )
    data = [
        T(topic_id=(topic_ids or {})[t], partitions=ps) if version >= 13 else T(topic=t, partitions=ps)
        for t, ps in topics.items()
    ]
    fields = dict(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=data,
        forgotten_topics_data=[],
        rack_id="",
    )
    if version >= 15:
        fields.pop("replica_id")
    return FetchRequest(**fields, version=version)


def fetch_response(version: int = 12, partitions: dict[tuple[str, int], dict] | None = None, topic_ids=None):
    """A FetchResponse; `partitions` maps (topic, partition) to its fields: records (bytes), aborted
    ([(producer id, first offset)] or None), high_watermark, last_stable_offset, log_start_offset, error."""
    partitions = partitions or {("orders", 0): {"records": record_batch()}}
    R = FetchResponse.FetchableTopicResponse
    P = R.PartitionData
    A = P.AbortedTransaction
    topics: dict[str, list] = {}
    for (topic, part), f in partitions.items():
        aborted = f.get("aborted", [])
        topics.setdefault(topic, []).append(
            P(
                partition_index=part,
                error_code=f.get("error", 0),
                high_watermark=f.get("high_watermark", 10),
                last_stable_offset=f.get("last_stable_offset", 10),
                log_start_offset=f.get("log_start_offset", 0),
                aborted_transactions=None
                if aborted is None
                else [A(producer_id=p, first_offset=o) for p, o in aborted],
                preferred_read_replica=-1,
                records=f.get("records", b""),
            )
        )
    data = [
        R(topic_id=(topic_ids or {})[t], partitions=ps) if version >= 13 else R(topic=t, partitions=ps)
        for t, ps in topics.items()
    ]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=data, version=version)


def control_batch(
    producer_id: int, epoch: int, commit: bool, base_offset: int, coordinator_epoch: int = 0
) -> bytes:
    """A transaction marker as a broker writes it: a control batch of one record, key (version, type),
    value (version, coordinator epoch)."""
    import struct

    import crc32c
    from decode_encoder import uvarint

    def zigzag(n: int) -> bytes:
        return uvarint((n << 1) ^ (n >> 63))

    key, value = struct.pack(">hh", 0, 1 if commit else 0), struct.pack(">hi", 0, coordinator_epoch)
    body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(len(key)) + key + zigzag(len(value)) + value + zigzag(0)
    record = zigzag(len(body)) + body
    ts = 1_700_000_000_000
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, ts, ts, producer_id, epoch, -1, 1) + record
    crc = crc32c.crc32c(after_crc)
    head = struct.pack(">qiibI", base_offset, len(after_crc) + 9, 0, 2, crc)
    return head + after_crc


def init_producer_id(version: int = 4, transactional_id: str | None = "tx-1"):
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=60000,
        producer_id=-1,
        producer_epoch=-1,
        version=version,
    )


def init_producer_id_response(version: int = 4, producer_id: int = 1000, epoch: int = 0, error: int = 0):
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch, version=version
    )


def end_txn(version: int = 3, commit: bool = True):
    return EndTxnRequest(
        transactional_id="tx-1", producer_id=1000, producer_epoch=0, committed=commit, version=version
    )


def end_txn_response(version: int = 3, error: int = 0):
    return EndTxnResponse(throttle_time_ms=0, error_code=error, version=version)


def api_versions(version: int = 3):
    return ApiVersionsRequest(client_software_name="ksniff", client_software_version="1", version=version)


def api_versions_response(version: int = 3):
    K = ApiVersionsResponse.ApiVersion
    return ApiVersionsResponse(
        error_code=0,
        api_keys=[K(api_key=0, min_version=0, max_version=11)],
        throttle_time_ms=0,
        version=version,
    )


def metadata_response(version: int, topics: dict[str, object]):
    T = MetadataResponse.MetadataResponseTopic
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            T(error_code=0, name=n, topic_id=i, is_internal=False, partitions=[]) for n, i in topics.items()
        ],
        version=version,
    )


CLIENT = Endpoint("10.0.0.1", 50000)
BROKER = Endpoint("10.0.0.2", 9092)


@dataclass
class Stream:
    """Builds the events of one connection as the capture room would deliver them."""

    conn: int = 1
    src: Endpoint = CLIENT
    dst: Endpoint = BROKER
    ts: float = 1000.0
    offsets: dict = field(default_factory=lambda: {True: 0, False: 0})

    def opened(self, handshake: bool = True) -> ConnectionOpened:
        return ConnectionOpened(self.conn, self.src, self.dst, self.ts, handshake)

    def send(self, data: bytes, from_src: bool = True, step: float = 0.001) -> StreamChunk:
        self.ts += step
        off = self.offsets[from_src]
        self.offsets[from_src] = off + len(data)
        return StreamChunk(self.conn, from_src, off, bytes(data), self.ts, self.ts)

    def request(self, data: bytes) -> StreamChunk:
        return self.send(data, self.src is CLIENT or self.src.port != 9092)

    def gap(self, length: int, from_src: bool = True) -> StreamGap:
        off = self.offsets[from_src]
        self.offsets[from_src] = off + length
        return StreamGap(self.conn, from_src, off, length, self.ts)

    def closed(self, reason: str = "fin") -> ConnectionClosed:
        return ConnectionClosed(self.conn, self.ts, reason)


def run(decoder, events) -> list:
    out = []
    for ev in events:
        out += decoder.feed(ev)
    return out
