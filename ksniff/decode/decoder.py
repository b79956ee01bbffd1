"""The decode room's entry point: stream events in, Kafka exchanges and connection events out.

Which connections are Kafka: those with a side on a `--port` (that side is the broker), and, with
auto-detection, any other connection whose client side parses as plausible Kafka requests and whose
server side answers with the same correlation id. Undecided connections are buffered (capped) until
they are decided, then replayed; connections that are not Kafka are handed back through `on_not_kafka`
so the capture room can stop reassembling them. TLS on a Kafka port is counted, not decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import field
from typing import Any

from ksniff.capture.events import (
    ConnectionClosed,
    ConnectionOpened,
    StreamChunk,
    StreamEvent,
    StreamGap,
)
from ksniff.common.frozen import slotted_dataclass
from ksniff.decode import connection
from ksniff.decode.connection import Connection
from ksniff.decode.context import BodyDecoder, DecodeContext
from ksniff.decode.events import DecodeEvent, DecodeStats, ElsewhereCounts
from ksniff.decode.frames import DEFAULT_MAX_FRAME, FOUND, MIN_RESPONSE, NONE, WAIT
from ksniff.decode.reader import MAX_BODY_ITEMS
from ksniff.decode.records import (
    MAX_DECOMPRESSED,
    MAX_DECOMPRESSED_REQUEST,
    MAX_DECOMPRESSED_RUN,
    Inflation,
    inflation_warnings,
)
from ksniff.decode.schema import Api
from ksniff.decode.sync import looks_like_tls

INF = float("inf")
DEFAULT_PORTS = (9092,)  # Kafka's default listener port: the one place ksniff writes it
DEFAULT_MAX_IN_FLIGHT = 4096  # requests waiting for responses on one connection
DEFAULT_MAX_IN_FLIGHT_TOTAL = 65536  # ... on all connections together
DEFAULT_MAX_PARTIAL_TOTAL = 256 << 20  # bytes of frames waiting for their end, on all connections
DETECT_BUFFER = 1 << 20  # bytes held per undecided connection before it is declared not Kafka
# With named ports only (no auto-detection), bytes of another port's connection looked at before it is
# given up as not Kafka: as many as auto-detection would hold (only the first 64 of each side are kept).
WATCH_BUFFER = DETECT_BUFFER


def _default_apis() -> Mapping[int, Api]:
    from ksniff.decode.apis import ALL_APIS

    return ALL_APIS


@slotted_dataclass
class _Undecided:
    """A connection on no Kafka port, held until its first request and response say what it is."""

    opened: ConnectionOpened
    events: list = field(default_factory=list)
    prefix: dict = field(default_factory=lambda: {True: bytearray(), False: bytearray()})
    size: int = 0
    watch: bool = False  # named ports only: look whether it looks like Kafka, count it, never decode it


def limit_warnings(
    stats: DecodeStats,
    max_frame: int,
    max_in_flight: int,
    *,
    max_in_flight_total: int = DEFAULT_MAX_IN_FLIGHT_TOTAL,
    max_partial_total: int = DEFAULT_MAX_PARTIAL_TOTAL,
    records_caps: tuple[int, int, int] = (MAX_DECOMPRESSED, MAX_DECOMPRESSED_REQUEST, MAX_DECOMPRESSED_RUN),
    max_body_items: int = MAX_BODY_ITEMS,
) -> list[str]:
    """What the decode limits cut (in `stats`, of one decoder or a run's sum), one line each."""
    notes = []
    if stats.oversized_frames:
        notes.append(f"frame size limit ({max_frame} bytes) reached: {stats.oversized_frames} frames skipped")
    if stats.in_flight_evicted:
        notes.append(
            f"in-flight request limit ({max_in_flight} per connection) reached: "
            f"{stats.in_flight_evicted} requests given up as unanswered"
        )
    if stats.partial_dropped:
        notes.append(
            f"partial frame limit ({max_partial_total} bytes in all) reached: "
            f"{stats.partial_dropped} partial frames (streams resynchronised) or connections "
            "still being identified given up"
        )
    if stats.in_flight_total_evicted:
        notes.append(
            f"in-flight request limit ({max_in_flight_total} in all) reached: "
            f"{stats.in_flight_total_evicted} requests given up as unanswered"
        )
    if stats.bodies_over_item_cap:
        notes.append(
            f"body item limit ({max_body_items} array elements and record batches) reached: "
            f"{stats.bodies_over_item_cap} bodies not decoded"
        )
    return notes + inflation_warnings(stats, *records_caps)


class Decoder:
    """Feed it the capture room's stream events; it yields DecodeEvents."""

    def __init__(
        self,
        ports: Iterable[int] = DEFAULT_PORTS,
        auto_detect: bool = True,
        max_frame: int = DEFAULT_MAX_FRAME,
        on_not_kafka: Callable[[int], Any] | None = None,
        keep_records: bool = False,
        *,
        apis: Mapping[int, Api] | None = None,
        body_decoder: BodyDecoder | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        records_caps: tuple[int, int, int] = (
            MAX_DECOMPRESSED,
            MAX_DECOMPRESSED_REQUEST,
            MAX_DECOMPRESSED_RUN,
        ),
        max_in_flight_total: int = DEFAULT_MAX_IN_FLIGHT_TOTAL,
        max_partial_total: int = DEFAULT_MAX_PARTIAL_TOTAL,
        max_body_items: int = MAX_BODY_ITEMS,
        on_elsewhere: Callable[[int, int], Any] | None = None,
        watch_elsewhere: bool = True,
        shared: DecodeContext | None = None,
        only: Collection[str] | None = None,
    ) -> None:
        self.ports = frozenset(ports)
        self.auto_detect = auto_detect
        self.on_not_kafka = on_not_kafka
        # Without auto-detection, a connection on another port is still looked at (its first bytes only,
        # `watch_elsewhere`) so the run can say where else Kafka seems to be (stats.kafka_elsewhere);
        # `on_elsewhere(conn, port)` drops such a connection instead of `on_not_kafka`, and keeps counting
        # its bytes (the capture room's `Reassembler.drop(conn, tally=port)`).
        self.on_elsewhere = on_elsewhere
        self.watch_elsewhere = watch_elsewhere
        # What every connection shares: body decoding, counters, caps and the run's topic names; with
        # `shared` (another decoder's context, made with the same settings: DecodeContext.sharing), its
        # counters and caches too.
        if shared is not None:
            ctx = self.ctx = shared.sharing()
        else:
            apis = apis if apis is not None else _default_apis()
            ctx = self.ctx = DecodeContext(
                apis,
                max_frame=max_frame,
                max_in_flight=max_in_flight,
                keep_records=keep_records,
                body_decoder=body_decoder,
                max_body_items=max_body_items,
                only=None if only is None else frozenset(k for k, a in apis.items() if a.name in only),
            )
        self.max_frame, self.max_in_flight, self.keep_records = max_frame, max_in_flight, keep_records
        self.apis, self.stats, self.request_check = ctx.apis, ctx.stats, ctx.request_check
        self.topic_names = ctx.topic_names  # topic id -> name, learnt from Metadata responses in the run
        # --records: what the run may decompress (per batch, per request, in all), drawn on by the rows.
        self.inflation = Inflation(self.stats, *records_caps)
        # Run-wide caps: what all connections together hold in requests in flight and partial frames.
        self.max_in_flight_total = max_in_flight_total
        self.max_partial_total = max_partial_total
        self._in_flight = 0
        self._partial = 0
        self._undecided_bytes = 0  # held for connections still being identified, under the same cap
        self.kafka_connections = 0
        self._conns: dict[int, Connection] = {}
        self._undecided: dict[int, _Undecided] = {}
        self._ported: dict[int, ConnectionOpened] = {}  # on a Kafka port, awaiting the first bytes
        # Gaps that came before a ported connection's first bytes: its decoding starts resynchronising.
        self._early_gaps: dict[int, list[StreamGap]] = {}
        self._ignored: set[int] = set()
        # `feed` of a chunk of a known connection in C (ksniff.decode._bodies.FrameLane: whole frames with
        # nothing held) when built, the Python below for everything it hands back; callers that feed
        # every chunk may call `lane.feed(decoder, event)` themselves first (ksniff.engine.local).
        self.lane = connection.LANE

    # -- the engine's interface --------------------------------------------------------------------

    def feed(self, event: StreamEvent) -> list[DecodeEvent]:
        if isinstance(event, StreamChunk):
            c = self._conns.get(event.conn)
            if c is not None:
                lane = self.lane  # the usual chunks in C (`connection.LANE`), and this path the rest
                if lane is not None:
                    out = lane.feed(self, event)
                    if out is not None:
                        return out
                # Once per chunk: the run-wide totals move by what the chunk changed, the bytes its
                # splitter holds (`Connection.moved`) and the requests in flight (`_account` when a cap
                # is passed).
                waiting = len(c.pending)
                e = event
                out = c.chunk(e.from_src, e.data, e.first_ts, e.last_ts, e.offset, e.marks)
                self._in_flight += len(c.pending) - waiting
                if c.moved:
                    self._partial += c.moved
                    c.moved = 0
                if self._partial > self.max_partial_total or self._in_flight > self.max_in_flight_total:
                    return self._account(c, 0, 0, out, counted=True)
                return out
            return self._chunk_slow(event)
        if isinstance(event, StreamGap):
            c = self._conns.get(event.conn)
            if c is not None:
                held, waiting = c.held(), len(c.pending)
                return self._account(
                    c, held, waiting, c.gap(event.from_src, event.offset, event.length, event.ts)
                )
            u = self._undecided.get(event.conn)
            if u is not None:
                if not u.watch:  # a watched connection is never replayed
                    u.events.append(event)
            elif event.conn in self._ported:
                self._early_gaps.setdefault(event.conn, []).append(event)
            return []
        if isinstance(event, ConnectionOpened):
            return self._opened(event)
        if isinstance(event, ConnectionClosed):
            return self._closed(event.conn, event.ts, event.reason)
        return []

    def _account(
        self, c: Connection, held: int, waiting: int, out: list[DecodeEvent], counted: bool = False
    ) -> list[DecodeEvent]:
        """After `c` changed (it held `held` partial bytes and `waiting` requests before): the run-wide
        totals, and what their caps give up when they are passed. `counted`: the totals already moved."""
        if not counted:
            self._partial += c.held() - held
            self._in_flight += len(c.pending) - waiting
            c.moved = 0  # counted by the line above
        while self._partial > self.max_partial_total:
            big = max(self._conns.values(), key=Connection.held)
            held = big.held()
            if not held:  # nothing left to give up: the count had drifted
                self._partial = 0
                break
            out += big.drop_partial()
            self.stats.partial_dropped += 1
            self._partial -= held - big.held()
        while self._in_flight > self.max_in_flight_total:
            busy = max(self._conns.values(), key=lambda x: len(x.pending))
            if not busy.pending:
                self._in_flight = 0
                break
            out.append(busy.give_up_oldest())
            self.stats.in_flight_total_evicted += 1
            self._in_flight -= 1
        return out

    def finish(self) -> list[DecodeEvent]:
        """End of capture: requests still waiting are unanswered; undecided connections are dropped.

        Connections end in the order they opened (their ids), not the order they were identified in: what
        the end lets go is then a function of the connections alone, whichever engine decoded them."""
        out: list[DecodeEvent] = []
        for conn in sorted(self._conns):
            out += self._closed(conn, self._last_ts(conn), "end_of_capture")
        self._undecided.clear()
        self._undecided_bytes = 0
        self._ported.clear()
        self._early_gaps.clear()
        return out

    def horizon(self) -> float:
        """No decode event still to come carries a timestamp before this one (inf: none is owed), as long
        as stream events keep arriving in capture order. Exchanges carry their request's time, so requests
        in flight, partial requests, connections still being identified and early gaps hold it back.
        Costs one pass over the open connections."""
        low = INF
        for c in self._conns.values():
            t = c.earliest_ts()
            if t < low:
                low = t
        for u in self._undecided.values():  # replayed through a Connection once identified
            if u.events:
                first = u.events[0]
                t = first.first_ts if isinstance(first, StreamChunk) else first.ts
                if t < low:
                    low = t
        for gaps in self._early_gaps.values():
            for g in gaps:
                if g.ts < low:
                    low = g.ts
        return low

    @property
    def open_connections(self) -> int:
        return len(self._conns) + len(self._undecided)

    def warnings(self) -> list[str]:
        """What the decode limits cut, one line each, for the run's warnings."""
        inf = self.inflation
        return limit_warnings(
            self.stats,
            self.max_frame,
            self.max_in_flight,
            max_in_flight_total=self.max_in_flight_total,
            max_partial_total=self.max_partial_total,
            records_caps=(inf.per_batch, inf.per_request, inf.per_run),
            max_body_items=self.ctx.max_body_items,
        )

    def topic_name(self, topic_id: Any) -> str:
        """A topic id's name when a Metadata response told it, else the id as a string."""
        return self.ctx.topic_name(topic_id)

    # -- connection lifecycle ----------------------------------------------------------------------

    def _opened(self, ev: ConnectionOpened) -> list[DecodeEvent]:
        self._closed(ev.conn, ev.ts, "reopened", quiet=True)
        if ev.dst.port in self.ports or ev.src.port in self.ports:
            self._ported[ev.conn] = ev
        elif self.auto_detect:
            self._undecided[ev.conn] = _Undecided(ev)
        elif self.watch_elsewhere:
            self._undecided[ev.conn] = _Undecided(ev, watch=True)
        else:
            self._not_kafka(ev.conn)
        return []

    def _closed(self, conn: int, ts: float, reason: str, quiet: bool = False) -> list[DecodeEvent]:
        self._ignored.discard(conn)
        self._forget_undecided(conn)
        self._ported.pop(conn, None)
        self._early_gaps.pop(conn, None)
        c = self._conns.pop(conn, None)
        if c is None:
            return []
        self._partial -= c.held()
        self._in_flight -= len(c.pending)
        out = c.close(ts, reason)
        return [] if quiet else out

    def _last_ts(self, conn: int) -> float:
        return self._conns[conn].last_ts

    def _not_kafka(self, conn: int) -> None:
        self._ignored.add(conn)
        self._forget_undecided(conn)
        self._ported.pop(conn, None)
        self._early_gaps.pop(conn, None)
        if self.on_not_kafka is not None:
            self.on_not_kafka(conn)

    def _forget_undecided(self, conn: int) -> None:
        u = self._undecided.pop(conn, None)
        if u is not None and not u.watch:
            self._undecided_bytes -= u.size

    def _start(self, ev: ConnectionOpened, client_is_src: bool) -> Connection:
        client, broker = (ev.src, ev.dst) if client_is_src else (ev.dst, ev.src)
        c = Connection(
            self.ctx, ev.conn, str(client), str(broker), client_is_src, mid_stream=not ev.handshake_seen
        )
        self._conns[ev.conn] = c
        self.kafka_connections += 1
        return c

    def _chunk_slow(self, ev: StreamChunk) -> list[DecodeEvent]:
        if ev.conn in self._ignored:
            return []
        if ev.data.__class__ is tuple:  # its segments' payloads (ChunkMerger.pieces_from): joined here
            data = b"".join(ev.data)
            ev = StreamChunk(ev.conn, ev.from_src, ev.offset, data, ev.first_ts, ev.last_ts, ev.marks, ev.at)
        opened = self._ported.get(ev.conn)
        if opened is not None:
            return self._first_on_port(opened, ev)
        u = self._undecided.get(ev.conn)
        if u is not None:
            return self._detect(u, ev)
        return []

    def _first_on_port(self, opened: ConnectionOpened, ev: StreamChunk) -> list[DecodeEvent]:
        del self._ported[opened.conn]
        if looks_like_tls(ev.data[:3]):
            self.stats.tls_connections += 1
            self._not_kafka(opened.conn)
            return []
        if opened.dst.port in self.ports and (opened.src.port not in self.ports or opened.handshake_seen):
            client_is_src = True
        elif opened.src.port in self.ports and opened.dst.port not in self.ports:
            client_is_src = False
        else:  # both sides on Kafka ports and no handshake: the side sending requests is the client
            client_is_src = ev.from_src == (self.request_check.header_at(bytes(ev.data[:64]), 0) != NONE)
        c = self._start(opened, client_is_src)
        out: list[DecodeEvent] = []
        for g in self._early_gaps.pop(opened.conn, ()):
            out += c.gap(g.from_src, g.offset, g.length, g.ts)
        out += c.chunk(ev.from_src, ev.data, ev.first_ts, ev.last_ts, ev.offset, ev.marks)
        return self._account(c, 0, 0, out)  # a new connection held nothing before

    # -- auto-detection ----------------------------------------------------------------------------

    def _detect(self, u: _Undecided, ev: StreamChunk) -> list[DecodeEvent]:
        if u.watch:
            return self._watch(u, ev)
        u.events.append(ev)
        u.size += len(ev.data)
        self._undecided_bytes += len(ev.data)
        if self._undecided_bytes > self.max_partial_total:  # the run-wide cap: this one is given up
            self.stats.partial_dropped += 1
            self._not_kafka(u.opened.conn)
            return []
        prefix = u.prefix[ev.from_src]
        if len(prefix) < 64:
            prefix += ev.data[: 64 - len(prefix)]
            verdict = self._verdict(u)
        else:  # the verdict reads only the first 64 bytes of each side: unchanged since the last chunk
            verdict = None
        if verdict is None:
            if u.size > DETECT_BUFFER:
                self._not_kafka(u.opened.conn)
            return []
        if verdict is False:
            self._not_kafka(u.opened.conn)
            return []
        self._forget_undecided(u.opened.conn)
        c = self._start(u.opened, verdict == "src")
        out: list[DecodeEvent] = []
        for e in u.events:
            if isinstance(e, StreamChunk):
                out += c.chunk(e.from_src, e.data, e.first_ts, e.last_ts, e.offset, e.marks)
            else:
                out += c.gap(e.from_src, e.offset, e.length, e.ts)
        return self._account(c, 0, 0, out)

    def _watch(self, u: _Undecided, ev: StreamChunk) -> list[DecodeEvent]:
        """A connection on no named port (no auto-detection): only its first bytes are looked at, nothing
        is held or decoded. One that looks like Kafka is counted by its broker's port and given up."""
        u.size += len(ev.data)
        prefix = u.prefix[ev.from_src]
        if len(prefix) < 64:
            prefix += ev.data[: 64 - len(prefix)]
            verdict = self._verdict(u)
        else:
            verdict = None
        if verdict is None and u.size <= WATCH_BUFFER:
            return []
        conn = u.opened.conn
        if not verdict:
            self._not_kafka(conn)
            return []
        port = (u.opened.dst if verdict == "src" else u.opened.src).port
        tally = self.stats.kafka_elsewhere.setdefault(port, ElsewhereCounts())
        tally.connections += 1
        tally.bytes += u.size
        if self.on_elsewhere is None:
            self._not_kafka(conn)
            return []
        self._forget_undecided(conn)
        self._ignored.add(conn)
        self.on_elsewhere(conn, port)
        return []

    def _verdict(self, u: _Undecided) -> str | bool | None:
        """ "src"/"dst": Kafka with that side the client; False: not Kafka; None: not yet known."""
        sides = (True,) if u.opened.handshake_seen else (True, False)
        undecided = False
        for client_is_src in sides:
            req, resp = bytes(u.prefix[client_is_src]), bytes(u.prefix[not client_is_src])
            if looks_like_tls(req):
                return False
            first = self.request_check.header_at(req, 0)
            if first == WAIT:
                undecided = True
                continue
            if first != FOUND:
                continue
            if len(resp) < 8:
                undecided = True
                continue
            size = int.from_bytes(resp[:4], "big", signed=True)
            if MIN_RESPONSE <= size <= self.max_frame and resp[4:8] == req[8:12]:
                return "src" if client_is_src else "dst"
        return None if undecided else False
