"""The in-process engine: capture -> decode -> audit in one streaming pass, memory bounded.

The decoder emits an exchange when its response arrives (or when it is known to have none), while the
audit wants events in the order the requests were sent, across all connections. A small heap holds
events and releases them in request order, waiting at most `reorder_window` seconds of capture time for
earlier ones: each event's release time is its request time plus the window, or the capture's clock when
the decoder gave it (the reassembler's `clock`) if that is later (an exchange slower than the window, which
the audit tolerates). Events go to the audit in the order of (release time, request time, place in the
capture, the order the decoder gave them), each once the clock has passed its release time, or earlier
when nothing before it can come any more (the decoder has no older request in flight or partly read, the
reassembler no older bytes held back). The place is where the capture event the decoder made it from came
(the reassembler's `place`; for a chunk, its first segment's). That order depends only on each
connection's own segments and the capture's clock, so an engine that decodes each connection in a
different task (ksniff.engine.spark_tasks) puts events in the same order by sorting them on the same keys.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import heapq
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from ksniff.audit import Auditor
from ksniff.capture import CaptureError, Reassembler, read_files
from ksniff.capture.connections import Alike
from ksniff.capture.events import ConnectionOpened, StreamChunk
from ksniff.capture.files import CaptureFile
from ksniff.capture.folders import expand_inputs
from ksniff.common import ending
from ksniff.config import EngineConfig
from ksniff.decode.events import DecodeEvent, Exchange
from ksniff.decode.identity import Identity
from ksniff.decode.rows import batch_row, exchange_row, iter_record_rows, record_rows
from ksniff.engine import sets as capture_sets
from ksniff.engine.clock import within_uncertainty
from ksniff.result import AuditResult, join_results, stamp_set

RECORD_ROWS_CHUNK = 4096  # record rows handed to the exports at a time
PROGRESS_SECONDS = 0.1  # between two progress reports: often enough for a rate and an ETA
GC_FIRST_THRESHOLD = 100_000  # allocations between young-generation collections during a run
# Segments from which a chunk is handed to the decoder as its pieces (Reassembler.hand_pieces): a
# large chunk of bulk data, never the chunk of a small request or response.
PIECES_FROM = 16


_rare_depth = 0  # how many `fewer_collections` the running code is inside


@contextlib.contextmanager
def fewer_collections(keep_frozen: bool = False) -> Iterator[None]:
    """Run the cyclic garbage collector rarely while the pipeline runs.

    The pipeline allocates millions of small objects that reference counting frees on its own (events
    hold no cycles), and keeps many alive for a while (the reorder window, the audit's state). With
    Python's default threshold (700 allocations) the collector walks them over and over: 15-20% of a
    run over many small transactions. Objects that exist before the run (modules, tables) are frozen
    out of its walks for the same reason. In a process that ends without the interpreter's teardown
    (ksniff.common.ending) the run's settings stay for what is left of it, the report of this run.

    Of nested calls (a Spark task around the audits of its capture sets) each freezes what exists when
    it starts, and the outermost alone puts the collector back. `keep_frozen`: what was frozen stays out
    of the collector's walks after the run, for a process that collects whole after every run (a Spark
    task's Python worker: pyspark's daemon calls gc.collect() after each task, and each such walk over
    the modules and tables a task had frozen cost 28 ms, 0.8 s of the engine benchmark's 164 files). A
    frozen object is still freed when nothing refers to it; only a cycle of them is never collected.
    """
    global _rare_depth
    gc.freeze()  # nested too: what the runs before it in the task left (their results) is not walked
    _rare_depth += 1
    if _rare_depth > 1:
        try:
            yield
        finally:
            _rare_depth -= 1
        return
    before = gc.get_threshold()
    gc.set_threshold(GC_FIRST_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        _rare_depth -= 1
        if not ending.armed():
            gc.set_threshold(*before)
            if not keep_frozen:
                gc.unfreeze()


class RowSink(Protocol):
    """Takes table rows as the engine releases exchanges (report.stream.TableExport, RowFanout)."""

    def add(self, table: str, rows: Iterable[dict]) -> None: ...

    def restart(self) -> None:
        """Forgets the rows added so far: the capture is read again from its start."""


class RowFanout:
    """Hands each chunk of rows to several sinks (the exports and the --producer timeline)."""

    def __init__(self, *sinks: RowSink) -> None:
        self.sinks = sinks

    def add(self, table: str, rows: Iterable[dict]) -> None:
        rows = rows if isinstance(rows, list | tuple) else list(rows)
        for sink in self.sinks:
            sink.add(table, rows)

    def restart(self) -> None:
        for sink in self.sinks:
            sink.restart()


INF = float("inf")
DECODER_END = (2,)  # the place of what the decoder's own end gives (after the capture's, END)
HORIZON_EVERY = 32  # decode events between two looks at the decoder's horizon (plus one per connection)
# Capture time that events wait at least when the capture's own horizon is not known (out-of-order
# segments held by the reassembler can still deliver bytes that old). Slower exchanges are held up to
# the reorder window by the decoder's horizon instead.
REORDER_SLACK = 0.1


def event_ts(event: DecodeEvent) -> float:
    return event.request_ts if isinstance(event, Exchange) else event.ts


def release_time(ets: float, clock: float, window: float) -> float:
    """When an event requested at `ets`, given by the decoder when the capture's clock was `clock`, goes
    to the audit (the module's docstring): the same in every engine."""
    due = ets + window
    return clock if clock > due else due


class Reorder:
    """Releases decode events in the order of (release time, request time, place, arrival) (the module's
    docstring)."""

    def __init__(self, window: float) -> None:
        self._window = window
        # (release time, request time, place, arrival, event), the smallest first
        self.heap: list[tuple[float, float, tuple, int, DecodeEvent]] = []
        self._seq = itertools.count()

    def push(self, event: DecodeEvent, clock: float = -INF, place: tuple = ()) -> None:
        """`event`, given by the decoder when the capture's clock was `clock` (INF: at the very end), from
        a capture event of `place` (Reassembler.place)."""
        ets = event_ts(event)
        release = release_time(ets, clock, self._window)
        heapq.heappush(self.heap, (release, ets, place, next(self._seq), event))

    def push_all(self, events: list[DecodeEvent], clock: float, place: tuple) -> None:
        """`push` of each of `events`, in their order (one call per capture event: `event_ts` and
        `release_time` inline)."""
        heap, window, seq, push = self.heap, self._window, self._seq, heapq.heappush
        for event in events:
            ets = event.request_ts if isinstance(event, Exchange) else event.ts
            due = ets + window
            push(heap, (clock if clock > due else due, ets, place, next(seq), event))

    def release(self, now: float, before: float = -INF) -> list[DecodeEvent]:
        """Events due before the clock `now`, and those requested before `before` (nothing earlier can
        come any more). An event due exactly at `now` waits for the clock to move past it: events the
        decoder still gives at `now` may come before it."""
        heap = self.heap
        if not heap or (heap[0][0] >= now and heap[0][1] >= before):  # the usual case: nothing due
            return []
        pop = heapq.heappop
        out = []
        while heap and (heap[0][0] < now or heap[0][1] < before):
            out.append(pop(heap)[4])
        return out

    def __len__(self) -> int:
        return len(self.heap)

    def drain(self) -> Iterable[DecodeEvent]:
        while self.heap:
            yield heapq.heappop(self.heap)[4]


class Pipeline:
    """Decode + reorder + audit + tables over a stream of capture events; shared by audit and live."""

    def __init__(
        self,
        config: EngineConfig,
        on_not_kafka: Callable[[int], None] | None = None,
        capture: Reassembler | None = None,
        tables: RowSink | None = None,
        on_elsewhere: Callable[[int, int], None] | None = None,
    ) -> None:
        """`capture`: the reassembler the capture events come from, for the capture's clock as it hands
        each out and the earliest time still to come (without it, the latest time of the events fed is
        the clock). `tables`: where the table rows go as exchanges are released (the exports write them
        as they come) instead of the lists `exchanges` and `batches`, which then stay empty (and
        `records`, None)."""
        self.config = config
        self.tables = tables
        self.decoder = config.decoder(on_not_kafka, on_elsewhere)
        self._lane = self.decoder.lane
        self.auditor = Auditor(config.audit_config())
        self.reorder = Reorder(config.reorder_window)
        self.identity = Identity()
        self.exchanges: list[dict] = []
        self.batches: list[dict] = []
        self.findings_so_far: list = []
        self.last_ts: float | None = None
        self.exchanges_seen = 0
        self.records: list[dict] | None = [] if config.keep_records and tables is None else None
        # Events before `_before` are released without waiting out the window: the decoder owes nothing
        # earlier (its horizon). Asked every HORIZON_EVERY events or so, as it walks the open connections.
        self._before = -INF
        self._horizon_due = HORIZON_EVERY
        self._capture = capture
        self.clock = -INF  # the capture's clock as of the last event fed
        # Without the capture's horizon, a fixed slack; with it, none until the capture's timestamps are
        # seen to go back (a file not in time order), then as much as they went back.
        self._slack = REORDER_SLACK if capture is None else 0.0

    def feed(self, capture_event) -> None:
        # Called once per capture event: class checks instead of getattr with defaults (a missing slot
        # raises and catches an AttributeError inside getattr).
        cls = capture_event.__class__
        if cls is StreamChunk:
            ts = capture_event.last_ts
            earliest = capture_event.first_ts
        elif cls is ConnectionOpened:
            ts = earliest = None
        else:
            ts = earliest = getattr(capture_event, "ts", None)
        lane = self._lane  # Decoder.feed's usual case in C, without its Python frame (None: the Python)
        events = None if lane is None else lane.feed(self.decoder, capture_event)
        if events is None:
            events = self.decoder.feed(capture_event)
        if ts is not None:
            last = self.last_ts
            if last is None:
                self.last_ts = ts
            else:
                if earliest < last - self._slack:  # time went back: wait that much from now on
                    self._slack = min(last - earliest, self.config.reorder_window)
                if ts > last:
                    self.last_ts = ts
        capture = self._capture
        clock = capture.clock if capture is not None else self.last_ts
        if clock is not None and clock > self.clock:
            self.clock = clock
        if events:
            if capture is None:
                place = ()
            elif cls is StreamChunk:  # where its first segment came, even when the end let it go
                place = (0, capture_event.at, 0)
            else:
                place = capture.place
            self.reorder.push_all(events, self.clock, place)
            self._horizon_due -= len(events)
        if ts is not None:
            if self._horizon_due <= 0:
                self._horizon_due = HORIZON_EVERY + self.decoder.open_connections
                self._before = self._horizon()
            heap = self.reorder.heap
            # Reorder.release's usual case inline (once per capture event): nothing due yet.
            if heap and (heap[0][0] < self.clock or heap[0][1] < self._before):
                for event in self.reorder.release(self.clock, self._before):
                    self._audit(event)

    def _horizon(self) -> float:
        """Events before this time can go to the audit now: nothing earlier is still to come."""
        low = min(self.decoder.horizon(), self.last_ts - self._slack)
        if self._capture is not None:
            low = min(low, self._capture.horizon())
        return low

    def _audit(self, event: DecodeEvent) -> None:
        if isinstance(event, Exchange):
            self.exchanges_seen += 1
            self.identity.feed(event)
            sink = self.tables
            if sink is not None:
                sink.add("exchanges", (exchange_row(event),))
                if event.batches:
                    sink.add("batches", [batch_row(b) for b in event.batches])
                    if self.config.keep_records:
                        inflation = self.decoder.inflation
                        inflation.new_request()
                        for b in event.batches:  # in chunks: a batch may hold millions of records
                            rows = iter_record_rows(b, inflation)
                            while chunk := list(itertools.islice(rows, RECORD_ROWS_CHUNK)):
                                sink.add("records", chunk)
            else:
                if self.config.keep_tables:
                    self.exchanges.append(exchange_row(event))
                    self.batches.extend(batch_row(b) for b in event.batches)
                if self.records is not None:
                    inflation = self.decoder.inflation
                    inflation.new_request()
                    for b in event.batches:
                        self.records.extend(record_rows(b, inflation))
        self.findings_so_far.extend(self.auditor.feed(event))

    def tick(self, now: float) -> None:
        """The clock moved on with no traffic (live capture, wall-clock time): what waited for later
        traffic to be released goes to the audit now, so the live view's counters stay current.
        Called between `feed`s, never during one."""
        if self.last_ts is None or now <= self.last_ts:
            return
        self.last_ts = now
        if now > self.clock:
            self.clock = now
        self._before = min(self.decoder.horizon(), now - self._slack)
        for event in self.reorder.release(self.clock, self._before):
            self._audit(event)

    def finish(self):
        for event in self.decoder.finish():  # at the very end: after every other event
            self.reorder.push(event, INF, DECODER_END)
        for event in self.reorder.drain():
            self._audit(event)
        return self.auditor.finish(self.last_ts)

    def result(self, run, engine: str) -> AuditResult:
        """The run's result once `run` (a capture run: files or live) has given every event."""
        output = self.finish()
        stats = run.stats
        stats.kafka_connections = self.decoder.kafka_connections
        return AuditResult.of_run(
            engine,
            inputs=run.inputs,
            capture=stats,
            decode=self.decoder.stats,
            output=output,
            warnings=list(run.warnings) + self.decoder.warnings(),
            exchanges=self.exchanges,
            batches=self.batches,
            records=self.records,
        )


def audit_paths(
    paths: Sequence[str],
    config: EngineConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
    tables: RowSink | None = None,
) -> AuditResult:
    """Audit capture files or folders in-process. Raises CaptureError for inputs that cannot be read.

    The inputs are grouped into capture sets (ksniff.engine.sets), each audited by its own pipeline, one
    after the other, and the results joined. With `tables`, the table rows go there as they are made,
    and the result's row lists stay empty."""
    config = config or EngineConfig()
    files, skipped_warnings, skipped_files = expand_inputs(list(paths))
    if not files:
        raise CaptureError("no capture files given")
    for path in files:  # every input checked before the work starts: an unreadable one is the user's error
        CaptureFile(path).close()
    planned = capture_sets.plan(
        files, config.capture_sets, ports=config.ports, auto_detect=config.auto_detect, limits=config.limits
    )
    total = sum(os.path.getsize(f) for f in files)
    done = 0
    results = []
    for cset in planned:

        def step(read: int, _total: int, base: int = done) -> None:
            progress(base + read, total)

        used = sum(r.decode.records_inflated_bytes for r in results)  # one --records budget per run
        results.append(_audit_set(cset, config, step if progress is not None else None, tables, used))
        done += sum(i.bytes for i in results[-1].inputs)
    # Each set as its audit labelled it: with the clusters its answers named, not only those planning saw.
    result = join_results(results, [r.capture_sets[0] for r in results], files, engine="local")
    result.warnings[:0] = skipped_warnings  # inputs skipped while expanding folders come first
    result.capture.skipped_files += skipped_files
    return result


def _audit_set(
    cset: capture_sets.CaptureSet,
    config: EngineConfig,
    progress: Callable[[int, int], None] | None,
    tables: RowSink | None,
    records_used: int = 0,
) -> AuditResult:
    """One capture set's run, labelled as the set's; `records_used`: bytes earlier sets' records already
    drew from the run's decompression budget."""
    offset_of = cset.offset_of if cset.clocks else None
    paths = list(cset.paths)
    try:
        # A set the planner did not scan (one input, --merge, --separate) may hold one connection twice,
        # behind an address translation: the reassembler stops at the first two connections that begin
        # alike under other 4-tuples (usually within the capture's first packets).
        result, identity = audit_capture(
            paths, config, offset_of, progress, tables, records_used, cset.renames(), not cset.scanned
        )
    except Alike:
        # The set's bytes decide (ksniff.engine.sets.read_once), and it is read from its start, each
        # connection once where they say so, as it was before the stop where they do not.
        renamed, reasons = capture_sets.read_once(
            paths, ports=config.ports, auto_detect=config.auto_detect, limits=config.limits
        )
        if renamed:
            cset = dataclasses.replace(cset, reasons=cset.reasons + reasons, renamed=renamed)
        if tables is not None:
            tables.restart()
        result, identity = audit_capture(
            paths, config, offset_of, progress, tables, records_used, cset.renames()
        )
    if cset.clocks:
        result.findings = within_uncertainty(result.findings, cset.clocks)
    stamp_set(result, cset, identity)
    return result


def audit_capture(
    paths: Sequence[str],
    config: EngineConfig,
    offset_of: Callable[[str], float] | None = None,
    progress: Callable[[int, int], None] | None = None,
    tables: RowSink | None = None,
    records_used: int = 0,
    renames: dict[tuple, tuple] | None = None,
    stop_when_alike: bool = False,
    peak: list[int] | None = None,
) -> tuple[AuditResult, Identity]:
    """The audit of one capture: `paths` read as one (each file's timestamps moved by `offset_of(path)`
    seconds, the capture set's clock alignment). The result is the set's before it is labelled as one,
    with what the capture's answers named (its Identity). The Spark engine runs this in the task that
    reads a capture set's files, for a set small enough for one task. `records_used`: bytes of the run's
    --records budget (ksniff.decode.records.Inflation) the sets before it used; `peak`: when given, the
    budget's peak this audit reached (Inflation.peak) is appended to it; `renames`: the 4-tuples read
    as others (the capture set's connections seen behind an address translation, CaptureSet.renamed);
    `stop_when_alike`: raise ksniff.capture.connections.Alike when two connections begin alike under
    other 4-tuples (`Reassembler.alike`)."""
    run = read_files(list(paths), config.limits)
    # The decoder takes a large chunk as its segments' payloads: a frame of many chunks (a bulk Produce
    # request) is joined once, from its segments, instead of from chunks joined first.
    run.reassembler.hand_pieces(PIECES_FROM)
    if offset_of is not None:  # captures of several hosts: each file on the set's time line
        run.offsets = [offset_of(f.path) for f in run.files]
    run.renames = renames
    run.reassembler.stop_when_alike = stop_when_alike
    pipeline = Pipeline(
        config,
        on_not_kafka=run.drop,
        capture=run.reassembler,
        tables=tables,
        on_elsewhere=run.drop,
    )
    inflation = pipeline.decoder.inflation
    inflation.run_used = records_used
    if peak is not None:
        inflation.peak = records_used
    with fewer_collections():
        feed = pipeline.feed
        if progress is None:
            for event in run:
                feed(event)
        else:
            # By the clock, asked every 256 events (a chunk may be one packet or a thousand).
            due = time.monotonic()
            for n, event in enumerate(run):
                feed(event)
                if not n & 0xFF and time.monotonic() >= due:
                    progress(run.bytes_read, run.bytes_total)
                    due = time.monotonic() + PROGRESS_SECONDS
            progress(run.bytes_total, run.bytes_total)  # read: what is left is the audit's end
        result = pipeline.result(run, "local")
    if peak is not None:
        peak.append(inflation.peak)
    ending.keep(pipeline, run)  # in a process that ends without teardown, not taken apart first
    return result, pipeline.identity
