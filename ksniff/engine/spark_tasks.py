"""What the Spark engine's tasks run: plain functions over Arrow batches, importable without pyspark.

A capture set small enough for one task (a file of a folder of captures, a short capture's rotated
files, several hosts' files on one time line) is audited by the task that reads its files, with the
local engine's own code (`extract_audited`): its result and its table rows leave the task, nothing
else. Larger sets, or one large capture on many cores, go through three stages, each the capture,
decode or audit room's own code applied to a slice of the data:

1. `extract`: one task per capture file reads its TCP segments into rows, with the keys that put the
   segments of all files back into the in-process engine's order (`pm`, `file`, `idx`, below).
2. `decode`: the rows of each flow (the unordered 4-tuple) together, where their file was read when
   the flow is in one file (ksniff.engine.spark._flows_decoded), and sorted into that order; one
   Reassembler and one Decoder per flow turn them into decode events, pickled, each with the key of its
   place in the in-process engine's audit order.
3. `fold`: events partitioned by producer key and sorted by that order key; one Auditor per key, over
   its own events and the context events every key must see (ksniff.audit.keys). Beside it
   `context_fold`: the capture gaps and the partition logs, over the context events and the exchanges
   the logs read, in folds of the set's partitions (by index modulo the set's fold count), each given
   only its pieces of each Produce and Fetch (`log_pieces`) and what every fold reads.

The in-process engine's audit order is a function of each connection's own segments and the capture's
clock (ksniff.engine.local), so each flow's task computes its events' places alone, with the capture and
decode rooms' own code:

- The order segments are processed in. `heapq.merge` of the files by timestamp puts a segment at
  position (running maximum of ts within its file, file index, index within the file): that triple
  (`pm`, `file`, `idx`) sorts every segment into exactly the merge's order, even in files whose clock
  steps back, and `pm` is the capture's clock at that segment. Connection ids are numbered in that
  order of the segment that opened each connection.
- When a decode event leaves the decoder. A connection's chunk is cut by its own events and by the
  capture's clock passing the end of the chunk cell it started in, and connections are swept idle at
  fixed times of that clock (ksniff.capture.reassembly): each flow's reassembler, fed its own segments
  with `sweeps(pm)` as the clock reaches each segment's `pm`, cuts and sweeps exactly as the in-process
  one. What a cell's end or a sweep lets go, every flow's at once, sits at `(time, -1, CELL or SWEEP)`,
  before any segment at that time; the rest at its segment's position.
- The release order. An event goes to the audit in the order of (release time, request time, place):
  its release time is request time plus the reorder window, or the clock when it left if later (the end
  of the run's events for what the reassembler's end lets go, infinity for the decoder's own end). The
  place is the position it left at, then the opening of its connection (`opm`, `oconn`) and the task's
  serial `n`, so events of different flows (decoded by different tasks) never tie.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import heapq
import itertools
import math
import operator
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field, replace
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from ksniff.audit import CONTEXT_KEY, Auditor, is_context, partlog, producer_keys, touched_keys
from ksniff.audit.fold import finding_order
from ksniff.audit.keys import LOG_APIS, is_log_event
from ksniff.audit.model import AuditOutput
from ksniff.audit.partlog import LogState, learn_names, learn_txn_ids, topic_names, txn_id_pairs
from ksniff.capture import CaptureError, Reassembler
from ksniff.capture import compiled as walks
from ksniff.capture.compiled import load
from ksniff.capture.events import CaptureStats, ConnectionOpened, StreamChunk
from ksniff.capture.files import CaptureFile
from ksniff.capture.packets import TRUNCATED
from ksniff.capture.run import renamed_batches
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.config import EngineConfig
from ksniff.decode.context import DecodeContext
from ksniff.decode.events import (
    ConnectionEnded,
    ConnectionLost,
    DecodeEvent,
    DecodeStats,
    Exchange,
    FetchedPartition,
    ProducedBatch,
    RecordBatchHeader,
)
from ksniff.decode.identity import IDENTITY_APIS, fact_of
from ksniff.engine import objectstore
from ksniff.engine import pack as packing
from ksniff.engine.local import event_ts, fewer_collections, release_time
from ksniff.engine.pack import is_packed

BATCH_ROWS = 16_384
# Durations of transactions a task's digest keeps (32 KiB); a part with more leaves them where they are.
DURATIONS_KEPT = 4096
BLOCK_BYTES = 16 << 20  # of a `records` block of rows (their keys and values) made where a set is audited


def dumps(obj) -> bytes:
    """A blob of what is not a decode event (a file's summary, a task's counters, an audit's output)."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def loads(blob: bytes, conns: dict[int, int] | None = None):
    """The value of a blob `dumps` or `pack` made; with `conns` (stage 2's connection numbers -> the
    in-process engine's), a packed event's connection numbers (its own, its batches', its fetched
    partitions') are the in-process engine's, renamed as the event is read (a TxnIds or TopicNames has
    none)."""
    return _codec().unpack(blob, conns) if is_packed(blob) else pickle.loads(blob)


def pack(event) -> bytes:
    """A blob of a decode event (or what stands for one: TxnIds, TopicNames, an identity fact), or of a
    block of segments (SEGMENTS): ksniff.engine.pack's encoding, in C when built (ksniff.engine._pack),
    a fifth of pickle's time and two thirds of its bytes on the corpus's events."""
    return _codec().pack(event)


@functools.cache
def _codec():
    """The codec of events, the same classes in the same order in every process (ksniff.engine.pack)."""
    classes = (
        Exchange,
        ProducedBatch,
        RecordBatchHeader,
        FetchedPartition,
        ConnectionLost,
        ConnectionEnded,
        TxnIds,
        TopicNames,
    )
    compiled = load("ksniff.engine._pack")
    return (compiled or packing).Codec(classes, renamed="conn")


FULL_WALK_EVERY = 8  # tasks of a worker, the last of which leaves nothing frozen (`_rarely_collected`)
_tasks_run = 0  # by this process


def _keeps_frozen() -> bool:
    """Whether the task starting now leaves what it froze frozen. A module function, so the count is the
    worker's: a task's closure comes with a copy of the globals it names (cloudpickle)."""
    global _tasks_run
    _tasks_run += 1
    return _tasks_run % FULL_WALK_EVERY != 0


def _rarely_collected(run):
    """A task's `run` over Arrow batches with the cyclic garbage collector run rarely while it works, as
    the local engine's pipeline runs (ksniff.engine.local.fewer_collections): a task that decodes or
    unpickles events makes millions of small objects that hold no cycles, and with Python's default
    threshold the collector walks those it keeps (a fold's context events, a flow's open requests) over
    and over: unpickling the 52,805 keyed events of 13,200 small transactions took 1.05 s instead of
    0.32 s.

    pyspark's daemon collects a Python worker whole after every task it runs. What the worker held
    before the task, and what each capture set's audit found there, stays frozen out of that walk
    (`keep_frozen`), but for every FULL_WALK_EVERY-th task of the worker, when it all goes back: a cycle
    that became garbage while frozen is collected then, so the worker's memory does not grow run after
    run (it did by 20-35 MiB a run of the engine benchmark's 164 files, frozen after every task)."""

    @functools.wraps(run)
    def rarely(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with fewer_collections(keep_frozen=_keeps_frozen()):
            yield from run(batches)

    return rarely


INF = math.inf

# The position of what the end of the capture lets go (other than chunks): after every segment's.
AT_END = (INF, 0, 0)

# Row kinds leaving stage 2.
KEYED, CONTEXT, TABLE, CONN, FLOW_STATS, LINK, IDENTITY = 0, 1, 2, 3, 4, 6, 7
LOG = 8  # exchanges the partition logs read (ksniff.audit.keys.is_log_event): for the CONTEXT_KEY group
FILE_META = 5  # a file's FileMeta, from a file decoded where it was read (`extract_decoded`)
# A KEYED row whose exchange the partition logs read too (its first key's): the CONTEXT_KEY group takes it,
# so a keyed exchange the logs read is stored and shuffled once, not once more as a LOG row.
KEYED_LOG = 9
# From a capture set audited where its files were read (`extract_audited`): the set's AuditResult
# without its findings and transactions, its Identity and the Digest of those two (AUDITED: what the
# driver always reads), the two lists themselves (AUDITED_LISTS: read by the driver only for a whole
# summary, else turned into table rows where they are) and its table rows as Arrow IPC (`key`: the
# table), already in their final form.
AUDITED, TABLE_ROWS, AUDITED_LISTS = 10, 11, 12
# A producer key of a connection's keyed events, one row per key (`key`; `oconn`: the connection): the
# key groups that are given the connection's context events (its losses and its end), found by Spark.
CONN_KEYS = 13
# The server sides of a task's Kafka connections of a set (IDENTITY rows: what its naming answers taught).
BROKERS = 14
# The `key` of a CONTEXT row, for Spark to route it to the key groups that need it without reading it: a
# connection's own event (its `oconn`'s groups'), an ApiVersions answer with the cluster's
# transaction.version it tells (CONTEXT_TXN_VERSION + the level, or + "" when it tells none),
# transaction markers with the producer ids they name (CONTEXT_MARKERS + the ids, comma-separated: the
# groups of their "pid:N" keys'), or None (every group's).
CONTEXT_CONN, CONTEXT_TXN_VERSION, CONTEXT_MARKERS = "conn", "txnv:", "markers:"

_SQL_TYPES = {
    pa.binary(): "binary",
    pa.string(): "string",
    pa.float64(): "double",
    pa.int8(): "tinyint",
    pa.int32(): "int",
    pa.int64(): "long",
    pa.bool_(): "boolean",
}


def ddl(schema: pa.Schema) -> str:
    """The Spark DDL string of an Arrow schema of flat columns (what mapInArrow is told it returns)."""
    return ", ".join(f"`{f.name}` {_SQL_TYPES[f.type]}" for f in schema)


# Stage 1's rows: a file's segments in blocks, each of one flow (every connection on one 4-tuple), and
# the file's summary (`meta`, in a row of its own). A block is the packed tuple of its segments (`pack`),
# each (pm, file, idx, ts, src, sport, dst, dport, seq, ack, flags, payload): `pm` the running maximum of
# the file's timestamps up to it, `idx` its place among the file's segments, `payload` its bytes or, for
# a segment the capture cut short (TRUNCATED), the length it had. The row's `pm`, `file` and `idx` are the
# block's first segment's: the merge's order of the blocks, in which stage 2 takes them.
SEGMENTS = pa.schema(
    [
        ("cset", pa.int32()),  # the capture set the file is audited in (its index in the run's plan)
        ("flow", pa.binary()),
        ("pm", pa.float64()),
        ("file", pa.int32()),
        ("idx", pa.int64()),
        ("block", pa.binary()),
        ("meta", pa.binary()),
    ]
)
# A flow's block is closed at this many segments or payload bytes, and every block once the file's open
# ones hold BLOCKS_HELD bytes: a task holds a few MB of a file however long its connections are.
BLOCK_SEGMENTS = 1024
LIST_SEGMENTS = 1024  # a flow's segments handed to its reassembler at a time (Reassembler.clocked_events)
BLOCK_PAYLOAD = 512 << 10
BLOCKS_HELD = 32 << 20
SEGMENTS_DDL = ddl(SEGMENTS)

# Stage 2's rows. `rel`, `ets` and (`phase`, `ppm`, `pfile`, `pidx`, `n`) make the audit order key.
EVENTS = pa.schema(
    [
        ("cset", pa.int32()),
        ("kind", pa.int8()),
        ("key", pa.string()),
        ("rel", pa.float64()),
        ("ets", pa.float64()),
        ("phase", pa.int8()),
        ("ppm", pa.float64()),
        ("pfile", pa.int32()),
        ("pidx", pa.int64()),
        ("opm", pa.float64()),
        ("oconn", pa.int64()),
        ("n", pa.int64()),
        # Of the rows the partition logs read: the fold of the logs that reads it (`log_pieces`), or
        # EVERY_FOLD; of the others, 0.
        ("lfold", pa.int32()),
        ("blob", pa.binary()),
    ]
)
EVENTS_DDL = ddl(EVENTS)
EVERY_FOLD = -1
ORDER_COLUMNS = ("rel", "ets", "phase", "ppm", "pfile", "pidx", "opm", "oconn", "n")

# Stage 3: each group's output, per capture set: whole (`blob`), and without its findings and
# transactions but with their Digest (`digest`), all a bounded driver reads.
OUTPUTS = pa.schema(
    [("cset", pa.int32()), ("key", pa.string()), ("blob", pa.binary()), ("digest", pa.binary())]
)
OUTPUTS_DDL = ddl(OUTPUTS)


@frozen_dataclass
class Digests:
    """How a task digests an audit's findings and transactions for a driver that holds no list of them
    (ksniff.audit.digest): findings judged against the set's clocks (when it joins several hosts), the
    report's filters applied (`keep`: ksniff.report.filters.ResultFilter, or None), the slowest
    transactions the terminal shows kept whole; their durations only up to `durations` (DURATIONS_KEPT:
    past it the driver asks the transactions table for their spread)."""

    clocks: dict = field(default_factory=dict)  # capture set index -> its clocks
    keep: object = None
    slowest: int | None = None
    durations: int | None = None

    def of(self, cset: int, output) -> tuple:
        """(`output` without findings and transactions, the Digest of them): `output` an AuditOutput or
        an AuditResult of capture set `cset`."""
        return self.of_judged(self.judged(cset, output))

    def judged(self, cset: int, output):
        """`output` with its findings judged against the set's clocks, if it has any."""
        return judged(output, self.clocks[cset]) if self.clocks.get(cset) else output

    def of_judged(self, output) -> tuple:
        """`of`, for an output whose findings are judged already."""
        from ksniff.audit.digest import Digest

        findings, transactions = output.findings, output.transactions
        keep = self.keep
        if keep is not None and keep.active:
            findings = [f for f in findings if keep.finding(f)]
            transactions = [t for t in transactions if keep.transaction(t)]
        digest = Digest.of(findings, transactions, self.slowest, self.durations)
        return replace(
            output, findings=type(output.findings)(), transactions=type(output.transactions)()
        ), digest


@frozen_dataclass
class RunEnd:
    """What the driver learns of the whole run after stage 1, for stages 2 and 3."""

    end_ts: float | None = None  # the capture's last segment time: where the reassembler closes everything
    last_event: float | None = None  # the latest capture event time: where the local engine ends the audit
    folds: int = 1  # the set's partition logs are folded in this many parts (`log_pieces`)


@slotted_dataclass
class FileMeta:
    """One file's walk, as stage 1 reports it: the capture run's per-file summary."""

    file: int
    path: str
    format: str
    linktypes: list[str]
    size: int
    packets: int
    non_tcp: int
    fragments: int
    cut_short: int
    first_ts: float | None
    last_ts: float | None
    max_ts: float | None
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # the one-line error the local engine would stop with
    skipped: bool = False  # found in a folder and not a capture: left out, as the local walk does
    # (size, modification time in ns) when its segment rows refer to their payloads in the file instead
    # of carrying them (`extract_referring`): stage 2 reads them there, from a file that must not change.
    stamp: tuple[int, int] | None = None
    damaged_times: int = 0  # packets given their predecessor's time (ksniff.capture.walk.out_of_line)
    damaged_headers: int = 0  # packets left out: their IPv4 header fails its checksum


@slotted_dataclass
class FlowStats:
    """What one stage-2 task's reassemblers and decoders counted (`decoding`: the context whose counters
    are `decode`, which the task's decoders of the set share, with its caches)."""

    capture: CaptureStats
    decode: DecodeStats
    decoding: DecodeContext | None = None
    kafka_connections: int = 0
    evicted: int = 0
    forced_gaps: int = 0
    last_event_ts: float = -INF  # the latest capture event time fed to a decoder
    serial: int = 0  # decode events seen


# -- before stage 1: what the capture-set planner needs, learnt where the files are read -------------------


PLAN_INPUTS_DDL = "file int, path string, uri string, folder boolean, grp int, content binary"
PLANNED = pa.schema([("file", pa.int32()), ("grp", pa.int32()), ("blob", pa.binary())])
PLANNED_DDL = ddl(PLANNED)
SCANNED, SKIPPED, FAILED = "scan", "skipped", "error"


def study():
    """mapInArrow over rows of PLAN_INPUTS_DDL: per input, what ksniff.engine.sets.plan needs of every
    file (`sets.scan`: its TCP directions and time span), pickled as (SCANNED, FileScan); or (SKIPPED,
    None) for a file found in a folder that is not a capture; or (FAILED, the local engine's one-line
    error). The cluster a file names is asked of the few files that need it afterwards (`identities`)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from ksniff.capture.folders import looks_like_capture
        from ksniff.engine import sets

        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in ("file", "path", "uri", "folder")]
            contents = batch.column("content")
            for i, (file, path, uri, folder) in enumerate(zip(*columns, strict=True)):
                out: tuple
                try:
                    with opened(uri, contents[i].as_buffer) as where:
                        if folder and not looks_like_capture(where):
                            out = (SKIPPED, None)
                        else:
                            try:
                                scan = sets.scan(where)
                                scan.path = path
                                out = (SCANNED, scan)
                            except CaptureError as exc:
                                out = (FAILED, str(exc).replace(where, path, 1))
                except CaptureError as exc:  # an object that could not be read
                    out = (FAILED, str(exc).replace(uri, path, 1))
                yield pa.RecordBatch.from_pydict(
                    {"file": [file], "grp": [0], "blob": [dumps(out)]}, schema=PLANNED
                )

    return _rarely_collected(run)


def identities(ports: tuple[int, ...], auto_detect: bool, limits):
    """mapInArrow over rows of PLAN_INPUTS_DDL: per input, the cluster its head names
    (`sets.identify`), pickled as (SCANNED, (clusters, addresses)), or (FAILED, the one-line error)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from ksniff.engine import sets

        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in ("file", "path", "uri")]
            contents = batch.column("content")
            for i, (file, path, uri) in enumerate(zip(*columns, strict=True)):
                out: tuple
                try:
                    with opened(uri, contents[i].as_buffer) as where:
                        try:
                            scan = sets.FileScan(where)
                            sets.identify(scan, ports, auto_detect, limits)
                            out = (SCANNED, (scan.clusters, scan.addresses))
                        except CaptureError as exc:
                            out = (FAILED, str(exc).replace(where, path, 1))
                except CaptureError as exc:
                    out = (FAILED, str(exc).replace(uri, path, 1))
                yield pa.RecordBatch.from_pydict(
                    {"file": [file], "grp": [0], "blob": [dumps(out)]}, schema=PLANNED
                )

    return _rarely_collected(run)


def anchors(ports: tuple[int, ...], auto_detect: bool, limits):
    """mapInArrow over rows of PLAN_INPUTS_DDL, each group's in one partition (in any order): the clock
    anchors (ksniff.engine.clock.anchors_of) of each group of files that share one clock, read together
    in the order of their numbers. A remote file's bytes go to a temporary file as its row comes, until
    its group is done."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from ksniff.engine.clock import anchors_of

        def rows() -> Iterator[tuple]:
            for batch in batches:
                columns = [batch.column(name).to_pylist() for name in ("grp", "file", "uri")]
                contents = batch.column("content")
                for i, (grp, file, uri) in enumerate(zip(*columns, strict=True)):
                    yield grp, file, uri, contents[i].as_buffer

        for grp, files in _by_group(rows()):
            # A file that could not be read here failed the study, which stops the run first.
            readable = [where for (where,) in files if not isinstance(where, CaptureError)]
            found = anchors_of(readable, ports, auto_detect, limits)
            yield pa.RecordBatch.from_pydict(
                {"file": [0], "grp": [grp], "blob": [dumps(found)]}, schema=PLANNED
            )

    return _rarely_collected(run)


# -- stage 1: files into segment rows ---------------------------------------------------------------------


LISTING_DDL = "file int, path string, uri string, folder boolean, content binary"


def local_path(uri: str) -> str | None:
    """The path an executor opens for a `file:` URI (or a plain path); None for other file systems."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return unquote(parts.path) if parts.scheme else uri
    return None


def extract(batches: Iterator[pa.RecordBatch], refer: bool = False) -> Iterator[pa.RecordBatch]:
    """mapInArrow over rows of LISTING_DDL (and optional `offset` and `cset` columns, the file's clock
    offset and capture set): every TCP segment of each file, then its FileMeta.

    A `file:` URI is opened where the task runs; any other file system's bytes come in `content` (Spark's
    binaryFile source read them) and go through a temporary file. An input that cannot be read is a
    FileMeta with the one-line error the local engine gives (or `skipped`, for a file found in a folder
    that is not a capture), never a task failure for Spark to retry.

    With `refer` (`extract_referring`), the segments of a file opened where it lies (a path or a `file:`
    URI, not gzip) say where their payload is in the file instead of carrying its bytes, for stage 2 to
    read it there (`Payloads`): a bulk capture's bytes then pass through no Arrow batch, cached block or
    shuffle of Spark's, which cost about 10 s of CPU per GB (bench/README.md, "Payloads read where they
    lie, and compiled executors"). A file not opened where it lies (Spark's binaryFile source, a copy of
    an S3 object) or gzip carries its bytes, as without the compiled walk, which alone can say where a
    payload lies."""
    for file, path, uri, folder, content, offset, cset, _place, renames in _listed(batches):
        yield from _extract_input(file, path, uri, folder, content, offset, cset, refer, renames)


extract_referring = functools.partial(extract, refer=True)


def _by_group(rows: Iterable[tuple]) -> Iterator[tuple[int, list[tuple]]]:
    """Rows (group, place, uri, content, *rest) of files coming in any order, gathered by group: each
    file opened for the task as its row comes (`opened`: a remote file's bytes to a temporary file, so
    the task holds one such file's bytes at a time), then each group in turn once every row is in, as
    (group, [(where, *rest), ...] in the order of their places; `where` the CaptureError of a file that
    could not be read); a group's temporary files go when the caller asks for the next group."""
    held: dict[int, tuple[contextlib.ExitStack, list[tuple]]] = {}
    try:
        for group, place, uri, content, *rest in rows:
            stack, files = held.setdefault(group, (contextlib.ExitStack(), []))
            try:
                where: str | CaptureError = stack.enter_context(opened(uri, content))
            except CaptureError as exc:  # an object that could not be read: its error in its place
                where = exc
            files.append((place, where, *rest))
        for group in sorted(held):
            stack, files = held[group]
            with stack:
                yield group, [f[1:] for f in sorted(files, key=lambda f: f[0])]
    finally:
        for stack, _files in held.values():
            stack.close()


def _listed(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple]:
    """(file, path, uri, folder, content, offset, cset, place, renames) of each listing row; `content()`
    gives the bytes Spark read for a file system other than `file:` (the Arrow buffer itself, not a copy);
    no `offset` or `cset` column: 0; no `place` (the file's place in its set): the rows' own order;
    `renames`: its capture set's 4-tuples read as others (dict), or None."""
    n = 0
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in ("file", "path", "uri", "folder")]
        names = batch.schema.names
        rows = batch.num_rows
        offsets = batch.column("offset").to_pylist() if "offset" in names else [0.0] * rows
        sets = batch.column("cset").to_pylist() if "cset" in names else [0] * rows
        places = batch.column("place").to_pylist() if "place" in names else list(range(n, n + rows))
        renames = batch.column("renames").to_pylist() if "renames" in names else [None] * rows
        n += rows
        contents = batch.column("content")
        for i, (file, path, uri, folder) in enumerate(zip(*columns, strict=True)):
            moved = dict(pickle.loads(renames[i])) if renames[i] else None
            yield file, path, uri, folder, contents[i].as_buffer, offsets[i] or 0.0, sets[i], places[i], moved


# The largest capture decoded where it is read the exact way of --records (`extract_decoded`), which holds
# the file's segments in memory.
DIRECT_MAX_BYTES = 256 << 20


def extract_decoded(config: EngineConfig):
    """mapInArrow over rows like `extract`'s, each file the only one of its capture set: every flow of the
    file lives in it, so its segments are put into stage 2's order and decoded by this task (`decode`,
    with the file's own end), and stage 2's rows leave it, with the file's FileMeta as a FILE_META row:
    nothing of the file is shuffled before the audit."""

    def one(segments: list[pa.RecordBatch], meta_row: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        cset = meta_row.column("cset")[0].as_py()
        blob = meta_row.column("meta")[0].as_py()
        meta = loads(blob)
        rows = _Rows()
        rows.cset = cset
        rows.add(FILE_META, None, NO_ORDER, blob)
        yield rows.take()
        if meta.error or meta.skipped or not segments:
            return  # the driver stops the run with the error, or leaves the file out
        table = pa.Table.from_batches(segments, schema=SEGMENTS)
        end = RunEnd(meta.max_ts)
        order = pa.compute.sort_indices(table, sort_keys=[(c, "ascending") for c in ("flow", "pm", "idx")])
        yield from decode(config, {cset: end})(iter(table.take(order).to_batches(BATCH_ROWS)))

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        segments: list[pa.RecordBatch] = []
        for batch in extract(batches):
            if batch.column("meta").null_count:  # segments of the file being read
                segments.append(batch)
            else:  # its summary, the last batch of each file
                yield from one(segments, batch)
                segments = []

    return _rarely_collected(run)


def extract_audited(
    config: EngineConfig, clocks: dict[int, tuple] | None = None, digests: Digests | None = None
):
    """mapInArrow over rows like `extract`'s (with `offset` and `cset`), each capture set's files together
    and in order: each set is audited by this task with the local engine's own code
    (ksniff.engine.local.audit_capture), so nothing of it is shuffled or pickled event by event. Rows
    out: each file's FileMeta (FILE_META), the set's result without its findings and transactions, its
    identity, the digest of those two (`digests`) and, with --records, the peak of the decompression
    budget the audit reached (AUDITED), the two lists (AUDITED_LISTS), and, when the run keeps tables,
    its `exchanges`, `batches` and `records` rows (TABLE_ROWS, Arrow IPC with the row-order columns: the
    set, then the order the local engine made them in) and its `transactions`, `findings` and
    `producers` rows (TABLE_ROWS, without their capture set's number and cluster, which `labelled_rows`
    adds; findings judged against the set's `clocks`, by set, as locally). With --records, each set
    draws on a budget of its own, from zero: the driver checks, set after set, that the run's one budget
    would have treated every batch alike (`Inflation.peak`), and audits the run another way if not. A
    file that cannot be read is its FileMeta with the local engine's error, and its
    set is not audited (the driver stops the run with the error); a file of a folder that is not a
    capture is left out of its set."""
    digests = digests or Digests(clocks or {})

    def one(cset: int, files: list[tuple]) -> Iterator[pa.RecordBatch]:
        from ksniff.engine.local import audit_capture

        rows = _Rows()
        rows.cset = cset
        kept = []  # (file, path, where, offset) of the captures
        failed = False
        renames = next((moved for *_row, moved in files if moved), None)  # the set's, on each of its rows
        for file, path, folder, where, offset, _moved in files:
            try:
                if isinstance(where, CaptureError):  # an object that could not be read (`_by_group`)
                    raise where
                CaptureFile(where).close()
            except CaptureError as exc:
                if exc is where:  # not read: an error whether it was named or found in a folder
                    meta = _failed(file, path, str(exc), False)
                else:
                    meta = _failed(file, path, str(exc).replace(where, path, 1), folder)
                rows.add(FILE_META, None, NO_ORDER, dumps(meta))
                failed = failed or not meta.skipped
                continue
            kept.append((file, path, where, offset))
        if failed or not kept:
            yield rows.take()
            return
        records = config.keep_records
        tables = _TableRows(cset, records) if config.keep_tables or records else None
        offsets = {where: offset for _file, _path, where, offset in kept}
        offset_of = offsets.get if any(offsets.values()) else None
        peak: list[int] | None = [] if records else None
        try:
            result, identity = audit_capture(
                [k[2] for k in kept], config, offset_of, tables=tables, peak=peak, renames=renames
            )
        except CaptureError as exc:  # met in the middle of a file: the first file it names
            text = str(exc)
            file, path, where, _offset = next((k for k in kept if k[2] in text), kept[0])
            rows.add(FILE_META, None, NO_ORDER, dumps(_failed(file, path, text.replace(where, path), False)))
            yield rows.take()
            return
        named = {where: path for _file, path, where, _offset in kept if where != path}
        if named:  # temporary copies, or file: URIs' own paths: named as the user named them
            result.inputs = [replace(i, path=named.get(i.path, i.path)) for i in result.inputs]
            for where, path in named.items():
                result.warnings = [w.replace(where, path) for w in result.warnings]
        for (file, path, _where, _offset), info in zip(kept, result.inputs, strict=True):
            linktypes = info.linktype.split(",")
            meta = FileMeta(
                file, path, info.format, linktypes, info.bytes, info.packets, 0, 0, 0, None, None, None
            )
            rows.add(FILE_META, None, NO_ORDER, dumps(meta))
        own = digests.judged(cset, result)  # judged once, for the digest and the tables
        bare, digest = digests.of_judged(own)
        rows.add(AUDITED, None, NO_ORDER, dumps((bare, identity, digest, peak[0] if peak else None)))
        rows.add(AUDITED_LISTS, None, NO_ORDER, dumps((result.findings, result.transactions)))
        if tables is not None:
            for table, blob in tables.blobs():
                if table == "records" or config.keep_tables:
                    rows.add(TABLE_ROWS, table, NO_ORDER, blob)
                    if rows.full():
                        yield rows.take()
        if config.keep_tables:
            for table in OUTPUT_TABLES:
                rows.add(TABLE_ROWS, table, NO_ORDER, _ipc(output_batch(table, [own])))
        yield rows.take()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # A file read by Spark's binaryFile source goes to a temporary file as its row comes, before the
        # next row is read: the task holds one such file's bytes at a time (each larger than the run's
        # Arrow batch bound comes in a batch of its own: ksniff.engine.spark.BATCH_BYTES). The
        # rows of a set come in any order: once all are in, each set is audited, its files in their
        # places, and its temporary files go.
        listed = (
            (cset, place, uri, content, file, path, folder, offset, moved)
            for file, path, uri, folder, content, offset, cset, place, moved in _listed(batches)
        )
        for cset, files in _by_group(listed):
            yield from one(
                cset,
                [
                    (file, path, folder, where, offset, moved)
                    for where, file, path, folder, offset, moved in files
                ],
            )

    return _rarely_collected(run)


class _TableRows:
    """The local engine's table rows (a RowSink) as Arrow IPC, each row with its row-order columns: the
    capture set, then the order the engine made the table's rows in. Blocks of at most BATCH_ROWS rows
    and, for `records` (a set's records may decompress to a GiB), about BLOCK_BYTES of keys and values;
    the blocks wait in a temporary file, not in memory, until the audit ends."""

    def __init__(self, cset: int, records: bool = False) -> None:
        self.cset = cset
        tables = ("exchanges", "batches", "records") if records else ("exchanges", "batches")
        self.rows: dict[str, list[dict]] = {t: [] for t in tables}
        self.made = dict.fromkeys(tables, 0)
        self.held = 0  # bytes of keys and values in `rows["records"]`
        self.done: list[tuple[str, int, int]] = []  # (table, where, length) in `spill`
        self.spill = None

    def add(self, table: str, rows: Iterable[dict]) -> None:
        mine = self.rows[table]
        if table == "records":
            rows = list(rows)
            self.held += sum(len(r["key"] or "") + len(r["value"] or "") for r in rows)
        mine.extend(rows)
        if len(mine) >= BATCH_ROWS or (table == "records" and self.held >= BLOCK_BYTES):
            self._take(table)

    def _take(self, table: str) -> None:
        import tempfile

        rows = self.rows[table]
        if not rows:
            return
        first = self.made[table]
        self.made[table] += len(rows)
        zeros = [0] * len(rows)
        extra = {name: zeros for name in ROW_ORDER}
        extra["oset"] = [self.cset] * len(rows)
        extra["n"] = list(range(first, first + len(rows)))
        blob = _ipc(_arrow_rows(rows, table, _stored_schema(table), extra))
        if self.spill is None:
            self.spill = tempfile.TemporaryFile(prefix="ksniff-rows-")
        where = self.spill.seek(0, os.SEEK_END)
        self.spill.write(blob)
        self.done.append((table, where, len(blob)))
        self.rows[table] = []
        if table == "records":
            self.held = 0

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        """The blocks, each once, in the order they were made; the temporary file goes with the last."""
        for table in self.rows:
            self._take(table)
        try:
            for table, where, length in self.done:
                self.spill.seek(where)
                yield table, self.spill.read(length)
        finally:
            if self.spill is not None:
                self.spill.close()
                self.spill = None


def _ipc(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _stored_schema(table: str) -> pa.Schema:
    """A table's schema with its row-order columns, without `_cluster` (known once the set's identity is)."""
    schema = _table_schema(table, order=True)
    return schema.remove(schema.get_field_index("_cluster"))


def stored_rows(table: str, clusters: dict[int, str | None]):
    """mapInArrow over TABLE_ROWS rows of `table` (`extract_audited`): the rows themselves, each with
    `_cluster`, the cluster of its capture set (`clusters`, by set)."""
    schema = _table_schema(table, order=True)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for cset, blob in zip(
                batch.column("cset").to_pylist(), batch.column("blob").to_pylist(), strict=True
            ):
                for stored in pa.ipc.open_stream(blob):
                    cluster = pa.array([clusters.get(cset)] * stored.num_rows, pa.string())
                    yield pa.RecordBatch.from_arrays([*stored.columns, cluster], schema=schema)

    return run


OUTPUT_TABLES = ("transactions", "findings", "producers")  # made from audit outputs, not exchanges


def labelled_rows(table: str, labels: dict[int, tuple]):
    """mapInArrow over TABLE_ROWS rows of one of OUTPUT_TABLES (`extract_audited`): the rows, each with
    its capture set's number and cluster from `labels` (set -> (number, cluster))."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for cset, blob in zip(
                batch.column("cset").to_pylist(), batch.column("blob").to_pylist(), strict=True
            ):
                number, cluster = labels[cset]
                for stored in pa.ipc.open_stream(blob):
                    n, schema = stored.num_rows, stored.schema
                    label = {
                        "capture_set": pa.array([number] * n, schema.field("capture_set").type),
                        "cluster": pa.array([cluster] * n, schema.field("cluster").type),
                    }
                    named = zip(schema.names, stored.columns, strict=True)
                    columns = [label.get(name, column) for name, column in named]
                    yield pa.RecordBatch.from_arrays(columns, schema=schema)

    return run


def scratch_folder() -> str | None:
    """Where a task writes the captures it copies: the first of Spark's local folders for this executor
    (`spark.local.dir`, SPARK_LOCAL_DIRS, which Spark hands its Python workers; the disks set aside for
    Spark's own spills, which Spark empties when the application ends), else the system's temporary
    folder (None)."""
    for folder in os.environ.get("SPARK_LOCAL_DIRS", "").split(","):
        if folder and os.path.isdir(folder):
            return folder
    return None


@contextlib.contextmanager
def opened(uri: str, content) -> Iterator[str]:
    """A path this task can open for an input: a `file:` URI's own path, or a temporary file in the
    executor's scratch folder (`scratch_folder`, removed after) holding an S3 object the task copied
    (ksniff.engine.objectstore) or the bytes Spark's binaryFile source read from any other file system
    (`content()`). An object that cannot be read is a CaptureError with its one-line reason."""
    where = local_path(uri)
    if where is not None:
        yield where
        return

    def from_spark(out: BinaryIO) -> None:
        out.write(content() or b"")

    def from_s3(out: BinaryIO) -> None:
        try:
            objectstore.copy(uri, out)
        except objectstore.StoreError as exc:
            raise CaptureError(str(exc)) from None

    # No bytes from Spark for an S3 object: the task reads it itself.
    with _spooled(from_s3 if content() is None and objectstore.is_s3(uri) else from_spark) as where:
        yield where


@contextlib.contextmanager
def _spooled(fill: Callable[[BinaryIO], None]) -> Iterator[str]:
    """A temporary file in the scratch folder (`scratch_folder`) that `fill` writes, removed after."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="ksniff-", suffix=".cap", dir=scratch_folder())
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _extract_input(
    file: int,
    path: str,
    uri: str,
    folder: bool,
    content,
    offset: float = 0.0,
    cset: int = 0,
    refer: bool = False,
    renames: dict[tuple, tuple] | None = None,
) -> Iterator[pa.RecordBatch]:
    try:
        yield from _extract_opened(file, path, uri, folder, content, offset, cset, refer, renames)
    except CaptureError as exc:  # an object that could not be read
        yield _meta_batch(_failed(file, path, str(exc).replace(uri, path, 1), False), cset)


def _extract_opened(
    file: int,
    path: str,
    uri: str,
    folder: bool,
    content,
    offset: float,
    cset: int,
    refer: bool = False,
    renames: dict[tuple, tuple] | None = None,
) -> Iterator[pa.RecordBatch]:
    with opened(uri, content) as where:
        refer = refer and where == local_path(uri)  # where it lies, not a copy
        try:
            capture = CaptureFile(where)
        except CaptureError as exc:
            yield _meta_batch(_failed(file, path, str(exc).replace(where, path, 1), folder), cset)
            return
        try:
            yield from _extract_file(file, path, capture, offset, cset, refer, renames)
        except CaptureError as exc:
            yield _meta_batch(_failed(file, path, str(exc).replace(where, path, 1), False), cset)
        finally:
            capture.close()


def _failed(file: int, path: str, error: str, skipped: bool) -> FileMeta:
    return FileMeta(
        file, path, "", [], 0, 0, 0, 0, 0, None, None, None, [], None if skipped else error, skipped
    )


def _meta_batch(meta: FileMeta, cset: int) -> pa.RecordBatch:
    row: dict[str, list] = {name: [None] for name in SEGMENTS.names}
    row["cset"] = [cset]
    row["meta"] = [dumps(meta)]
    return pa.RecordBatch.from_pydict(row, schema=SEGMENTS)


# The smallest payload a segment row refers to instead of carrying (`extract_referring`): reading a
# small one back costs stage 2 more than carrying it costs (13,200 small transactions cut into 12 files:
# stage 2 0.78 s carrying every payload, 0.87 s referring to every one, in one process).
REFERRED_MIN = 512


def _extract_file(
    file: int,
    path: str,
    capture: CaptureFile,
    offset: float = 0.0,
    cset: int = 0,
    refer: bool = False,
    renames: dict[tuple, tuple] | None = None,
) -> Iterator[pa.RecordBatch]:
    """`offset`: seconds added to every timestamp (the capture set's clock alignment, ksniff.engine.clock);
    `renames`: 4-tuples whose segments are read as another's (one connection seen behind an address
    translation, CaptureSet.renamed).

    Segment rows of one flow travel as blocks (SEGMENTS): a row per segment cost the JVM more than all of
    stage 2's decoding (kept, sorted and shuffled, each row taken apart into Arrow columns and back).
    With `refer`, a payload the walk gives as a view of the mapped file travels as (where it begins in the
    file, its length) when the compiled walk can say where (`extract_referring`)."""
    out = _Blocks(file, cset)
    open_blocks = out.open
    where_in = walks.fastwalk.payload_offsets if refer and walks.fastwalk is not None else None
    into_blocks = _into_blocks()
    state = [-INF, 0, 0, False]  # the latest time, segments so far, bytes held in open blocks, referred
    batches = capture.segments(batched=True)
    for batch in batches if not renames else renamed_batches(batches, renames):
        at = None
        if where_in is not None:
            base = capture.mapped()
            if base is not None:
                at = where_in(batch, base)
        i, n = 0, len(batch)
        while i < n:
            state[2] = out.held
            i, flow = into_blocks(
                batch,
                at,
                i,
                offset,
                file,
                open_blocks,
                state,
                REFERRED_MIN,
                BLOCK_PAYLOAD,
                BLOCK_SEGMENTS,
                BLOCKS_HELD,
            )
            out.held = state[2]
            if flow is None:
                break
            block = open_blocks[flow]
            if block[0] >= BLOCK_PAYLOAD or len(block[1]) >= BLOCK_SEGMENTS:
                out.close(flow)
            if out.held >= BLOCKS_HELD:
                out.close_all()
            if out.ready():
                yield out.take()
    out.close_all()
    if out.rows:
        yield out.take()
    pm, idx, _held, referred = state
    c = capture.counts
    yield _meta_batch(
        FileMeta(
            file,
            path,
            capture.format,
            list(capture.linktypes),
            capture.size,
            c.packets,
            c.non_tcp,
            c.fragments,
            c.cut_short,
            None if c.first_ts is None else c.first_ts + offset,  # on the capture set's time line
            None if c.last_ts is None else c.last_ts + offset,
            pm if idx else None,
            list(capture.warnings),
            stamp=capture.stamp if referred else None,
            damaged_times=c.damaged_times,
            damaged_headers=c.damaged_headers,
        ),
        cset,
    )


def into_blocks(
    segs: list[tuple],
    at: list[int] | None,
    i: int,
    offset: float,
    file: int,
    blocks: dict[bytes, list],
    state: list,
    referred_min: int,
    block_payload: int,
    block_segments: int,
    held_max: int,
) -> tuple[int, bytes | None]:
    """Segments `segs[i:]` of the walk into their flows' open blocks ([payload bytes, rows]), until one
    fills (`block_payload` bytes or `block_segments` rows) or the open blocks hold `held_max` bytes: then
    (the next segment's index, that segment's flow), else (len(segs), None). `at`: where each payload
    lies in the file (`payload_offsets`), None when nowhere; `state`: [the latest time, segments so far,
    bytes held, whether a payload was referred to], updated. A row is (the latest time, file, index, the
    time plus `offset`, src, sport, dst, dport, seq, ack, flags, the payload's bytes, or (where, length)
    for one of at least `referred_min` bytes lying in the file, or a truncated segment's length).

    The reference of ksniff.engine._pack.into_blocks, which does the same in C."""
    pm, idx, held, referred = state
    n = len(segs)
    try:
        while i < n:
            ts, src, sport, dst, dport, seq, ack, flags, payload = segs[i]
            where = at[i] if at is not None else -1
            i += 1
            if offset:
                ts += offset
            if ts > pm:
                pm = ts
            a, b = src + sport.to_bytes(2, "big"), dst + dport.to_bytes(2, "big")
            flow = a + b if a <= b else b + a
            if flags & TRUNCATED:
                size = 0
            elif where >= 0 and len(payload) >= referred_min:  # where it lies (`Payloads` reads it there)
                payload = (where, len(payload))
                size = 0
                referred = True
            else:
                payload = bytes(payload)
                size = len(payload)
            block = blocks.get(flow)
            if block is None:
                block = blocks[flow] = [0, []]
            block[1].append((pm, file, idx, ts, src, sport, dst, dport, seq, ack, flags, payload))
            block[0] += size
            held += size + 100
            idx += 1
            if block[0] >= block_payload or len(block[1]) >= block_segments or held >= held_max:
                return i, flow
        return n, None
    finally:
        state[0], state[1], state[2], state[3] = pm, idx, held, referred


@functools.cache
def _into_blocks():
    """`into_blocks` in C when built (ksniff.engine._pack), else the reference."""
    compiled = load("ksniff.engine._pack")
    return getattr(compiled, "into_blocks", None) or into_blocks


class _Blocks:
    """A file's segment blocks (SEGMENTS): those still open, per flow ([payload bytes, segments]), and
    the rows of the closed ones, made into Arrow batches."""

    def __init__(self, file: int, cset: int) -> None:
        self.file, self.cset = file, cset
        self.open: dict[bytes, list] = {}
        self.held = 0  # bytes of the open blocks, about
        self.rows: list[tuple] = []
        self.packed = 0  # bytes of the closed blocks' rows

    def close(self, flow: bytes) -> None:
        size, segments = self.open.pop(flow)
        self.held -= size + 100 * len(segments)
        first = segments[0]
        blob = pack(tuple(segments))
        self.rows.append((flow, first[0], first[2], blob))
        self.packed += len(blob)

    def close_all(self) -> None:
        for flow in list(self.open):
            self.close(flow)
        self.held = 0

    def ready(self) -> bool:
        return self.packed >= BLOCK_BYTES or len(self.rows) >= BATCH_ROWS

    def take(self) -> pa.RecordBatch:
        flows, pms, idxs, blobs = ([*c] for c in zip(*self.rows, strict=True))  # lists: see _Rows.take
        n = len(flows)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.cset] * n, pa.int32()),
                pa.array(flows, pa.binary()),
                pa.array(pms, pa.float64()),
                pa.array([self.file] * n, pa.int32()),
                pa.array(idxs, pa.int64()),
                pa.array(blobs, pa.binary()),
                pa.nulls(n, pa.binary()),
            ],
            schema=SEGMENTS,
        )
        self.rows = []
        self.packed = 0
        return batch


# -- stage 2: one reassembler and decoder per flow --------------------------------------------------------


class _Rows:
    """Stage 2's output rows, buffered into Arrow batches; each of capture set `cset`. A row is kept as
    one tuple, made into columns when the batch is taken (one transposition, not an append per column)."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.cset = 0
        self.held = 0  # bytes of the blobs buffered

    def add(self, kind: int, key: str | None, order: tuple, blob: bytes, lfold: int = 0) -> None:
        self.rows.append((self.cset, kind, key, *order, lfold, blob))
        self.held += len(blob)

    def full(self) -> bool:
        return len(self.rows) >= BATCH_ROWS or self.held >= BLOCK_BYTES

    def take(self) -> pa.RecordBatch:
        # Lists: pyarrow makes an array of a tuple ten times slower than of a list.
        columns = [list(c) for c in zip(*self.rows, strict=True)] if self.rows else [[]] * len(_ROW_NAMES)
        batch = pa.RecordBatch.from_pydict(dict(zip(_ROW_NAMES, columns, strict=True)), schema=EVENTS)
        self.rows = []
        self.held = 0
        return batch


_ROW_NAMES = ("cset", "kind", "key", *ORDER_COLUMNS, "lfold", "blob")  # a _Rows row's values, in order


NO_ORDER = (0.0, 0.0, 0, 0.0, 0, 0, 0.0, 0, 0)


class _Seen:
    """What a stage-2 task's flows of one capture set tell the driver once per set, not per flow or per
    answer: the keys touched together (LINK rows, ksniff.audit.keys.fold_groups), the brokers (BROKERS)
    and what the naming answers taught (IDENTITY: each distinct `identity.fact_of` at the first and the
    last place the task saw it, all that `Identity.learn` depends on: a cluster is listed from its
    first answer, and for each broker, node and coordinator the last answer wins)."""

    def __init__(self) -> None:
        self.links: set[frozenset[str]] = set()  # keys touched together (ksniff.audit.keys)
        self.brokers: set[str] = set()  # server sides of the Kafka exchanges (ksniff.decode.identity)
        self.facts: dict[tuple, list[tuple]] = {}  # fact -> [its first order, its last]

    def learnt(self, fact: tuple, order: tuple) -> None:
        """`fact` taught at `order` (a task's flows come one after another, not in order)."""
        seen = self.facts.get(fact)
        if seen is None:
            self.facts[fact] = [order, order]
        elif order < seen[0]:
            seen[0] = order
        elif order > seen[1]:
            seen[1] = order

    def add_rows(self, rows: _Rows) -> None:
        """Its rows, once the task's flows of the set are decoded."""
        for keys in self.links:
            rows.add(LINK, None, NO_ORDER, "\n".join(sorted(keys)).encode())
        if self.brokers:
            rows.add(BROKERS, None, NO_ORDER, dumps(tuple(sorted(self.brokers))))
        for fact, (first, last) in self.facts.items():
            blob = pack(fact)
            rows.add(IDENTITY, None, first, blob)
            if last != first:
                rows.add(IDENTITY, None, last, blob)


class _Flow:
    """Reassembles and decodes one flow (every connection on one 4-tuple) in the merge's order."""

    def __init__(self, config: EngineConfig, end: RunEnd, stats: FlowStats, rows: _Rows, seen: _Seen) -> None:
        self.config, self.end, self.stats, self.rows = config, end, stats, rows
        self.folds = end.folds  # the set's partition logs' folds (`log_pieces`)
        self.tables = config.keep_tables or config.keep_records
        # The task's counters of the set: the reassembler only adds to them, so every flow's counts in one.
        self.reassembler = Reassembler(config.limits, stats.capture, conn_id=self._conn_id)
        # The set's decoders in this task share their counters and caches (not their topic names).
        self.decoder = config.decoder(self.reassembler.drop, self.reassembler.drop, shared=stats.decoding)
        self.position: tuple[float, int, int] = (0.0, 0, 0)
        # The positions of this flow's segments from the first one a chunk still being merged may have
        # started at: the n-th segment the reassembler took (its count, StreamChunk.at) is at
        # `positions[n - first]`, so each chunk's own place is found, and the place of what let it go.
        self.positions: list[tuple[float, int, int]] = []
        self.first = 1
        self.opened_at: dict[int, tuple[float, int, int]] = {}
        self.seen, self.links, self.brokers = seen, seen.links, seen.brokers
        self.conn_keys: dict[int, set[str]] = {}  # each connection's keyed events' keys

    def _conn_id(self, _sip: bytes, _sp: int, _dip: bytes, _dp: int, _ts: float) -> int:
        # Unique across the run (the opening segment's file and index); renumbered on the driver in the
        # merge's order of openings, which is how the in-process reassembler numbers connections.
        position = self.positions[self.reassembler.place[1] - self.first]  # the segment being taken
        pm, file, place = position
        conn = (file << 40) | (place >> 1)  # a connection opens at a segment of its own (place 2 idx + 1)
        self.opened_at[conn] = position
        self.rows.add(CONN, None, (0.0, 0.0, 0, pm, file, place, pm, conn, 0), dumps(conn))
        return conn

    def run(self, runs: Iterator[tuple]) -> None:
        """`runs`: the flow's segments in the merge's order, as `merged_runs` gives them."""
        reassembler = self.reassembler
        positions = self.positions
        # Sweeps come from the run's clock (each segment's `pm`), not this flow's own timestamps.
        for taken, clocks in self._lists(runs):
            for event in reassembler.clocked_events(taken, clocks):
                place = reassembler.place
                if len(place) == 3:  # let go by a segment
                    self._feed(event, 0, positions[place[1] - self.first])
                else:  # by a sweep or a cell's end, before the segment `place[1]`
                    self._feed(event, 0, (place[3], -1, place[4]))
        if self.end.end_ts is not None:
            self._sweep_until(self.end.end_ts)
        reassembler.finish(self.end.end_ts)
        while reassembler.out:
            self._feed(reassembler.out.popleft(), 1, AT_END)
        for event in self.decoder.finish():
            self._decoded(event, 2, INF, self._opening(event.conn))
        s = self.stats
        s.kafka_connections += self.decoder.kafka_connections
        s.evicted += reassembler.evicted
        s.forced_gaps += reassembler.forced_gaps
        for conn, keys in self.conn_keys.items():
            on_conn = (0.0, 0.0, 0, 0.0, 0, 0, 0.0, conn, 0)
            for key in sorted(keys):
                self.rows.add(CONN_KEYS, key, on_conn, b"")

    def _lists(self, runs: Iterator[tuple]) -> Iterator[tuple[list[tuple], list[float]]]:
        """The reassembler's segment tuples and the run's clock at each (`pm`), a list of LIST_SEGMENTS at
        a time (the last one shorter), each segment's position noted in `positions`; `runs`: (a block's
        segments (SEGMENTS), from, to) in the merge's order (`merged_runs`). Once the reassembler has
        taken a list, the positions before the oldest chunk still being merged are let go."""
        positions = self.positions
        into_lists = _into_lists()
        taken: list[tuple] = []
        clocks: list[float] = []
        for segments, lo, hi in runs:
            while lo < hi:
                upto = min(hi, lo + LIST_SEGMENTS - len(taken))
                into_lists(segments, lo, upto, taken, clocks, positions)
                lo = upto
                if len(taken) == LIST_SEGMENTS:
                    yield taken, clocks
                    self._let_go()
                    taken, clocks = [], []
        if taken:
            yield taken, clocks
            self._let_go()

    def _let_go(self) -> None:
        positions = self.positions
        oldest = self.reassembler.oldest_pending_at()
        drop = (self.first + len(positions) if oldest is None else oldest) - self.first
        if drop > 0:
            del positions[:drop]
            self.first += drop

    def _sweep_until(self, pm: float) -> None:
        """What the capture's clock reaching `pm` let go in the in-process reassembler (its idle sweeps,
        and the end of this flow's chunk cell): at their times, before any segment whose running maximum
        reached them, every flow's at once (a cell's chunks before a sweep's closes)."""
        reassembler = self.reassembler
        if not reassembler.due(pm):  # most segments: no generator made
            return
        for now, kind in reassembler.sweeps(pm):
            self.position = (now, -1, kind)
            while reassembler.out:
                self._feed(reassembler.out.popleft(), 0, self.position)

    def _opening(self, conn: int) -> tuple[float, int, int]:
        return self.opened_at.get(conn, (0.0, 0, 0))

    def _feed(self, event, phase: int, position: tuple[float, int, int]) -> None:
        """A capture event handed out at `position` (its time the clock then; AT_END: the end)."""
        decoded = self.decoder.feed(event)
        if not isinstance(event, ConnectionOpened):
            # The in-process engine's clock: the latest capture event time it was fed.
            ts = getattr(event, "ts", None) or getattr(event, "last_ts", None)
            if ts is not None and ts > self.stats.last_event_ts:
                self.stats.last_event_ts = ts
        if not decoded:
            return
        clock = self.end.end_ts if phase == 1 else position[0]
        if isinstance(event, StreamChunk):  # where its first segment came, even when the end let it go
            phase = 0
            position = self.positions[event.at - self.first]
        for d in decoded:
            self._decoded(d, phase, -INF if clock is None else clock, position)

    def _decoded(self, event: DecodeEvent, phase: int, clock: float, position: tuple) -> None:
        """`event`, given by the decoder when the clock was `clock`, from a capture event of `position`."""
        pm, file, idx = position
        ets = event_ts(event)
        # The decoder's own finish is always at the end (ksniff.engine.local).
        rel = INF if phase == 2 else release_time(ets, clock, self.config.reorder_window)
        opm, _file, _place = self._opening(event.conn)
        at = (rel, ets, phase, pm, file, idx, opm, event.conn)  # its order but the serial
        stats = self.stats
        tables = self.tables
        if event.__class__ is Exchange and event.api_name == "Fetch":
            # Read only by the partition logs (a Fetch is no key's, no context, no identity): they travel
            # without their bodies (`for_logs`), the bulk of a consumer's traffic; whole only for the tables.
            stats.serial += 1  # the order events left the decoder in, within one position
            order = (*at, stats.serial)
            self.brokers.add(event.broker)
            if tables:
                self.rows.add(TABLE, None, order, pack(event))
            for k, piece in log_pieces(for_logs(event), self.folds):
                self.rows.add(LOG, None, order, pack(piece), k)
            return
        log = is_log_event(event)
        if log and self.folds > 1 and event.api_name == "Produce" and event.request is not None:
            # What the partition logs' folds that do not keep this Produce's partitions learn from it, just
            # before it (`TxnIds`: the serial before its own).
            pairs = txn_id_pairs(event)
            if pairs:
                stats.serial += 1
                self.rows.add(LOG, None, (*at, stats.serial), pack(TxnIds(pairs)), EVERY_FOLD)
        stats.serial += 1
        order = (*at, stats.serial)
        # Packed when a row takes it whole: not for an exchange no fold, log or table reads (a heartbeat),
        # nor for an ApiVersions answer, which the folds take without its list of API versions.
        blob = b""
        if isinstance(event, Exchange):
            self.brokers.add(event.broker)
            if event.api_name in IDENTITY_APIS and event.response is not None:
                fact = fact_of(event)
                if fact is not None:
                    self.seen.learnt(fact, order)
            if tables:
                blob = blob or pack(event)
                self.rows.add(TABLE, None, order, blob)
            if log and event.api_name == "Metadata":
                # The logs read of a Metadata answer only the topics' names by id (`TopicNames`); the rest
                # of it, all topics, partitions and brokers, is for the tables and the cluster identity.
                names = topic_names(event) if event.request is not None else ()
                if names:
                    self.rows.add(LOG, None, order, pack(TopicNames(names)), EVERY_FOLD)
                return
        context = is_context(event)
        keys = () if context else producer_keys(event)
        # The logs' pieces of it. When the one piece is the event itself, a keyed event's row of its first
        # key carries it to the logs too (KEYED_LOG): stored and shuffled once.
        pieces = log_pieces(event, self.folds) if log else ()
        whole = len(pieces) == 1 and pieces[0][1] is event
        if context:  # read by the first fold, the CONTEXT_KEY group's; the losses and markers by every one
            every = event.__class__ is ConnectionLost or log
            told = None
            given = None
            if event.__class__ is ConnectionLost or event.__class__ is ConnectionEnded:
                told = CONTEXT_CONN
            elif event.api_name == "ApiVersions":
                given = pack(for_context(event))
                told = CONTEXT_TXN_VERSION + txn_version_told(event)
            elif event.api_name == "WriteTxnMarkers" and event.request is not None:
                pids = sorted({m.producer_id for m in event.request.markers})
                told = CONTEXT_MARKERS + ",".join(map(str, pids))
            given = given or blob or pack(event)
            self.rows.add(CONTEXT, told, order, given, EVERY_FOLD if every else 0)
        elif keys:
            blob = blob or pack(event)
            for i, key in enumerate(keys):
                if whole and not i:
                    self.rows.add(KEYED_LOG, key, order, blob, pieces[0][0])
                else:
                    self.rows.add(KEYED, key, order, blob)
            self.links.add(touched_keys(event))
            conn_keys = self.conn_keys.get(event.conn)
            if conn_keys is None:
                conn_keys = self.conn_keys[event.conn] = set()
            conn_keys.update(keys)
        if context or (keys and whole):
            return
        for k, piece in pieces:
            if piece is event:
                blob = blob or pack(event)
                self.rows.add(LOG, None, order, blob, k)
            else:
                self.rows.add(LOG, None, order, pack(piece), k)


@frozen_dataclass
class TxnIds:
    """A transactional Produce's (producer id, transactional id) pairs (ksniff.audit.partlog.txn_id_pairs),
    for the partition logs' folds that do not keep its partitions (partlog.learn_txn_ids)."""

    pairs: tuple[tuple[int, str], ...]


@frozen_dataclass
class TopicNames:
    """What the partition logs read of a Metadata answer (ksniff.audit.partlog.topic_names)."""

    pairs: tuple[tuple[str, str], ...]


def log_pieces(ex: Exchange, folds: int) -> list[tuple[int, Exchange]]:
    """An exchange the partition logs read, as the logs' `folds` folds are given it: (fold, piece) pairs,
    fold k keeping the partitions whose index is k modulo `folds` (ksniff.audit.partlog.LogState.split).
    A Produce or Fetch goes to the folds of its batches' or partitions' and each is given only those
    (each partition's log reads only its own); a Produce with a batch of no producer id goes whole to
    fold 0 too, the CONTEXT_KEY group's, whose idempotence watch reads it (ksniff.audit.idempotence). What
    every fold reads, or is small, goes to every fold (EVERY_FOLD): a transaction's end, a producer's
    timeout, topic names, offsets committed, listed and fetched (a fold acts only on its own partitions).
    An exchange the logs pass over (no request), or of no partition, goes to fold 0."""
    api = ex.api_name
    if api not in ("Produce", "Fetch"):
        return [(EVERY_FOLD, ex)]
    if folds == 1 or ex.request is None:
        return [(0, ex)]
    by_fold: dict[int, list] = {}
    if api == "Fetch":
        for part in ex.fetched:
            by_fold.setdefault(part.partition % folds, []).append(part)
        if len(by_fold) <= 1:
            return [(next(iter(by_fold), 0), ex)]
        return [(k, _remade(ex, fetched=tuple(parts))) for k, parts in sorted(by_fold.items())]
    plain = False
    for b in ex.batches:
        by_fold.setdefault(b.partition % folds, []).append(b)
        plain = plain or (b.header.producer_id < 0 and not b.header.control)
    if not by_fold or (len(by_fold) == 1 and (not plain or 0 in by_fold)):
        return [(next(iter(by_fold), 0), ex)]
    pieces = [(0, ex)] if plain else []
    return pieces + [
        (k, _remade(ex, batches=tuple(batches)))
        for k, batches in sorted(by_fold.items())
        if not (plain and k == 0)
    ]


# What stands for a Fetch's request and answer in `for_logs`: not None, as the bodies it replaces.
_READ = ()


def for_logs(event: Exchange) -> Exchange:
    """A Fetch exchange as the partition logs read it (ksniff.audit.partlog): its answer's partitions
    (`fetched`) and the exchange's own fields, its bodies replaced by an empty tuple (a body that was
    None stays None: the logs skip an exchange without a request, and the findings say whether it was
    answered). About a third of its pickled size, and of the objects an unpickling makes."""
    return _remade(
        event,
        request=None if event.request is None else _READ,
        response=None if event.response is None else _READ,
    )


_EXCHANGE_FIELDS = packing.fields_of(Exchange)
_EXCHANGE_PLACE = {name: n for n, name in enumerate(Exchange.__match_args__)}


def _remade(ex: Exchange, **changes) -> Exchange:
    """`dataclasses.replace` of an exchange, in a fifth of its time: once per Fetch a consumer made."""
    values = list(_EXCHANGE_FIELDS(ex))
    for name, value in changes.items():
        values[_EXCHANGE_PLACE[name]] = value
    return Exchange(*values)


def txn_version_told(event: Exchange) -> str:
    """The cluster's transaction.version an ApiVersions answer sets in the fold (ksniff.audit.fold), as
    text; "" when it sets none."""
    told = ""
    if event.response is not None:
        for feature in getattr(event.response, "finalized_features", ()):
            if feature.name == "transaction.version":
                told = str(feature.max_version_level)
    return told


def for_context(event: Exchange) -> Exchange:
    """An ApiVersions exchange as the folds read it (ksniff.audit.fold: the cluster's finalized
    features, the exchange's own fields): without its answer's list of API version ranges, which every
    connection's first exchange carries and no fold reads. Every key group's fold is given every context
    event, through the driver: per connection about 880 bytes pickled with the list, 300 without."""
    resp = event.response
    if resp is None or not resp.api_keys:
        return event
    return _remade(event, response=resp._replace(api_keys=()))


def decode(config: EngineConfig, ends: dict[int, RunEnd], files: dict[int, tuple] | None = None):
    """mapInArrow over segment blocks (not the files' summaries) sorted by (cset, flow, pm, file, idx):
    decode events, and the counters of each capture set the task met (`ends`: each set's RunEnd).
    `files`: (path to open, path as named, stamp) of each file whose segments refer to their payloads
    (`extract_referring`), read there (`Payloads`). A file found changed since stage 1 read it is a
    FILE_META row with its error, which stops the run."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = _Rows()
        stats: dict[int, FlowStats] = {}
        seen: dict[int, _Seen] = {}
        with Payloads(files or {}) as payloads:
            for (cset, _flow), blocks in itertools.groupby(_block_rows(batches), key=lambda row: row[:2]):
                rows.cset = cset
                if cset not in stats:
                    decoding = config.decoder().ctx
                    stats[cset] = FlowStats(CaptureStats(), decoding.stats, decoding)
                    seen[cset] = _Seen()
                try:
                    _Flow(config, ends[cset], stats[cset], rows, seen[cset]).run(
                        merged_runs(blocks, payloads)
                    )
                except FileChanged as exc:
                    rows.add(FILE_META, None, NO_ORDER, dumps(_failed(exc.file, exc.path, str(exc), False)))
                    yield rows.take()
                    return
                if rows.full():
                    yield rows.take()
        for cset, counted in stats.items():
            rows.cset = cset
            rows.add(FLOW_STATS, None, NO_ORDER, dumps(replace(counted, decoding=None)))
            seen[cset].add_rows(rows)
        yield rows.take()

    return _rarely_collected(run)


class FileChanged(Exception):
    """A capture file stage 2 reads payloads from is not the file stage 1 walked."""

    def __init__(self, file: int, path: str) -> None:
        super().__init__(
            f"{path}: changed while it was audited (its size or modification time is not what it was when "
            "it was first read): audit it again once nothing writes to it"
        )
        self.file, self.path = file, path


FILES_OPEN = 64  # capture files a stage-2 task keeps open to read payloads from (`Payloads`)

# A block's referred payloads are read with one read of the bytes from the first to the end of the last
# when that span is at most this, or at most four times their own bytes; else each payload alone.
SPAN_BYTES = 4 << 20


class Payloads:
    """Stage 2's reader of the payloads segment rows refer to (`extract_referring`): each file opened
    once per task, checked against the size and modification time stage 1 saw, and a block's payloads
    read with one `pread` of their span where they lie close together (one flow of a bulk capture), as
    views of it; a payload's bytes are the file's, so stage 2 decodes what it would have been given."""

    def __init__(self, files: dict[int, tuple]) -> None:
        self.files = files  # file -> (path to open, path as named, stamp)
        self.fds: dict[int, int] = {}

    def __enter__(self) -> Payloads:
        return self

    def __exit__(self, *exc) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def _fd(self, file: int) -> int:
        fd = self.fds.get(file)
        if fd is None:
            where, path, stamp = self.files[file]
            if len(self.fds) >= FILES_OPEN:  # a flow over a year of hourly files: the oldest closed
                os.close(self.fds.pop(next(iter(self.fds))))
            try:
                fd = os.open(where, os.O_RDONLY)
            except OSError:
                raise FileChanged(file, path) from None
            st = os.fstat(fd)
            if (st.st_size, st.st_mtime_ns) != tuple(stamp):
                os.close(fd)
                raise FileChanged(file, path)
            self.fds[file] = fd
        return fd

    def __call__(self, segments: tuple) -> tuple | list:
        """A block's segments (SEGMENTS, one file's), each payload that refers to the file read."""
        found = _referred()(segments)
        if found is None:
            return segments
        low, high, own = found
        file = segments[0][1]
        fd = self._fd(file)
        if low <= high and high - low <= max(SPAN_BYTES, 4 * own):
            span = os.pread(fd, high - low, low)
            if len(span) != high - low:
                raise FileChanged(file, self.files[file][1])
            return _with_views()(segments, memoryview(span), low)
        out = []
        for s in segments:
            if s[11].__class__ is tuple:
                at, n = s[11]
                data = os.pread(fd, n, at)
                if len(data) != n:
                    raise FileChanged(file, self.files[file][1])
                s = (*s[:11], data)
            out.append(s)
        return out


def referred(segments: Sequence[tuple]) -> tuple[int, int, int] | None:
    """Of a block's payloads that refer to the file ((where, length), in the file's order), where the
    first begins, where the last ends and their bytes; None when none does. The reference of
    ksniff.engine._pack.referred."""
    refs = [s[11] for s in segments if s[11].__class__ is tuple]
    if not refs:
        return None
    return refs[0][0], refs[-1][0] + refs[-1][1], sum(n for _at, n in refs)


@functools.cache
def _referred():
    """`referred` in C when built (ksniff.engine._pack), else the reference."""
    compiled = load("ksniff.engine._pack")
    return getattr(compiled, "referred", None) or referred


def with_views(segments: Sequence[tuple], view: memoryview, low: int) -> list[tuple]:
    """A block's segments (SEGMENTS) with each payload that refers to the file ((where, length)) as that
    part of `view`, the file's bytes from `low` on. The reference of ksniff.engine._pack.with_views."""
    return [
        (*s[:11], view[s[11][0] - low : s[11][0] - low + s[11][1]]) if s[11].__class__ is tuple else s
        for s in segments
    ]


@functools.cache
def _with_views():
    """`with_views` in C when built (ksniff.engine._pack), else the reference."""
    compiled = load("ksniff.engine._pack")
    return getattr(compiled, "with_views", None) or with_views


def _block_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple]:
    names = ("cset", "flow", "pm", "file", "idx", "block")
    for batch in batches:
        yield from zip(*(batch.column(name).to_pylist() for name in names), strict=True)


def merged(blocks: Iterable[tuple], payloads: Callable | None = None) -> Iterator[tuple]:
    """The segments of one flow's blocks, one at a time (`merged_runs`)."""
    for segments, lo, hi in merged_runs(blocks, payloads):
        yield from itertools.islice(segments, lo, hi)


def merged_runs(blocks: Iterable[tuple], payloads: Callable | None = None) -> Iterator[tuple]:
    """The segments of one flow's blocks, rows (cset, flow, pm, file, idx, block) in the order of their
    first segments' (pm, file, idx), in the merge's order of (pm, file, idx), as runs (a block's
    segments, from, to) of a block's segments that come one after the other. The blocks of one file
    follow each other (a run per block); those of several files (a connection over rotated files, or
    seen by two captured hosts) interleave. Each block is read when it comes, once every segment before
    its first is out, so a task holds the blocks that overlap, not the flow. `payloads` (a `Payloads`)
    reads what a block's segments refer to."""
    unpack = _codec().unpack
    heap: list[list] = []  # each block begun: [its next segment's (pm, file, idx), at, its segments]
    for _cset, _flow, pm, file, idx, blob in blocks:
        if heap:
            yield from _until(heap, (pm, file, idx))
        segments = unpack(blob)
        if payloads is not None:
            segments = payloads(segments)
        heapq.heappush(heap, [segments[0][:3], 0, segments])
    yield from _until(heap, None)


_position = operator.itemgetter(0, 1, 2)  # a segment's (pm, file, idx)


def _until(heap: list[list], bound: tuple | None) -> Iterator[tuple]:
    """The runs of the blocks in `heap` before `bound` (all, for None), in (pm, file, idx) order."""
    while heap:
        top = heap[0]
        key, at, segments = top
        if bound is not None and key >= bound:
            return
        if len(heap) == 1:  # one block: its segments before the bound, in their order (they are sorted)
            n = len(segments)
            stop = n if bound is None else bisect.bisect_left(segments, bound, at, n, key=_position)
            if stop > at:
                yield segments, at, stop
            if stop < n:
                top[0], top[1] = segments[stop][:3], stop
                return
            heap.pop()
            return
        yield segments, at, at + 1
        at += 1
        if at < len(segments):
            heapq.heapreplace(heap, [segments[at][:3], at, segments])
        else:
            heapq.heappop(heap)


def into_lists(
    segments: Sequence[tuple], lo: int, hi: int, taken: list, clocks: list, positions: list
) -> None:
    """Segments `segments[lo:hi]` (SEGMENTS) onto stage 2's lists: the reassembler's tuple of each, the
    run's clock at it (`pm`), and its position (pm, file, 2 idx + 1). The reference of
    ksniff.engine._pack.into_lists, which does the same in C."""
    part = segments[lo:hi]
    taken += [s[3:] for s in part]
    clocks += [s[0] for s in part]
    positions += [(s[0], s[1], 2 * s[2] + 1) for s in part]


@functools.cache
def _into_lists():
    """`into_lists` in C when built (ksniff.engine._pack), else the reference."""
    compiled = load("ksniff.engine._pack")
    return getattr(compiled, "into_lists", None) or into_lists


# -- stage 3: the audit fold per producer key ------------------------------------------------------------


def fold(
    config: EngineConfig,
    ends: dict[int, RunEnd],
    context: dict[int, list[tuple[tuple, bytes]]],
    conns: dict[int, int],
    groups: dict[tuple[int, str], frozenset[str]],
    digests: Digests | None = None,
):
    """mapInArrow over KEYED, KEYED_LOG and CONTEXT rows sorted by (cset, group, order): one fold per
    group of keys of a capture set over its events and the context events Spark routed to it (the losses
    and ends of the connections its events are on, the transaction markers of its producer ids:
    engine.spark._routed_context), with the set's context events every group is given (`context`),
    merged in audit order; each group's AuditOutput pickled, whole and digested (`digests`)."""
    digests = digests or Digests()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        unpickled: dict[int, list] = {}
        out: dict[str, list] = {name: [] for name in OUTPUTS.names}
        for (cset, group), events in _keyed(batches):
            if cset not in unpickled:
                unpickled[cset] = [(order, loads(blob, conns)) for order, blob in context.get(cset, ())]
            auditor = Auditor(config.audit_config(), key=group, keys=groups[cset, group])
            merged = heapq.merge(_once(events, conns), iter(unpickled[cset]), key=lambda x: x[0])
            for _order, event in merged:
                auditor.feed(event)
            _output_row(out, cset, group, auditor.finish(ends[cset].last_event), digests)
        yield pa.RecordBatch.from_pydict(out, schema=OUTPUTS)

    return _rarely_collected(run)


def _output_row(out: dict[str, list], cset: int, key: str, output, digests: Digests) -> None:
    out["cset"].append(cset)
    out["key"].append(key)
    out["blob"].append(dumps(output))
    out["digest"].append(dumps(digests.of(cset, output)))


def _once(
    events: Iterator[tuple[tuple, bytes]], conns: dict[int, int]
) -> Iterator[tuple[tuple, DecodeEvent]]:
    """A group's events, each once: an event of several keys of the group came once per key."""
    previous = None
    for order, blob in events:
        if order != previous:
            previous = order
            yield order, loads(blob, conns)


def _keyed(
    batches: Iterator[pa.RecordBatch], by: tuple[str, ...] = ("cset", "group")
) -> Iterator[tuple[tuple, Iterator[tuple[tuple, bytes]]]]:
    """Rows sorted by (*by, order) as one iterator per value of `by`, streamed."""

    def rows() -> Iterator[tuple[tuple, tuple, bytes]]:
        for batch in batches:
            values = zip(*(batch.column(name).to_pylist() for name in by), strict=True)
            for value, (order, blob) in zip(values, _ordered(batch), strict=True):
                yield value, order, blob

    for value, rows_of_group in itertools.groupby(rows(), key=lambda row: row[0]):
        yield value, ((order, blob) for _value, order, blob in rows_of_group)


def _ordered(batch: pa.RecordBatch) -> Iterator[tuple[tuple, bytes]]:
    """A batch of event rows as (audit order, pickled event) pairs."""
    orders = zip(*(batch.column(name).to_pylist() for name in ORDER_COLUMNS), strict=True)
    return zip(orders, batch.column("blob").to_pylist(), strict=True)


def context_output(
    config: EngineConfig, end: RunEnd, events: Iterable[DecodeEvent], split: tuple[int, int] = (1, 0)
):
    """The CONTEXT_KEY group's output: the capture gaps, which belong to no producer, and the partition
    logs, over the context events and the exchanges the logs read, in audit order.

    `split` (n, k): the logs of the partitions numbered k modulo n only. Fold 0 is the CONTEXT_KEY group
    with those logs; the others fold only the logs of theirs (`logs_output`), over the same events."""
    if split[1]:
        return logs_output(config, events, split)
    auditor = Auditor(config.audit_config(), key=CONTEXT_KEY)
    logs = auditor.state.logs
    if split[0] > 1:
        logs.split = split
    for event in events:
        if event.__class__ is TxnIds:
            learn_txn_ids(logs, event.pairs)
        elif event.__class__ is TopicNames:
            learn_names(logs, event.pairs)
        else:
            auditor.feed(event)
    return auditor.finish(end.last_event)


def logs_output(config: EngineConfig, events: Iterable[DecodeEvent], split: tuple[int, int]) -> AuditOutput:
    """The partition logs of the partitions numbered k modulo n (`split`), folded as the audit folds them
    (ksniff.audit.fold: every exchange the logs read, before anything else of the fold looks at it, with
    the times the capture lost bytes of each connection), over a set's CONTEXT and LOG events: their
    findings and the partitions' summaries."""
    logs = LogState(split=split)
    out = fold_logs(logs, events)
    partlog.finish(logs, out, config.audit_config().txn_timeout_ms)
    return AuditOutput(
        producers=(),
        transactions=(),
        findings=tuple(sorted(out, key=finding_order)),
        partitions=partlog.summaries(logs),
    )


def fold_logs(logs: LogState, events: Iterable[DecodeEvent]) -> list:
    """`logs` given `events` (a set's CONTEXT and LOG events, in audit order) as the audit gives them
    (ksniff.audit.fold): its findings so far."""
    losses: dict[int, list[float]] = {}
    ctx = partlog.Context(losses)
    out: list = []
    for event in events:
        if event.__class__ is Exchange:
            if event.api_name in LOG_APIS:
                partlog.on_exchange(logs, event, out, ctx)
        elif event.__class__ is TxnIds:
            learn_txn_ids(logs, event.pairs)
        elif event.__class__ is TopicNames:
            learn_names(logs, event.pairs)
        elif event.__class__ is ConnectionLost:
            losses.setdefault(event.conn, []).append(event.ts)
    return out


def context_fold(
    config: EngineConfig,
    ends: dict[int, RunEnd],
    conns: dict[int, int],
    digests: Digests | None = None,
):
    """mapInArrow over the CONTEXT, LOG and KEYED_LOG rows sorted by (cset, lfold, audit order), each
    (set, fold)'s in one partition: each set's CONTEXT_KEY group output in as many parts as its RunEnd
    says (`context_output`, the partition logs split by partition), made where the rows are, so the
    exchanges the partition logs read never reach the driver. An event that is both context and read by
    the logs came once per kind, with one order: `_once` folds it once."""
    digests = digests or Digests()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out: dict[str, list] = {name: [] for name in OUTPUTS.names}
        for (cset, k), rows in _keyed(batches, ("cset", "lfold")):
            events = (event for _order, event in _once(rows, conns))
            output = context_output(config, ends[cset], events, (ends[cset].folds, k))
            _output_row(out, cset, CONTEXT_KEY, output, digests)
        yield pa.RecordBatch.from_pydict(out, schema=OUTPUTS)

    return _rarely_collected(run)


# -- the tables, built where the events are --------------------------------------------------------------

_ARROW_TYPES = {"float64": pa.float64(), "Int64": pa.int64(), "boolean": pa.bool_(), "string": pa.string()}
# Each exported row keeps the place of its exchange in the audit order (and of itself within the
# exchange), so a writer can give the rows in exactly the local engine's order.
# A table row's place in the local export's order after its time: its capture set (the sets' rows are
# joined by time, set after set), its exchange's audit order and its place among the exchange's rows.
ROW_ORDER = ("oset", *ORDER_COLUMNS, "sub")
PRODUCERS_DDL = (
    "transactional_id string, producer_id bigint, epochs array<bigint>, clients array<string>, "
    "client_ids array<string>, batches bigint, records bigint, "
    "transactions struct<commit: bigint, abort: bigint, open: bigint, unknown: bigint>, "
    "capture_set bigint, cluster string"
)


def table_ddl(table: str, order: bool = False) -> str:
    return ddl(_table_schema(table, order))


def _table_schema(table: str, order: bool) -> pa.Schema:
    from ksniff.report.tables import SCHEMAS

    fields = [pa.field(name, _ARROW_TYPES[dtype]) for name, dtype in SCHEMAS[table].items()]
    if order:
        kinds = {
            "oset": pa.int32(),
            "phase": pa.int8(),
            "pfile": pa.int64(),
            "pidx": pa.int64(),
            "oconn": pa.int64(),
            "n": pa.int64(),
            "sub": pa.int64(),
        }
        fields += [pa.field(name, kinds.get(name, pa.float64())) for name in ROW_ORDER]
        fields.append(pa.field("_cluster", pa.string()))
    return pa.schema(fields)


def _cell(value, dtype: str):
    if value is None:
        return None
    if dtype == "float64":
        return None if value != value else float(value)  # NaN is missing, as in the local exports
    if dtype == "string":
        return value if isinstance(value, str) else str(value)
    return value


def _arrow_rows(
    rows: list[dict], table: str, schema: pa.Schema, extra: dict[str, list] | None = None
) -> pa.RecordBatch:
    from ksniff.report.tables import SCHEMAS

    arrays = [
        pa.array([_cell(r[name], dtype) for r in rows], type=_ARROW_TYPES[dtype])
        for name, dtype in SCHEMAS[table].items()
    ]
    for f in schema:
        if extra is not None and f.name in extra:
            arrays.append(pa.array(extra[f.name], type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def table_rows(
    table: str,
    conns: dict[int, int],
    clusters: dict[int, str | None],
    per_batch: int = 64 << 20,
    cut: frozenset[tuple] = frozenset(),
):
    """mapInArrow over TABLE rows (pickled exchanges): the rows of `exchanges`, `batches` or `records`,
    with the exchange's connection number as the local engine gives it, their audit-order columns and
    `_cluster`, the cluster of their capture set (`clusters`, by set; see --partition-by).
    `records`: each batch decompressed under the per-batch cap, except the batches in `cut` (audit order
    columns and the batch's index in its exchange), which the run's request and run caps cut
    (see `record_probe`)."""
    from ksniff.decode.records import Inflation
    from ksniff.decode.rows import batch_row, exchange_row, record_rows

    def rows_of(ex: Exchange, order: tuple) -> list[dict]:
        if table == "exchanges":
            return [exchange_row(ex)]
        if table == "batches":
            return [batch_row(b) for b in ex.batches]
        inflation = Inflation(DecodeStats(by_api={}), per_batch, _UNCAPPED, _UNCAPPED)
        return [
            r for i, b in enumerate(ex.batches) if (*order, i) not in cut for r in record_rows(b, inflation)
        ]

    schema = _table_schema(table, order=True)
    hidden = (*ROW_ORDER, "_cluster")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            orders = zip(*(batch.column(name).to_pylist() for name in ORDER_COLUMNS), strict=True)
            sets = batch.column("cset").to_pylist()
            rows: list[dict] = []
            extra: dict[str, list] = {name: [] for name in hidden}
            for cset, order, blob in zip(sets, orders, batch.column("blob").to_pylist(), strict=True):
                made = rows_of(loads(blob, conns), order)
                rows.extend(made)
                for sub in range(len(made)):
                    for name, value in zip(hidden, (cset, *order, sub, clusters.get(cset)), strict=True):
                        extra[name].append(value)
                if len(rows) >= BATCH_ROWS:
                    yield _arrow_rows(rows, table, schema, extra)
                    rows, extra = [], {name: [] for name in hidden}
            if rows:
                yield _arrow_rows(rows, table, schema, extra)

    return _rarely_collected(run)


# -- the --records decompression budget ---------------------------------------------------------------------

_UNCAPPED = 1 << 62


def record_probe(per_batch: int):
    """mapInArrow over TABLE rows: for every batch the --records rows decompress (its bytes kept, not a
    control batch), in its exchange's audit order: `need`, the smallest cap under which it is not cut
    (inf: past the per-batch cap), `used`, the bytes it decompresses to when not cut (0 when its bytes do
    not decompress), and `request_need`, its exchange's bytes before it plus its need. The driver replays
    the local engine's budget (ksniff.decode.records.Inflation) over these rows in audit order."""
    from ksniff.decode.records import TooLarge, cap_needed, iter_records

    def outcome(raw, cap: int) -> tuple[bool, list[int]]:
        inflated: list[int] = []
        try:
            for _record in iter_records(raw, max(cap, 0), inflated):
                pass
        except TooLarge:
            return True, inflated
        except ValueError:  # damaged: the rows before the damage are kept, the bytes inflated are used
            pass
        return False, inflated

    def probe(raw) -> tuple[float, int]:
        too_large, inflated = outcome(raw, per_batch)
        if too_large:
            return INF, 0
        if inflated:
            return float(cap_needed(raw, inflated[0])), inflated[0]
        # Its bytes do not decompress under the per-batch cap; under a smaller one the check that comes
        # first may cut it instead: the smallest cap that does not (monotone in the cap).
        low, high = 0, max(per_batch, 0)
        while low < high:
            mid = (low + high) // 2
            if outcome(raw, mid)[0]:
                low = mid + 1
            else:
                high = mid
        return float(low), 0

    names = ("cset", *ORDER_COLUMNS, "batch", "need", "used", "request_need")

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            cols: dict[str, list] = {name: [] for name in names}
            orders = zip(*(batch.column(name).to_pylist() for name in ORDER_COLUMNS), strict=True)
            sets = batch.column("cset").to_pylist()
            for cset, order, blob in zip(sets, orders, batch.column("blob").to_pylist(), strict=True):
                ex = loads(blob)
                before = 0
                for i, b in enumerate(ex.batches):
                    if b.records is None or b.header.control:
                        continue
                    need, used = probe(b.records)
                    values = (cset, *order, i, need, used, before + need)
                    for name, value in zip(names, values, strict=True):
                        cols[name].append(value)
                    before += used
            yield pa.RecordBatch.from_pydict(cols, schema=_PROBE_SCHEMA)

    return _rarely_collected(run)


_PROBE_SCHEMA = pa.schema(
    [
        *(f for f in EVENTS if f.name == "cset" or f.name in ORDER_COLUMNS),
        pa.field("batch", pa.int64()),
        pa.field("need", pa.float64()),
        pa.field("used", pa.int64()),
        pa.field("request_need", pa.float64()),
    ]
)
PROBE_DDL = ddl(_PROBE_SCHEMA)


def output_rows(table: str, labels: dict[int, tuple] | None = None, clocks: dict[int, tuple] | None = None):
    """mapInArrow over the folds' pickled AuditOutputs: the `transactions`, `findings` or `producers`
    rows of each group, labelled with their capture set's (number, cluster) from `labels`. `clocks`: a
    set's clocks (ksniff.engine.clock), when it joins captures of several hosts: findings that rest on an
    order within their uncertainty are marked as locally."""
    from ksniff.report.tables import finding_row, transaction_row

    labels, clocks = labels or {}, clocks or {}

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            sets = batch.column("cset").to_pylist()
            outputs = [loads(b) for b in batch.column("blob").to_pylist()]
            if table == "findings":
                pairs = zip(sets, outputs, strict=True)
                outputs = [judged(o, clocks[c]) if clocks.get(c) else o for c, o in pairs]
            yield output_batch(table, outputs, [labels.get(c) for c in sets], finding_row, transaction_row)

    return _rarely_collected(run)


def listed_rows(table: str, labels: dict[int, tuple], clocks: dict[int, tuple]):
    """mapInArrow over AUDITED_LISTS rows (`extract_audited`): the `transactions` or `findings` rows of
    each set audited where it was read, labelled with its capture set's (number, cluster) and judged
    against its clocks as `output_rows` does."""
    from ksniff.audit.model import AuditOutput
    from ksniff.report.tables import finding_row, transaction_row

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            sets = batch.column("cset").to_pylist()
            outputs = []
            for cset, blob in zip(sets, batch.column("blob").to_pylist(), strict=True):
                findings, transactions = loads(blob)
                output = AuditOutput(producers=(), transactions=tuple(transactions), findings=tuple(findings))
                outputs.append(
                    judged(output, clocks[cset]) if clocks.get(cset) and table == "findings" else output
                )
            yield output_batch(table, outputs, [labels.get(c) for c in sets], finding_row, transaction_row)

    return run


def judged(output, clocks: tuple):
    """`output` with its findings judged against the set's clocks (ksniff.engine.clock.within_uncertainty:
    each finding on its own, so a group's findings are judged as the whole run's are)."""
    from ksniff.engine.clock import within_uncertainty

    findings = within_uncertainty(list(output.findings), clocks)
    return replace(output, findings=type(output.findings)(findings))  # a tuple or a list, as it came


def output_batch(
    table: str, outputs, labels: Sequence[tuple | None] = (), finding_row=None, transaction_row=None
) -> pa.RecordBatch:
    """The rows of `table` from AuditOutputs, each output's with its (capture set, cluster) label from
    `labels` when given."""
    if finding_row is None:
        from ksniff.report.tables import finding_row, transaction_row

    def made(output) -> list[dict]:
        if table == "producers":
            return [p.as_contract() for p in output.producers]
        if table == "transactions":
            return [transaction_row(t) for t in output.transactions]
        return [finding_row(f) for f in output.findings]

    rows = []
    for i, output in enumerate(outputs):
        mine = made(output)
        if i < len(labels) and labels[i] is not None:
            number, cluster = labels[i]
            for row in mine:
                row["capture_set"], row["cluster"] = number, cluster
        rows.extend(mine)
    if table == "producers":
        return pa.RecordBatch.from_pylist(rows, schema=PRODUCERS_SCHEMA)
    return _arrow_rows(rows, table, _table_schema(table, order=False))


PRODUCERS_SCHEMA = pa.schema(
    [
        ("transactional_id", pa.string()),
        ("producer_id", pa.int64()),
        ("epochs", pa.list_(pa.int64())),
        ("clients", pa.list_(pa.string())),
        ("client_ids", pa.list_(pa.string())),
        ("batches", pa.int64()),
        ("records", pa.int64()),
        (
            "transactions",
            pa.struct(
                [("commit", pa.int64()), ("abort", pa.int64()), ("open", pa.int64()), ("unknown", pa.int64())]
            ),
        ),
        ("capture_set", pa.int64()),
        ("cluster", pa.string()),
    ]
)


def csv_cells(table: str):
    """(mapInArrow function, DDL): a sorted table's rows as the local CSV export's cell texts, the `_utc`
    twin after each time column; an empty cell is null, which Spark's CSV writer leaves empty."""
    from ksniff.report.stream import _csv_cells

    cells = _csv_cells(table)
    schema = pa.schema([(name, pa.string()) for name, _column, _cell in cells])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            values = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            arrays = []
            for _name, column, cell in cells:
                texts = [cell(v) for v in values[column]]
                arrays.append(pa.array([t if t else None for t in texts], type=pa.string()))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return run, ", ".join(f"`{name}` string" for name in schema.names)


def keep_rows(keep, table: str):
    """mapInArrow over a table with its order columns (and any others, passed through): the rows the
    report's filters keep (ksniff.report.filters.ResultFilter.table_row), as the local exports keep them."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_pylist(
                [r for r in batch.to_pylist() if keep.table_row(table, r)], schema=batch.schema
            )

    return run


def summary_batch(table: str, result) -> pa.RecordBatch:
    """The `transactions`, `findings`, `partitions` or `partition_log` rows of an AuditResult (the
    driver's; transactions and findings already filtered)."""
    from ksniff.report.tables import finding_row, partition_log_rows, partition_rows, transaction_row

    if table == "partitions":
        rows = partition_rows(result.partitions)
    elif table == "partition_log":
        rows = partition_log_rows(result.partitions)
    else:
        rows = (
            [transaction_row(t) for t in result.transactions]
            if table == "transactions"
            else [finding_row(f) for f in result.findings]
        )
    return _arrow_rows(rows, table, _table_schema(table, order=False))
