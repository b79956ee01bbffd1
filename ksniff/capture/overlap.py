"""The overlap policy and the out-of-order buffer of the reassembler.

One consistent rule for overlaps: the bytes received first win. Later bytes that disagree with them are
counted (`overlaps_differing`) and dropped. Out-of-order bytes wait in a bounded buffer per direction; a
hole becomes a gap when the peer acknowledged past it (the capture lost it), when a cap forces it, when
the connection closes, or at the end of the capture.

Every step costs in proportion to the segment's own bytes plus a logarithm of what is buffered, whatever
the segmentation: pieces are found by bisection, and a drain takes a run of pieces off the front in one
slice. The caps count each buffered piece's bookkeeping (`PIECE_COST`) on top of its bytes, so a flood of
one-byte segments meets the same memory bound as a few large ones.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import OrderedDict

from ksniff.capture.chunks import ChunkMerger
from ksniff.capture.errors import CaptureLimits
from ksniff.capture.events import CaptureStats
from ksniff.capture.halves import HALF, INF, Half

# What Python spends on one buffered piece besides its bytes: its tuple, its bytes object's header and
# its list slot (measured with sys.getsizeof: 72 + 33 + 8, rounded up).
PIECE_COST = 128


# Pieces of the chunk being merged that a retransmitted segment is compared with, from its end back: a
# segment's twin from a second capture point comes within a few segments of it, and the comparison costs
# each segment a bounded amount whatever the chunk holds.
PIECES_COMPARED = 8


def differs(h: Half, off: int, data) -> bool:
    """Whether bytes [off, off + len(data)) of direction `h`, all delivered already, disagree with the
    delivered bytes still held: the last `PIECES_COMPARED` pieces of the chunk being merged, then (for
    bytes before that chunk) the tail of the last chunk let go. Bytes further back are not compared.
    `_fastwalk.inorder` takes the same steps."""
    end = off + len(data)
    parts = h.parts
    if parts is not None and end > h.p_off:
        k = len(parts)
        stop = h.p_off + h.p_len
        walked = 0
        while k and walked < PIECES_COMPARED:
            k -= 1
            walked += 1
            piece = parts[k]
            start = stop - len(piece)
            if start < end:
                a, b = max(start, off), min(stop, end)
                if piece[a - start : b - start] != data[a - off : b - off]:
                    return True
            if start <= off:
                return False
            stop = start
        if k:
            return False
        end = h.p_off
    tail = h.tail
    if tail is None:
        return False
    a, b = max(off, h.tail_off), min(end, h.tail_off + len(tail))
    return a < b and tail[a - h.tail_off : b - h.tail_off] != data[a - off : b - off]


class OutOfOrder:
    """Bytes that came before the ones expected, per direction, under the buffer caps."""

    __slots__ = ("limits", "stats", "merger", "held_total", "waiting", "forced_gaps")

    def __init__(self, limits: CaptureLimits, stats: CaptureStats, merger: ChunkMerger) -> None:
        self.limits = limits
        self.stats = stats
        self.merger = merger
        self.held_total = 0
        # Directions holding pieces, oldest first: when the total cap is hit, the one that has waited
        # longest gives up a hole (found in constant time, whatever the number of connections: an
        # OrderedDict, as a plain dict's first key costs a walk over the keys deleted before it).
        self.waiting: OrderedDict[Half, None] = OrderedDict()
        self.forced_gaps = 0

    def data(self, h: Half, off: int, end: int, data, now: float, ts: float) -> None:
        """Bytes [off, end) of direction `h`; `data` None means the capture lost them (snaplen)."""
        nxt = h.nxt
        if end <= nxt:
            if data is not None:
                self.compare_old(h, off, data)
            return
        if off < nxt:
            if data is not None:
                self.compare_old(h, off, data[: nxt - off])
                data = data[nxt - off :]
            off = nxt
        if off == nxt and not h.ooo:
            if data is None:
                self.merger.gap(h, off, end - off, ts)
            else:
                self.merger.deliver(h, data, ts)
            return
        self._buffer(h, off, end, data, ts)
        self.ack_gap(h, ts)
        self.drain(h)
        self._enforce_caps(h, now)

    def compare_old(self, h: Half, off: int, data) -> None:
        """A retransmission of delivered bytes, or the same segment seen at a second capture point:
        counted once if it disagrees with what was delivered, as far as that is still held (the pieces of
        the chunk being merged, then the tail of the last chunk). The chunk being merged goes on: a
        connection captured at both ends brings every segment twice."""
        if differs(h, off, data):
            self.stats.overlaps_differing += 1

    def _buffer(self, h: Half, off: int, end: int, data, ts: float) -> None:
        """Keeps the parts of [off, end) that no earlier segment covered (first received wins)."""
        if data is not None and not isinstance(data, bytes):
            data = bytes(data)  # the capture buffer moves on; buffered bytes must own their memory
        ooo = h.ooo
        cur = off
        pieces = []
        # Pieces never overlap, so only the one starting before `off` can reach into [off, end).
        i = bisect_left(ooo, (off,))
        if i:
            i -= 1
        for k in range(i, len(ooo)):
            s, e, d, _t = ooo[k]
            if e <= cur:
                continue
            if s >= end:
                break
            if s > cur:
                pieces.append((cur, s))
            a, b = max(s, cur), min(e, end)
            if d is not None and data is not None and d[a - s : b - s] != data[a - off : b - off]:
                self.stats.overlaps_differing += 1
            cur = e
            if cur >= end:
                break
        if cur < end:
            pieces.append((cur, end))
        held = 0
        for a, b in pieces:
            piece = None if data is None else data[a - off : b - off]
            insort(ooo, (a, b, piece, ts))
            held += PIECE_COST + (0 if piece is None else b - a)
        h.ooo_held += held
        self.held_total += held
        if ts < h.ooo_ts:
            h.ooo_ts = ts
        if ooo and h not in self.waiting:
            self.waiting[h] = None

    def ack_gap(self, h: Half, ts: float) -> None:
        """If the peer acknowledged bytes up to buffered data, the hole before it was lost in capture."""
        ack = h.peer.ack_out
        if ack is None or not h.ooo:
            return
        first = h.ooo[0][0]
        if h.nxt < first <= h.offset(ack):
            self.merger.gap(h, h.nxt, first - h.nxt, ts)

    def drain(self, h: Half) -> None:
        """Delivers the pieces that now start at or before `nxt`, in one pass."""
        ooo = h.ooo
        merger = self.merger
        k = 0
        released = 0
        while k < len(ooo) and ooo[k][0] <= h.nxt:
            s, e, d, t = ooo[k]
            k += 1
            released += PIECE_COST + (0 if d is None else e - s)
            if e <= h.nxt:
                continue
            if d is None:
                merger.gap(h, h.nxt, e - h.nxt, t)
            else:
                merger.deliver(h, d[h.nxt - s :] if s < h.nxt else d, t)
        if k:
            del ooo[:k]
            h.ooo_held -= released
            self.held_total -= released
        if not ooo:
            h.ooo_ts = INF
            self.waiting.pop(h, None)

    def _enforce_caps(self, h: Half, now: float) -> None:
        limits = self.limits
        while h.ooo and h.ooo_held > limits.ooo_bytes_per_direction:
            self.force_gap(h, now)
        while self.held_total > limits.ooo_bytes_total and self.waiting:
            self.force_gap(h if h.ooo else next(iter(self.waiting)), now)

    def force_gap(self, h: Half, now: float) -> None:
        """A cap was hit: give up waiting for the first hole and deliver what follows it."""
        self.stats.dropped_by_limits += 1
        self.stats.forced_gaps += 1
        self.forced_gaps += 1
        self.merger.gap(h, h.nxt, h.ooo[0][0] - h.nxt, now)
        self.drain(h)
        h.refresh()

    def settle(self, h: Half, ts: float) -> None:
        """At close: every hole left in this direction becomes a gap, buffered bytes are delivered."""
        if h.base is None:
            return
        while h.ooo:
            self.merger.gap(h, h.nxt, h.ooo[0][0] - h.nxt, ts)
            self.drain(h)
        end = h.fin
        if end is None and h.peer.ack_out is not None:
            acked = h.offset(h.peer.ack_out)
            end = acked if acked - h.nxt < HALF else None
        if end is not None and end > h.nxt:
            self.merger.gap(h, h.nxt, end - h.nxt, ts)

    def release(self, h: Half) -> None:
        """Forget what `h` holds (its connection closed, was dropped or forgotten)."""
        self.held_total -= h.ooo_held
        h.ooo_held = 0
        h.ooo = []
        h.ooo_ts = INF
        self.waiting.pop(h, None)

    def earliest(self, low: float) -> float:
        for h in self.waiting:
            if h.ooo_ts < low:
                low = h.ooo_ts
        return low

    def warnings(self) -> list[str]:
        if not self.forced_gaps:
            return []
        return [f"out-of-order buffer limits reached: {self.forced_gaps} holes given up as gaps"]
