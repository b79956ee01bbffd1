"""The live view (issue 15): counters that stay current when traffic pauses, open transactions per
transactional id aged by the wall clock, and the final report's hanging transactions judged at the stop.

A real capture (a transaction left open by its producer) is fed to the live engine's pipeline the way
the capture loop feeds it; the view reads it as rich's refresh thread does.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from ksniff.capture import read_files
from ksniff.engine.live import LiveView
from ksniff.engine.local import EngineConfig, Pipeline

CAPTURE = Path(__file__).resolve().parents[1] / "pcaps" / "anomalies_tansu.pcap"  # tx-hang stays open


def fed_pipeline(txn_timeout_ms: int = 60_000) -> tuple[object, Pipeline]:
    run = read_files([str(CAPTURE)])
    pipeline = Pipeline(EngineConfig(txn_timeout_ms=txn_timeout_ms))
    for event in run:
        pipeline.feed(event)
    return run, pipeline


def test_counters_catch_up_when_traffic_pauses():
    run, pipeline = fed_pipeline()
    requests = pipeline.decoder.stats.requests  # each one an exchange, answered or not
    held_back = requests - pipeline.exchanges_seen  # waiting for later traffic that never comes
    snap = LiveView(run, pipeline, "lo").snapshot()
    assert held_back > 0, "the capture ends with exchanges still held for reordering"
    assert snap.exchanges == requests
    assert snap.packets == run.stats.packets


def test_open_transactions_are_aged_by_the_wall_clock():
    run, pipeline = fed_pipeline()
    snap = LiveView(run, pipeline, "lo").snapshot()
    assert [(t.transactional_id, t.producer_id) for t, _ in snap.open_transactions] == [("tx-hang", 3)]
    txn, timeout_ms = snap.open_transactions[0]
    assert timeout_ms == 1500  # the producer's own transaction.timeout.ms, from its InitProducerId
    assert snap.now - txn.start_ts > 3600  # the capture is from the past: its age is counted until now
    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    console.print(LiveView(run, pipeline, "lo"))
    text = console.export_text()
    assert "Open transactions (oldest first)" in text
    line = next(line for line in text.splitlines() if line.startswith("tx-hang"))
    assert "3/0" in line and "1.50 s passed" in line


def test_the_final_report_judges_open_transactions_at_the_stop():
    run, pipeline = fed_pipeline(txn_timeout_ms=600_000)
    last_packet = run.stats.last_ts
    stopped = time.time()
    pipeline.tick(stopped)  # what live_audit does when it stops
    output = pipeline.finish()
    hanging = [f for f in output.findings if f.kind == "hanging_transaction"]
    assert [f.transactional_id for f in hanging] == ["tx-hang"]
    assert hanging[0].evidence["capture_end_ts"] == stopped > last_packet
