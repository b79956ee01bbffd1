"""The progress bar of a long offline audit (issue 15): it moves with the bytes walked, so rich can show
a rate and an ETA, and says "finishing" once everything is read (the audit's end, the exports)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from ksniff.engine import local
from ksniff.report.progress import progress
from tests.capture.capture_builders import Flow, ethernet, pcap_bytes, pcapng_section

PACKETS = 20_000


def many_packets(path: Path, fmt: str) -> Path:
    flow = Flow()
    frames = [ethernet(p) for p in flow.handshake()]
    frames += [ethernet(flow.send(i % 2 == 0, b"x" * 200)) for i in range(PACKETS)]
    if fmt == "pcap":
        path.write_bytes(pcap_bytes([(1000 + i * 0.001, f) for i, f in enumerate(frames)]))
    else:
        packets = [(0, 1000 + i * 0.001, f) for i, f in enumerate(frames)]
        path.write_bytes(pcapng_section([(1, None)], packets))
    return path


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_progress_follows_the_bytes_walked(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(local, "PROGRESS_SECONDS", 0.0)
    capture = many_packets(tmp_path / f"many.{fmt}", fmt)
    seen: list[tuple[int, int]] = []
    local.audit_paths([str(capture)], progress=lambda done, total: seen.append((done, total)))
    size = capture.stat().st_size
    assert {total for _, total in seen} == {size}
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == size
    # One step per 1,024 packets or so, not one jump per 32 MiB window (the whole file here).
    assert len(set(done)) >= PACKETS // 1024 - 2
    assert max(b - a for a, b in zip(done, done[1:], strict=False)) < size / 10


def test_the_bar_says_finishing_once_everything_is_read():
    console = Console(file=io.StringIO(), force_terminal=True, width=100, color_system=None)
    bar = progress(console, 1000)
    bar.update(400, 1000)
    assert bar._progress.tasks[0].description == "reading"
    bar.update(1000, 1000)
    assert bar._progress.tasks[0].description == "finishing"
    bar.close()
