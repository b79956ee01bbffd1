"""What the decode room hands to the audit room and the exports.

Message bodies are `Struct` values built by the schema machinery (ksniff.decode.schema): attribute access
by Kafka's field name in snake_case (`TransactionalId` -> `transactional_id`). Every field of the
message's schema is present at every version; a field outside its version range holds the schema's
default (Kafka's own rule), so the audit reads `request.transactional_id` of a Produce v2 and gets None.
Record data inside Produce requests is replaced by the parsed batch headers (`RecordBatchHeader`).
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass

SEQUENCE_MODULUS = 1 << 31  # producer sequences are int32 and wrap from 2^31 - 1 to 0


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record, as Kafka computes it (base + last offset delta, wrapped);
    -1 for a batch without sequences (idempotence off)."""
    if base_sequence < 0:
        return -1
    return (base_sequence + last_offset_delta) % SEQUENCE_MODULUS


@fast_init
@frozen_dataclass(init=False)
class RecordBatchHeader:
    """The 61-byte header of a magic-2 record batch (or the few fields of a magic 0/1 message set)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_ok: bool | None  # None when the batch was not whole in the capture
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    codec: str  # "none" | "gzip" | "snappy" | "lz4" | "zstd" | "unknown"
    transactional: bool
    control: bool
    control_type: str | None  # "COMMIT" | "ABORT" for control batches, when readable
    coordinator_epoch: int | None  # of a control batch's marker


@fast_init
@frozen_dataclass(init=False)
class ProducedBatch:
    """One record batch written by a Produce request, with the broker's answer for its partition."""

    ts: float  # request's first byte
    response_ts: float | None
    conn: int
    client: str  # "ip:port"
    broker: str
    client_id: str | None
    correlation_id: int
    api_version: int
    transactional_id: str | None
    acks: int
    topic: str  # the name; for topic-id versions, resolved from Metadata, else the id as a string
    partition: int
    header: RecordBatchHeader
    error_code: int | None  # None: no response (acks=0, unanswered)
    base_offset: int | None  # assigned by the broker, from the response
    unverified: bool  # capture lost bytes on this connection before this exchange was re-synchronised
    # The batch's bytes (header included; read them with ksniff.decode.records.iter_records), kept only
    # when the Decoder was asked to (`keep_records=True`): record keys and values are private.
    records: bytes | None = None


ISOLATION_LEVELS = {0: "read_uncommitted", 1: "read_committed"}


@fast_init
@frozen_dataclass(init=False)
class FetchedPartition:
    """One partition of a Fetch answer, beside what the fetcher asked of it: what the broker said is at
    which offsets (batch headers only, never records), and the offsets that bound what may be read."""

    ts: float  # the request's first byte
    response_ts: float | None
    conn: int
    client: str
    broker: str
    client_id: str | None
    correlation_id: int
    api_version: int
    replica_id: int  # -1 for a consumer; a broker id for a follower replicating the partition
    isolation_level: int  # 0 read_uncommitted, 1 read_committed (ISOLATION_LEVELS); 0 before v4
    session_id: int  # the fetch session (KIP-227); 0 without one
    session_epoch: int
    topic: str  # the name; for topic-id versions (v13+), resolved from Metadata, else the id as a string
    partition: int
    # Where the fetcher asked to read from; None when the request did not name the partition (an
    # incremental fetch session carries only partitions whose position changed).
    fetch_offset: int | None
    error_code: int
    high_watermark: int
    last_stable_offset: int  # -1 where the version has none (v0-3)
    log_start_offset: int  # -1 where the version has none (v0-4)
    # (producer id, first offset) of each aborted transaction in the returned range (read_committed
    # fetches, v4+); None when the broker sent a null list.
    aborted: tuple[tuple[int, int], ...] | None
    batches: tuple[RecordBatchHeader, ...]
    unverified: bool  # capture lost bytes on this connection before this exchange

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == 1


@fast_init
@frozen_dataclass(init=False)
class Exchange:
    """A request matched with its response (or a request that got none)."""

    conn: int
    client: str
    broker: str
    api_key: int
    api_name: str  # Kafka's own name: "Produce", "InitProducerId", ...
    api_version: int
    correlation_id: int
    client_id: str | None
    request: Any  # Struct, or None when the body was not decoded (see `decode_error`)
    response: Any  # Struct, or None (no response, or not decoded)
    request_ts: float  # first byte of the request frame
    request_end_ts: float  # last byte of the request frame
    response_ts: float | None  # last byte of the response frame
    status: str  # "ok" | "no_response" (acks=0 Produce) | "unanswered" (connection closed or capture ended)
    unverified: bool  # a capture gap on this connection came before this exchange
    decode_error: str | None  # why a body is None: "unknown_version", "skipped_api", "malformed: ..."
    batches: tuple[ProducedBatch, ...] = ()  # Produce only
    fetched: tuple[FetchedPartition, ...] = ()  # Fetch only: one per partition of the answer

    @property
    def latency(self) -> float | None:
        return None if self.response_ts is None else self.response_ts - self.request_ts


@fast_init
@frozen_dataclass(init=False)
class ConnectionLost:
    """Bytes of a Kafka connection went missing: what the audit needs to mark findings unverified."""

    conn: int
    client: str
    broker: str
    ts: float
    offset: int
    length: int
    to_broker: bool  # the gap is in the client -> broker direction
    # Bytes held but damaged, rather than missing (None: a gap in the capture): "crc", a record batch of
    # `topic`-`partition` whose CRC-32C does not match its bytes; "malformed", a body that could not be
    # read; "unmatched", an answer to a request the capture did not read. `offset` is then -1, and
    # `length` the damaged batch's bytes (0 otherwise).
    damaged: str | None = None
    topic: str | None = None
    partition: int | None = None


@fast_init
@frozen_dataclass(init=False)
class ConnectionEnded:
    """A Kafka connection ended: its client and broker, when and why."""

    conn: int
    client: str
    broker: str
    ts: float
    reason: str


DecodeEvent = Exchange | ConnectionLost | ConnectionEnded


@slotted_dataclass
class ApiCounts:
    """Requests, responses and exchanges of one API, counted by the decoder."""

    requests: int = 0
    responses: int = 0
    exchanges: int = 0
    versions: set[int] | None = None
    # Bodies (requests and responses) of this API that were not decoded, by why: the API's bodies are not
    # read (nothing in them for the audit), its version is newer than the tables, its key is unknown, or
    # the bytes did not parse.
    skipped_api: int = 0
    unknown_version: int = 0
    unknown_api: int = 0
    malformed: int = 0
    over_item_cap: int = 0  # more array elements and record batches than --max-body-items
    with_leftover: int = 0  # bodies decoded with bytes after what their schema defines

    def not_decoded(self, reason: str) -> None:
        """Counts one body not decoded, by the decoder's reason ("malformed: ..." counts as malformed)."""
        if reason.startswith("malformed"):
            self.malformed += 1
        elif reason in NOT_DECODED:
            setattr(self, reason, getattr(self, reason) + 1)

    def not_decoded_contract(self) -> dict[str, int]:
        return {reason: n for reason in NOT_DECODED if (n := getattr(self, reason))}


NOT_DECODED = ("skipped_api", "unknown_version", "unknown_api", "malformed", "over_item_cap")


@slotted_dataclass
class ElsewhereCounts:
    """Connections on a port the run was not told to read (named ports only) whose first request and
    response look like Kafka, and their TCP payload bytes (both directions)."""

    connections: int = 0
    bytes: int = 0


@slotted_dataclass
class DecodeStats:
    """Counters of the decode stage: the JSON document's `decode` block."""

    requests: int = 0
    responses: int = 0
    exchanges: int = 0
    unmatched_requests: int = 0
    unmatched_responses: int = 0
    errors: int = 0  # malformed frames or bodies
    undecoded_bodies: int = 0  # versions newer than the tables, or APIs whose bodies are skipped
    resyncs: int = 0
    tls_connections: int = 0
    oversized_frames: int = 0  # frame sizes above the cap (max_frame): skipped, the stream resynchronised
    in_flight_evicted: int = 0  # requests given up as unanswered because the in-flight cap was reached
    # Bodies that decoded with bytes after what the schema defines (a client's extra field): decoded
    # as what their header says, never dropped; counted here with the bytes left over.
    bodies_with_leftover: int = 0
    leftover_bytes: int = 0
    # --records: bytes of records decompressed, and batches left undecoded by each decompression cap.
    partial_dropped: int = 0  # partial frames given up at the run-wide cap (--max-partial-total)
    in_flight_total_evicted: int = 0  # requests given up at the run-wide cap (--max-in-flight-total)
    records_inflated_bytes: int = 0
    records_cut_by_batch_cap: int = 0
    records_cut_by_request_cap: int = 0
    records_cut_by_run_cap: int = 0
    bodies_over_item_cap: int = 0  # bodies not decoded: more items than --max-body-items
    by_api: dict[str, ApiCounts] | None = None
    # Named ports only: per broker port not named, the connections that looked like Kafka (not decoded).
    kafka_elsewhere: dict[int, ElsewhereCounts] = field(default_factory=dict)

    def as_contract(self) -> dict:
        return {
            "requests": self.requests,
            "responses": self.responses,
            "exchanges": self.exchanges,
            "unmatched_requests": self.unmatched_requests,
            "unmatched_responses": self.unmatched_responses,
            "errors": self.errors,
            # Additions to the contract's keys: what the decode limits cut.
            "oversized_frames": self.oversized_frames,
            "in_flight_evicted": self.in_flight_evicted,
            "bodies_with_leftover": self.bodies_with_leftover,
            "leftover_bytes": self.leftover_bytes,
            "undecoded_bodies": self.undecoded_bodies,  # by API and why: by_api[...].not_decoded
            "partial_dropped": self.partial_dropped,
            "in_flight_total_evicted": self.in_flight_total_evicted,
            "records_inflated_bytes": self.records_inflated_bytes,
            "records_cut_by_batch_cap": self.records_cut_by_batch_cap,
            "records_cut_by_request_cap": self.records_cut_by_request_cap,
            "records_cut_by_run_cap": self.records_cut_by_run_cap,
            "bodies_over_item_cap": self.bodies_over_item_cap,
            "by_api": {
                name: {
                    "requests": c.requests,
                    "responses": c.responses,
                    "exchanges": c.exchanges,
                    "versions": sorted(c.versions or ()),
                    # addition: bodies not decoded, by why (skipped_api, unknown_version, unknown_api,
                    # malformed, over_item_cap); absent reasons are left out
                    "not_decoded": c.not_decoded_contract(),
                    # addition: bodies decoded with bytes after what their schema defines (counted in
                    # bodies_with_leftover too)
                    "with_leftover": c.with_leftover,
                }
                for name, c in sorted((self.by_api or {}).items())
            },
        }


def made_by_position(cls: type, untracked: bool = False) -> Any:
    """`cls`, or when the compiled body reader is built (ksniff.decode._bodies), a `Maker` of it: the same
    instances, made in C from every field's value given in order, without the class call's binding of
    arguments and Python `__init__` (twice the cost of storing the values, for the events made per batch
    and per exchange). Its callers give every field, by position. A class whose fields are not all object
    slots of its own (a subclass's, a property) is made by the class.

    `untracked`: for records that can never be part of a reference cycle (their fields only ever hold
    numbers, text, None, such records, or containers of those), made without the cyclic collector's
    tracking, as CPython itself untracks tuples and dicts of such values. The audit keeps tens of
    thousands of these for the whole run, and every young collection walked each of them once; reference
    counting frees them as before. Without the compiled module (or with a build older than the flag)
    they are tracked, the results the same."""
    from ksniff.capture.compiled import load

    m = load("ksniff.decode._bodies")
    if getattr(m, "Maker", None) is None:
        return cls
    names = tuple(f.name for f in fields(cls))
    try:
        return m.Maker(cls, names, untracked) if untracked else m.Maker(cls, names)
    except TypeError:
        if not untracked:
            return cls
    return made_by_position(cls)  # a build without the flag
