"""TCP reassembly per half-connection: segment tuples in, StreamEvents out, memory bounded.

One consistent rule for overlaps: the bytes received first win. Later bytes that disagree with them are
counted (`overlaps_differing`) and dropped. Out-of-order bytes wait in a bounded buffer; a hole becomes a
`StreamGap` when the peer acknowledged past it (the capture lost it), when a cap forces it, when the
connection closes, or at the end of the capture. Consecutive in-order segments are merged into one
`StreamChunk` (up to `max_chunk_bytes`) so the decoder sees few, large chunks.

The reassembler consumes the flat tuples of `ksniff.capture.packets` from any source, so a Spark job can
group segments by connection and run one reassembler per group; `stable_conn_id` then gives ids that
agree across partitions. Such an engine drives from outside what a single reassembler decides on its own
segments' times: `events(..., sweeps=False)` plus `sweep(now)` at the whole capture's sweep times (every
`sweep_every` seconds), `flush()` where another connection's traffic would have cut the chunk being
merged, and `open_connections` to know whether a sweep can change anything.
"""

from __future__ import annotations

import bisect
import hashlib
import socket
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from ksniff.capture.errors import CaptureLimits
from ksniff.capture.events import (
    CaptureStats,
    ConnectionClosed,
    ConnectionOpened,
    Endpoint,
    StreamChunk,
    StreamEvent,
    StreamGap,
)
from ksniff.capture.packets import ACK, FIN, RST, SYN, TICK, TRUNCATED

MASK = 0xFFFFFFFF
HALF = 0x80000000
TAIL_KEPT = 64 << 10  # bytes of the last chunk kept per direction to compare retransmissions against
_SLOW_FLAGS = FIN | SYN | RST | TRUNCATED | TICK

ConnIdFn = Callable[[bytes, int, bytes, int, float], int]


def stable_conn_id(src_ip: bytes, src_port: int, dst_ip: bytes, dst_port: int, ts: float) -> int:
    """A connection id from the client's 4-tuple and first timestamp: equal wherever it is computed."""
    key = src_ip + dst_ip + struct.pack("!HHd", src_port, dst_port, ts)
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def ip_text(packed: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)


class _Conn:
    __slots__ = ("id", "src", "dst", "halves", "closed", "dropped")

    def __init__(self, conn_id: int, src: Endpoint, dst: Endpoint) -> None:
        self.id, self.src, self.dst = conn_id, src, dst
        self.halves: tuple[_Half, _Half] = ()  # type: ignore[assignment]
        self.closed: str | None = None
        self.dropped = False

    def last_ts(self) -> float:
        return max(self.halves[0].last_ts, self.halves[1].last_ts)


class _Half:
    """One direction of a connection. `nxt` is the stream offset expected next, `nxt32` its sequence no."""

    __slots__ = ("conn", "from_src", "peer", "key", "fast", "isn", "base", "nxt", "nxt32", "ooo",
                 "ooo_bytes", "fin", "ack_out", "last_ts", "parts", "p_off", "p_len", "p_first",
                 "p_last", "tail", "tail_off")

    def __init__(self, conn: _Conn, from_src: bool, key: tuple, ts: float) -> None:
        self.conn, self.from_src, self.key = conn, from_src, key
        self.peer: _Half = self
        self.fast = False  # in-order delivery needs no checks: base known, nothing buffered, open
        self.isn: int | None = None
        self.base: int | None = None  # sequence number of stream offset 0
        self.nxt = 0
        self.nxt32 = 0
        self.ooo: list[tuple[int, int, bytes | None, float]] = []  # sorted, non-overlapping; None: lost
        self.ooo_bytes = 0
        self.fin: int | None = None
        self.ack_out: int | None = None  # last ACK number this side sent: what it got of the peer's bytes
        self.last_ts = ts
        self.parts: list | None = None
        self.p_off = self.p_len = 0
        self.p_first = self.p_last = 0.0
        self.tail: bytes | None = None
        self.tail_off = 0

    def offset(self, seq: int) -> int:
        """The stream offset of `seq`, taken as the nearest one to `nxt` (handles wrap-around)."""
        d = (seq - self.nxt32) & MASK
        return self.nxt + (d - 0x100000000 if d >= HALF else d)


class Reassembler:
    """Turns segment tuples into StreamEvents. Use `events(segments)`; `drop(conn)` stops a connection."""

    def __init__(self, limits: CaptureLimits | None = None, stats: CaptureStats | None = None,
                 conn_id: ConnIdFn | None = None) -> None:
        self.limits = limits or CaptureLimits()
        self.stats = stats if stats is not None else CaptureStats()
        self.out: deque[StreamEvent] = deque()
        self.evicted = 0
        self.forced_gaps = 0
        self._conn_id = conn_id
        self._next_id = 1
        self._table: dict[tuple, _Half] = {}
        self._conns: dict[int, _Conn] = {}
        self._pend: _Half | None = None
        self._ooo_total = 0
        self._ooo_halves: set[_Half] = set()
        self._now = 0.0
        self._next_sweep = float("-inf")
        # Seconds of capture time between two idle sweeps: a few per timeout.
        self.sweep_every = max(1.0, min(self.limits.idle_timeout, self.limits.closed_linger) / 4)

    # -- the hot loop -------------------------------------------------------------------------------

    def events(self, segments: Iterable[tuple], finish: bool = True,
               sweeps: bool = True) -> Iterator[StreamEvent]:
        """Events for `segments` (in capture order); with `finish`, closes what is open at the end.

        Without `sweeps`, idle connections are expired only when the caller says (`sweep`): an engine that
        gives each reassembler a slice of the capture sweeps on the whole capture's clock, not the slice's.
        """
        table_get = self._table.get
        out = self.out
        popleft = out.popleft
        slow = self._segment
        max_chunk = self.limits.max_chunk_bytes
        ts = None
        sweep_at = self._next_sweep if sweeps else float("inf")
        for seg in segments:
            ts, sip, sp, dip, dp, seq, ack, flags, payload = seg
            if ts >= sweep_at:  # idle expiry runs on capture time, a few times per timeout
                if ts >= self._next_sweep:
                    self.sweep(ts)
                sweep_at = self._next_sweep
            h = table_get((sip, sp, dip, dp))
            if h is None or not h.fast or flags & _SLOW_FLAGS:
                slow(h, seg)
            else:
                h.last_ts = ts
                h.ack_out = ack
                if payload:
                    if seq != h.nxt32:
                        slow(h, seg)
                    else:
                        n = len(payload)
                        h.nxt += n
                        h.nxt32 = (seq + n) & MASK
                        if self._pend is h:
                            h.parts.append(payload)
                            h.p_last = ts
                            h.p_len += n
                            if h.p_len >= max_chunk:
                                self._flush()
                        else:
                            self._start(h, h.nxt - n, payload, n, ts)
            while out:
                yield popleft()
        if finish:
            self.finish(ts)
            while out:
                yield popleft()

    # -- the careful path ---------------------------------------------------------------------------

    def _segment(self, h: _Half | None, seg: tuple) -> None:
        ts, sip, sp, dip, dp, seq, ack, flags, payload = seg
        if ts > self._now:
            self._now = ts
        if flags & TICK:
            self._flush()
            return
        if h is None:
            if flags & RST:
                return  # a reset of a connection we never saw carries nothing
            h = self._open(seg)
        conn = h.conn
        if flags & (SYN | ACK) == SYN and h.isn is not None and seq != h.isn or (
                conn.closed is not None and flags & (SYN | ACK) == SYN):
            # A new connection on a 4-tuple already used: a new SYN after the close, or one with a
            # different initial sequence number (the old connection's close was not captured).
            self._close(conn, ts, "reused")
            h = self._reopen(conn, seg)
            conn = h.conn
        if conn.closed is not None or conn.dropped:
            h.last_ts = ts
            return  # stray packets of a finished or ignored connection
        h.last_ts = ts
        if flags & ACK:
            h.ack_out = ack
            if h.peer.ooo:
                # This ACK may cover bytes of the peer that the capture lost: declare that gap now, so
                # the peer's buffered bytes (a request) come out before this segment's (its response).
                self._ack_gap(h.peer, ts)
                self._drain(h.peer)
                self._refresh(h.peer)
        if flags & SYN:
            if h.base is None:
                h.isn = seq
                self._set_base(h, (seq + 1) & MASK)
            seq = (seq + 1) & MASK
        if h.base is None:  # first segment of a direction seen mid-stream: it starts the stream
            self._set_base(h, seq)
        if flags & TRUNCATED:
            self.stats.truncated_packets += 1
            off = h.offset(seq)
            self._data(h, off, off + payload, None, ts)
            length = payload
        else:
            length = len(payload)
            if length:
                off = h.offset(seq)
                self._data(h, off, off + length, payload, ts)
        if flags & FIN and h.fin is None:
            h.fin = h.offset(seq) + length
            if h.peer.fin is not None:
                self._close(conn, ts, "fin")
        if flags & RST:
            self._close(conn, ts, "rst")
        self._refresh(h)

    def _set_base(self, h: _Half, base: int) -> None:
        h.base = base
        h.nxt = 0
        h.nxt32 = base

    def _data(self, h: _Half, off: int, end: int, data, ts: float) -> None:
        """Bytes [off, end) of direction `h`; `data` None means the capture lost them (snaplen)."""
        nxt = h.nxt
        if end <= nxt:
            if data is not None:
                self._compare_old(h, off, data)
            return
        if off < nxt:
            if data is not None:
                self._compare_old(h, off, data[:nxt - off])
                data = data[nxt - off:]
            off = nxt
        if off == nxt and not h.ooo:
            if data is None:
                self._gap(h, off, end - off, ts)
            else:
                self._deliver(h, data, ts)
            return
        self._buffer(h, off, end, data, ts)
        self._ack_gap(h, ts)
        self._drain(h)
        self._enforce_caps(h)

    def _compare_old(self, h: _Half, off: int, data) -> None:
        """A retransmission of delivered bytes: count it if it disagrees with what we delivered."""
        if self._pend is h:
            self._flush()
        tail = h.tail
        if tail is None:
            return
        a, b = max(off, h.tail_off), min(off + len(data), h.tail_off + len(tail))
        if a < b and tail[a - h.tail_off:b - h.tail_off] != data[a - off:b - off]:
            self.stats.overlaps_differing += 1

    def _buffer(self, h: _Half, off: int, end: int, data, ts: float) -> None:
        """Keeps the parts of [off, end) that no earlier segment covered (first received wins)."""
        if data is not None and not isinstance(data, bytes):
            data = bytes(data)  # the capture buffer moves on; buffered bytes must own their memory
        ooo = h.ooo
        cur = off
        pieces = []
        for s, e, d, _t in ooo:
            if e <= cur:
                continue
            if s >= end:
                break
            if s > cur:
                pieces.append((cur, s))
            a, b = max(s, cur), min(e, end)
            if d is not None and data is not None and d[a - s:b - s] != data[a - off:b - off]:
                self.stats.overlaps_differing += 1
            cur = e
            if cur >= end:
                break
        if cur < end:
            pieces.append((cur, end))
        for a, b in pieces:
            piece = None if data is None else data[a - off:b - off]
            bisect.insort(ooo, (a, b, piece, ts))
            if piece is not None:
                h.ooo_bytes += b - a
                self._ooo_total += b - a
        if ooo:
            self._ooo_halves.add(h)

    def _ack_gap(self, h: _Half, ts: float) -> None:
        """If the peer acknowledged bytes up to buffered data, the hole before it was lost in capture."""
        ack = h.peer.ack_out
        if ack is None or not h.ooo:
            return
        first = h.ooo[0][0]
        if h.nxt < first <= h.offset(ack):
            self._gap(h, h.nxt, first - h.nxt, ts)

    def _drain(self, h: _Half) -> None:
        ooo = h.ooo
        while ooo and ooo[0][0] <= h.nxt:
            s, e, d, t = ooo.pop(0)
            if d is not None:
                h.ooo_bytes -= e - s
                self._ooo_total -= e - s
            if e <= h.nxt:
                continue
            if d is None:
                self._gap(h, h.nxt, e - h.nxt, t)
            else:
                self._deliver(h, d[h.nxt - s:] if s < h.nxt else d, t)
        if not ooo:
            self._ooo_halves.discard(h)

    def _enforce_caps(self, h: _Half) -> None:
        limits = self.limits
        while h.ooo and h.ooo_bytes > limits.ooo_bytes_per_direction:
            self._force_gap(h)
        while self._ooo_total > limits.ooo_bytes_total and self._ooo_halves:
            self._force_gap(h if h.ooo else max(self._ooo_halves, key=lambda x: x.ooo_bytes))

    def _force_gap(self, h: _Half) -> None:
        """A cap was hit: give up waiting for the first hole and deliver what follows it."""
        self.stats.dropped_by_limits += 1
        self.stats.forced_gaps += 1
        self.forced_gaps += 1
        self._gap(h, h.nxt, h.ooo[0][0] - h.nxt, self._now)
        self._drain(h)
        self._refresh(h)

    def _refresh(self, h: _Half) -> None:
        # A half whose peer holds out-of-order bytes takes the careful path: its ACKs may end a gap there.
        for x in (h, h.peer):
            x.fast = (x.base is not None and not x.ooo and not x.peer.ooo and x.conn.closed is None
                      and not x.conn.dropped)

    # -- output -------------------------------------------------------------------------------------

    def _start(self, h: _Half, off: int, payload, n: int, ts: float) -> None:
        if self._pend is not None:
            self._flush()
        h.parts = [payload]
        h.p_off, h.p_len, h.p_first, h.p_last = off, n, ts, ts
        self._pend = h

    def _deliver(self, h: _Half, data, ts: float) -> None:
        n = len(data)
        if self._pend is h:
            h.parts.append(data)
            h.p_last = ts
            h.p_len += n
        else:
            self._start(h, h.nxt, data, n, ts)
        h.nxt += n
        h.nxt32 = (h.base + h.nxt) & MASK
        if h.p_len >= self.limits.max_chunk_bytes:
            self._flush()

    def _flush(self) -> None:
        h = self._pend
        if h is None:
            return
        self._pend = None
        parts = h.parts
        h.parts = None
        data = b"".join(parts)
        self.out.append(StreamChunk(h.conn.id, h.from_src, h.p_off, data, h.p_first, h.p_last))
        if len(data) <= TAIL_KEPT:
            h.tail, h.tail_off = data, h.p_off
        else:  # keep only the last segment, copied so no capture buffer stays alive through it
            h.tail = bytes(parts[-1])
            h.tail_off = h.p_off + len(data) - len(h.tail)

    def _emit(self, event: StreamEvent) -> None:
        if self._pend is not None:
            self._flush()
        self.out.append(event)

    def _gap(self, h: _Half, off: int, length: int, ts: float) -> None:
        if length <= 0:
            return
        if not h.conn.dropped:
            self._emit(StreamGap(h.conn.id, h.from_src, off, length, ts))
            self.stats.gaps += 1
            self.stats.gap_bytes += length
        h.nxt = off + length
        h.nxt32 = (h.base + h.nxt) & MASK

    # -- connection lifecycle -----------------------------------------------------------------------

    def _open(self, seg: tuple) -> _Half:
        ts, sip, sp, dip, dp, _seq, _ack, flags, _payload = seg
        if len(self._conns) >= self.limits.max_connections:
            self._evict(ts)
        forward = not (flags & SYN and flags & ACK)  # a SYN-ACK comes from the server
        if not forward:
            sip, sp, dip, dp = dip, dp, sip, sp
        conn_id = self._conn_id(sip, sp, dip, dp, ts) if self._conn_id else self._next_id
        self._next_id += 1
        conn = _Conn(conn_id, Endpoint(ip_text(sip), sp), Endpoint(ip_text(dip), dp))
        a = _Half(conn, True, (sip, sp, dip, dp), ts)
        b = _Half(conn, False, (dip, dp, sip, sp), ts)
        a.peer, b.peer = b, a
        conn.halves = (a, b)
        self._table[a.key] = a
        self._table[b.key] = b
        self._conns[conn_id] = conn
        self.stats.connections += 1
        self._emit(ConnectionOpened(conn_id, conn.src, conn.dst, ts, bool(flags & SYN)))
        return a if forward else b

    def _reopen(self, old: _Conn, seg: tuple) -> _Half:
        self._forget(old)
        return self._open(seg)

    def _close(self, conn: _Conn, ts: float, reason: str) -> None:
        if conn.closed is not None:
            return
        if not conn.dropped:
            for h in conn.halves:
                self._settle(h, ts)
            self._emit(ConnectionClosed(conn.id, ts, reason))
        conn.closed = reason
        for h in conn.halves:
            self._release(h)

    def _settle(self, h: _Half, ts: float) -> None:
        """At close: every hole left in this direction becomes a gap, buffered bytes are delivered."""
        if h.base is None:
            return
        while h.ooo:
            self._gap(h, h.nxt, h.ooo[0][0] - h.nxt, ts)
            self._drain(h)
        end = h.fin
        if end is None and h.peer.ack_out is not None:
            acked = h.offset(h.peer.ack_out)
            end = acked if acked - h.nxt < HALF else None
        if end is not None and end > h.nxt:
            self._gap(h, h.nxt, end - h.nxt, ts)

    def _release(self, h: _Half) -> None:
        if self._pend is h:
            self._pend = None
        h.parts = None
        h.tail = None
        self._ooo_total -= h.ooo_bytes
        h.ooo_bytes = 0
        h.ooo = []
        self._ooo_halves.discard(h)
        h.fast = False

    def _forget(self, conn: _Conn) -> None:
        for h in conn.halves:
            self._release(h)
            if self._table.get(h.key) is h:
                del self._table[h.key]
        self._conns.pop(conn.id, None)

    def sweep(self, now: float) -> None:
        """Expires idle connections and forgets closed ones, as of capture time `now`; the events (closes,
        their gaps) go to `out`. `events` calls it every `sweep_every` seconds unless told not to."""
        self._now = max(self._now, now)
        self._next_sweep = now + self.sweep_every
        idle_before = now - self.limits.idle_timeout
        linger_before = now - self.limits.closed_linger
        for conn in list(self._conns.values()):
            last = conn.last_ts()
            if conn.closed is not None:
                if last < linger_before:
                    self._forget(conn)
            elif last < idle_before:
                self._close(conn, now, "idle")
                self._forget(conn)

    def _evict(self, now: float) -> None:
        """At the connection cap: forget closed ones first, then close the longest idle."""
        batch = max(1, self.limits.max_connections // 64)
        order = sorted(self._conns.values(), key=lambda c: (c.closed is None, c.last_ts()))
        for conn in order[:batch]:
            if conn.closed is None:
                self._close(conn, now, "evicted")
                self.evicted += 1
                self.stats.dropped_by_limits += 1
                self.stats.evicted_connections += 1
            self._forget(conn)

    # -- control ------------------------------------------------------------------------------------

    def drop(self, conn_id: int) -> None:
        """Stop reassembling a connection: nothing more is buffered or emitted for it."""
        conn = self._conns.get(conn_id)
        if conn is None or conn.dropped:
            return
        conn.dropped = True
        for h in conn.halves:
            self._release(h)
        keep = [e for e in self.out if e.conn != conn_id]
        self.out.clear()
        self.out.extend(keep)

    def flush(self) -> None:
        """Emit the chunk being merged now, to `out` (live capture calls this when traffic pauses; an
        engine running one reassembler per connection, where another connection's traffic came)."""
        self._flush()

    @property
    def open_connections(self) -> int:
        """Connections tracked now (open, or closed and lingering): a sweep can change only those."""
        return len(self._conns)

    def horizon(self) -> float:
        """The earliest capture time that an event still to come from bytes already seen can carry (inf
        when none): the chunk being merged, out-of-order bytes waiting for a hole, events not yet taken.
        The engine's reordering releases what is older than this without waiting."""
        low = float("inf")
        if self._pend is not None:
            low = self._pend.p_first
        for h in self._ooo_halves:
            for entry in h.ooo:  # (start, end, data, ts)
                if entry[3] < low:
                    low = entry[3]
        for ev in self.out:
            t = ev.first_ts if ev.__class__ is StreamChunk else getattr(ev, "ts", low)
            if t < low:
                low = t
        return low

    def finish(self, ts: float | None = None) -> None:
        """End of capture: every open connection closes, holes become gaps."""
        now = self._now if ts is None else max(ts, self._now)
        for conn in list(self._conns.values()):
            if conn.closed is None:
                self._close(conn, now, "end_of_capture")
            self._forget(conn)
        self._flush()

    def warnings(self) -> list[str]:
        notes = []
        if self.evicted:
            notes.append(f"connection limit ({self.limits.max_connections}) reached: "
                         f"{self.evicted} idle connections evicted")
        if self.forced_gaps:
            notes.append(f"out-of-order buffer limits reached: {self.forced_gaps} holes given up as gaps")
        return notes
