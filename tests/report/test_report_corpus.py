"""The terminal report of real captures, at 80 columns, against reviewed snapshots.

These pin what an on-call engineer reads for the corpus stories: a zombie rejected by the broker
(Tansu) and the deliberate anomalies. `KSNIFF_UPDATE_SNAPSHOTS=1` rewrites them after a reviewed change.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths
from ksniff.report.terminal import render_report

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"


def report_text(name: str, **options) -> str:
    cwd = os.getcwd()
    os.chdir(PCAPS)  # the header names the input as given: keep it independent of where tests run
    try:
        result = audit_paths([name], EngineConfig(keep_tables=True))
    finally:
        os.chdir(cwd)
    console = Console(record=True, width=80, color_system=None, file=io.StringIO())
    render_report(console, result, **options)
    return console.export_text()


@pytest.mark.parametrize("name", ["txn_confluent_tansu.pcap", "anomalies_tansu.pcap"])
def test_full_report_of_a_real_capture(name, snapshot):
    text = report_text(name)
    assert max(len(line) for line in text.splitlines()) <= 80
    snapshot(f"corpus_{Path(name).stem}", text)


def test_producer_timeline_of_a_real_capture(snapshot):
    text = report_text("txn_confluent_tansu.pcap", quiet=True, producer="tx-A")
    assert "InitProducerId" in text and "PRODUCER_FENCED" in text
    snapshot("corpus_txn_confluent_tansu_timeline", text)
