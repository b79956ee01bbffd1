"""The decode room's entry point: stream events in, Kafka exchanges and connection events out.

Which connections are Kafka: those with a side on a `--port` (that side is the broker), and, with
auto-detection, any other connection whose client side parses as plausible Kafka requests and whose
server side answers with the same correlation id. Undecided connections are buffered (capped) until
they are decided, then replayed; connections that are not Kafka are handed back through `on_not_kafka`
so the capture room can stop reassembling them. TLS on a Kafka port is counted, not decoded.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ksniff.capture.events import (
    ConnectionClosed,
    ConnectionOpened,
    StreamChunk,
    StreamEvent,
    StreamGap,
)
from ksniff.decode import compiled
from ksniff.decode.connection import Connection
from ksniff.decode.events import ApiCounts, DecodeEvent, DecodeStats
from ksniff.decode.frames import DEFAULT_MAX_FRAME, FOUND, MIN_RESPONSE, NONE, WAIT, parse_request_header
from ksniff.decode.reader import DecodeError
from ksniff.decode.schema import Api
from ksniff.decode.sync import BODY_BAD, BODY_OK, RequestCheck, body_verdict, looks_like_tls
from ksniff.decode.values import Struct

INF = float("inf")
DEFAULT_PORTS = (9092,)  # Kafka's default listener port: the one place ksniff writes it
DEFAULT_MAX_IN_FLIGHT = 4096  # requests waiting for responses on one connection
DETECT_BUFFER = 1 << 20  # bytes held per undecided connection before it is declared not Kafka

BodyDecoder = Callable[[Api, int, bool, Any], Struct]


def _default_apis() -> Mapping[int, Api]:
    from ksniff.decode.apis import ALL_APIS

    return ALL_APIS


@dataclass(slots=True)
class _Undecided:
    """A connection on no Kafka port, held until its first request and response say what it is."""

    opened: ConnectionOpened
    events: list = field(default_factory=list)
    prefix: dict = field(default_factory=lambda: {True: bytearray(), False: bytearray()})
    size: int = 0


def limit_warnings(stats: DecodeStats, max_frame: int, max_in_flight: int) -> list[str]:
    """What the decode limits cut (in `stats`, of one decoder or a run's sum), one line each."""
    notes = []
    if stats.oversized_frames:
        notes.append(f"frame size limit ({max_frame} bytes) reached: {stats.oversized_frames} "
                     "frames skipped")
    if stats.in_flight_evicted:
        notes.append(f"in-flight request limit ({max_in_flight} per connection) reached: "
                     f"{stats.in_flight_evicted} requests given up as unanswered")
    return notes


class Decoder:
    """Feed it the capture room's stream events; it yields DecodeEvents."""

    def __init__(self, ports: Iterable[int] = DEFAULT_PORTS, auto_detect: bool = True,
                 max_frame: int = DEFAULT_MAX_FRAME, on_not_kafka: Callable[[int], Any] | None = None,
                 keep_records: bool = False, *, apis: Mapping[int, Api] | None = None,
                 body_decoder: BodyDecoder | None = None, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.ports = frozenset(ports)
        self.auto_detect = auto_detect
        self.max_frame = max_frame
        self.on_not_kafka = on_not_kafka
        self.keep_records = keep_records
        self.apis: Mapping[int, Api] = apis if apis is not None else _default_apis()
        # With the default (compiled) decoders, `decode` calls each generated function directly through
        # `_bodies`; a decoder passed in (the interpreter, in tests) goes through `body_decoder` always.
        self._compiled = body_decoder is None
        self._counts: dict[tuple[str, int], ApiCounts] = {}
        self._bodies: dict[tuple[int, int, bool], tuple[Api | None, Any, str | None]] = {}
        if body_decoder is None:
            body_decoder = (functools.partial(compiled.decode_body, keep_records=True) if keep_records
                            else compiled.decode_body)
        self.body_decoder: BodyDecoder = body_decoder
        self.max_in_flight = max_in_flight
        self.request_check = RequestCheck(self.apis, max_frame, verify=self.verify_request)
        self.stats = DecodeStats(by_api={})
        self.kafka_connections = 0
        # Topic id -> name, learnt from Metadata responses anywhere in the run.
        self.topic_names: dict[Any, str] = {}
        self._conns: dict[int, Connection] = {}
        self._undecided: dict[int, _Undecided] = {}
        self._ported: dict[int, ConnectionOpened] = {}  # on a Kafka port, awaiting the first bytes
        # Gaps that came before a ported connection's first bytes: its decoding starts resynchronising.
        self._early_gaps: dict[int, list[StreamGap]] = {}
        self._ignored: set[int] = set()

    # -- the engine's interface --------------------------------------------------------------------

    def feed(self, event: StreamEvent) -> list[DecodeEvent]:
        if isinstance(event, StreamChunk):
            c = self._conns.get(event.conn)
            if c is not None:
                return c.chunk(event.from_src, event.data, event.first_ts, event.last_ts, event.offset)
            return self._chunk_slow(event)
        if isinstance(event, StreamGap):
            c = self._conns.get(event.conn)
            if c is not None:
                return c.gap(event.from_src, event.offset, event.length, event.ts)
            u = self._undecided.get(event.conn)
            if u is not None:
                u.events.append(event)
            elif event.conn in self._ported:
                self._early_gaps.setdefault(event.conn, []).append(event)
            return []
        if isinstance(event, ConnectionOpened):
            return self._opened(event)
        if isinstance(event, ConnectionClosed):
            return self._closed(event.conn, event.ts, event.reason)
        return []

    def finish(self) -> list[DecodeEvent]:
        """End of capture: requests still waiting are unanswered; undecided connections are dropped."""
        out: list[DecodeEvent] = []
        for conn in list(self._conns):
            out += self._closed(conn, self._last_ts(conn), "end_of_capture")
        self._undecided.clear()
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
        return limit_warnings(self.stats, self.max_frame, self.max_in_flight)

    def topic_name(self, topic_id: Any) -> str:
        """A topic id's name when a Metadata response told it, else the id as a string."""
        return self.topic_names.get(topic_id, str(topic_id))

    # -- body decoding, shared by connections ------------------------------------------------------

    def count(self, name: str, version: int) -> ApiCounts:
        hit = self._counts.get((name, version))  # once per frame: skip the versions set after the first
        if hit is not None:
            return hit
        hit = self._counts[(name, version)] = self._count(name, version)
        return hit

    def _count(self, name: str, version: int) -> ApiCounts:
        by_api = self.stats.by_api
        c = by_api.get(name)
        if c is None:
            c = by_api[name] = ApiCounts(versions=set())
        c.versions.add(version)
        return c

    def decode(self, api: Api | None, version: int, is_request: bool, body: memoryview
               ) -> tuple[Struct | None, str | None]:
        if self._compiled:  # twice per exchange: one dict lookup, then the generated function
            key = (id(api), version, is_request)
            plan = self._bodies.get(key)
            if plan is None or plan[0] is not api:
                plan = self._bodies[key] = (api, *self._plan(api, version, is_request))
            _, fn, reason = plan
            if fn is None:
                self.stats.undecoded_bodies += 1
                return None, reason
            try:
                value, end = fn(body)
            except Exception:  # noqa: BLE001 - rare: the general path below words the error
                pass
            else:
                if end != len(body):  # bytes the schema does not define: the body is still what it says
                    self.stats.bodies_with_leftover += 1
                    self.stats.leftover_bytes += len(body) - end
                return value, None
        return self._decode(api, version, is_request, body)

    def _plan(self, api: Api | None, version: int, is_request: bool) -> tuple[Any, str | None]:
        """(generated decoder, None), or (None, why the body is not decoded): `_decode`'s checks, once."""
        reason = self._undecodable(api, version)
        if reason is not None:
            return None, reason
        return compiled.decoder_for(api, version, is_request, self.keep_records), None

    @staticmethod
    def _undecodable(api: Api | None, version: int) -> str | None:
        if api is None:
            return "unknown_api"
        if api.extra.get("body") == "skipped" or not (api.request or api.response):
            return "skipped_api"
        if not api.valid.contains(version):
            # Never guess a newer (or retired) version's layout from one we know.
            return "unknown_version"
        return None

    def _decode(self, api: Api | None, version: int, is_request: bool, body: memoryview
                ) -> tuple[Struct | None, str | None]:
        reason = self._undecodable(api, version)
        if reason is not None:
            self.stats.undecoded_bodies += 1
            return None, reason
        try:
            return self.body_decoder(api, version, is_request, body), None
        except DecodeError as e:
            self.stats.errors += 1
            return None, f"malformed: {e}"
        except Exception as e:  # noqa: BLE001 - untrusted bytes must never stop the run
            self.stats.errors += 1
            return None, f"malformed: {type(e).__name__}: {e}"

    def verify(self, api: Api | None, version: int, is_request: bool, body: memoryview) -> int:
        """Resynchronisation's test of a candidate frame's body (`sync.body_verdict`); bodies that are
        never decoded pass."""
        if api is None or api.extra.get("body") == "skipped" or not api.valid.contains(version):
            return BODY_OK
        return body_verdict(functools.partial(self.body_decoder, api, version, is_request), body)

    def verify_request(self, payload: memoryview) -> int:
        api_key, api_version = struct.unpack_from(">hh", payload, 0)
        api = self.apis.get(api_key)
        header = parse_request_header(payload, api is not None and api.flexible.contains(api_version))
        if header is None:
            return BODY_BAD
        return self.verify(api, api_version, True, payload[header.body_offset:])

    # -- connection lifecycle ----------------------------------------------------------------------

    def _opened(self, ev: ConnectionOpened) -> list[DecodeEvent]:
        self._closed(ev.conn, ev.ts, "reopened", quiet=True)
        if ev.dst.port in self.ports or ev.src.port in self.ports:
            self._ported[ev.conn] = ev
        elif self.auto_detect:
            self._undecided[ev.conn] = _Undecided(ev)
        else:
            self._not_kafka(ev.conn)
        return []

    def _closed(self, conn: int, ts: float, reason: str, quiet: bool = False) -> list[DecodeEvent]:
        self._ignored.discard(conn)
        self._undecided.pop(conn, None)
        self._ported.pop(conn, None)
        self._early_gaps.pop(conn, None)
        c = self._conns.pop(conn, None)
        if c is None:
            return []
        out = c.close(ts, reason)
        return [] if quiet else out

    def _last_ts(self, conn: int) -> float:
        return self._conns[conn].last_ts

    def _not_kafka(self, conn: int) -> None:
        self._ignored.add(conn)
        self._undecided.pop(conn, None)
        self._ported.pop(conn, None)
        self._early_gaps.pop(conn, None)
        if self.on_not_kafka is not None:
            self.on_not_kafka(conn)

    def _start(self, ev: ConnectionOpened, client_is_src: bool) -> Connection:
        client, broker = (ev.src, ev.dst) if client_is_src else (ev.dst, ev.src)
        c = Connection(self, ev.conn, str(client), str(broker), client_is_src,
                       mid_stream=not ev.handshake_seen)
        self._conns[ev.conn] = c
        self.kafka_connections += 1
        return c

    def _chunk_slow(self, ev: StreamChunk) -> list[DecodeEvent]:
        if ev.conn in self._ignored:
            return []
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
        return out + c.chunk(ev.from_src, ev.data, ev.first_ts, ev.last_ts, ev.offset)

    # -- auto-detection ----------------------------------------------------------------------------

    def _detect(self, u: _Undecided, ev: StreamChunk) -> list[DecodeEvent]:
        u.events.append(ev)
        u.size += len(ev.data)
        prefix = u.prefix[ev.from_src]
        if len(prefix) < 64:
            prefix += ev.data[:64 - len(prefix)]
        verdict = self._verdict(u)
        if verdict is None:
            if u.size > DETECT_BUFFER:
                self._not_kafka(u.opened.conn)
            return []
        if verdict is False:
            self._not_kafka(u.opened.conn)
            return []
        del self._undecided[u.opened.conn]
        c = self._start(u.opened, verdict == "src")
        out: list[DecodeEvent] = []
        for e in u.events:
            if isinstance(e, StreamChunk):
                out += c.chunk(e.from_src, e.data, e.first_ts, e.last_ts, e.offset)
            else:
                out += c.gap(e.from_src, e.offset, e.length, e.ts)
        return out

    def _verdict(self, u: _Undecided) -> str | bool | None:
        """"src"/"dst": Kafka with that side the client; False: not Kafka; None: not yet known."""
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
