"""Real captures from tests/pcaps: what ksniff reassembles agrees with tshark, format by format."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from ksniff.capture import read_files
from ksniff.capture.events import ConnectionOpened, StreamChunk, StreamGap
from ksniff.capture.files import looks_like_capture

CORPUS = Path(__file__).resolve().parent.parent / "pcaps"
CAPTURES = sorted(p for p in CORPUS.rglob("*") if p.is_file() and looks_like_capture(str(p)))

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


def tshark_directions(path: Path) -> dict[tuple[str, str], int]:
    """Bytes covered by TCP payloads per (sender, receiver), retransmitted ranges counted once."""
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(path),
            "-Y",
            "tcp",
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-o",
            "tcp.relative_sequence_numbers:FALSE",
            "-o",
            "tcp.desegment_tcp_streams:FALSE",
            "-e",
            "tcp.stream",
            "-e",
            "ip.src",
            "-e",
            "ipv6.src",
            "-e",
            "tcp.srcport",
            "-e",
            "ip.dst",
            "-e",
            "ipv6.dst",
            "-e",
            "tcp.dstport",
            "-e",
            "tcp.seq",
            "-e",
            "tcp.len",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ranges: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for line in out.splitlines():
        stream, s4, s6, sport, d4, d6, dport, seq, length = line.split("|")
        if int(length or 0):
            key = (stream, f"{s4 or s6}:{sport}", f"{d4 or d6}:{dport}")
            ranges[key].append((int(seq), int(length)))
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for (_stream, src, dst), segs in ranges.items():
        totals[(src, dst)] += _covered(segs)
    return dict(totals)


def _covered(segs: list[tuple[int, int]]) -> int:
    """Size of the union of [seq, seq + len) ranges, unwrapping 32-bit sequence numbers."""
    base = segs[0][0]
    spans = sorted((((s - base) & 0xFFFFFFFF), ((s - base) & 0xFFFFFFFF) + n) for s, n in segs)
    total, reach = 0, 0
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def ksniff_directions(path: Path):
    run = read_files([str(path)])
    ends = {}
    totals: dict[tuple[str, str], int] = defaultdict(int)
    gaps = 0
    for e in run:
        if isinstance(e, ConnectionOpened):
            ends[e.conn] = (_plain(e.src), _plain(e.dst))
        elif isinstance(e, StreamChunk):
            src, dst = ends[e.conn]
            totals[(src, dst) if e.from_src else (dst, src)] += len(e.data)
        elif isinstance(e, StreamGap):
            gaps += e.length
    return dict(totals), gaps, run


def _plain(endpoint) -> str:
    return f"{endpoint.ip}:{endpoint.port}"


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_reassembled_bytes_match_tshark(path):
    ours, gap_bytes, run = ksniff_directions(path)
    theirs = tshark_directions(path)
    assert ours == theirs
    assert run.inputs[0].packets == run.stats.packets
    # Gaps exactly where tshark sees segments missing from the capture.
    lost = tshark_count(path, "tcp.analysis.lost_segment or tcp.analysis.ack_lost_segment")
    assert (gap_bytes > 0) == (lost > 0)


def tshark_count(path: Path, display_filter: str) -> int:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.split())


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_packet_count_matches_tshark(path):
    run = read_files([str(path)])
    for _ in run:
        pass
    assert run.stats.packets == tshark_count(path, "frame")


def test_corpus_folder_reads_as_one_run():
    if not CAPTURES:
        pytest.skip("no captures in tests/pcaps yet")
    run = read_files([str(CORPUS)])
    for _ in run:
        pass
    assert len(run.inputs) == len(CAPTURES)
    assert run.stats.packets == sum(i.packets for i in run.inputs)
