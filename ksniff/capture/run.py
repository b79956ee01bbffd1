"""A capture run over files: open all inputs up front, then stream events in capture-time order."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from ksniff.capture.errors import CaptureError, CaptureLimits
from ksniff.capture.events import CaptureStats, InputInfo, StreamEvent
from ksniff.capture.files import CaptureFile, expand_inputs
from ksniff.capture.reassembly import Reassembler, hot_loop
from ksniff.common.counters import add_counters


class CaptureRun:
    """Iterate once for the events; `stats`, `inputs` and `warnings` are complete after that."""

    def __init__(
        self,
        files: list[CaptureFile],
        limits: CaptureLimits | None = None,
        warnings: Sequence[str] = (),
        offsets: Sequence[float] = (),
    ) -> None:
        self._files = files
        self.offsets = list(offsets)  # seconds added to each file's timestamps (clock alignment)
        # 4-tuple -> the 4-tuple its segments are read as (one connection seen behind an address
        # translation: ksniff.engine.sets.CaptureSet.renamed), or None
        self.renames: dict[tuple, tuple] | None = None
        self.stats = CaptureStats()
        self.reassembler = Reassembler(limits, self.stats)
        self.inputs: list[InputInfo] = []
        self.warnings: list[str] = list(warnings)  # inputs skipped while expanding folders come first
        self.bytes_total = sum(f.size for f in files)
        self._started = False

    @property
    def files(self) -> list[CaptureFile]:
        return list(self._files)

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self._files)

    def drop(self, conn_id: int, tally: int = 0) -> None:
        """The decoder found this connection is not Kafka, or not to be read: no more events or buffering
        for it (with `tally`, a port: its bytes still counted, Reassembler.drop)."""
        self.reassembler.drop(conn_id, tally)

    def __iter__(self) -> Iterator[StreamEvent]:
        if self._started:
            raise RuntimeError("a capture run can be iterated only once")
        self._started = True
        return self._events()

    def _events(self) -> Iterator[StreamEvent]:
        try:
            yield from reassembled(self.reassembler, self._files, self.offsets, self.renames)
        finally:
            self._summarise()

    def _summarise(self) -> None:
        stats = self.stats
        shifts = self.offsets or [0.0] * len(self._files)
        for f, offset in zip(self._files, shifts, strict=True):
            add_file_counts(stats, self.warnings, f.path, f.counts, f.warnings, offset)
            self.inputs.append(InputInfo(f.path, f.format, ",".join(f.linktypes), f.counts.packets, f.size))
        self.warnings.extend(self.reassembler.warnings())
        self.warnings.extend(truncation_warnings(stats))


def truncation_warnings(stats: CaptureStats) -> list[str]:
    """The run's note on packets the snapshot length cut, for any engine's summed counters."""
    if not stats.truncated_packets:
        return []
    return [
        f"{stats.truncated_packets} packets cut short by the capture's snapshot length: the bytes "
        "beyond it are missing (counted as gaps)"
    ]


def add_file_counts(
    stats: CaptureStats,
    warnings: list[str],
    path: str,
    counts,
    file_warnings: Sequence[str],
    offset: float = 0.0,
) -> None:
    """Folds one file's walk (packets, non_tcp, fragments, cut_short, damaged_headers, first_ts, last_ts,
    damaged_times) into a run's counters and warnings; every engine sums its files this way. `offset`:
    seconds added to the file's times (its capture set's clock alignment), so the span is the set's."""
    add_counters(
        stats,
        CaptureStats(
            packets=counts.packets,
            non_tcp_packets=counts.non_tcp,
            ip_fragments=counts.fragments,
            truncated_packets=counts.cut_short,
            tcp_segments=counts.packets
            - counts.non_tcp
            - counts.fragments
            - counts.cut_short
            - counts.damaged_headers,
            first_ts=None if counts.first_ts is None else counts.first_ts + offset,
            last_ts=None if counts.last_ts is None else counts.last_ts + offset,
            damaged_times=counts.damaged_times,
            damaged_packets=counts.damaged_headers,
        ),
    )
    warnings.extend(file_warnings)
    if counts.fragments:
        warnings.append(f"{path}: {counts.fragments} IP fragments not reassembled")
    if counts.damaged_headers:
        n = counts.damaged_headers
        warnings.append(
            f"{path}: {n} packet{'s' if n > 1 else ''} whose IPv4 header fails its checksum (damaged bytes): "
            "left out, as bytes the capture lost"
        )
    if counts.damaged_times:
        n = counts.damaged_times
        warnings.append(
            f"{path}: {n} packet time{'s' if n > 1 else ''} out of line with the packets around "
            f"{'them' if n > 1 else 'it'} (damaged bytes, or a capture queue's reordering): given the time "
            "of the packet before"
        )


def reassembled(
    reassembler: Reassembler,
    files: list[CaptureFile],
    offsets: Sequence[float] = (),
    renames: dict[tuple, tuple] | None = None,
) -> Iterator[StreamEvent]:
    """`reassembler`'s events for the files' segments merged by time (`segments`): in the compiled
    walk's lists, cut where the merge goes to another file, through the hot loop when it is built, else
    one at a time through the Python loop."""
    if hot_loop() is not None:
        return reassembler.batch_events(batched_segments(files, offsets, renames))
    return reassembler.events(segments(files, offsets, renames))


def segments(
    files: list[CaptureFile], offsets: Sequence[float] = (), renames: dict[tuple, tuple] | None = None
) -> Iterator[tuple]:
    """Segments of all files; several files are merged by timestamp, each file's shifted by its offset
    (seconds added: ksniff.engine.clock) when given; a segment of a 4-tuple in `renames` as the 4-tuple
    it names (one connection seen behind an address translation)."""
    shifts = list(offsets) or [0.0] * len(files)
    if len(files) == 1:
        walk = _walk(files[0], shifts[0])
    else:
        walk = _merged(files, shifts)
    if not renames:
        return walk
    return (seg for batch in renamed_batches(([s] for s in walk), renames) for seg in batch)


def renamed_batches(batches: Iterator[list[tuple]], renames: dict[tuple, tuple]) -> Iterator[list[tuple]]:
    """The batches with each segment of a 4-tuple in `renames` as the 4-tuple it names."""
    get = renames.get
    for batch in batches:
        yield [seg if (to := get(seg[1:5])) is None else (seg[0], *to, *seg[5:]) for seg in batch]


def _walk(f: CaptureFile, offset: float) -> Iterator[tuple]:
    return f.segments() if not offset else _shifted(f.segments(), offset)


def _merged(files: list[CaptureFile], shifts: list[float]) -> Iterator[tuple]:
    """`heapq.merge` of the files' walks by (shifted) timestamp, ties to the earlier file, with each file
    opened only when the merge reaches its first segment (`CaptureFile.first_ts`, read first with the file
    closed again) and closed after its last: the rotated files of a week of captures hold open the few
    the merge is in, not thousands at once."""
    heap = [(ts, n, None, None) for ts, n in _first_times(files, shifts)]
    while heap:
        _key, n, seg, walk = heap[0]
        if walk is None:  # the merge is at this file's first segment: open it
            walk = _walk(files[n], shifts[n])
            seg = next(walk, None)
            if seg is None:
                heapq.heappop(heap)
                continue
        yield seg
        seg = next(walk, None)
        if seg is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (seg[0], n, seg, walk))


def _first_times(files: list[CaptureFile], shifts: list[float]) -> list[tuple[float, int]]:
    """(the shifted time of its first TCP segment, its place) of each file that has one, in order: where
    a merge opens each file (the files stay closed until then)."""
    firsts = [(f.first_ts(), n) for n, f in enumerate(files)]
    return sorted((ts + shifts[n], n) for ts, n in firsts if ts is not None)


def _shifted(walk: Iterator[tuple], offset: float) -> Iterator[tuple]:
    for seg in walk:
        yield (seg[0] + offset, *seg[1:])


def batched_segments(
    files: list[CaptureFile], offsets: Sequence[float] = (), renames: dict[tuple, tuple] | None = None
) -> Iterator[list[tuple]]:
    """`segments(files, offsets, renames)` in lists, for `Reassembler.batch_events`: the same segments in
    the same order. One file on its own clock gives its walk's batches as they are, in the compiled
    walk's columns when nothing reads them as tuples on the way (no address to rename)."""
    shifts = list(offsets) or [0.0] * len(files)
    if len(files) == 1:
        batches = _batched_walk(files[0], shifts[0], columns=not renames)
    else:
        batches = _merged_batches(files, shifts)
    return batches if not renames else renamed_batches(batches, renames)


def _batched_walk(f: CaptureFile, offset: float, columns: bool = False) -> Iterator[list[tuple]]:
    if not offset:
        return f.segments(batched=True, columns=columns)
    return ([(seg[0] + offset, *seg[1:]) for seg in batch] for batch in f.segments(batched=True))


def _next_batch(walk: Iterator[list[tuple]]) -> list[tuple] | None:
    """A walk's next list that holds a segment (None at its end)."""
    for batch in walk:
        if batch:
            return batch
    return None


# Segments per list the merge of several files gathers runs into (the compiled walk's batches are up to
# 1,024 records).
MERGED_BATCH = 1024


def _merged_batches(files: list[CaptureFile], shifts: list[float]) -> Iterator[list[tuple]]:
    """`_merged` a run of one file's segments at a time: the merge takes a file's next segment while it
    is still the least of all (its timestamp, then the file's place, against the next segment of every
    other file), so a run goes on until a segment of another file comes first. Rotated files, which
    follow one another, give their whole batches; files of hosts captured at once, the runs between
    their segments."""
    # (its next segment's timestamp, file, its batch, that segment's place, walk)
    heap: list[tuple] = [(ts, n, None, 0, None) for ts, n in _first_times(files, shifts)]
    # Runs are gathered into lists of about MERGED_BATCH segments: files of two capture points of the same
    # connections alternate segment by segment, and a list per segment would cost the loops per list.
    out: list[tuple] = []
    while heap:
        _key, n, batch, i, walk = heap[0]
        if walk is None:  # the merge is at this file's first segment: open it
            walk = _batched_walk(files[n], shifts[n])
            batch, i = _next_batch(walk), 0
            if batch is None:
                heapq.heappop(heap)
                continue
        m = len(batch)
        j = i + 1
        if len(heap) == 1:
            j = m
        else:  # the least next segment of the other files: the root's children hold it
            bound = heap[1] if len(heap) == 2 or heap[1] < heap[2] else heap[2]
            limit = bound[0]
            if n < bound[1]:  # a tie goes to the earlier file
                while j < m and batch[j][0] <= limit:
                    j += 1
            else:
                while j < m and batch[j][0] < limit:
                    j += 1
        if i == 0 and j == m and not out:
            yield batch  # a whole batch: as the walk made it
        else:
            out += batch[i:j] if j - i > 1 else (batch[i],)
            if len(out) >= MERGED_BATCH:
                yield out
                out = []
        if j == m:
            batch, j = _next_batch(walk), 0
            if batch is None:
                heapq.heappop(heap)
                continue
        heapq.heapreplace(heap, (batch[j][0], n, batch, j, walk))
    if out:
        yield out


def iter_segments(path: str) -> Iterator[tuple]:
    """Segment tuples `(ts, src_ip, src_port, dst_ip, dst_port, seq, ack, flags, payload)` of one file.

    For engines that partition by connection: feed each group to its own `Reassembler`.
    Raises CaptureError when the file cannot be read at all.
    """
    return CaptureFile(path).segments()


def read_files(paths: Sequence[str], limits: CaptureLimits | None = None) -> CaptureRun:
    """Open capture files and folders (recursively); raises CaptureError for any input we cannot read."""
    if not paths:
        raise CaptureError("no capture files given")
    files: list[CaptureFile] = []
    paths, skipped, skipped_files = expand_inputs(list(paths))
    try:
        for path in paths:
            files.append(CaptureFile(path, limits))
    except CaptureError:
        for f in files:
            f.close()
        raise
    run = CaptureRun(files, limits, skipped)
    run.stats.skipped_files = skipped_files
    return run
