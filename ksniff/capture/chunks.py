"""Chunk merging: the reassembler's output side.

Consecutive in-order bytes of one direction are merged into one `StreamChunk` (up to `max_chunk_bytes`)
so the decoder sees few, large chunks. Each connection merges on its own: another event of the same
connection (a gap, its close, the other direction's bytes) first flushes its chunk, so a connection's
events leave in the order they happened, and no other connection's traffic cuts it. What every chunk
still being merged waits for at most is the reassembler's clock passing the end of the chunk cell it
started in (ksniff.capture.reassembly.CHUNK_CELL): where chunks are cut, and so when each decode event
leaves, depends on the connection's own segments and the capture's clock, never on which other
connections happened to send in between. An engine that reassembles each connection in a different task
cuts the same chunks.
"""

from __future__ import annotations

from collections import deque

from ksniff.capture.events import CaptureStats, StreamChunk, StreamEvent, StreamGap
from ksniff.capture.halves import Half

# Bytes at the end of the last chunk kept per direction to compare retransmissions against: a segment's
# worth, so that tens of thousands of open connections hold megabytes here, not gigabytes.
TAIL_KEPT = 2 << 10
# Chunks being merged at once, at most: with the capture's clock not moving (timestamps all equal, or
# coarser than the chunk cell), nothing else would bound them (connections times max_chunk_bytes). Past
# it, every chunk being merged leaves at once, which on a clock that moves does not happen unless this
# many connections send within one cell. Then, as with the other run-wide caps, when a slow exchange
# leaves (and so its place in audit order) depends on other connections.
MAX_PENDING = 1024


def chunk_size(data: bytes | tuple) -> int:
    """Bytes of a chunk's `data`: bytes, or its pieces in order (ChunkMerger.pieces_from)."""
    return len(data) if data.__class__ is not tuple else sum(map(len, data))


def _last_bytes(parts: list, n: int) -> bytes:
    """The last `n` bytes of the pieces `parts` (all of them when they hold fewer)."""
    keep, have = [], 0
    for p in reversed(parts):
        keep.append(p)
        have += len(p)
        if have >= n:
            break
    keep.reverse()
    return b"".join(keep)[-n:]


def _opening_order(h: Half) -> int:
    return h.conn.id


class ChunkMerger:
    """`out` is the queue of events ready to leave; `pending` the directions whose chunk is being merged
    (at most one per connection; a direction's `parts` is a list exactly while it is there)."""

    __slots__ = ("out", "pending", "max_chunk", "stats", "at", "pieces_from")

    def __init__(self, max_chunk: int, stats: CaptureStats) -> None:
        self.out: deque[StreamEvent] = deque()
        self.pending: dict[Half, None] = {}
        self.max_chunk = max_chunk
        self.stats = stats
        self.at = 0  # where the segment being taken came in the capture: StreamChunk.at of a chunk it starts
        # A chunk of at least this many segments is handed on as the tuple of their payloads, not joined
        # (0: never): for a consumer that takes pieces (the decoder's frame splitter joins a large frame
        # once from its segments instead of from joined chunks). Off unless the engine turns it on.
        self.pieces_from = 0

    def start(self, h: Half, off: int, payload, n: int, ts: float) -> None:
        """A new chunk for `h` from stream offset `off` (the hot loop's in-order bytes come here too);
        the other direction's chunk, if it is being merged, leaves first."""
        if len(self.pending) >= MAX_PENDING:
            self.flush()
        peer = h.peer
        if peer.parts is not None:
            self.flush_half(peer)
        h.parts = [payload]
        h.p_off, h.p_len, h.p_first, h.p_last = off, n, ts, ts
        h.p_marks = None
        h.p_at = self.at
        self.pending[h] = None

    @staticmethod
    def mark(h: Half, ts: float) -> None:
        """The pending chunk of `h` goes on with bytes of another capture time, from its current end."""
        h.p_last = ts
        if h.p_marks is None:
            h.p_marks = [(h.p_off + h.p_len, ts)]
        else:
            h.p_marks.append((h.p_off + h.p_len, ts))

    def deliver(self, h: Half, data, ts: float) -> None:
        """In-order bytes of `h` at its `nxt`."""
        n = len(data)
        if h.parts is not None:
            h.parts.append(data)
            if ts != h.p_last:
                self.mark(h, ts)
            h.p_len += n
        else:
            self.start(h, h.nxt, data, n, ts)
        h.advance(n)
        if h.p_len >= self.max_chunk:
            self.flush_half(h)

    def flush(self) -> None:
        """Every chunk being merged leaves, in the order their connections opened."""
        pending = self.pending
        if len(pending) == 1:
            self.flush_half(next(iter(pending)))
        elif pending:
            for h in sorted(pending, key=_opening_order):
                self.flush_half(h)

    def flush_conn(self, h: Half) -> None:
        """The chunk being merged by either direction of `h`'s connection leaves."""
        if h.parts is not None:
            self.flush_half(h)
        elif h.peer.parts is not None:
            self.flush_half(h.peer)

    def flush_half(self, h: Half) -> None:
        """The chunk `h` is merging leaves."""
        del self.pending[h]
        parts = h.parts
        h.parts = None
        marks, h.p_marks = h.p_marks, None
        pieces = self.pieces_from and len(parts) >= self.pieces_from
        # The marks as a tuple of pairs; the hot loop's (`_fastwalk.Marks`, kept as numbers) stay as they
        # are on a chunk handed on as its pieces, which the decoder's frame splitter reads them from.
        if marks is None:
            marks = ()
        elif not pieces or marks.__class__ is list:
            marks = tuple(marks)
        data = tuple(parts) if pieces else b"".join(parts)
        self.out.append(StreamChunk(h.conn.id, h.from_src, h.p_off, data, h.p_first, h.p_last, marks, h.p_at))
        if pieces:
            h.tail = _last_bytes(parts, TAIL_KEPT)
            h.tail_off = h.p_off + h.p_len - len(h.tail)
        elif len(data) <= TAIL_KEPT:
            h.tail, h.tail_off = data, h.p_off
        else:  # a copy of the end, so the whole chunk does not stay alive through it
            h.tail = data[-TAIL_KEPT:]
            h.tail_off = h.p_off + len(data) - TAIL_KEPT

    def emit(self, event: StreamEvent, h: Half | None = None) -> None:
        """`event` of the connection of direction `h` leaves, after that connection's chunk (`h` None: a
        connection just opened, which has none)."""
        if h is not None:
            self.flush_conn(h)
        self.out.append(event)

    def gap(self, h: Half, off: int, length: int, ts: float) -> None:
        """Bytes [off, off + length) of `h` will never come: a `StreamGap`, and `h` moves past them."""
        if length <= 0:
            return
        if not h.conn.dropped:
            self.emit(StreamGap(h.conn.id, h.from_src, off, length, ts), h)
            self.stats.gaps += 1
            self.stats.gap_bytes += length
        h.nxt = off
        h.advance(length)

    def forget(self, h: Half) -> None:
        """`h` is released: its chunk in progress is abandoned (a dropped or forgotten connection)."""
        if h.parts is not None:
            del self.pending[h]
        h.parts = None
        h.tail = None

    def discard(self, conn_id: int) -> None:
        """Events of a dropped connection still waiting to leave go."""
        keep = [e for e in self.out if e.conn != conn_id]
        self.out.clear()
        self.out.extend(keep)

    def earliest(self, low: float) -> float:
        """The earliest time among `low`, the chunks being merged and the events waiting to leave."""
        for h in self.pending:
            if h.p_first < low:
                low = h.p_first
        for ev in self.out:
            t = ev.first_ts if ev.__class__ is StreamChunk else getattr(ev, "ts", low)
            if t < low:
                low = t
        return low
