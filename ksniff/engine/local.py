"""The in-process engine: capture -> decode -> audit in one streaming pass, memory bounded.

The decoder emits an exchange when its response arrives (or when it is known to have none), while the
audit wants events in the order the requests were sent, across all connections. A small heap holds
events for `reorder_window` seconds of capture time and releases them in request order; an exchange
slower than the window is released late, which the audit tolerates.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ksniff.audit import AuditConfig, Auditor
from ksniff.capture import CaptureLimits, read_files
from ksniff.capture.events import ConnectionOpened
from ksniff.decode import Decoder
from ksniff.decode.decoder import DEFAULT_MAX_IN_FLIGHT
from ksniff.decode.events import DecodeEvent, Exchange
from ksniff.decode.frames import DEFAULT_MAX_FRAME
from ksniff.report.tables import batch_row, exchange_row, record_rows
from ksniff.result import AuditResult


@dataclass(frozen=True, slots=True)
class EngineConfig:
    ports: tuple[int, ...] = (9092,)
    auto_detect: bool = True
    txn_timeout_ms: int | None = None
    keep_tables: bool = True  # build exchange and batch rows (exports, --producer); off saves memory
    keep_records: bool = False
    reorder_window: float = 5.0
    limits: CaptureLimits | None = None  # the reassembler's caps (connections, out-of-order bytes)
    max_frame: int = DEFAULT_MAX_FRAME  # bytes; a frame claiming more is skipped and counted
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # requests awaiting a response, per connection


def event_ts(event: DecodeEvent) -> float:
    return event.request_ts if isinstance(event, Exchange) else event.ts


class Reorder:
    """Releases decode events in timestamp order once they are older than the window."""

    def __init__(self, window: float) -> None:
        self._window = window
        self._heap: list[tuple[float, int, DecodeEvent]] = []
        self._seq = itertools.count()

    def push(self, event: DecodeEvent) -> None:
        heapq.heappush(self._heap, (event_ts(event), next(self._seq), event))

    def release(self, now: float) -> Iterable[DecodeEvent]:
        horizon = now - self._window
        heap = self._heap
        while heap and heap[0][0] <= horizon:
            yield heapq.heappop(heap)[2]

    def drain(self) -> Iterable[DecodeEvent]:
        while self._heap:
            yield heapq.heappop(self._heap)[2]


class Pipeline:
    """Decode + reorder + audit + tables over a stream of capture events; shared by audit and live."""

    def __init__(self, config: EngineConfig, on_not_kafka: Callable[[int], None] | None = None) -> None:
        self.config = config
        self.decoder = Decoder(ports=config.ports, auto_detect=config.auto_detect,
                               on_not_kafka=on_not_kafka, keep_records=config.keep_records,
                               max_frame=config.max_frame, max_in_flight=config.max_in_flight)
        audit_config = AuditConfig() if config.txn_timeout_ms is None else AuditConfig(
            txn_timeout_ms=config.txn_timeout_ms)
        self.auditor = Auditor(audit_config)
        self.reorder = Reorder(config.reorder_window)
        self.exchanges: list[dict] = []
        self.batches: list[dict] = []
        self.findings_so_far: list = []
        self.last_ts: float | None = None
        self.exchanges_seen = 0
        self.records: list[dict] | None = [] if config.keep_records else None

    def feed(self, capture_event) -> None:
        ts = getattr(capture_event, "ts", None) or getattr(capture_event, "last_ts", None)
        for event in self.decoder.feed(capture_event):
            self.reorder.push(event)
        if ts is not None and not isinstance(capture_event, ConnectionOpened):
            self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
            for event in self.reorder.release(self.last_ts):
                self._audit(event)

    def _audit(self, event: DecodeEvent) -> None:
        if isinstance(event, Exchange):
            self.exchanges_seen += 1
            if self.config.keep_tables:
                self.exchanges.append(exchange_row(event))
                self.batches.extend(batch_row(b) for b in event.batches)
            if self.records is not None:
                for b in event.batches:
                    self.records.extend(record_rows(b))
        self.findings_so_far.extend(self.auditor.feed(event))

    def finish(self):
        for event in self.decoder.finish():
            self.reorder.push(event)
        for event in self.reorder.drain():
            self._audit(event)
        return self.auditor.finish(self.last_ts)


def audit_paths(paths: Sequence[str], config: EngineConfig | None = None,
                progress: Callable[[int, int], None] | None = None) -> AuditResult:
    """Audit capture files or folders in-process. Raises CaptureError for inputs that cannot be read."""
    config = config or EngineConfig()
    run = read_files(list(paths), config.limits)
    pipeline = Pipeline(config, on_not_kafka=run.drop)
    for n, event in enumerate(run):
        pipeline.feed(event)
        if progress is not None and n % 4096 == 0:
            progress(run.bytes_read, run.bytes_total)
    output = pipeline.finish()
    stats = run.stats
    stats.kafka_connections = pipeline.decoder.kafka_connections
    return AuditResult(
        inputs=list(run.inputs),
        capture=stats,
        decode=pipeline.decoder.stats,
        producers=list(output.producers),
        transactions=list(output.transactions),
        findings=list(output.findings),
        exchanges=sorted(pipeline.exchanges, key=lambda r: r["ts"]),
        batches=sorted(pipeline.batches, key=lambda r: r["ts"]),
        engine="local",
        warnings=list(run.warnings) + pipeline.decoder.warnings(),
        records=pipeline.records,
    )
