"""TCP reassembly per half-connection: segment tuples in, StreamEvents out, memory bounded.

The `Reassembler` holds the hot loop (in-order segments of a known connection merged without checks)
and the TCP state machine of the careful path (handshakes, reused 4-tuples, ACKs that end a hole, FIN
and RST). Each other concern has its own module: the overlap policy and out-of-order buffer
(`overlap`), the connection table with idle expiry and eviction (`connections`), chunk merging and the
output queue (`chunks`), and the per-direction state (`halves`).

The reassembler consumes the flat tuples of `ksniff.capture.packets` from any source. An engine that
runs one reassembler per connection (naming connections itself: `conn_id`) drives from outside what a
single reassembler decides on its own segments' times: `events(..., sweeps=False)` plus `sweeps(now)` as
the whole capture's clock passes its sweep times.

The capture's clock is its latest timestamp so far (a file whose timestamps step back does not move it
back). Everything the reassembler does on its own happens at fixed times of that clock, each as the clock
reaches it, so it depends on nothing but the clock and each connection's own segments, not on which
segments of other connections happened to come when:

- idle expiry sweeps at the multiples of `sweep_every` seconds;
- the chunks being merged (one per connection at most, ksniff.capture.chunks) leave at the end of the
  chunk cell they started in: the multiples of CHUNK_CELL seconds.

`clock` is the time of the events being handed out: the sweep's or the cell's end for what those let go,
else the clock when the segment that let them go came. `place` says where they were let go: `(0, n, 0)`
by the capture's n-th segment, `(0, n, -1, time, CELL or SWEEP)` by a cell's end or a sweep due before
it, `(1, inf)` by the end of the capture; a chunk's place is where its own first segment came,
`(0, StreamChunk.at, 0)`, whatever let it go. Both orders are the capture's: the same whichever other
connections are in it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Iterator

from ksniff.capture import chunks as merging
from ksniff.capture import compiled
from ksniff.capture.chunks import ChunkMerger, chunk_size
from ksniff.capture.connections import ConnectionTable, ConnIdFn
from ksniff.capture.errors import CaptureLimits
from ksniff.capture.events import CaptureStats, StreamChunk, StreamEvent
from ksniff.capture.halves import MASK, Conn, Half, ip_text
from ksniff.capture.overlap import OutOfOrder
from ksniff.capture.packets import ACK, FIN, RST, SYN, TICK, TRUNCATED

__all__ = ["Reassembler", "ip_text"]

_SLOW_FLAGS = FIN | SYN | RST | TRUNCATED | TICK
# Capture seconds a chunk being merged waits at most for more bytes of its direction: it leaves when the
# clock passes the next multiple of this (a power of two, so every multiple is an exact float).
CHUNK_CELL = 2.0**-6
# What each of `sweeps` hands out: a cell's chunks let go, an idle sweep's closes (the order of the two
# at one time, and the last field of a Spark event's position there).
CELL, SWEEP = -2, -1
END = (1, float("inf"))  # Reassembler.place of what the end of the capture lets go
MAX_TALLY_HOLES = 64  # holes remembered per direction of a dropped connection whose bytes are counted


def _of_part(part: str, name: str) -> property:
    """A counter or setting one of the reassembler's parts keeps, read and set through the reassembler."""
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, n: setattr(getattr(self, part), name, n),
    )


class Reassembler:
    """Turns segment tuples into StreamEvents. Use `events(segments)`; `drop(conn)` stops a connection."""

    def __init__(
        self,
        limits: CaptureLimits | None = None,
        stats: CaptureStats | None = None,
        conn_id: ConnIdFn | None = None,
    ) -> None:
        self.limits = limits or CaptureLimits()
        self.stats = stats if stats is not None else CaptureStats()
        self._merger = ChunkMerger(self.limits.max_chunk_bytes, self.stats)
        self._ooo = OutOfOrder(self.limits, self.stats, self._merger)
        self._conns = ConnectionTable(self.limits, self.stats, self._merger, self._ooo, conn_id)
        self.out = self._merger.out
        self._now = float("-inf")  # the capture's clock: its latest timestamp so far
        self.clock = float("-inf")  # the time of the events being handed out (the module's docstring)
        self.place: tuple = (0, 0, 0)  # ... and where they were let go
        self._n = 0  # segments taken so far: the n-th is the segment at `place` (0, n, 0)
        self._hot = None  # the compiled hot loop's slots, once `clocked_events` made them
        # The end of the chunk cell the clock is in: the chunks being merged leave when the clock gets there.
        self.cell_end = float("-inf")
        # The next sweep time not swept yet (a multiple of sweep_every): `sweeps(now)` has work from then.
        self.next_sweep = float("-inf")
        # Seconds of capture time between two idle sweeps: a few per timeout.
        self.sweep_every = max(1.0, min(self.limits.idle_timeout, self.limits.closed_linger) / 4)

    def hand_pieces(self, segments: int) -> None:
        """Chunks of at least `segments` segments are handed on as the tuple of their payloads, not
        joined (ChunkMerger.pieces_from): for a consumer that takes pieces, as the decoder does."""
        self._merger.pieces_from = segments

    # Counters an engine that runs several reassemblers adds up before asking one of them for warnings.
    evicted = _of_part("_conns", "evicted")
    # Directions whose first segment is alike another's (ksniff.capture.connections), and whether the
    # first such raises connections.Alike.
    alike = _of_part("_conns", "alike")
    stop_when_alike = _of_part("_conns", "stop_when_alike")
    forced_gaps = _of_part("_ooo", "forced_gaps")

    # -- the hot loop -------------------------------------------------------------------------------

    def events(
        self, segments: Iterable[tuple], finish: bool = True, sweeps: bool = True
    ) -> Iterator[StreamEvent]:
        """Events for `segments` (in capture order); with `finish`, closes what is open at the end.

        Without `sweeps`, idle connections are expired only when the caller says (`sweeps`): an engine
        that gives each reassembler a slice of the capture sweeps on the whole capture's clock, not the
        slice's, and calls `sweeps(now)` with that clock before each segment.
        """
        table_get = self._conns.table.get
        merger = self._merger
        out = merger.out
        popleft = out.popleft
        slow = self._segment
        max_chunk = self.limits.max_chunk_bytes
        ts = None
        now = self._now
        at = self._n
        due_at = self._due_at() if sweeps else float("inf")
        for seg in segments:
            ts, sip, sp, dip, dp, seq, ack, flags, payload = seg
            at += 1
            if not sweeps:  # the caller keeps the whole capture's clock (`sweeps`)
                now = self._now
            if ts > now:
                now = ts
                if ts >= due_at:  # a sweep or a cell's end: what they let go leaves before this segment
                    yield from self._let_go_by_time(ts, at)
                    due_at = self._due_at()
            h = table_get((sip, sp, dip, dp))
            if h is None or not h.fast or flags & _SLOW_FLAGS:
                self._now = now
                merger.at = at
                slow(h, seg)
            else:
                h.last_ts = ts
                h.ack_out = ack
                if payload:
                    if seq != h.nxt32:
                        self._now = now
                        merger.at = at
                        slow(h, seg)
                    else:
                        n = len(payload)
                        h.nxt += n
                        h.nxt32 = (seq + n) & MASK
                        if h.parts is not None:
                            h.parts.append(payload)
                            if ts != h.p_last:  # ChunkMerger.mark, inline: most bulk segments come here
                                h.p_last = ts
                                if h.p_marks is None:
                                    h.p_marks = [(h.p_off + h.p_len, ts)]
                                else:
                                    h.p_marks.append((h.p_off + h.p_len, ts))
                            h.p_len += n
                            if h.p_len >= max_chunk:
                                merger.flush_half(h)
                        else:
                            merger.at = at
                            merger.start(h, h.nxt - n, payload, n, ts)
            if out:
                self._now = self.clock = now
                self._n = at
                self.place = (0, at, 0)
                while out:
                    yield popleft()
        self._now = now
        self._n = at
        if finish:
            yield from self._finished(ts)

    def _let_go_by_time(self, now: float, at: int) -> Iterator[StreamEvent]:
        """What the clock reaching `now` lets go (`sweeps`) before the `at`-th segment, each sweep's and
        cell's events at its time and place."""
        out = self.out
        for clock, kind in self.sweeps(now):
            self.clock = clock
            self.place = (0, at, -1, clock, kind)
            while out:
                yield out.popleft()

    def _finished(self, ts: float | None) -> Iterator[StreamEvent]:
        """The end of the capture (its last segment's time `ts`): what is open closes."""
        self.finish(ts)
        self.clock = self._now
        self.place = END
        out = self.out
        while out:
            yield out.popleft()

    def batch_events(self, batches: Iterable[list], finish: bool = True) -> Iterator[StreamEvent]:
        """`events` over segments that come in lists (the compiled file walk's batches). With the
        compiled walk, the loop above runs in C over each list (`_fastwalk.inorder`: the same steps on
        the same objects) and hands this loop every segment it leaves, which `events` then takes alone;
        without it, `events` takes them all. The same events either way."""
        inorder = hot_loop()
        slots = self._hot_slots(inorder)
        if slots is None:
            yield from self.events(itertools.chain.from_iterable(batches), finish)
            return
        table = self._conns.table
        merger = self._merger
        out = merger.out
        popleft = out.popleft
        max_chunk = self.limits.max_chunk_bytes
        last = None
        # The clock and the count of segments live in `slots` while the compiled loop runs, in the
        # reassembler while the Python loop takes a segment. What the compiled loop leaves is chunks only,
        # whose place is their own (StreamChunk.at): `place` is not kept up for them.
        slots.pm, slots.n = self._now, self._n
        due_at = self._due_at()
        for batch in batches:
            i, n = 0, len(batch)
            while i < n:
                i = inorder(batch, i, table, merger, out, due_at, max_chunk, slots)
                if out:
                    self.clock = slots.pm
                    while out:
                        yield popleft()
                if i < 0:  # a segment for the careful path, or a sweep or a cell's end due first
                    i = ~i
                    self._now, self._n = slots.pm, slots.n
                    yield from self.events((batch[i],), finish=False)
                    slots.pm, slots.n = self._now, self._n
                    due_at = self._due_at()
                    i += 1
            if n:
                last = batch[-1]
        self._now, self._n = slots.pm, slots.n
        if finish:
            yield from self._finished(None if last is None else last[0])

    def _hot_slots(self, inorder):
        """What the compiled hot loop keeps between its calls (`_fastwalk.HotSlots`), or None: no compiled
        loop, or a build older than these classes' slots or than the loop."""
        if inorder is None:
            return None
        try:
            slots = compiled.fastwalk.HotSlots(Half)
        except TypeError:  # a build older than these classes' slots, or than this loop: the Python loop
            return None
        if hasattr(compiled.fastwalk, "Chunks"):
            # The hot loop starts and lets go chunks in C (ChunkMerger.start and flush_half, the same
            # steps); a build older than that calls the merger's methods.
            limits = merging.MAX_PENDING, merging.TAIL_KEPT  # read now: a test may set them lower
            slots.chunks = compiled.fastwalk.Chunks(Half, Conn, ChunkMerger, StreamChunk, *limits)
            slots.chunks.pieces_from = self._merger.pieces_from
        return slots

    def clocked_events(self, segments: list[tuple], clocks: list[float]) -> Iterator[StreamEvent]:
        """`events(segments, finish=False)` on the whole capture's clock, for an engine that gives this
        reassembler a slice of the capture (one flow's segments: ksniff.engine.spark_tasks): `clocks[i]`
        is that clock when `segments[i]` came (the running maximum of the capture's timestamps, at least
        the segment's own; never going back). The sweeps and cells' ends that the clock passes come
        before the segment it passes them at, at their own times, as `events` gives them on its own
        clock; between two of them, the segments run through the compiled hot loop, as `batch_events`
        runs them. `place` and `clock` say, for each event, where and when it was let go, as `events`
        keeps them (a chunk's place is its own, `StreamChunk.at`), and `place` is the segment being taken
        while the careful path takes it (a new connection is named then: `conn_id`)."""
        inorder = hot_loop()
        slots = self._hot
        if slots is None and inorder is not None:
            slots = self._hot = self._hot_slots(inorder)
        table = self._conns.table
        merger = self._merger
        out = merger.out
        popleft = out.popleft
        max_chunk = self.limits.max_chunk_bytes
        n = len(segments)
        i = 0
        while i < n:
            now = clocks[i]
            if now > self._now:
                self._now = now
            due_at = self._due_at()
            if now >= due_at:  # what the clock reaching `now` lets go, before this segment
                yield from self._let_go_by_time(now, self._n + 1)
                due_at = self._due_at()
            # Up to the next segment at which the clock reaches the next sweep, nothing is let go by time.
            stop = bisect.bisect_left(clocks, due_at, i + 1, n) if slots is not None else i + 1
            run = segments if i == 0 and stop == n else segments[i:stop]
            base, k, m = i, 0, stop - i
            while k < m:
                if slots is not None:
                    slots.pm, slots.n = self._now, self._n
                    got = inorder(run, k, table, merger, out, math.inf, max_chunk, slots)
                    taken = got if got >= 0 else ~got
                    self._n = slots.n
                    if taken > k:
                        self._now = clocks[base + taken - 1]
                    if out:
                        self.clock = self._now
                        self.place = (0, self._n, 0)
                        while out:
                            yield popleft()
                    k = taken
                    if got >= 0:
                        continue
                # The careful path (or no compiled loop): this segment alone, on the clock.
                now = clocks[base + k]
                if now > self._now:
                    self._now = now
                self.place = (0, self._n + 1, 0)
                yield from self.events((run[k],), finish=False, sweeps=False)
                k += 1
            i = stop

    def oldest_pending_at(self) -> int | None:
        """`StreamChunk.at` of the oldest chunk being merged: where the earliest chunk still to come from
        the segments taken began (None: none is being merged)."""
        return min((h.p_at for h in self._merger.pending), default=None)

    # -- the careful path: the TCP state machine ----------------------------------------------------

    def _segment(self, h: Half | None, seg: tuple) -> None:
        ts, sip, sp, dip, dp, seq, ack, flags, payload = seg
        if ts > self._now:
            self._now = ts
        if flags & TICK:
            self._merger.flush()
            return
        table = self._conns
        if h is None:
            if flags & RST:
                return  # a reset of a connection we never saw carries nothing
            h = table.open(seg)
        conn = h.conn
        if (
            flags & (SYN | ACK) == SYN
            and h.isn is not None
            and seq != h.isn
            or (conn.closed is not None and flags & (SYN | ACK) == SYN)
        ):
            # A new connection on a 4-tuple already used: a new SYN after the close, or one with a
            # different initial sequence number (the old connection's close was not captured).
            table.close(conn, ts, "reused")
            h = table.reopen(conn, seg)
            conn = h.conn
        if conn.closed is not None or conn.dropped:
            h.last_ts = ts
            if conn.tally and conn.closed is None:
                self._tally(h, conn.tally, seq, payload if flags & TRUNCATED else len(payload))
            return  # stray packets of a finished or ignored connection
        h.last_ts = ts
        ooo = self._ooo
        if flags & ACK:
            h.ack_out = ack
            if h.peer.ooo:
                # This ACK may cover bytes of the peer that the capture lost: declare that gap now, so
                # the peer's buffered bytes (a request) come out before this segment's (its response).
                ooo.ack_gap(h.peer, ts)
                ooo.drain(h.peer)
                h.peer.refresh()
        if h.base is None:  # the direction's first segment: alike another's (ConnectionTable.alike)?
            table.first_segment(h.key, seq, ack, flags, payload, ts)
        if flags & SYN:
            if h.base is None:
                h.isn = seq
                h.set_base((seq + 1) & MASK)
            seq = (seq + 1) & MASK
        if h.base is None:  # first segment of a direction seen mid-stream: it starts the stream
            h.set_base(seq)
        if flags & TRUNCATED:
            self.stats.truncated_packets += 1
            off = h.offset(seq)
            ooo.data(h, off, off + payload, None, self._now, ts)
            length = payload
        else:
            length = len(payload)
            if length:
                off = h.offset(seq)
                ooo.data(h, off, off + length, payload, self._now, ts)
        if flags & FIN and h.fin is None:
            h.fin = h.offset(seq) + length
            if h.peer.fin is not None:
                table.close(conn, ts, "fin")
        if flags & RST:
            table.close(conn, ts, "rst")
        h.refresh()

    # -- hooks for engines --------------------------------------------------------------------------

    def sweep(self, now: float) -> None:
        """Runs the sweeps and lets go the chunks due by capture time `now`; the events (chunks, closes,
        their gaps) go to `out`. `events` calls it as the clock moves unless told not to."""
        for _ in self.sweeps(now):
            pass

    def _due_at(self) -> float:
        """The first time of the clock that lets something go: the next sweep or the chunk cell's end."""
        return min(self.next_sweep, self.cell_end)

    def due(self, now: float) -> bool:
        """The clock reaches `now`: whether that lets anything go (`sweeps`)."""
        if now > self._now:
            self._now = now
        return now >= self._due_at()

    def sweeps(self, now: float) -> Iterator[tuple[float, int]]:
        """What the clock reaching `now` lets go, in time order, each as `(time, CELL or SWEEP)` once its
        events are in `out`: the chunks being merged when the clock passes the end of their chunk cell
        (all at once, in the order their connections opened), and the idle sweeps, one at each multiple
        of `sweep_every` up to `now` not swept yet, each expiring connections idle `idle_timeout` before
        it and forgetting closed ones after `closed_linger` (at one time, the chunks first). Sweeps that
        cannot change anything are skipped: when nothing is tracked, and between two sweeps of one call
        (no segment comes in between) until the first connection is due."""
        if not self.due(now):
            return
        every = self.sweep_every
        line = self.next_sweep
        cell = self.cell_end if self._merger.pending and self.cell_end <= now else None
        while line <= now and self._conns.conns:
            if cell is not None and cell <= line:
                self._merger.flush()
                yield cell, CELL
                cell = None
            due = self._conns.sweep(line)
            yield line, SWEEP
            line = max(_multiple_after(line, every), _multiple_after(due, every))
        if cell is not None:
            self._merger.flush()
            yield cell, CELL
        self.next_sweep = _multiple_after(now, every)
        if now >= self.cell_end:
            self.cell_end = _multiple_after(now, CHUNK_CELL)

    def drop(self, conn_id: int, tally: int = 0) -> None:
        """Stop reassembling a connection: nothing more is buffered or emitted for it. With `tally` (a
        port), its payload bytes are still counted, in `stats.kafka_elsewhere_bytes[tally]`: what was
        taken in and not yet handed on now, each later byte once (retransmissions not counted twice)."""
        conn = self._conns.conns.get(conn_id)
        if not tally or conn is None or conn.dropped:
            self._conns.drop(conn_id)
            return
        conn.tally, conn.holes = tally, {True: [], False: []}
        out = self._merger.out
        held = sum(chunk_size(e.data) for e in out if e.conn == conn_id and e.__class__ is StreamChunk)
        reached = {}
        for h in conn.halves:
            if h.parts is not None:
                held += h.p_len
            if h.base is None:
                continue
            # Out-of-order bytes waiting for a hole: counted now; the holes before them stay open.
            cursor, holes = h.nxt, conn.holes[h.from_src]
            for start, end, data, _ts in sorted(h.ooo or ()):
                if data is None:
                    continue
                if start > cursor:
                    holes.append(((h.base + cursor) & MASK, (h.base + start) & MASK))
                held += end - max(start, cursor) if end > cursor else 0
                cursor = max(cursor, end)
            reached[h] = (h.base + cursor) & MASK
        self._add_tally(tally, held)
        self._conns.drop(conn_id)
        for h, nxt32 in reached.items():
            h.nxt32 = nxt32

    def _tally(self, h: Half, port: int, seq: int, length: int) -> None:
        """Counts the bytes of a dropped connection's segment that this direction had not carried yet:
        past the furthest byte so far, or filling a hole left behind it (a retransmission counts
        nothing)."""
        if h.base is None:
            h.set_base(seq)
        holes = h.conn.holes[h.from_src]
        end = (seq + length) & MASK
        new = (end - h.nxt32) & MASK
        if 0 < new < 1 << 31:  # past the furthest byte so far
            if new > length:  # a hole between the furthest byte and this segment
                holes.append((h.nxt32, seq))
                if len(holes) > MAX_TALLY_HOLES:
                    del holes[0]
            h.nxt32 = end
            self._add_tally(port, min(new, length))
        elif holes:
            self._add_tally(port, _fill(holes, seq, length))

    def _add_tally(self, port: int, n: int) -> None:
        if n:
            tallies = self.stats.kafka_elsewhere_bytes
            tallies[port] = tallies.get(port, 0) + n

    def flush(self) -> None:
        """Every chunk being merged leaves now, to `out` (a live capture's pause)."""
        self._merger.flush()

    @property
    def open_connections(self) -> int:
        """Connections tracked now (open, or closed and lingering): a sweep can change only those."""
        return len(self._conns.conns)

    def horizon(self) -> float:
        """The earliest capture time that an event still to come from bytes already seen can carry (inf
        when none): the chunks being merged, out-of-order bytes waiting for a hole, events not yet taken.
        The engine's reordering releases what is older than this without waiting."""
        return self._merger.earliest(self._ooo.earliest(float("inf")))

    def finish(self, ts: float | None = None) -> None:
        """End of capture: every open connection closes, holes become gaps."""
        self._conns.finish(self._now if ts is None else max(ts, self._now))
        self._merger.flush()

    def warnings(self) -> list[str]:
        return self._conns.warnings() + self._ooo.warnings()


def hot_loop():
    """The compiled hot loop (`_fastwalk.inorder`), or None: not built, an older build without it, or
    KSNIFF_PURE_PYTHON set. Read when a run starts, so a test can switch the compiled walk off."""
    return getattr(compiled.fastwalk, "inorder", None)


def _multiple_after(t: float, every: float) -> float:
    """The first multiple of `every` strictly after `t` (itself for an infinite `t`). Every sweep time is
    one of these, so a sweep falls on the same float whichever engine's task asks for it."""
    if math.isinf(t):
        return t
    line = (math.floor(t / every) + 1) * every
    if line <= t:
        line += every
    # Past 2**53 times `every`, floats are further apart than `every`: the next float is the next time.
    return line if line > t else math.nextafter(t, math.inf)


def _signed(a: int, b: int) -> int:
    """a - b in 32-bit sequence space, as a signed distance."""
    return ((a - b + (1 << 31)) & MASK) - (1 << 31)


def _fill(holes: list[tuple[int, int]], seq: int, length: int) -> int:
    """The bytes of [seq, seq + length) that fall in `holes` (sequence ranges), taken out of them."""
    filled = 0
    for i in range(len(holes) - 1, -1, -1):
        hs, he = holes[i]
        size = _signed(he, hs)
        lo, hi = max(0, _signed(seq, hs)), min(size, _signed(seq, hs) + length)
        if hi <= lo:
            continue
        filled += hi - lo
        rest = [(hs, (hs + lo) & MASK)] if lo > 0 else []
        if hi < size:
            rest.append(((hs + hi) & MASK, he))
        holes[i : i + 1] = rest
    return filled
