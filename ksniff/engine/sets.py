"""Capture sets: which of the inputs are one body of traffic, to be audited together.

Producer ids are unique within one cluster's broker lifetime, never across clusters, so captures that
have nothing in common must not share one producer-id space. Before the audit, one cheap pass over each
file (`scan`) notes:

- every TCP direction it saw (4-tuple, the sequence numbers it covered), over the whole file;
- the cluster id and brokers that the first Metadata or DescribeCluster answer names, looked for in the
  first `IDENTITY_BYTES` of the file (clients ask for metadata as they connect); only those two APIs'
  bodies are decoded, and the decoding stops at the first answer that names a cluster. Files whose group
  ran at no time near another group's are not looked at: only captures at overlapping times can join by
  cluster.

`plan` then joins files into sets: two files are one set when they carry the same TCP connection
(a direction with the same 4-tuple whose sequence numbers meet or overlap: rotated files of one capture,
or one connection captured at both ends; or the same bytes at the same sequence numbers under another
4-tuple, one capture point behind an address translation, `_translated`, whose view the audit reads
under the other's 4-tuples), or when they name the same cluster id, list compatible brokers
and overlap in time (captures taken on several brokers of one cluster at once). A cluster id alone is not
enough: Tansu names every instance alike and librdkafka's mock draws ids that repeat, and captures taken
at different times share no state the audit could check (joining them would invent sequence gaps across
the hours between them). Everything else is a set of its own. `--merge` makes one set, `--separate` one
per file. The files of a rotated capture share its clock; two capture points of one connection each keep
their own (`_two_points`), and ksniff.engine.clock puts them on one time line: by the times both saw
the same bytes at (`_segment_bounds`) where those link a set's clocks, else by the protocol's order.

Each set is audited by its own pipeline, one after the other: a set of one file gives exactly what that
file gives alone, and memory is that of the largest set.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Sequence
from dataclasses import field

from ksniff.capture import CaptureError, compiled
from ksniff.capture.errors import CaptureLimits
from ksniff.capture.files import CaptureFile
from ksniff.capture.halves import ip_text
from ksniff.capture.packets import ACK, FIN, RST, SYN
from ksniff.capture.reassembly import Reassembler
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.decode import Decoder
from ksniff.decode.events import Exchange
from ksniff.decode.identity import Identity
from ksniff.engine.clock import Anchors, align, anchors_of

AUTO, MERGE, SEPARATE = "auto", "merge", "separate"
MODES = (AUTO, MERGE, SEPARATE)

IDENTITY_BYTES = 1 << 20  # TCP payload bytes of a file decoded at most to learn its cluster
MAX_DIRECTIONS = 200_000  # TCP directions remembered per file; more are counted, not kept
SEQ_SLACK = 1 << 20  # sequence numbers two files' views of a direction may lie apart and still meet
CLOCK_SLACK = 300.0  # seconds two hosts' clocks may disagree by and their captures still count as at once
MAX_SERVERS = 10_000  # addresses connections were opened to, remembered per file
# Two files of one connection are two capture points of it (each on its own clock, `_two_points`) when
# they ran at once for more than AT_ONCE seconds as recorded, or carry the same bytes of most directions
# they share: at least half of the shorter one's bytes of a direction, or TWICE_BYTES of them.
AT_ONCE = 1.0
TWICE_BYTES = 256 << 10
# What a direction's bytes look like, to know it again behind an address translation (`_translated`):
# the SAMPLE_BYTES bytes at every absolute sequence number that is a multiple of 2**level, the level
# starting at SAMPLE_LEVEL and raised while a direction holds more than SAMPLES of them. Two views of one
# direction then share every multiple of the coarser view's step that both saw.
SAMPLE_LEVEL = 2
SAMPLES = 32
SAMPLE_BYTES = 8
# A sample's record: its sequence number (4 bytes, little-endian), its bytes, and the time of the segment
# that first held them (a little-endian double): two capture points' times of the same bytes bound their
# clocks (`_segment_bounds`).
SAMPLE_KEY = 4 + SAMPLE_BYTES
TIME_SLACK = 2e-6  # seconds: a capture's times are microseconds, kept as doubles of about 2**31 seconds
SAMPLE_SIZE = SAMPLE_KEY + 8
CLOSED_SAMPLES = 4  # samples kept of a direction once it opened and closed (`_trimmed`)
MAX_CLOSED = 50_000  # directions that opened and closed kept per file, with their samples
MAX_HELD = 1 << 16  # samples of open directions kept per file at most, before each keeps CLOSED_SAMPLES
MAX_VIEWS = 64  # views sharing one sample looked at, at most (one connection: a few points, a few files)
_MOD = 1 << 32
_HALF = 1 << 31
INF = float("inf")
_TIME = struct.Struct("<d")


@slotted_dataclass
class FileScan:
    """What the identification pass learnt of one file."""

    path: str
    first_ts: float | None = None
    last_ts: float | None = None
    # (src, sport, dst, dport) -> [first seq, lowest, highest (relative to the first), SYN and FIN seen,
    # its samples' level, its samples (bytearray of SAMPLE_SIZE records) or None]
    directions: dict[tuple, list] = field(default_factory=dict)
    directions_dropped: int = 0
    # The directions that opened and closed inside the file, as `directions` holds them with their
    # CLOSED_SAMPLES lowest samples (at most MAX_CLOSED): such a connection goes on in no other file, but
    # another capture point can see it too, under its 4-tuple or behind an address translation.
    closed: dict[tuple, list] = field(default_factory=dict)
    clusters: dict[str, frozenset[tuple[int, int]]] = field(default_factory=dict)  # id -> {(node, port)}
    addresses: dict[str, frozenset[str]] = field(default_factory=dict)  # id -> {"host:port"} of its brokers
    servers: set[str] = field(default_factory=set)  # "ip:port" that connections were opened to
    # What `identify` found in this file's own head, (clusters, addresses), when it ran where the file was
    # read (`plan(..., identities=...)`: the Spark engine's executors): taken from here, not read again.
    named: tuple[dict, dict] | None = None


@frozen_dataclass
class CaptureSet:
    """Inputs audited together: `number` (1, 2, ... in the order of their first file), why they joined."""

    number: int
    paths: tuple[str, ...]
    reasons: tuple[str, ...]
    cluster_ids: tuple[str, ...] = ()
    clocks: tuple = ()  # ksniff.engine.clock.Clock per group of files with one clock, when aligned
    # (4-tuple, the 4-tuple it is read as) of each direction seen behind an address translation: the
    # audit reads the two views of such a connection as one (ksniff.capture.run: `renames`)
    renamed: tuple = ()
    # Planned from its files' scans (`scan`), which found whatever `renamed` holds; False for one input,
    # --merge and --separate, whose connections seen twice are looked for only when the audit asks
    # (`read_once`).
    scanned: bool = False

    def renames(self) -> dict[tuple, tuple] | None:
        """The 4-tuples to read as another, or None."""
        return dict(self.renamed) if self.renamed else None

    def offset_of(self, path: str) -> float:
        """Seconds added to the timestamps of `path` to put it on the set's time line."""
        for c in self.clocks:
            if path in c.paths:
                return c.offset
        return 0.0

    def as_contract(self) -> dict:
        return {
            "capture_set": self.number,
            "inputs": list(self.paths),
            "reasons": list(self.reasons),
            "cluster_ids": list(self.cluster_ids),
            "clock_offsets": [row for c in self.clocks for row in c.as_contract()],
            "translated_connections": [
                {"seen_as": _shown(key), "read_as": _shown(to)}
                for key, to in self.renamed
                if _outward(key) == key
            ],
        }


def scan(path: str) -> FileScan:
    """One walk of `path`: its time span and TCP directions (no reassembly, no decoding)."""
    out = FileScan(path)
    f = CaptureFile(path)
    walk = compiled.fastwalk
    try:
        if walk is not None:  # the same work in C over each of the compiled walk's batches
            batch = walk.scan_batch
            dirs, servers = out.directions, out.servers
            for segs in f.segments(batched=True):
                out.directions_dropped += batch(segs, dirs, servers, MAX_DIRECTIONS, MAX_SERVERS, _address)
        else:
            for segs in f.segments(batched=True):
                scan_segments(segs, out)
        out.first_ts, out.last_ts = f.counts.first_ts, f.counts.last_ts
    finally:
        f.close()
    # A connection that opened and closed inside this file cannot go on in another one: what is kept of
    # it is its samples, for another capture point's view of it (bounded like the reassembler's).
    dirs, closed = out.directions, out.closed
    for key in [k for k, r in dirs.items() if r[3] == SYN | FIN]:
        r = dirs.pop(key)
        if r[5] and len(closed) < MAX_CLOSED:
            closed[key] = r
    # What the planner holds of a file until every file is scanned stays small: past MAX_HELD samples,
    # each open direction keeps only its lowest few, as a closed one does.
    if sum(len(r[5]) for r in dirs.values() if r[5]) > MAX_HELD * SAMPLE_SIZE:
        for r in dirs.values():
            r[5] = _trimmed(r[5])
    return out


def scan_segments(segs: list[tuple], out: FileScan) -> None:
    """`scan`'s work on a list of segment tuples, the reference of `_fastwalk.scan_batch`: for each TCP
    direction (src, sport, dst, dport), [its first sequence number, the lowest and the highest byte seen
    relative to it, whether it opened (SYN) and closed (FIN), its samples' level and samples (`sample`)];
    the address of each connection opened."""
    dirs = out.directions
    for seg in segs:
        key = seg[1:5]
        seq = seg[5]
        payload = seg[8]
        n = payload if payload.__class__ is int else len(payload)
        r = dirs.get(key)
        if seg[7] & SYN and not seg[7] & ACK and len(out.servers) < MAX_SERVERS:
            out.servers.add(_address(seg[3], seg[4]))
        if r is None:
            if len(dirs) >= MAX_DIRECTIONS:
                out.directions_dropped += 1
                continue
            r = dirs[key] = [seq, 0, n, seg[7] & SYN, SAMPLE_LEVEL, None]
        else:
            if seg[7] & (FIN | RST):
                r[3] |= FIN
                if r[3] == SYN | FIN:
                    r[5] = _trimmed(r[5])  # opened and closed here: a few samples kept (`scan`)
            rel = (seq - r[0]) % _MOD
            if rel >= _HALF:
                rel -= _MOD
            if rel < r[1]:
                r[1] = rel
            if rel + n > r[2]:
                r[2] = rel + n
        if n >= SAMPLE_BYTES and r[3] != SYN | FIN and payload.__class__ is not int:
            sample(r, seq, payload, n, seg[0])


def sample(r: list, seq: int, payload, n: int, ts: float) -> None:
    """Into a direction's record `r` (`FileScan.directions`), the SAMPLE_BYTES bytes of `payload` (at
    sequence number `seq`, `n` bytes, seen at `ts`) at each multiple of 2**r[4] it holds whole, unless
    already sampled; the level raised first when the segment alone holds more than SAMPLES multiples,
    and again whenever the direction's samples outgrow SAMPLES (the reference of the scan's sampling in
    C, `_fastwalk._sample`)."""
    level = r[4]
    while n >> level > SAMPLES and level < 31:
        level += 1
    if level != r[4]:
        r[4] = level
        r[5] = _coarsened(r[5], level)
    step = 1 << level
    d = -seq & (step - 1)
    while d + SAMPLE_BYTES <= n:
        pos = (seq + d) & (_MOD - 1)
        held = r[5]
        if held is None:
            held = r[5] = bytearray()
        if not _holds(held, pos):
            held += pos.to_bytes(4, "little") + bytes(payload[d : d + SAMPLE_BYTES]) + _TIME.pack(ts)
            while len(held) > SAMPLES * SAMPLE_SIZE and level < 31:
                level = r[4] = level + 1
                held = r[5] = _coarsened(held, level)
            step = 1 << level
        d += 1
        d += -(seq + d) & (step - 1)


def _trimmed(held: bytearray | None) -> bytearray | None:
    """The CLOSED_SAMPLES samples of `held` at the lowest sequence numbers, in their order: what two
    views of a whole connection both hold, whichever segments each saw its bytes in."""
    if held is None:
        return None
    records = [held[i : i + SAMPLE_SIZE] for i in range(0, len(held), SAMPLE_SIZE)]
    records.sort(key=lambda r: int.from_bytes(r[:4], "little"))
    return bytearray(b"".join(records[:CLOSED_SAMPLES]))


def _holds(held: bytearray, pos: int) -> bool:
    return any(int.from_bytes(held[i : i + 4], "little") == pos for i in range(0, len(held), SAMPLE_SIZE))


def _coarsened(held: bytearray | None, level: int) -> bytearray | None:
    """The samples of `held` at multiples of 2**level, in their order."""
    if held is None:
        return None
    mask = (1 << level) - 1
    out = bytearray()
    for i in range(0, len(held), SAMPLE_SIZE):
        if not int.from_bytes(held[i : i + 4], "little") & mask:
            out += held[i : i + SAMPLE_SIZE]
    return out


def identify(
    scan: FileScan, ports: Sequence[int], auto_detect: bool, limits: CaptureLimits | None = None
) -> None:
    """The cluster the first Metadata or DescribeCluster answer of the file names (into `scan.clusters`),
    looked for in its first `IDENTITY_BYTES` of TCP payload, decoding only those two APIs."""
    if scan.named is not None:  # found where the file was read
        scan.clusters, scan.addresses = dict(scan.named[0]), dict(scan.named[1])
        return
    f = CaptureFile(scan.path)
    identity = Identity()
    try:

        def head():
            budget = IDENTITY_BYTES
            for seg in f.segments():
                yield seg
                payload = seg[8]
                budget -= payload if payload.__class__ is int else len(payload)
                if budget < 0 or identity.cluster_ids:
                    return

        reassembler = Reassembler(limits)
        decoder = Decoder(
            ports=ports,
            auto_detect=auto_detect,
            on_not_kafka=reassembler.drop,
            only=_NAMING,
            watch_elsewhere=False,
        )
        for event in reassembler.events(head(), finish=False):
            for ex in decoder.feed(event):
                if ex.__class__ is Exchange and ex.api_name in _NAMING:
                    identity.feed(ex)
    finally:
        f.close()
    for cid in identity.cluster_ids:
        scan.clusters[cid] = frozenset((b.node_id, b.port) for b in identity.brokers(cid))
        scan.addresses[cid] = frozenset(b.address for b in identity.brokers(cid))


_NAMING = frozenset({"Metadata", "DescribeCluster"})


def _identify_groups(
    groups: Sequence[Sequence[int]],
    scans: Sequence[FileScan],
    identities: Callable[[list[str]], list[tuple[dict, dict]]] | None,
    *,
    ports: Sequence[int] = (9092,),
    auto_detect: bool = True,
    limits: CaptureLimits | None = None,
) -> None:
    """Per group of files (in time order), its earliest files until one names a cluster, which every
    file of the group then names (`scans[m].clusters`; only the naming file's brokers' addresses).

    Here the files are read one after the other. `identities` (paths -> (clusters, addresses) each)
    reads them elsewhere, several at once: the first file of every group, then the next two of the
    groups none of whose files named one, the next four, ... (a call per round, a few rounds at most;
    files read past a group's first naming one are not taken, so the result is the same)."""
    width = 1
    pending = [(list(files), 0) for files in groups if files]
    while pending:
        if identities is not None:
            asked = [m for files, at in pending for m in files[at : at + width] if scans[m].named is None]
            if asked:
                for m, named in zip(asked, identities([scans[m].path for m in asked]), strict=True):
                    scans[m].named = named
        later = []
        for files, at in pending:
            for m in files[at : at + width]:
                identify(scans[m], ports, auto_detect, limits)
                if scans[m].clusters:
                    for other in files:
                        scans[other].clusters = dict(scans[m].clusters)
                    break
            else:
                if at + width < len(files):
                    later.append((files, at + width))
        pending = later
        if identities is not None:
            width *= 2


def _continues(a: FileScan, b: FileScan) -> tuple | None:
    """A TCP direction both files carry with sequence numbers that meet: one connection in both."""
    small, large = (a, b) if len(a.directions) <= len(b.directions) else (b, a)
    for key, (first, lo, hi, *_rest) in small.directions.items():
        other = large.directions.get(key)
        if other is None:
            continue
        olo, ohi = _range_against(first, other)
        if olo <= hi + SEQ_SLACK and lo <= ohi + SEQ_SLACK:
            return key
    return None


def _root(parent, i):
    """The root of `i` in the union-find forest `parent` (a list of indices, or a dict of its nodes: each
    node's parent, a root its own), its paths halved on the way."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def _range_against(first: int, other: list[int]) -> tuple[int, int]:
    """The lowest and highest byte of another file's view `other` of a direction ([its first sequence
    number, lowest, highest]), relative to `first`, this file's first sequence number of it."""
    shift = (other[0] - first) % _MOD
    if shift >= _HALF:
        shift -= _MOD
    return other[1] + shift, other[2] + shift


def _two_points(a: FileScan, b: FileScan) -> bool:
    """Whether two files that carry the same TCP connection saw it at two capture points (a client's host
    and a broker's, each with its own clock), rather than one after the other (a rotated capture: one
    clock). Two points ran at once, as recorded, or carry the same bytes of most directions they share
    (with clocks apart by more than the captures lasted, they need not overlap as recorded); a rotated
    capture repeats at its cut at most a retransmitted segment."""
    if a.first_ts is not None and b.first_ts is not None:
        if min(a.last_ts, b.last_ts) - max(a.first_ts, b.first_ts) > AT_ONCE:
            return True
    small, large = (a, b) if len(a.directions) <= len(b.directions) else (b, a)
    shared = twice = 0
    for key, (first, lo, hi, *_rest) in small.directions.items():
        other = large.directions.get(key)
        if other is None or hi <= lo or other[2] <= other[1]:
            continue  # not in both, or no bytes in one of them
        olo, ohi = _range_against(first, other)
        both = min(hi, ohi) - max(lo, olo)
        shared += 1
        if both > 0 and (both >= TWICE_BYTES or 2 * both >= min(hi - lo, ohi - olo)):
            twice += 1
    return 2 * twice > shared


def _translated(scans: Sequence[FileScan]) -> list[tuple[int, tuple, int, tuple]]:
    """The TCP connections that two files both carry, found by their bytes: under different 4-tuples,
    one seen behind an address translation (a Kubernetes service, a load balancer's NAT, a client's
    SNAT), or under the same 4-tuple, opened and closed inside both files (two capture points of a short
    connection, which `_continues` does not see). One file can carry both views of a connection too
    (`tcpdump -i any` on a host that translates, a Kubernetes node: each packet on its way in and again
    on its way out, `_crossing`). As (file, 4-tuple, other file or the same, its 4-tuple) of one
    direction of each such pair of views; both directions were checked.

    Address translation keeps TCP's sequence numbers, so two views of one connection hold the same bytes
    at the same sequence numbers: both directions' samples (`sample`) agree wherever both views sampled
    one, and they share at least one (in either direction). Distinct connections' random initial
    sequence numbers make such a match by chance negligible, and a single sample that differs rules it out."""
    index: dict[bytes, list[tuple[int, tuple, bool]]] = {}
    for i, sc in enumerate(scans):
        for views, done in ((sc.directions, False), (sc.closed, True)):
            for key, r in views.items():
                held = r[5]
                if held:
                    for at in range(0, len(held), SAMPLE_SIZE):
                        index.setdefault(bytes(held[at : at + SAMPLE_KEY]), []).append((i, key, done))
    pairs = set()
    for views in index.values():
        if 1 < len(views) <= MAX_VIEWS:
            for x, (i, key, done) in enumerate(views):
                for j, other, other_done in views[x + 1 :]:
                    # The same 4-tuple open at two files' edges is `_continues`'s (a rotated capture too)
                    if key != other or (i != j and done and other_done):
                        pairs.add((i, key, j, other) if (i, key) < (j, other) else (j, other, i, key))
    del index
    found = []
    for i, key, j, other in sorted(pairs):
        back, other_back = _reverse(key), _reverse(other)
        a, b = _view(scans[i], key), _view(scans[j], other)
        ra, rb = _view(scans[i], back), _view(scans[j], other_back)
        if ra is None or rb is None or _agree(a, b) is None:
            continue
        replies = _agree(ra, rb)
        if replies is None or (not replies and not _ranges_meet(ra, rb)):
            continue
        if i == j and not _crossing(a, b, ra, rb):
            continue
        if _outward(key) != key:  # one entry per connection, whichever direction found it
            key, other = back, other_back
        found.append((i, key, j, other))
    return sorted(set(found))


def read_once(
    paths: Sequence[str],
    *,
    ports: Sequence[int] = (9092,),
    auto_detect: bool = True,
    limits: CaptureLimits | None = None,
) -> tuple[tuple, tuple[str, ...]]:
    """For a set of `paths` that was not planned from their scans (one input, --merge, --separate): the
    connections it carries twice behind an address translation, in one file or across its files, as
    `CaptureSet.renamed` (each view read as the one `plan` keeps), and the reasons that say so; ((), ())
    when there are none. Its files are scanned for this: the local engine asks only when the audit's
    reassembler saw two connections begin alike (`Reassembler.alike`)."""
    scans = [scan(p) for p in paths]
    twins = _translated(scans)
    if not twins:
        return (), ()
    reasons: list[str] = []
    _join_twins(scans, twins, lambda _i, _j, why: reasons.append(why))
    # Which view names the broker addresses clients are told (the cluster's own answers).
    _identify_groups(
        [list(range(len(scans)))], scans, None, ports=ports, auto_detect=auto_detect, limits=limits
    )
    renamed = _renames(twins, {a for sc in scans for named in sc.addresses.values() for a in named})
    return tuple(sorted(renamed.items())), tuple(reasons)


def _crossing(a: list, b: list, ra: list, rb: list) -> bool:
    """Two views of a connection in one file (`a`, `b` one direction's, `ra`, `rb` the other's) as a
    host that translates sees them: each segment comes in on one side and goes out on the other, so in
    one direction every byte both sampled is seen first in one view, and in the other direction first in
    the other (one clock: `_offsets` allows an offset of zero). Two connections that only hold the
    same bytes (a stack that numbers its connections alike, as test captures do; a capture replayed
    under other addresses) come one after the other in both directions, and are two."""
    allowed = _offsets(a, b, ra, rb)
    return allowed is not None and any(lo <= 0.0 <= hi for lo, hi in allowed[0])


def _view(sc: FileScan, key: tuple) -> list | None:
    """A file's record of a direction, open at its edges or opened and closed inside it."""
    r = sc.directions.get(key)
    return r if r is not None else sc.closed.get(key)


def _join_twins(
    scans: Sequence[FileScan], twins: Sequence[tuple], join: Callable[[int, int, str], None]
) -> None:
    """The files of `twins` (`_translated`'s) joined as two capture points, with the reason (for both
    views in one file, the reason alone)."""
    told: dict[tuple[int, int], list[tuple]] = {}
    for i, key, j, other in twins:
        seen = told.setdefault((i, j), [])
        if key != other:
            seen.append((key, other))
    for (i, j), seen in sorted(told.items()):
        a, b = _name(scans[i].path), _name(scans[j].path)
        if i == j:  # both views in one file: nothing to join, what was found is said
            key, other = min(seen)
            n = len(seen)
            more = f", and {n - 1} more" if n > 1 else ""
            join(
                i,
                j,
                f"{a} carries {'a TCP connection' if n == 1 else f'{n} TCP connections'} twice, behind an "
                f"address translation ({_shown(key)} is {_shown(other)}{more}): read once",
            )
            continue
        if not seen:  # the same 4-tuples: connections opened and closed inside both files
            join(i, j, f"{b} and {a} carry the same TCP connection, seen at two capture points")
            continue
        key, other = min(seen)
        more = f", and {len(seen) - 1} more" if len(seen) > 1 else ""
        join(
            i,
            j,
            f"{b} and {a} carry the same TCP connection behind an address translation ({_shown(key)} in {a} "
            f"is {_shown(other)} in {b}{more}), seen at two capture points",
        )


def _renames(twins: Sequence[tuple], advertised: set[str]) -> dict[tuple, tuple]:
    """The 4-tuples to read as another (`twins`, `_translated`'s): in each group of views of one
    connection, every direction as the view that names a broker address the cluster's answers gave
    (`advertised`: what clients are told to connect to, so the audit maps the connection to its broker
    node) names it, else as the earliest file that carries it names it."""
    parent: dict[tuple, tuple] = {}  # a union-find forest over 4-tuples (`_root`)

    def root(key: tuple) -> tuple:
        return _root(parent, key)

    first: dict[tuple, int] = {}
    for i, key, j, other in twins:
        for a, b in ((key, other), (_reverse(key), _reverse(other))):
            first[a] = min(first.get(a, i), i)
            first[b] = min(first.get(b, j), j)
            parent.setdefault(a, a)
            parent.setdefault(b, b)
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

    def rank(key: tuple) -> tuple:
        told = _address(key[0], key[1]) in advertised or _address(key[2], key[3]) in advertised
        return (not told, first[key], key)

    named: dict[tuple, tuple] = {}
    for key in sorted(first, key=rank):
        named.setdefault(root(key), key)
    out = {}
    for key in first:
        chosen = named[root(key)]
        if chosen != key and named[root(_reverse(key))] == _reverse(chosen):
            out[key] = chosen
    return out


def _shown(key: tuple) -> str:
    return f"{_address(key[0], key[1])} > {_address(key[2], key[3])}"


def _outward(key: tuple) -> tuple:
    """Of a direction and its reverse, the one to the lower port (a server's, as a rule): how a
    connection is named in the planner's reasons."""
    back = _reverse(key)
    return key if (key[3], key) < (back[3], back) else back


def _reverse(key: tuple) -> tuple:
    return (key[2], key[3], key[0], key[1])


def _samples(r: list | None) -> dict[bytes, tuple[bytes, float]]:
    """A direction's samples: sequence number (its 4 bytes) -> (the bytes there, when they were seen)."""
    held = (r[5] if r is not None else None) or b""
    key = SAMPLE_KEY
    return {
        bytes(held[at : at + 4]): (bytes(held[at + 4 : at + key]), _TIME.unpack_from(held, at + key)[0])
        for at in range(0, len(held), SAMPLE_SIZE)
    }


def _agree(a: list, b: list) -> int | None:
    """How many sequence numbers two views of a direction both sampled, when every one of them holds
    the same bytes in both; None when one does not."""
    mine, theirs = _samples(a), _samples(b)
    both = mine.keys() & theirs.keys()
    if any(mine[p][0] != theirs[p][0] for p in both):
        return None
    return len(both)


def _lags(a: list | None, b: list | None) -> list[float]:
    """For each sequence number two views of a direction both sampled: its time in `a` minus in `b`."""
    mine, theirs = _samples(a), _samples(b)
    return [mine[p][1] - theirs[p][1] for p in mine.keys() & theirs.keys()]


def _segment_bounds(
    scans: Sequence[FileScan], views: Sequence[tuple[int, tuple, int, tuple]]
) -> dict[tuple[int, int], tuple[float, float, int]]:
    """What two capture points' own times of the same bytes allow for their clocks: (file i, file j) ->
    (low, high, samples) of `offset(j) - offset(i)`, from `views`, (i, a direction's 4-tuple there, j,
    the same direction's there) of connections both carry.

    A segment passes the point upstream of it first, so in one direction every sample is seen earlier
    at one point, and in the other direction at the other: with x = its time at i minus its time at j,
    offset(j) - offset(i) is at least every x of the direction i is upstream in and at most every x of
    the other. Which point is upstream in which direction is the one that leaves an interval (both, for
    points too close to tell: the two together). The intervals of every connection two files share are
    intersected; files whose connections disagree (a capture that lost the first copy of a segment and
    kept its retransmission) get no bounds from their segments."""
    found: dict[tuple[int, int], tuple[float, float, int]] = {}
    broken = set()
    for i, key, j, other in views:
        there, back = scans[i], scans[j]
        allowed = _offsets(
            _view(there, key), _view(back, other), _view(there, _reverse(key)), _view(back, _reverse(other))
        )
        if allowed is None:
            continue
        ways, samples = allowed
        if not ways:
            broken.add((i, j))
            continue
        lo, hi = min(w[0] for w in ways), max(w[1] for w in ways)
        low, high, n = found.get((i, j), (-INF, INF, 0))
        found[(i, j)] = (max(low, lo), min(high, hi), n + samples)
    return {pair: b for pair, b in found.items() if pair not in broken and b[0] <= b[1]}


def _offsets(a: list | None, b: list | None, ra: list | None, rb: list | None):
    """What one connection's two views (`a`, `b` of one direction, `ra`, `rb` of the other) allow for
    the offset of `b`'s clock against `a`'s, from the times both saw the same bytes at
    (`_segment_bounds`): ([(low, high)], samples), an interval for each way the views can be upstream of
    one another (none: they disagree), or None when a direction has no sample both saw."""
    ahead, behind = _lags(a, b), _lags(ra, rb)
    if not ahead or not behind:
        return None
    ways = [
        (lo - TIME_SLACK, hi + TIME_SLACK)
        for lo, hi in ((max(ahead), min(behind)), (max(behind), min(ahead)))
        if lo <= hi + 2 * TIME_SLACK
    ]
    return ways, len(ahead) + len(behind)


def _ranges_meet(a: list, b: list) -> bool:
    """Two views of a direction cover sequence numbers that meet or overlap (SEQ_SLACK apart at most)."""
    lo, hi = _range_against(a[0], b)
    return lo <= a[2] + SEQ_SLACK and a[1] <= hi + SEQ_SLACK


def _seen_edges(
    groups: Sequence[tuple[str, ...]], lags: dict[tuple[int, int], tuple[float, float, int]], paths: list[str]
) -> dict[tuple[int, int], tuple[float, float, int]]:
    """`_segment_bounds`'s bounds between files, as bounds between a set's clock `groups` (i < j):
    (low, high, samples) of offset(group j) - offset(group i), the files' bounds intersected."""
    if len(groups) < 2:
        return {}
    place = {p: k for k, g in enumerate(groups) for p in g}
    seen: dict[tuple[int, int], tuple[float, float, int]] = {}
    for (i, j), (lo, hi, n) in lags.items():
        gi, gj = place.get(paths[i]), place.get(paths[j])
        if gi is None or gj is None or gi == gj:
            continue
        if gi > gj:
            gi, gj, lo, hi = gj, gi, -hi, -lo
        low, high, m = seen.get((gi, gj), (-INF, INF, 0))
        seen[(gi, gj)] = (max(low, lo), min(high, hi), m + n)
    return {pair: b for pair, b in seen.items() if b[0] <= b[1]}


def _linked(n: int, edges: dict[tuple[int, int], tuple]) -> bool:
    """Whether `edges` between n groups link every group to every other."""
    parent = list(range(n))
    for i, j in edges:
        parent[_root(parent, i)] = _root(parent, j)
    return len({_root(parent, k) for k in range(n)}) == 1


def _near(a: FileScan, b: FileScan, slack: float = 0.0) -> bool:
    """Both captures ran at once, give or take `slack` seconds."""
    if a.first_ts is None or b.first_ts is None:
        return False
    return a.first_ts - slack <= b.last_ts and b.first_ts - slack <= a.last_ts


def _other_hosts(a: FileScan, b: FileScan, addresses: frozenset[str]) -> bool:
    """The two captures saw connections opened to different brokers of one list: taken on two brokers'
    hosts, whose clocks may disagree (CLOCK_SLACK). One broker captured twice has one clock: its captures
    must overlap as recorded, or they are two moments (a broker restarted, a test run again)."""
    if not a.servers or not b.servers or a.servers & b.servers:
        return False
    return (a.servers | b.servers) <= addresses


def _to_brokers_of(a: FileScan, b: FileScan) -> str | None:
    """The cluster of `b` to whose brokers every connection `a` saw opened went, `a` naming none."""
    if a.clusters or not a.servers:
        return None
    for cid, addresses in b.addresses.items():
        if a.servers <= addresses and _near(a, b, CLOCK_SLACK if _other_hosts(a, b, addresses) else 0.0):
            return cid
    return None


def _same_cluster(a: FileScan, b: FileScan) -> str | None:
    """A cluster id both name, with brokers that agree, while both captures ran."""
    for cid, addresses in a.addresses.items():
        if addresses and b.addresses.get(cid) == addresses and _other_hosts(a, b, addresses):
            if _near(a, b, CLOCK_SLACK):
                return cid
    if not _near(a, b):
        return None
    for cid, brokers in a.clusters.items():
        theirs = b.clusters.get(cid)
        if theirs is None:
            continue
        if not brokers or not theirs or brokers & theirs:
            return cid
    return None


def _near_pairs(keyed: Sequence[tuple[int, set]], scans: Sequence[FileScan]) -> dict[int, set[int]]:
    """file -> the later files (by index) that share one of its keys and ran within CLOCK_SLACK of it
    (`_near(a, b, CLOCK_SLACK)`), found per key in one sweep over the files sorted by their start."""
    by_key: dict[object, list[int]] = {}
    for i, keys in keyed:
        if scans[i].first_ts is not None:
            for key in keys:
                by_key.setdefault(key, []).append(i)
    out: dict[int, set[int]] = {}
    for members in by_key.values():
        members.sort(key=lambda m: scans[m].first_ts)
        running: list[tuple[float, int]] = []  # (end, file) of the files started so far and not over
        for b in members:
            start = scans[b].first_ts - CLOCK_SLACK
            while running and running[0][0] < start:
                heapq.heappop(running)
            for _end, a in running:
                low, high = (a, b) if a < b else (b, a)
                out.setdefault(low, set()).add(high)
            heapq.heappush(running, (scans[b].last_ts, b))
    return out


def _listing(named: Sequence[int], scans: Sequence[FileScan]) -> dict[str, list[int]]:
    """Broker address -> the named files (in order) whose clusters list it."""
    listing: dict[str, list[int]] = {}
    for j in named:
        for address in {a for addresses in scans[j].addresses.values() for a in addresses}:
            listing.setdefault(address, []).append(j)
    return listing


def _alone_in_time(groups: Sequence[Sequence[FileScan]]) -> list[bool]:
    """Per group of files, whether no other group's files ran within CLOCK_SLACK of its own: every join by
    cluster needs that (`_same_cluster`, `_to_brokers_of`), so such a group needs no identification.
    A group with no packet is alone; spans are compared in one sweep over their sorted starts."""
    spans = []
    for g, scans in enumerate(groups):
        times = [(sc.first_ts, sc.last_ts) for sc in scans if sc.first_ts is not None]
        if times:
            spans.append((min(t[0] for t in times), max(t[1] for t in times), g))
    alone = [True] * len(groups)
    spans.sort()
    reach, reacher = -INF, -1  # the latest end among the spans started so far, and whose it is
    for first, last, g in spans:
        if first - CLOCK_SLACK <= reach:
            alone[g] = alone[reacher] = False
        if last > reach:
            reach, reacher = last, g
    return alone


def _address(ip: bytes, port: int) -> str:
    text = ip_text(ip)
    return f"[{text}]:{port}" if ":" in text else f"{text}:{port}"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def plan(
    paths: Sequence[str],
    mode: str = AUTO,
    *,
    ports: Sequence[int] = (9092,),
    auto_detect: bool = True,
    limits: CaptureLimits | None = None,
    scans: Sequence[FileScan] | None = None,
    anchors: Callable[[list[tuple[str, ...]]], list[Anchors]] | None = None,
    identities: Callable[[list[str]], list[tuple[dict, dict]]] | None = None,
) -> list[CaptureSet]:
    """The capture sets of `paths` (files, already expanded), in the order of their first file.

    `scans` (one per path, made by `scan`), `identities` (what `identify` finds in each of several paths,
    as (clusters, addresses)) and `anchors` (the clock anchors of each group of paths, as
    `ksniff.engine.clock.anchors_of` finds them) let a caller that cannot open the files here, the Spark
    engine's driver, have that work done where the files are read; by default all three run here."""
    paths = list(paths)
    if mode not in MODES:
        raise CaptureError(f"unknown capture-set mode {mode!r}")
    if len(paths) == 1:
        return [CaptureSet(1, tuple(paths), ("one input",))]
    if mode == MERGE:
        return [CaptureSet(1, tuple(paths), ("--merge: every input in one set",))]
    if mode == SEPARATE:
        return [CaptureSet(i + 1, (p,), ("--separate: one set per input",)) for i, p in enumerate(paths)]
    scans = list(scans) if scans is not None else [scan(p) for p in paths]
    parent = list(range(len(paths)))
    reasons: dict[int, list[str]] = {}

    def root(i: int) -> int:
        return _root(parent, i)

    def join(i: int, j: int, why: str) -> None:
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
        reasons.setdefault(j, []).append(why)

    sharing: dict[tuple, list[int]] = {}
    for i, sc in enumerate(scans):
        for key in sc.directions:
            sharing.setdefault(key, []).append(i)
    candidates = sorted(
        {(a, b) for files in sharing.values() for x, a in enumerate(files) for b in files[x + 1 :]}
    )
    del sharing
    # Files share a clock when they continue one another (a rotated capture); two capture points of one
    # connection are one set, each on its own clock, put on one time line like captures of several brokers.
    same_clock = list(range(len(paths)))

    def clock_of(i: int) -> int:
        return _root(same_clock, i)

    # Connections two files both carry, known by their bytes (`_translated`): under other 4-tuples, or
    # opened and closed inside both. Such files are two capture points, never one capture cut in two.
    twins = _translated(scans)
    pointed = {(i, j) for i, _key, j, _other in twins}
    views = []  # (file, 4-tuple, file, 4-tuple) of one direction seen at two capture points
    for i, j in candidates:
        if _continues(scans[i], scans[j]) is not None:
            a, b = _name(scans[j].path), _name(scans[i].path)
            if (i, j) in pointed or _two_points(scans[i], scans[j]):
                join(i, j, f"{a} and {b} carry the same TCP connection, seen at two capture points")
                mine, theirs = scans[i].directions, scans[j].directions
                views += [(i, k, j, k) for k in mine if k in theirs and _outward(k) == k]
            else:
                join(i, j, f"{a} and {b} carry the same TCP connection")
                ci, cj = clock_of(i), clock_of(j)
                same_clock[max(ci, cj)] = min(ci, cj)
    # One connection seen under two 4-tuples (behind an address translation): two capture points, one
    # set; the audit reads both views as one connection (`CaptureSet.renamed`, after the identity), not
    # as two.
    _join_twins(scans, twins, join)
    translated = {m for i, key, j, other in twins if key != other for m in (i, j)}
    views += [t for t in twins if t[0] != t[2]]  # both views in one file: one clock
    # The clocks of two capture points, bounded by the times each saw the same bytes at.
    lags = _segment_bounds(scans, views)
    # Identity: per group of files that continue one another, the earliest files until one names a
    # cluster (the later parts of a rotated capture rarely repeat the clients' first Metadata requests).
    # Only groups that ran at the same time as another group (give or take CLOCK_SLACK) can join it by
    # cluster: the others are not identified here (their audit learns their clusters all the same).
    components: dict[int, list[int]] = {}
    for i in range(len(paths)):
        components.setdefault(root(i), []).append(i)
    clock_group = {i: clock_of(i) for i in range(len(paths))}
    alone = _alone_in_time([[scans[m] for m in members] for members in components.values()])
    # A set with connections behind an address translation is identified too: the view kept of each is
    # the one that names the broker addresses its answers give, where one does.
    in_time = [
        sorted(members, key=lambda k: (scans[k].first_ts is None, scans[k].first_ts or 0.0))
        for members, by_itself in zip(components.values(), alone, strict=True)
        if not by_itself or translated.intersection(members)
    ]
    _identify_groups(in_time, scans, identities, ports=ports, auto_detect=auto_detect, limits=limits)
    renamed = _renames(twins, {a for sc in scans for named in sc.addresses.values() for a in named})
    named = [i for i, sc in enumerate(scans) if sc.clusters]
    # Only files that name one cluster id and ran within CLOCK_SLACK of each other can join by cluster:
    # those pairs are found per id in one sweep over time, not among every pair of named files (a fleet's
    # week of hourly files from every broker names one id thousands of times).
    near = _near_pairs([(i, set(scans[i].clusters) | set(scans[i].addresses)) for i in named], scans)
    for i in named:
        for j in sorted(near.get(i, ())):
            if root(i) == root(j):
                continue
            cid = _same_cluster(scans[i], scans[j])
            if cid is not None:
                join(
                    i,
                    j,
                    f"{_name(scans[j].path)} and {_name(scans[i].path)} name cluster {cid!r} at "
                    "overlapping times",
                )
    # A file that names no cluster joins the first named file listing every broker it connected to:
    # looked for among the named files that list one of them (by address), in order.
    listing = _listing(named, scans)
    for i, sc in enumerate(scans):
        if sc.clusters or not sc.servers:
            continue  # _to_brokers_of: nothing to join
        for j in listing.get(min(sc.servers), ()):
            if root(i) == root(j):
                continue
            cid = _to_brokers_of(sc, scans[j])
            if cid is not None:
                join(
                    j,
                    i,
                    f"{_name(sc.path)} connects only to brokers that {_name(scans[j].path)} names for "
                    f"cluster {cid!r}, at overlapping times",
                )
                break
    groups: dict[int, list[int]] = {}
    for i in range(len(paths)):
        groups.setdefault(root(i), []).append(i)
    found = []
    for members in sorted(groups.values(), key=lambda m: m[0]):
        clocks: dict[int, list[str]] = {}
        for m in members:
            clocks.setdefault(clock_group[m], []).append(paths[m])
        found.append((members, [tuple(g) for g in clocks.values()]))
    # Captures of several hosts in one set are put on one time line (ksniff.engine.clock): by the times
    # two capture points saw the same bytes at, where those link every clock group of the set; else by
    # the anchors of its clock groups (the protocol's order), found for every such set in one go.
    seen_of = [_seen_edges(groups_, lags, paths) for _members, groups_ in found]
    several = [
        g
        for (_members, groups_), seen in zip(found, seen_of, strict=True)
        if len(groups_) > 1 and not _linked(len(groups_), seen)
        for g in groups_
    ]
    if anchors is None:
        found_anchors = [anchors_of(g, ports, auto_detect, limits) for g in several]
    else:
        found_anchors = anchors(several) if several else []
    by_group = dict(zip(several, found_anchors, strict=True))
    index = {p: k for k, p in enumerate(paths)}
    sets = []
    lone = {r for r, by_itself in zip(components, alone, strict=True) if by_itself}  # roots never joined
    for number, ((members, groups_), seen) in enumerate(zip(found, seen_of, strict=True), start=1):
        why = [r for m in members for r in reasons.get(m, ())]
        if not why and root(members[0]) in lone:
            why = [
                f"no other input ran at the same time (within {CLOCK_SLACK:.0f} s), nor shares a TCP "
                "connection"
            ]
        elif not why:
            named = sorted({c for m in members for c in scans[m].clusters})
            why = [
                f"no other input shares its cluster ({', '.join(map(repr, named))}) while it ran, "
                "nor a TCP connection"
                if named
                else "no cluster identity seen and no TCP connection shared with another input"
            ]
        ids = tuple(dict.fromkeys(c for m in members for c in scans[m].clusters))
        aligned = None
        if len(groups_) > 1:
            served = [frozenset().union(*(scans[index[p]].servers for p in g)) for g in groups_]
            aligned = align(groups_, [by_group.get(g) or Anchors() for g in groups_], served, seen)
        moved = sorted(
            {
                (k, renamed[k])
                for m in members
                for views in (scans[m].directions, scans[m].closed)
                for k in views
                if k in renamed
            }
        )
        sets.append(
            CaptureSet(
                number,
                tuple(paths[m] for m in members),
                tuple(why),
                ids,
                tuple(aligned or ()),
                tuple(moved),
                scanned=True,
            )
        )
    return sets
