"""One Kafka connection: frames from both directions into exchanges paired by correlation id.

Kafka answers the requests of one connection in order, and a client may pipeline several. Requests
wait in an insertion-ordered in-flight table keyed by correlation id; a response takes its request
out, and any older request still waiting can then never be answered (it is reported `unanswered`).
Produce with acks=0 gets no response at all (`no_response`). A response whose request was not captured
is counted, never guessed at.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ksniff.capture.compiled import load
from ksniff.common.frozen import slotted_dataclass
from ksniff.common.sources import made
from ksniff.decode.events import (
    ConnectionEnded,
    ConnectionLost,
    DecodeEvent,
    Exchange,
    FetchedPartition,
    ProducedBatch,
    made_by_position,
)
from ksniff.decode.frames import (
    MIN_REQUEST,
    MIN_RESPONSE,
    FrameSplitter,
    measure,
    parse_response_header,
    request_head,
)
from ksniff.decode.reader import ZERO_UUID
from ksniff.decode.records import RecordSet
from ksniff.decode.sync import BODY_BAD, response_confirmer, response_finder
from ksniff.decode.values import Struct

if TYPE_CHECKING:
    from ksniff.decode.context import DecodeContext, VersionPlan
    from ksniff.decode.schema import Api

PRODUCE = 0
FETCH = 1
METADATA = 3
INF = float("inf")

_API_HEAD = struct.Struct(">hh").unpack_from
_CORRELATION = _SIZE = struct.Struct(">i").unpack_from
# parse_response_header's answer without tagged fields: v0 (no tagged fields at all), v1 (an empty set).
_HEADER_V0, _HEADER_V1 = (None, 4), (None, 5)


@slotted_dataclass
class Pending:
    """A request waiting for its response."""

    seq: int
    api: Api | None
    api_key: int
    api_name: str
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Struct | None
    decode_error: str | None
    first_ts: float
    last_ts: float
    unverified: bool
    plan: VersionPlan | None = None  # the API version's, when the generated decoders read its bodies


class Connection:
    """Decoding state of one Kafka connection (client and broker sides known)."""

    __slots__ = (
        "ctx",
        "conn",
        "client",
        "broker",
        "client_is_src",
        "pending",
        "seq",
        "last_correlation",
        "unverified",
        "last_ts",
        "moved",
        "requests",
        "responses",
        "lane",
    )

    def __init__(
        self, ctx: DecodeContext, conn: int, client: str, broker: str, client_is_src: bool, mid_stream: bool
    ) -> None:
        self.ctx = ctx
        self.conn = conn
        self.client = client
        self.broker = broker
        self.client_is_src = client_is_src
        self.pending: dict[int, Pending] = {}
        self.seq = 0
        self.last_correlation: int | None = None
        self.unverified = False
        self.last_ts = 0.0  # of the latest bytes seen: when the capture ends, the connection ends here
        # How much `chunk` changed the bytes the splitters hold, until the decoder adds it to its run-wide
        # total (a chunk holding one whole frame changes nothing).
        self.moved = 0
        self.lane = None  # what the compiled per-frame path read of `ctx`, once (FrameLane)

        def last() -> int | None:
            return self.last_correlation

        def pending() -> Collection[int]:
            return self.pending.keys()

        self.requests = FrameSplitter(
            min_size=MIN_REQUEST,
            max_frame=ctx.max_frame,
            finder=ctx.request_check.finder(last),
            confirm=ctx.request_check.confirmer(last),
            syncing=mid_stream,
        )
        self.responses = FrameSplitter(
            min_size=MIN_RESPONSE,
            max_frame=ctx.max_frame,
            finder=response_finder(ctx.max_frame, pending, self._verify_response),
            confirm=response_confirmer(ctx.max_frame, pending),
            syncing=mid_stream,
        )

    def _verify_response(self, payload: memoryview, correlation_id: int) -> int:
        p = self.pending.get(correlation_id)
        if p is None:
            return BODY_BAD
        api = p.api
        flexible = api is not None and api.flexible.contains(p.api_version) and not api.response_header_v0
        header = parse_response_header(payload, flexible)
        if header is None:
            return BODY_BAD
        return self.ctx.verify(api, p.api_version, False, payload[header[1] :])

    # -- stream events -----------------------------------------------------------------------------

    def chunk(
        self, from_src: bool, data: bytes, first_ts: float, last_ts: float, offset: int, marks: tuple = ()
    ) -> list[DecodeEvent]:
        out: list[DecodeEvent] = []
        self.last_ts = last_ts
        to_broker = from_src == self.client_is_src
        splitter = self.requests if to_broker else self.responses
        if data.__class__ is tuple:  # the chunk's segments (ChunkMerger.pieces_from): a large frame's pieces
            if not splitter.buf:
                n, mapped = measure(data)
                if splitter.start_parts(data, n, first_ts, offset, marks, mapped):
                    self.moved += len(splitter.buf) + splitter.later_len
                    return out
                data = b"".join(data)
        if splitter.buf:
            before, over = splitter.malformed, splitter.oversized
            held = len(splitter.buf) + splitter.later_len
            if data.__class__ is tuple:
                frames = splitter.take_parts(data, first_ts, last_ts, offset, marks)
            else:
                frames = splitter.take(data, first_ts, last_ts, offset, marks)
        else:
            # Nothing held, as nearly always: FrameSplitter.take's own steps for it inline. A chunk holding
            # exactly one whole frame (a small request or response) goes straight to its request or
            # response; pipelined frames to the splitter's loop, without its call.
            held = 0
            n = len(data)
            splitter.next_offset = offset + n
            if not splitter.syncing and splitter.confirm_at is None and n >= 4:
                size = _SIZE(data, 0)[0]
                if size + 4 == n and splitter.min_size <= size <= splitter.max_frame:
                    if to_broker:
                        self._request(memoryview(data)[4:], first_ts, last_ts, out)
                    else:
                        self._response(memoryview(data)[4:], last_ts, out)
                    return out
            before, over = splitter.malformed, splitter.oversized
            frames = splitter.split(data, first_ts, offset, marks)
        if to_broker:
            for payload, frame_first, frame_last, _, _ in frames:
                self._request(payload, frame_first, frame_last, out)
        else:
            for payload, _, frame_last, _, _ in frames:
                self._response(payload, frame_last, out)
        self.moved += len(splitter.buf) + splitter.later_len - held
        if splitter.malformed != before:
            self.ctx.stats.errors += splitter.malformed - before
            self.ctx.stats.oversized_frames += splitter.oversized - over
            self._unreadable(first_ts, to_broker, out)  # frames skipped: unreadable, or over the limit
        return out

    def gap(self, from_src: bool, offset: int, length: int, ts: float) -> list[DecodeEvent]:
        to_broker = from_src == self.client_is_src
        (self.requests if to_broker else self.responses).gap()
        self.unverified = True
        self.ctx.stats.resyncs += 1
        return [ConnectionLost(self.conn, self.client, self.broker, ts, offset, length, to_broker)]

    def held(self) -> int:
        """Bytes of partial frames (or resynchronisation tails) this connection's splitters hold."""
        return self.requests.buffered + self.responses.buffered

    def drop_partial(self) -> list[DecodeEvent]:
        """A run-wide cap: the larger partial frame is given up as if its bytes were lost."""
        to_broker = self.requests.buffered >= self.responses.buffered
        splitter = self.requests if to_broker else self.responses
        offset, length, ts = splitter.buf_offset, splitter.buffered, splitter.buf_ts
        return self.gap(to_broker == self.client_is_src, offset, length, ts)

    def give_up_oldest(self) -> Exchange:
        """A run-wide cap: the oldest request in flight is given up as unanswered."""
        return self._unanswered(self.pending.pop(next(iter(self.pending))))

    def earliest_ts(self) -> float:
        """The earliest time an event this connection still owes can carry (inf when it owes none):
        the oldest request in flight, or a request whose first bytes wait in the splitter's buffer."""
        low = INF
        if self.pending:
            low = next(iter(self.pending.values())).first_ts  # insertion order is arrival order
        if self.requests.buf and self.requests.buf_ts < low:
            low = self.requests.buf_ts
        return low

    def close(self, ts: float, reason: str) -> list[DecodeEvent]:
        out: list[DecodeEvent] = []
        if reason == "fin":
            # A peer that closes in order has sent every frame whole: a frame still partial here claimed
            # a size its bytes never reached (a damaged size), and what it hid (the answers after it) is
            # as lost as after a gap.
            for splitter, to_broker in ((self.requests, True), (self.responses, False)):
                if splitter.buffered:
                    self.ctx.stats.errors += 1
                    out.append(
                        ConnectionLost(
                            self.conn,
                            self.client,
                            self.broker,
                            ts,  # the bytes it swallowed run to the close: later than any request
                            splitter.buf_offset,
                            splitter.buffered,
                            to_broker,
                            "malformed",
                        )
                    )
        for p in self.pending.values():
            self._emit_unanswered(p, out)
        self.pending.clear()
        out.append(ConnectionEnded(self.conn, self.client, self.broker, ts, reason))
        return out

    # -- requests ----------------------------------------------------------------------------------

    def _request(self, payload: memoryview, first_ts: float, last_ts: float, out: list[DecodeEvent]) -> None:
        """One request frame (its payload: the bytes after the size prefix, and its capture times)."""
        ctx = self.ctx
        if len(payload) < MIN_REQUEST:
            ctx.stats.errors += 1
            self._unreadable(first_ts, True, out)
            return
        api_key, api_version = _API_HEAD(payload, 0)
        plan = ctx.plans.get((api_key, api_version))  # found for every request but a version's first
        if plan is not None:
            api = plan.api
            head = request_head(payload, plan.request_flexible)
        else:
            if ctx.only is not None and api_key not in ctx.only:
                # A pass that reads a few APIs (these never get a plan): the others' requests make no
                # exchange, and their answers find nothing pending (a connection joined mid-stream
                # looks only for answers it awaits).
                self.last_correlation = _CORRELATION(payload, 4)[0]
                return
            api = ctx.apis.get(api_key)
            head = request_head(payload, api is not None and api.flexible.contains(api_version))
        if head is None:
            ctx.stats.errors += 1
            self._unreadable(first_ts, True, out)
            return
        correlation_id, client_id, body_offset = head
        if plan is not None:
            name, counts = plan.name, plan.counts
            counts.requests += 1
            ctx.stats.requests += 1
            view = payload[body_offset:]
            try:  # `ctx.run` inline: the generated decoder called directly, `run` only when it raised
                body, end = plan.request(view, ctx.max_body_items)
                error = None
            except Exception:  # noqa: BLE001 - run again by `run`, which says why
                body, error = ctx.run(plan.request, api, api_version, True, view)
            else:
                if end != len(view):
                    ctx.leftover(len(view) - end, counts)
        else:
            name = api.name if api is not None else f"Unknown{api_key}"
            counts = ctx.count(name, api_version)
            counts.requests += 1
            ctx.stats.requests += 1
            body, error = ctx.decode(api, api_version, True, payload[body_offset:])
            plan = ctx.remember(api, api_version, counts)
        if error is not None:
            counts.not_decoded(error)
        self.last_correlation = correlation_id
        self.seq += 1
        pending = _PENDING(
            self.seq,
            api,
            api_key,
            name,
            api_version,
            correlation_id,
            client_id,
            body,
            error,
            first_ts,
            last_ts,
            self.unverified,
            plan,
        )
        if api_key == PRODUCE and body is not None and getattr(body, "acks", None) == 0:
            self._emit(out, pending, None, None, None, "no_response")
            return
        old = self.pending.pop(correlation_id, None)
        if old is not None:  # a reused correlation id: the older request was never answered
            self._emit_unanswered(old, out)
        self.pending[correlation_id] = pending
        if len(self.pending) > ctx.max_in_flight:
            ctx.stats.in_flight_evicted += 1
            self._emit_unanswered(self.pending.pop(next(iter(self.pending))), out)

    # -- responses ---------------------------------------------------------------------------------

    def _response(self, payload: memoryview, last_ts: float, out: list[DecodeEvent]) -> None:
        """One response frame (its payload, and the capture time of its last byte)."""
        ctx = self.ctx
        correlation_id = _CORRELATION(payload, 0)[0]
        ctx.stats.responses += 1
        pending = self.pending.pop(correlation_id, None)
        if pending is None:
            # An answer to a request the capture did not read (lost, or damaged): bytes lost on the way to
            # the broker, known now, before the reassembler can tell (it needs the client's next bytes).
            ctx.stats.unmatched_responses += 1
            self.unverified = True
            out.append(ConnectionLost(self.conn, self.client, self.broker, last_ts, -1, 0, True, "unmatched"))
            return
        # Kafka answers in order: whatever was sent before this request will never be answered now.
        while self.pending:
            first = next(iter(self.pending.values()))
            if first.seq > pending.seq:
                break
            self._emit_unanswered(self.pending.pop(first.correlation_id), out)
        api = pending.api
        plan = pending.plan
        if plan is not None:
            if not plan.response_flexible:  # parse_response_header's answers, inline
                header = _HEADER_V0
            elif len(payload) > 4 and payload[4] == 0:
                header = _HEADER_V1
            else:
                header = parse_response_header(payload, True)
            counts = plan.counts
        else:
            flexible = (
                api is not None and api.flexible.contains(pending.api_version) and not api.response_header_v0
            )
            header = parse_response_header(payload, flexible)
            counts = ctx.count(pending.api_name, pending.api_version)
        counts.responses += 1
        counts.exchanges += 1
        ctx.stats.exchanges += 1
        if header is None:
            ctx.stats.errors += 1
            body, error = None, "malformed: response header"
        elif plan is not None:
            view = payload[header[1] :]
            try:  # `ctx.run` inline, as for requests
                body, end = plan.response(view, ctx.max_body_items)
                error = None
            except Exception:  # noqa: BLE001 - run again by `run`, which says why
                body, error = ctx.run(plan.response, api, pending.api_version, False, view)
            else:
                if end != len(view):
                    ctx.leftover(len(view) - end, counts)
        else:
            body, error = ctx.decode(api, pending.api_version, False, payload[header[1] :])
        if error is not None:
            counts.not_decoded(error)
        if body is not None and pending.api_key == METADATA:
            self._learn_topic_ids(body)
        self._emit(out, pending, body, error, last_ts, "ok")

    def _learn_topic_ids(self, body: Struct) -> None:
        for topic in getattr(body, "topics", None) or ():
            topic_id = getattr(topic, "topic_id", None)
            name = getattr(topic, "name", None)
            if topic_id is not None and topic_id != ZERO_UUID and name:
                self.ctx.topic_names[topic_id] = name

    # -- exchanges ---------------------------------------------------------------------------------

    def _unreadable(self, ts: float, to_broker: bool, out: list[DecodeEvent]) -> None:
        """A frame of this connection could not be read (or was skipped by the size limit): what follows
        on it may rest on that frame, as after a gap."""
        self.unverified = True
        out.append(ConnectionLost(self.conn, self.client, self.broker, ts, -1, 0, to_broker, "malformed"))

    def _emit(
        self,
        out: list[DecodeEvent],
        p: Pending,
        response: Struct | None,
        response_error: str | None,
        response_ts: float | None,
        status: str,
    ) -> None:
        """The exchange into `out`, after what it shows was damaged in the capture (`damage`) as lost bytes
        of this connection: the exchange itself, and what follows on the connection, is unverified, as
        after a gap."""
        ex = self._exchange(p, response, response_error, response_ts, status)
        if ex.decode_error is None and not ex.fetched:
            batches = ex.batches
            if not batches:
                out.append(ex)  # the usual case
                return
            # A Produce: every batch whole (CRC) and, when answered, answered (one loop, for Produce-heavy
            # traffic); anything else is `damage`'s to say.
            answered = response is not None
            for b in batches:
                if b.header.crc_ok is False or (answered and b.error_code is None):
                    break
            else:
                out.append(ex)
                return
        lost = damage(ex)
        if lost is not None:
            if lost.damaged == "malformed" and ex.decode_error is None:  # an answer that does not fit
                self.ctx.stats.errors += 1
            out.append(lost)
            if not self.unverified:
                self.unverified = True
                ex = self._exchange(p, response, response_error, response_ts, status)  # made unverified
        out.append(ex)

    def _emit_unanswered(self, p: Pending, out: list[DecodeEvent]) -> None:
        self.ctx.stats.unmatched_requests += 1
        self._emit(out, p, None, None, None, "unanswered")

    def _unanswered(self, p: Pending) -> Exchange:
        self.ctx.stats.unmatched_requests += 1
        return self._exchange(p, None, None, None, "unanswered")

    def _exchange(
        self,
        p: Pending,
        response: Struct | None,
        response_error: str | None,
        response_ts: float | None,
        status: str,
    ) -> Exchange:
        error = p.decode_error
        if response_error is not None and response_error != error:
            error = response_error if error is None else f"{error}; response {response_error}"
        unverified = p.unverified or self.unverified
        batches: tuple[ProducedBatch, ...] = ()
        fetched: tuple[FetchedPartition, ...] = ()
        if p.api_key == PRODUCE and p.body is not None:
            made = None
            if _PRODUCED is not None:
                head = self._head(p)
                made = _PRODUCED(p.body, response, self.ctx.topic_names, head, response_ts, unverified)
            # Without the compiled maker, or for a body of other classes than the Produce schema's:
            batches = made if made is not None else self._produced(p, response, response_ts, unverified)
        elif p.api_key == FETCH and response is not None and p.body is not None:
            made = None
            if _FETCHED is not None:
                names = self.ctx.topic_names
                made = _FETCHED(p.body, response, names, self._head(p), response_ts, unverified)
            # Without the compiled maker, or for bodies of other classes than the Fetch schema's:
            fetched = made if made is not None else self._fetched(p, response, response_ts, unverified)
        return _EXCHANGE(
            self.conn,
            self.client,
            self.broker,
            p.api_key,
            p.api_name,
            p.api_version,
            p.correlation_id,
            p.client_id,
            p.body,
            response,
            p.first_ts,
            p.last_ts,
            response_ts,
            status,
            unverified,
            error,
            batches,
            fetched,
        )

    def _head(self, p: Pending) -> tuple:
        """The fields every batch event of an exchange starts with, in their order (ProducedBatch's and
        FetchedPartition's, their response time apart): request time, connection, client, broker, client
        id, correlation id, API version."""
        return (p.first_ts, self.conn, self.client, self.broker, p.client_id, p.correlation_id, p.api_version)

    def _fetched(
        self, p: Pending, response: Struct, response_ts: float | None, unverified: bool
    ) -> tuple[FetchedPartition, ...]:
        """Each partition of a Fetch answer with the offset the request asked it from."""
        request = p.body
        names = self.ctx.topic_names
        asked: dict[tuple[Any, int], int] = {}
        for topic in request.topics:
            key = _topic_key(topic, "topic")
            for part in topic.partitions:
                asked[(key, part.partition)] = part.fetch_offset
        replica_id = request.replica_id
        if p.api_version >= 15 and request.replica_state is not None:  # moved into a tagged struct
            replica_id = request.replica_state.replica_id
        isolation, session, session_epoch = request.isolation_level, request.session_id, request.session_epoch
        ts, conn, client, broker, client_id, correlation_id, api_version = self._head(p)
        out = []
        for topic in response.responses:
            key = _topic_key(topic, "topic")
            name = key if isinstance(key, str) else names.get(key, str(key))
            for part in topic.partitions:
                aborted = part.aborted_transactions
                if aborted is not None:
                    aborted = tuple([(a.producer_id, a.first_offset) for a in aborted])
                out.append(
                    FetchedPartition(
                        ts,
                        response_ts,
                        conn,
                        client,
                        broker,
                        client_id,
                        correlation_id,
                        api_version,
                        replica_id,
                        isolation,
                        session,
                        session_epoch,
                        name,
                        part.partition_index,
                        asked.get((key, part.partition_index)),
                        part.error_code,
                        part.high_watermark,
                        part.last_stable_offset,
                        part.log_start_offset,
                        aborted,
                        part.records or (),
                        unverified,
                    )
                )
        return tuple(out)

    def _produced(
        self, p: Pending, response: Struct | None, response_ts: float | None, unverified: bool
    ) -> tuple[ProducedBatch, ...]:
        # Once per Produce exchange: each batch made with its fields in order (ProducedBatch's), the
        # exchange's own values read once.
        # A Produce body (a Struct of the Produce schema, as are its topics and partitions: every field
        # present at every version) read by attribute.
        request = p.body
        names = self.ctx.topic_names
        answers: dict[tuple[Any, int], Any] = {}
        if response is not None:
            for topic in response.responses or ():
                key = _produce_topic_key(topic)
                for part in topic.partition_responses or ():
                    answers[(key, part.index)] = part
        transactional_id = request.transactional_id
        acks = request.acks
        ts, conn, client, broker, client_id, correlation_id, api_version = self._head(p)
        out = []
        for topic in request.topic_data or ():
            key = _produce_topic_key(topic)
            topic_name = key if isinstance(key, str) else names.get(key, str(key))
            for part in topic.partition_data or ():
                index = part.index
                answer = answers.get((key, index))
                error_code = None if answer is None else answer.error_code
                next_offset = None
                if answer is not None and error_code == 0 and answer.base_offset >= 0:
                    next_offset = answer.base_offset
                records = part.records or ()
                raw = records.raw if records.__class__ is RecordSet else ()
                for i, header in enumerate(records):
                    out.append(
                        ProducedBatch(
                            ts,
                            response_ts,
                            conn,
                            client,
                            broker,
                            client_id,
                            correlation_id,
                            api_version,
                            transactional_id,
                            acks,
                            topic_name,
                            index,
                            header,
                            error_code,
                            next_offset,
                            unverified,
                            raw[i] if i < len(raw) else None,
                        )
                    )
                    # Several batches for one partition: the broker's base offset is that of the first;
                    # each later batch starts where the previous one's offsets end.
                    if next_offset is not None:
                        next_offset += header.last_offset_delta + 1
        return tuple(out)


def _produce_topic_key(topic: Struct) -> Any:
    """`_topic_key` of a Produce request's or response's topic (both fields are in its class)."""
    topic_id = topic.topic_id
    if topic_id is not None and topic_id is not ZERO_UUID and topic_id != ZERO_UUID:
        return topic_id
    return topic.name or ""


def _topic_key(topic: Any, name_field: str = "name") -> Any:
    """Topics are named up to Produce and Fetch v12 and identified by topic id from v13 (Fetch calls
    the name `topic`)."""
    topic_id = getattr(topic, "topic_id", None)
    if topic_id is not None and topic_id is not ZERO_UUID and topic_id != ZERO_UUID:
        return topic_id
    return getattr(topic, name_field, "") or ""


def _nested(fields: tuple, name: str) -> tuple:
    """The fields and the Struct class of the elements of the array field `name` of a schema's `fields`."""
    from ksniff.decode.values import camel, struct_class

    f = next(f for f in fields if f.name == name)
    return f.type.of, struct_class(f.type.of, camel(name))


def _places(named: tuple) -> tuple[int, ...]:
    """The places of the fields `named` lists, each (Struct class, its fields' names...), in order."""
    return tuple(cls._fields.index(name) for cls, *names in named for name in names)


def _compiled_produced() -> Any:
    """`Connection._produced` in C (ksniff.decode._bodies.ProducedBatches, when built), reading the
    Structs of the Produce schema by field position; `_produced` is the reference it is held to
    (tests/decode/test_compiled_bodies.py) and runs for any other body."""
    m = load("ksniff.decode._bodies")
    if getattr(m, "ProducedBatches", None) is None:
        return None
    from ksniff.decode.apis.producer import PRODUCE as API
    from ksniff.decode.interp import message_class

    request, response = message_class(API, True), message_class(API, False)
    topic_fields, topic = _nested(API.request, "topic_data")
    _, part = _nested(topic_fields, "partition_data")
    answer_fields, answer_topic = _nested(API.response, "responses")
    _, answer = _nested(answer_fields, "partition_responses")
    named = (
        (request, "transactional_id", "acks", "topic_data"),
        (topic, "name", "topic_id", "partition_data"),
        (part, "index", "records"),
        (response, "responses"),
        (answer_topic, "name", "topic_id", "partition_responses"),
        (answer, "index", "error_code", "base_offset"),
    )
    classes = (request, topic, part, response, answer_topic, answer)
    return m.ProducedBatches(classes, _places(named), made_by_position(ProducedBatch), RecordSet, ZERO_UUID)


def _compiled_fetched() -> Any:
    """`Connection._fetched` in C (ksniff.decode._bodies.FetchedPartitions, when built), reading the
    Structs of the Fetch schema by field position; `_fetched` is the reference it is held to
    (tests/decode/test_compiled_bodies.py) and runs for any other body."""
    m = load("ksniff.decode._bodies")
    if getattr(m, "FetchedPartitions", None) is None:
        return None
    from ksniff.decode.apis.consumer import FETCH as API
    from ksniff.decode.interp import message_class
    from ksniff.decode.values import camel, struct_class

    request, response = message_class(API, True), message_class(API, False)
    topic_fields, topic = _nested(API.request, "topics")
    _, part = _nested(topic_fields, "partitions")
    answer_fields, answer_topic = _nested(API.response, "responses")
    answer_part_fields, answer = _nested(answer_fields, "partitions")
    _, aborted = _nested(answer_part_fields, "aborted_transactions")
    state_field = next(f for f in API.request if f.name == "replica_state")
    state = struct_class(state_field.type, camel("replica_state"))
    named = (
        (request, "topics", "replica_id", "replica_state", "isolation_level", "session_id", "session_epoch"),
        (topic, "topic", "topic_id", "partitions"),
        (part, "partition", "fetch_offset"),
        (response, "responses"),
        (answer_topic, "topic", "topic_id", "partitions"),
        (answer, "partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset"),
        (answer, "aborted_transactions", "records"),
        (aborted, "producer_id", "first_offset"),
        (state, "replica_id"),
    )
    classes = (request, topic, part, response, answer_topic, answer, aborted, state)
    return m.FetchedPartitions(classes, _places(named), made_by_position(FetchedPartition), ZERO_UUID)


_PRODUCED = _compiled_produced()
_FETCHED = _compiled_fetched()
# An Exchange, and a request waiting for its answer, made by position: in C when the compiled body reader
# is built (made_by_position).
_EXCHANGE = made_by_position(Exchange)
_PENDING = made_by_position(Pending)


def damage(ex: Exchange) -> ConnectionLost | None:
    """What exchange `ex` shows was damaged in the capture, as a ConnectionLost of its connection at its
    request's time (the first such thing; None when nothing was): a body that could not be read
    (`malformed`), or a record batch whose CRC-32C does not match its bytes (`crc`): the capture holds other
    bytes than were sent, or the client sent them corrupt (the broker answers CORRUPT_MESSAGE). The audit
    judges nothing in such a batch; what the missing batch leaves behind, as after a gap."""
    error = ex.decode_error
    if error is not None and error.startswith("malformed"):
        to_broker = ex.request is None
        return ConnectionLost(ex.conn, ex.client, ex.broker, ex.request_ts, -1, 0, to_broker, "malformed")
    if ex.response is not None and ex.batches:
        for b in ex.batches:  # a broker answers every partition of a Produce: one it did not, damage
            if b.error_code is None:
                return ConnectionLost(ex.conn, ex.client, ex.broker, ex.request_ts, -1, 0, True, "malformed")
    for b in ex.batches:
        h = b.header
        if h.crc_ok is False:
            length = h.batch_length
            return ConnectionLost(
                ex.conn, ex.client, ex.broker, ex.request_ts, -1, length, True, "crc", b.topic, b.partition
            )
    for part in ex.fetched:
        for h in part.batches:
            # Not a control batch's: librdkafka's mock cluster writes transaction markers whose CRC does
            # not match (tests/pcaps/consume_mock.pcap), and a marker's few fields are judged as read.
            if h.crc_ok is False and not h.control:
                return ConnectionLost(
                    ex.conn,
                    ex.client,
                    ex.broker,
                    ex.request_ts,
                    -1,
                    h.batch_length,
                    False,
                    "crc",
                    part.topic,
                    part.partition,
                )
    return None


def _compiled_lane() -> Any:
    """`Connection.chunk`'s usual case in C (ksniff.decode._bodies.FrameLane, when built): a chunk of whole
    frames with nothing held before it, read and paired as the methods here read and pair them, which are
    the reference it is held to (tests/decode/test_compiled_lane.py) and which it hands everything else
    to. Without it the methods read every chunk, the results the same."""
    if _PENDING is Pending or _EXCHANGE is Exchange:  # the events made by their classes: no makers to use
        return None
    from ksniff.capture.events import StreamChunk
    from ksniff.decode.context import VersionPlan
    from ksniff.decode.events import ApiCounts, DecodeStats

    classes = (StreamChunk, Connection, FrameSplitter, Pending, VersionPlan, ApiCounts, DecodeStats)
    return made(
        "ksniff.decode._bodies", "FrameLane", *classes, _PENDING, _EXCHANGE, _PRODUCED, _FETCHED, damage
    )


# A Decoder made while it is set feeds each chunk of a known connection through it first (None: the
# connection's methods read every chunk; tests set it so to compare the two).
LANE = _compiled_lane()
