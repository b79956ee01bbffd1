"""Clock alignment: captures of one set taken on different hosts, put on one time line.

Captures taken on several brokers of a cluster carry each host's clock, and those disagree by
milliseconds to seconds: merged as they are, a Produce could seem to leave before the InitProducerId answer
that gave it its producer id. The protocol itself says what came first, whatever the clocks:

- a producer id is written in a batch only after the InitProducerId answer that handed it out was
  received: that answer (on the coordinator's capture) is earlier than the first Produce carrying the id
  (on a leader's capture);
- a transactional client writes to a partition only once AddPartitionsToTxn added it: the first answer
  adding a partition for a producer id and epoch (on the coordinator's capture) is earlier than the first
  Produce to it with that id and epoch (on its leader's);
- a client commits a transaction only once every Produce of it was answered: the answer to the first batch
  of a partition in a producer epoch (base sequence 0), for a partition that the epoch's first transaction
  added, is earlier than that transaction's EndTxn(commit).

Each such pair bounds the difference between two captures' clocks, on one side. Within those bounds, a
transactional client writes nothing to a partition from the moment it sends EndTxn until AddPartitionsToTxn
has added that partition to its next transaction (or, if it never does, until EndTxn is answered): every
write of one capture that would land inside such a window of another rules out an interval of offsets, and
the offset is taken in the widest interval left. `align` gathers the
pairs of every two groups of files (files that continue one another share a clock), intersects the bounds
and picks each group's offset: none while the bounds allow the clocks as they are, else the middle of what
they allow (or just past the one bound there is). The offsets and their uncertainty go to the report;
each file's timestamps are shifted by its offset before the files are merged.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import field, replace

from ksniff.audit.transactions import add_partitions_entries
from ksniff.capture.errors import CaptureLimits
from ksniff.capture.files import CaptureFile
from ksniff.capture.reassembly import Reassembler
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.decode import Decoder
from ksniff.decode.events import Exchange

# What an offset chosen at one bound is moved past it: the other side cannot have acted in less.
STEP = 1e-4
_APIS = frozenset({"InitProducerId", "AddPartitionsToTxn", "EndTxn", "Produce"})
# What the pass decodes: those, and Metadata, whose answers name the topics that Produce requests from
# version 13 give by id only (the audit names them so too, and its keys must meet AddPartitionsToTxn's).
_DECODED = _APIS | {"Metadata"}


@slotted_dataclass
class Anchors:
    """One group of files' events that order it against other groups."""

    # (producer id, epoch) -> the InitProducerId answer that handed them out, and the first Produce
    # carrying them. Keyed by the epoch too: an answer of a later epoch of the same id (a restart, a fenced
    # zombie's successor) seen by a capture that began after the first would otherwise stand for the first.
    born: dict[tuple[int, int], float] = field(default_factory=dict)
    first_use: dict[tuple[int, int], float] = field(default_factory=dict)
    # (producer id, epoch) -> (first EndTxn request time, it committed, partitions added before it)
    first_end: dict[tuple[int, int], tuple[float, bool]] = field(default_factory=dict)
    added: dict[tuple[int, int], list[tuple[float, tuple[str, int]]]] = field(default_factory=dict)
    # (producer id, epoch, topic, partition) -> answer time of its batch with base sequence 0
    first_batch: dict[tuple[int, int, str, int], float] = field(default_factory=dict)
    # (producer id, epoch, topic, partition) -> first Produce request, and first AddPartitionsToTxn answer
    # that added it: only for an epoch whose InitProducerId answer this capture saw first (a capture that
    # began later in the epoch sees a later transaction's answer first, which no write need follow)
    first_write: dict[tuple[int, int, str, int], float] = field(default_factory=dict)
    first_added: dict[tuple[int, int, str, int], float] = field(default_factory=dict)
    # (producer id, epoch) -> EndTxn (request, answer) times; (producer id, epoch, topic, partition) ->
    # AddPartitionsToTxn answers adding it, and the times of Produce requests writing to it
    ends: dict[tuple[int, int], list[tuple[float, float]]] = field(default_factory=dict)
    adds: dict[tuple[int, int, str, int], list[float]] = field(default_factory=dict)
    writes: dict[tuple[int, int, str, int], list[float]] = field(default_factory=dict)
    # What changes a producer's state at the coordinator, that findings elsewhere are judged against:
    # (time, transactional id, producer id) of InitProducerId, AddPartitionsToTxn and EndTxn answers.
    boundaries: list[tuple[float, str | None, int]] = field(default_factory=list)
    # Made once by `seal`, after the last exchange: what every pair of groups is judged with.
    quiet: dict[tuple[int, int, str, int], list[tuple[float, float]]] = field(default_factory=dict)
    first_commit: dict[tuple[int, int, str, int], float] = field(default_factory=dict)

    def feed(self, ex: Exchange) -> None:
        name = ex.api_name
        if ex.request is None:
            return
        if name == "Produce":
            for b in ex.batches:
                h = b.header
                pid = h.producer_id
                if pid < 0:
                    continue
                used = (pid, h.producer_epoch)
                if ex.request_ts < self.first_use.get(used, math.inf):
                    self.first_use[used] = ex.request_ts
                if not h.transactional:
                    continue  # what follows orders transactions: an idempotent bulk load keeps nothing
                write = (pid, h.producer_epoch, b.topic, b.partition)
                self.writes.setdefault(write, []).append(ex.request_ts)
                if ex.request_ts < self.first_write.get(write, math.inf):
                    self.first_write[write] = ex.request_ts
                if h.base_sequence == 0 and b.error_code == 0 and b.response_ts is not None:
                    if b.response_ts < self.first_batch.get(write, math.inf):
                        self.first_batch[write] = b.response_ts
        elif name == "InitProducerId":
            resp = ex.response
            if resp is not None and resp.error_code == 0 and resp.producer_id >= 0 and ex.response_ts:
                pid = resp.producer_id
                granted = (pid, resp.producer_epoch)
                self.born[granted] = min(ex.response_ts, self.born.get(granted, math.inf))
                self.boundaries.append((ex.response_ts, ex.request.transactional_id, pid))
        elif name == "AddPartitionsToTxn":
            for tid, pid, epoch, verify_only, wanted, answers in add_partitions_entries(ex):
                if verify_only:
                    continue
                if ex.response_ts is not None:
                    self.boundaries.append((ex.response_ts, tid, pid))
                self.added.setdefault((pid, epoch), []).extend((ex.request_ts, tp) for tp in wanted)
                if ex.response_ts is None:
                    continue
                for topic, partition in wanted:
                    key = (pid, epoch, topic, partition)
                    self.adds.setdefault(key, []).append(ex.response_ts)
                    accepted = answers.get((topic, partition)) == 0
                    if not accepted or self.born.get((pid, epoch), math.inf) > ex.response_ts:
                        continue  # refused, or the epoch began before this capture
                    if ex.response_ts < self.first_added.get(key, math.inf):
                        self.first_added[key] = ex.response_ts
        elif name == "EndTxn":
            req = ex.request
            key = (req.producer_id, req.producer_epoch)
            if ex.response_ts is not None:
                self.ends.setdefault(key, []).append((ex.request_ts, ex.response_ts))
                self.boundaries.append((ex.response_ts, req.transactional_id, req.producer_id))
            if ex.request_ts < self.first_end.get(key, (math.inf, False))[0]:
                self.first_end[key] = (ex.request_ts, bool(req.committed))

    def seal(self) -> Anchors:
        """After the last exchange: the writes sorted, the quiet windows and first commits made."""
        for times in self.writes.values():
            times.sort()
        self.quiet = self.quiet_windows()
        self.first_commit = self.first_transaction()
        return self

    def quiet_windows(self) -> dict[tuple[int, int, str, int], list[tuple[float, float]]]:
        """(producer id, epoch, topic, partition) -> the windows in which its client writes nothing there:
        from each EndTxn request to the next answer adding the partition again (or to EndTxn's answer)."""
        out: dict[tuple[int, int, str, int], list[tuple[float, float]]] = {}
        for key, answers in self.adds.items():
            spans = self.ends.get(key[:2])
            if not spans:
                continue
            answers.sort()
            for start, answered in spans:
                i = bisect.bisect_right(answers, start)
                out.setdefault(key, []).append((start, answers[i] if i < len(answers) else answered))
        return out

    def first_transaction(self) -> dict[tuple[int, int, str, int], float]:
        """(producer id, epoch, topic, partition) -> the EndTxn(commit) time of the epoch's first
        transaction, for every partition that transaction added."""
        out = {}
        for key, (ts, committed) in self.first_end.items():
            if not committed:
                continue
            for added_ts, (topic, partition) in self.added.get(key, ()):
                if added_ts < ts:
                    out[(*key, topic, partition)] = ts
        return out


def anchors_of(
    paths: Sequence[str], ports: Sequence[int], auto_detect: bool, limits: CaptureLimits | None
) -> Anchors:
    """The anchors of files that share one clock, decoding only the four APIs they come from (and the
    topic names): every other request is passed over, and its answer with it."""
    from ksniff.capture.run import reassembled

    anchors = Anchors()
    files = [CaptureFile(p, limits) for p in paths]
    try:
        reassembler = Reassembler(limits)
        decoder = Decoder(ports=ports, auto_detect=auto_detect, on_not_kafka=reassembler.drop, only=_DECODED)

        def exchanges():
            for event in reassembled(reassembler, files):
                yield from decoder.feed(event)
            yield from decoder.finish()  # once the walk is over: the requests left unanswered

        for ex in exchanges():
            if ex.__class__ is Exchange and ex.api_name in _APIS:
                anchors.feed(ex)
    finally:
        for f in files:
            f.close()
    return anchors.seal()


def forbidden(a: Anchors, b: Anchors, low: float, high: float) -> list[tuple[float, float]]:
    """Open intervals of `offset(b) - offset(a)` within [low, high] that would put a write of one inside
    an EndTxn window of the same producer id and epoch in the other."""
    out = []
    for windows, writes, sign in ((a.quiet, b.writes, 1), (b.quiet, a.writes, -1)):
        for key, spans in windows.items():
            times = writes.get(key)
            if not times:
                continue
            for s, e in spans:
                if sign == 1:  # window in a, write w in b: s - w < d < e - w
                    lo_w, hi_w = s - high, e - low
                else:  # window in b, write w in a: w - e < d < w - s
                    lo_w, hi_w = low + s, high + e
                for w in times[bisect.bisect_left(times, lo_w) : bisect.bisect_right(times, hi_w)]:
                    out.append((s - w, e - w) if sign == 1 else (w - e, w - s))
    return out


def widest(low: float, high: float, holes: list[tuple[float, float]]) -> tuple[float, float]:
    """The interval of [low, high] left by the open `holes` that holds 0, else the widest one."""
    gaps = []
    at = low
    for s, e in sorted(holes):
        if s > at:
            gaps.append((at, min(s, high)))
        at = max(at, e)
        if at >= high:
            break
    if at < high:
        gaps.append((at, high))
    if not gaps:
        return low, high
    for g in gaps:
        if g[0] <= 0 <= g[1]:
            return g
    return max(gaps, key=lambda g: g[1] - g[0])


def bounds(a: Anchors, b: Anchors) -> tuple[float, float, int]:
    """(low, high, pairs): what the anchors allow for `offset(b) - offset(a)` (seconds added to b's
    timestamps minus those added to a's), from the events of a that must precede events of b and back."""
    low, high, pairs = -math.inf, math.inf, 0
    for earlier, later, sign in ((a, b, 1), (b, a, -1)):
        # earlier's event E must precede later's event L: L + off(later) >= E + off(earlier).
        found = []
        for granted, ts in earlier.born.items():
            use = later.first_use.get(granted)
            if use is not None:
                found.append(ts - use)
        for key, ts in earlier.first_added.items():
            write = later.first_write.get(key)
            if write is not None:
                found.append(ts - write)
        ends = later.first_commit
        for key, answered in earlier.first_batch.items():
            end = ends.get(key)
            if end is not None:
                found.append(answered - end)
        for gap in found:  # off(later) - off(earlier) >= gap
            pairs += 1
            if sign == 1:
                low = max(low, gap)
            else:
                high = min(high, -gap)
    return low, high, pairs


@frozen_dataclass
class Clock:
    """A group of files' offset (seconds added to their timestamps) and what bounds it."""

    paths: tuple[str, ...]
    offset: float
    low: float | None  # the bounds the anchors allow, relative to the reference group; None: unbounded
    high: float | None
    pairs: int  # ordered pairs of events that bounded it
    reference: bool = False
    # Not in the report: the group's state-changing answers (Anchors.boundaries, in its own clock) and the
    # broker addresses its connections were opened to, to tell whose clock a finding's exchange is on.
    boundaries: tuple[tuple[float, str | None, int], ...] = ()
    servers: frozenset[str] = frozenset()

    @property
    def uncertainty(self) -> float | None:
        """Half the width of what the anchors allow; None when one side is unbounded."""
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2

    def as_contract(self) -> list[dict]:
        return [
            {
                "input": p,
                "offset_s": round(self.offset, 6),
                "low_s": _round(self.low),
                "high_s": _round(self.high),
                "uncertainty_s": _round(self.uncertainty),
                "anchors": self.pairs,
                "reference": self.reference,
            }
            for p in self.paths
        ]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def choose(low: float, high: float) -> float:
    """The offset within [low, high]: none when the clocks as they are fit, else the middle, or just past
    the one finite bound."""
    if low <= 0 <= high:
        return 0.0
    if math.isfinite(low) and math.isfinite(high):
        return (low + high) / 2
    return low + STEP if math.isfinite(low) else high - STEP


def _sharing(anchors: Sequence[Anchors]) -> list[tuple[int, int]]:
    """The pairs (i < j, in order) of groups whose anchors can bound one another (`bounds`): one's event
    and the other's of one producer id, or of one (producer id, epoch, topic, partition). Groups sharing
    none give no pair, so a fleet's thousands of groups cost the pairs that share producers, not every
    pair."""
    holders: dict[tuple, tuple[set[int], set[int]]] = {}
    for g, a in enumerate(anchors):
        for kind, earlier, later in (
            (0, a.born, a.first_use),
            (1, a.first_added, a.first_write),
            (2, a.first_batch, a.first_commit),
        ):
            for key in earlier:
                holders.setdefault((kind, key), (set(), set()))[0].add(g)
            for key in later:
                holders.setdefault((kind, key), (set(), set()))[1].add(g)
    pairs = set()
    for first, then in holders.values():
        for a in first:
            for b in then:
                if a != b:
                    pairs.add((a, b) if a < b else (b, a))
    return sorted(pairs)


def align(
    groups: Sequence[tuple[str, ...]],
    anchors: Sequence[Anchors],
    servers: Sequence[frozenset[str]] = (),
    seen: dict[tuple[int, int], tuple[float, float, int]] | None = None,
) -> list[Clock] | None:
    """Each group's clock from its anchors (`anchors_of`, one per group), the group with most anchors the
    reference; None when fewer than two groups bound one another (nothing to align). Groups the anchors
    do not reach keep their clock. `seen`: (i, j) -> (low, high, pairs) of `offset(j) - offset(i)` (i < j)
    from the times two capture points saw the same bytes at (ksniff.engine.sets._segment_bounds): far
    tighter than the protocol's order, and taken alone where the two disagree."""
    if len(groups) < 2:
        return None
    n = len(groups)
    edges: dict[tuple[int, int], tuple[float, float, int]] = {}
    for i, j in _sharing(anchors):
        low, high, pairs = bounds(anchors[i], anchors[j])
        if pairs and low <= high:
            holes = forbidden(anchors[i], anchors[j], low, high)
            if holes and math.isfinite(low) and math.isfinite(high):
                low, high = widest(low, high, holes)
                pairs += len(holes)
        if pairs:
            edges[(i, j)] = (low, high, pairs)
    for (i, j), (s_low, s_high, s_pairs) in (seen or {}).items():
        low, high, pairs = edges.get((i, j), (-math.inf, math.inf, 0))
        if max(low, s_low) <= min(high, s_high):
            edges[(i, j)] = (max(low, s_low), min(high, s_high), pairs + s_pairs)
        else:  # the bytes' own times win over anchors that disagree with them
            edges[(i, j)] = (s_low, s_high, s_pairs)
    for (i, j), (low, high, pairs) in list(edges.items()):
        edges[(j, i)] = (-high, -low, pairs)
    if not edges:
        return None
    weight = [0] * n
    linked: dict[int, list[int]] = {}  # group -> the groups it has an edge with (both ways, as edges)
    for (i, j), (_l, _h, p) in edges.items():
        weight[i] += p
        linked.setdefault(j, []).append(i)
    ref = max(range(n), key=lambda k: (weight[k], -k))
    offset: dict[int, float] = {ref: 0.0}
    lows: dict[int, float] = {ref: 0.0}
    highs: dict[int, float] = {ref: 0.0}
    pairs_of: dict[int, int] = {ref: 0}
    frontier = [ref]
    while frontier:  # breadth first from the reference: each group bounded by the groups placed before it
        placed = set(offset)
        nxt = []
        # Only a neighbour of the groups placed last can be placed now (the others' were placed before).
        for j in sorted({j for i in frontier for j in linked[i] if j not in offset}):
            low, high, pairs = -math.inf, math.inf, 0
            for i in linked[j]:
                if i in placed:
                    e = edges[(i, j)]
                    low, high, pairs = max(low, offset[i] + e[0]), min(high, offset[i] + e[1]), pairs + e[2]
            if pairs:
                if low > high:  # anchors that disagree (a capture of retries, or reordered files): trust none
                    low, high = -math.inf, math.inf
                offset[j], lows[j], highs[j], pairs_of[j] = choose(low, high), low, high, pairs
                nxt.append(j)
        frontier = nxt
    out = []
    for k, g in enumerate(groups):
        if k in offset:
            low, high = lows[k], highs[k]
            out.append(
                Clock(
                    g,
                    offset[k],
                    low if math.isfinite(low) else None,
                    high if math.isfinite(high) else None,
                    pairs_of[k],
                    k == ref,
                    tuple(anchors[k].boundaries),
                    servers[k] if servers else frozenset(),
                )
            )
        else:
            out.append(Clock(g, 0.0, None, None, 0))
    return out


def within_uncertainty(findings: list, clocks: Sequence[Clock]) -> list:
    """Findings that rest on an order the clocks cannot tell: a warning or critical finding on one
    capture's clock, about a producer (transactional id or producer id) that another capture's answers
    changed the state of at a time no further from it than the two clocks' uncertainties together. Those
    are marked unverified (`evidence.unverified`, `evidence.clock_uncertainty_s`) and are never critical;
    the others are returned as they are, the list in `finding_order` if it came so."""
    from ksniff.audit.fold import finding_order
    from ksniff.audit.model import Severity

    bounded = [c for c in clocks if c.uncertainty is not None and c.servers]
    if len(bounded) < 2:
        return findings
    # Per producer key, per clock (in the clocks' order), the sorted times of its state changes: a finding
    # looks each clock up by bisection, so a long capture's thousands of transactions per producer cost
    # a few steps per finding, not a walk over all of them.
    by_tid: dict[str, dict[int, list[float]]] = {}
    by_pid: dict[int, dict[int, list[float]]] = {}
    own_of: dict[str, int] = {}
    spread = [c.uncertainty for c in bounded]
    for n, c in enumerate(bounded):
        for server in c.servers:
            own_of.setdefault(server, n)
        for ts, tid, pid in c.boundaries:
            if tid is not None:
                by_tid.setdefault(tid, {}).setdefault(n, []).append(ts + c.offset)
            by_pid.setdefault(pid, {}).setdefault(n, []).append(ts + c.offset)
    for per_clock in (*by_tid.values(), *by_pid.values()):
        for times in per_clock.values():
            times.sort()
    out = []
    changed = False
    for f in findings:
        mine = own_of.get(f.evidence.get("broker"))
        if f.severity == Severity.INFO or mine is None:
            out.append(f)
            continue
        near = None
        for per_clock in (
            by_tid.get(f.transactional_id) if f.transactional_id is not None else None,
            by_pid.get(f.producer_id) if f.producer_id is not None else None,
        ):
            for n, times in (per_clock or {}).items():
                if n == mine:
                    continue
                width = spread[mine] + spread[n]
                i = bisect.bisect_left(times, f.ts - width)
                if i < len(times) and times[i] <= f.ts + width:
                    near = width
                    break
            if near is not None:
                break
        if near is None:
            out.append(f)
            continue
        severity = Severity.WARNING if f.severity == Severity.CRITICAL else f.severity
        evidence = {**f.evidence, "unverified": True, "clock_uncertainty_s": round(near, 6)}
        out.append(replace(f, severity=severity, evidence=evidence))
        changed = True
    # A critical finding made a warning can move among findings of its time: the list stays in the order
    # every engine lists findings in (and a digest of its parts merges them in).
    return sorted(out, key=finding_order) if changed else out
