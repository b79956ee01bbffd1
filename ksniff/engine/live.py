"""The live engine: capture from an interface, audit as traffic flows, show a live view on stderr.

It stops at --duration, --count, Ctrl-C or SIGTERM, whichever comes first; what was captured up to
then is audited in full and reported, so stopping loses nothing.
"""

from __future__ import annotations

import signal
import threading
import time

from rich.console import Console
from rich.live import Live

from ksniff.capture.live import open_live
from ksniff.engine.local import EngineConfig, Pipeline, RowSink, fewer_collections
from ksniff.engine.sets import CaptureSet
from ksniff.report.live import LiveSnapshot, live_view
from ksniff.report.text import shown
from ksniff.result import AuditResult, stamp_set


def capture_filter(ports: tuple[int, ...], explicit_ports: bool, bpf: str | None) -> str:
    """The kernel filter: the named ports when given, else all TCP (Kafka is auto-detected on any port)."""
    base = " or ".join(f"tcp port {p}" for p in ports) if explicit_ports else "tcp"
    return f"({base}) and ({bpf})" if bpf else base


class LiveView:
    """The live view's data, read a few times a second by rich's refresh thread. The engine's loop holds
    `lock` while it feeds an event; the view takes it to move the pipeline's clock on to the wall clock
    (so what waited for more traffic is audited and the counters stay current when traffic pauses) and
    to read the counters."""

    def __init__(self, run, pipeline: Pipeline, iface: str, lock: threading.Lock | None = None) -> None:
        self.run, self.pipeline, self.iface = run, pipeline, iface
        self.lock = lock or threading.Lock()
        self.started = time.time()
        self._last = (self.started, 0)
        self._rate = 0.0

    def snapshot(self) -> LiveSnapshot:
        now = time.time()
        with self.lock:
            self.pipeline.tick(now)
            n = self.pipeline.exchanges_seen
            auditor = self.pipeline.auditor
            producers = len(auditor.state.producers)
            open_txns = auditor.open_transactions()
            findings = list(self.pipeline.findings_so_far)
        t0, n0 = self._last
        if now - t0 >= 1.0:
            self._rate, self._last = (n - n0) / (now - t0), (now, n)
        stats = self.run.stats
        return LiveSnapshot(
            iface=self.iface,
            now=now,
            elapsed=now - self.started,
            packets=stats.packets,
            kernel_drops=stats.kernel_drops,
            exchanges=n,
            per_second=self._rate,
            producers=producers,
            open_transactions=open_txns,
            findings=findings,
        )

    def __rich__(self):
        return live_view(self.snapshot())


def live_audit(
    iface: str,
    config: EngineConfig,
    *,
    console: Console,
    duration: float | None,
    count: int | None,
    write_path: str | None,
    bpf: str | None,
    quiet: bool = False,
    explicit_ports: bool = False,
    tables: RowSink | None = None,
) -> AuditResult:
    filter_text = capture_filter(config.ports, explicit_ports, bpf)
    run = open_live(
        iface, bpf=filter_text, count=count, duration=duration, write_path=write_path, limits=config.limits
    )
    pipeline = Pipeline(config, on_not_kafka=run.drop, capture=run.reassembler, tables=tables)
    # The handler first: a SIGTERM sent as soon as the line below is read must stop the capture cleanly.
    stop_on_term = _stop_on_sigterm(run)
    try:
        if not quiet:
            console.print(
                f"ksniff: capturing on {shown(iface)} ({shown(filter_text, 4096)}); Ctrl-C stops and reports",
                markup=False,
                highlight=False,
            )
        lock = threading.Lock()
        with (
            Live(
                LiveView(run, pipeline, iface, lock),
                console=console,
                refresh_per_second=4,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            if (console.is_terminal and not quiet)
            else _Nothing()
        ):
            try:
                with fewer_collections():
                    for event in run:
                        with lock:
                            pipeline.feed(event)
            except KeyboardInterrupt:
                run.stop()
                for event in run:  # what the capture already holds
                    pipeline.feed(event)
    finally:
        stop_on_term()
    # Ages and hanging transactions on the wall clock: a transaction abandoned a minute before the stop
    # was open for that minute, whenever its last packet came.
    stopped = time.time()
    pipeline.tick(stopped)
    stats = run.stats
    if stats.first_ts is not None:  # the capture lasted until the stop, not until its last packet
        stats.last_ts = max(stats.last_ts or stopped, stopped)
    result = pipeline.result(run, "live")
    stamp_set(result, CaptureSet(1, (iface,), ("one live capture",)), pipeline.identity)
    return result


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stop_on_sigterm(run):
    """SIGTERM and the first Ctrl-C ask the capture to stop; it then drains what the kernel holds.

    A KeyboardInterrupt raised at an arbitrary point could cut an event's decoding in half and lose the
    exchange in progress, so SIGINT is a request too; a second Ctrl-C interrupts for real.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous_int = signal.getsignal(signal.SIGINT)

    def on_int(*_):
        run.stop()
        signal.signal(signal.SIGINT, previous_int)

    previous_term = signal.signal(signal.SIGTERM, lambda *_: run.stop())
    signal.signal(signal.SIGINT, on_int)

    def restore():
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)

    return restore
