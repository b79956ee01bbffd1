"""The reassembler's connection table: opening, closing, idle expiry and eviction at the cap."""

from __future__ import annotations

from collections.abc import Callable

from ksniff.capture.chunks import ChunkMerger
from ksniff.capture.errors import CaptureLimits
from ksniff.capture.events import CaptureStats, ConnectionClosed, ConnectionOpened, Endpoint
from ksniff.capture.halves import Conn, Half, ip_text
from ksniff.capture.overlap import OutOfOrder
from ksniff.capture.packets import ACK, FIN, RST, SYN

ConnIdFn = Callable[[bytes, int, bytes, int, float], int]

# Two directions whose first segments are alike (`ConnectionTable.alike`): the same sequence and
# acknowledgement numbers, flags, length and first ALIKE_BYTES of payload, under other 4-tuples, within
# ALIKE_WINDOW seconds. Connections' initial sequence numbers are random (RFC 6528), so this is one
# connection seen twice, each packet in and out of a host that translates its addresses (`tcpdump -i
# any` on a Kubernetes node), unless a stack numbers its connections alike (test captures do): the
# capture's own bytes decide (ksniff.engine.sets.read_once), this only says it is worth asking.
ALIKE_BYTES = 16
ALIKE_WINDOW = 1.0
ALIKE_HELD = 4096  # first segments remembered, the latest
_ALIKE_FLAGS = FIN | SYN | RST | ACK


class Alike(Exception):
    """A direction began alike another under another 4-tuple, where the reader asked to stop at the first
    such (`ConnectionTable.stop_when_alike`)."""


class ConnectionTable:
    """Both directions of every tracked connection, by 4-tuple (`table`) and by id (`conns`)."""

    __slots__ = (
        "limits",
        "stats",
        "merger",
        "ooo",
        "table",
        "conns",
        "evicted",
        "alike",
        "stop_when_alike",
        "_firsts",
        "_conn_id",
        "_next_id",
    )

    def __init__(
        self,
        limits: CaptureLimits,
        stats: CaptureStats,
        merger: ChunkMerger,
        ooo: OutOfOrder,
        conn_id: ConnIdFn | None,
    ) -> None:
        self.limits = limits
        self.stats = stats
        self.merger = merger
        self.ooo = ooo
        self.table: dict[tuple, Half] = {}
        self.conns: dict[int, Conn] = {}
        self.evicted = 0
        self.alike = 0  # directions whose first segment is alike another's (ALIKE_BYTES)
        self.stop_when_alike = False  # raise Alike at the first, for a reader that would read again
        self._firsts: dict[tuple, tuple[tuple, float]] = {}  # a direction's first segment -> (4-tuple, time)
        self._conn_id = conn_id
        self._next_id = 1

    def open(self, seg: tuple) -> Half:
        """A connection for a segment of an unknown 4-tuple; returns the segment's direction."""
        ts, sip, sp, dip, dp, _seq, _ack, flags, _payload = seg
        if len(self.conns) >= self.limits.max_connections:
            self._evict(ts)
        forward = not (flags & SYN and flags & ACK)  # a SYN-ACK comes from the server
        if not forward:
            sip, sp, dip, dp = dip, dp, sip, sp
        conn_id = self._conn_id(sip, sp, dip, dp, ts) if self._conn_id else self._next_id
        self._next_id += 1
        conn = Conn(conn_id, Endpoint(ip_text(sip), sp), Endpoint(ip_text(dip), dp))
        a = Half(conn, True, (sip, sp, dip, dp), ts)
        b = Half(conn, False, (dip, dp, sip, sp), ts)
        a.peer, b.peer = b, a
        conn.halves = (a, b)
        self.table[a.key] = a
        self.table[b.key] = b
        self.conns[conn_id] = conn
        self.stats.connections += 1
        self.merger.emit(ConnectionOpened(conn_id, conn.src, conn.dst, ts, bool(flags & SYN)))
        return a if forward else b

    def first_segment(self, key: tuple, seq: int, ack: int, flags: int, payload, ts: float) -> None:
        """The first segment of direction `key`: counted in `alike` when it is alike another direction's
        first under another 4-tuple (ALIKE_BYTES)."""
        n = payload if payload.__class__ is int else len(payload)
        head = b"" if payload.__class__ is int else bytes(payload[:ALIKE_BYTES])
        first = (seq, ack, flags & _ALIKE_FLAGS, n, head)
        firsts = self._firsts
        earlier = firsts.pop(first, None)
        if earlier is not None and earlier[0] != key and ts - earlier[1] <= ALIKE_WINDOW:
            self.alike += 1
            if self.stop_when_alike:
                raise Alike
        firsts[first] = (key, ts)
        if len(firsts) > ALIKE_HELD:
            del firsts[next(iter(firsts))]

    def reopen(self, old: Conn, seg: tuple) -> Half:
        self.forget(old)
        return self.open(seg)

    def close(self, conn: Conn, ts: float, reason: str) -> None:
        if conn.closed is not None:
            return
        if not conn.dropped:
            for h in conn.halves:
                self.ooo.settle(h, ts)
            self.merger.emit(ConnectionClosed(conn.id, ts, reason), conn.halves[0])
        conn.closed = reason
        for h in conn.halves:
            self.release(h)

    def release(self, h: Half) -> None:
        self.merger.forget(h)
        self.ooo.release(h)
        h.fast = False

    def forget(self, conn: Conn) -> None:
        for h in conn.halves:
            self.release(h)
            if self.table.get(h.key) is h:
                del self.table[h.key]
        self.conns.pop(conn.id, None)

    def sweep(self, now: float) -> float:
        """Expires idle connections and forgets closed ones, as of capture time `now`. Returns the
        earliest time after which a later sweep can change anything (inf when nothing is tracked)."""
        idle, linger = self.limits.idle_timeout, self.limits.closed_linger
        idle_before = now - idle
        linger_before = now - linger
        due = float("inf")
        for conn in list(self.conns.values()):
            last = conn.last_ts()
            if conn.closed is not None:
                if last < linger_before:
                    self.forget(conn)
                elif last + linger < due:
                    due = last + linger
            elif last < idle_before:
                self.close(conn, now, "idle")
                self.forget(conn)
            elif last + idle < due:
                due = last + idle
        return due

    def _evict(self, now: float) -> None:
        """At the connection cap: forget closed ones first, then close the longest idle."""
        batch = max(1, self.limits.max_connections // 64)
        order = sorted(self.conns.values(), key=lambda c: (c.closed is None, c.last_ts()))
        for conn in order[:batch]:
            if conn.closed is None:
                self.close(conn, now, "evicted")
                self.evicted += 1
                self.stats.dropped_by_limits += 1
                self.stats.evicted_connections += 1
            self.forget(conn)

    def drop(self, conn_id: int) -> None:
        """Stop reassembling a connection: nothing more is buffered or emitted for it."""
        conn = self.conns.get(conn_id)
        if conn is None or conn.dropped:
            # Gone from the table already (closed at the end of the capture, say): what it left in `out`
            # still goes.
            self.merger.discard(conn_id)
            return
        conn.dropped = True
        for h in conn.halves:
            self.release(h)
        self.merger.discard(conn_id)

    def finish(self, now: float) -> None:
        """Every open connection closes (its holes become gaps); the table empties."""
        for conn in list(self.conns.values()):
            if conn.closed is None:
                self.close(conn, now, "end_of_capture")
            self.forget(conn)

    def warnings(self) -> list[str]:
        if not self.evicted:
            return []
        return [
            f"connection limit ({self.limits.max_connections}) reached: "
            f"{self.evicted} idle connections evicted"
        ]
