"""Chunk merging: the reassembler's output side.

Consecutive in-order bytes of one direction are merged into one `StreamChunk` (up to `max_chunk_bytes`)
so the decoder sees few, large chunks; any other event (a gap, a connection opening or closing, another
direction's bytes) first flushes the chunk being merged, so events leave in the order they happened.
"""

from __future__ import annotations

from collections import deque

from ksniff.capture.events import CaptureStats, StreamChunk, StreamEvent, StreamGap
from ksniff.capture.halves import Half

# Bytes at the end of the last chunk kept per direction to compare retransmissions against: a segment's
# worth, so that tens of thousands of open connections hold megabytes here, not gigabytes.
TAIL_KEPT = 2 << 10


class ChunkMerger:
    """`out` is the queue of events ready to leave; `pend` the direction whose chunk is being merged."""

    __slots__ = ("out", "pend", "max_chunk", "stats")

    def __init__(self, max_chunk: int, stats: CaptureStats) -> None:
        self.out: deque[StreamEvent] = deque()
        self.pend: Half | None = None
        self.max_chunk = max_chunk
        self.stats = stats

    def start(self, h: Half, off: int, payload, n: int, ts: float) -> None:
        """A new chunk for `h` from stream offset `off` (the hot loop's in-order bytes come here too)."""
        if self.pend is not None:
            self.flush()
        h.parts = [payload]
        h.p_off, h.p_len, h.p_first, h.p_last = off, n, ts, ts
        h.p_marks = None
        self.pend = h

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
        if self.pend is h:
            h.parts.append(data)
            if ts != h.p_last:
                self.mark(h, ts)
            h.p_len += n
        else:
            self.start(h, h.nxt, data, n, ts)
        h.advance(n)
        if h.p_len >= self.max_chunk:
            self.flush()

    def flush(self) -> None:
        h = self.pend
        if h is None:
            return
        self.pend = None
        parts = h.parts
        h.parts = None
        data = b"".join(parts)
        marks, h.p_marks = h.p_marks, None
        marks = () if marks is None else tuple(marks)
        self.out.append(StreamChunk(h.conn.id, h.from_src, h.p_off, data, h.p_first, h.p_last, marks))
        if len(data) <= TAIL_KEPT:
            h.tail, h.tail_off = data, h.p_off
        else:  # a copy of the end, so the whole chunk does not stay alive through it
            h.tail = data[-TAIL_KEPT:]
            h.tail_off = h.p_off + len(data) - TAIL_KEPT

    def emit(self, event: StreamEvent) -> None:
        if self.pend is not None:
            self.flush()
        self.out.append(event)

    def gap(self, h: Half, off: int, length: int, ts: float) -> None:
        """Bytes [off, off + length) of `h` will never come: a `StreamGap`, and `h` moves past them."""
        if length <= 0:
            return
        if not h.conn.dropped:
            self.emit(StreamGap(h.conn.id, h.from_src, off, length, ts))
            self.stats.gaps += 1
            self.stats.gap_bytes += length
        h.nxt = off
        h.advance(length)

    def forget(self, h: Half) -> None:
        """`h` is released: its chunk in progress is abandoned (a dropped or forgotten connection)."""
        if self.pend is h:
            self.pend = None
        h.parts = None
        h.tail = None

    def discard(self, conn_id: int) -> None:
        """Events of a dropped connection still waiting to leave go."""
        keep = [e for e in self.out if e.conn != conn_id]
        self.out.clear()
        self.out.extend(keep)

    def earliest(self, low: float) -> float:
        """The earliest time among `low`, the chunk being merged and the events waiting to leave."""
        if self.pend is not None and self.pend.p_first < low:
            low = self.pend.p_first
        for ev in self.out:
            t = ev.first_ts if ev.__class__ is StreamChunk else getattr(ev, "ts", low)
            if t < low:
                low = t
        return low
