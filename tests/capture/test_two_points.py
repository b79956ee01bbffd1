"""One capture's connections seen at two capture points (a client's host and a broker's, or both ends of a
NAT): every segment comes twice, the second time as bytes already delivered. Read together, the two
files give the very stream the first one gives alone (the same chunks: a segment's twin does not cut the
chunk being merged), a twin that disagrees is counted and loses, and the reassembler's hot loop in C
takes the twins exactly as the Python loop, its reference, does.

Where the project is built without a C compiler the comparisons with the hot loop skip; in CI they fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from compiled_walk import fastwalk
from pcap_edit import frame_bit_flipped, shifted

from ksniff.capture import compiled, read_files, reassembly
from ksniff.capture.events import StreamChunk, StreamGap

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
TWINNED = ["txn_confluent_tansu.pcap", "idempotent_none_tansu.pcap", "consume_tansu.pcap"]


def _read(paths: list[Path]) -> tuple[list, dict]:
    run = read_files([str(p) for p in paths])
    events = []
    for e in run:
        if e.__class__ is StreamChunk:
            data = e.data if isinstance(e.data, bytes) else b"".join(bytes(p) for p in e.data)
            events.append(("chunk", e.conn, e.from_src, e.offset, data, e.first_ts, e.last_ts, e.marks))
        elif e.__class__ is StreamGap:
            events.append(("gap", e.conn, e.from_src, e.offset, e.length))
        else:
            events.append((type(e).__name__, e.conn))
    stats = {k: getattr(run.stats, k) for k in run.stats.__slots__}
    return events, stats


def _twin(tmp_path: Path, name: str, micros: int = 200) -> tuple[Path, Path]:
    one = PCAPS / name
    return one, shifted(one, tmp_path / f"other_point_{name}", micros)


@pytest.mark.parametrize("name", TWINNED)
def test_a_second_capture_point_changes_nothing_read(tmp_path, name):
    one, other = _twin(tmp_path, name)
    alone, alone_stats = _read([one])
    both, both_stats = _read([one, other])
    assert both == alone
    assert both_stats["overlaps_differing"] == 0
    assert both_stats["packets"] == 2 * alone_stats["packets"]
    assert sum(1 for e in both if e[0] == "chunk") > 10


def test_a_twin_that_disagrees_is_counted_and_loses(tmp_path):
    one = PCAPS / "txn_confluent_tansu.pcap"
    # The copy's 40th record carries payload (a request or answer of the transactions): one bit of it flipped.
    records = _payload_records(one)
    flipped = frame_bit_flipped(one, tmp_path / "flipped.pcap", records[40], 80, 3)
    other = shifted(flipped, tmp_path / "other.pcap", 200)
    alone, _ = _read([one])
    both, stats = _read([one, other])
    assert both == alone
    assert stats["overlaps_differing"] == 1


@pytest.fixture
def hot():
    fast = fastwalk()
    if not hasattr(fast, "inorder"):
        pytest.skip("the compiled capture walk here was built before the hot loop: build it again")
    return fast


@pytest.mark.parametrize("micros", [200, -150, 3000])
@pytest.mark.parametrize("name", TWINNED)
def test_hot_loop_takes_twins_as_the_python_loop(monkeypatch, hot, tmp_path, name, micros):
    one, other = _twin(tmp_path, name, micros)
    records = _payload_records(one)
    flipped = frame_bit_flipped(other, tmp_path / "flipped.pcap", records[len(records) // 2], 70, 1)
    for paths in ([one, other], [one, flipped], [flipped, one]):
        monkeypatch.setattr(compiled, "fastwalk", hot)
        assert reassembly.hot_loop() is not None
        fast = _read(paths)
        monkeypatch.setattr(compiled, "fastwalk", None)
        pure = _read(paths)
        assert fast == pure


def _payload_records(capture: Path) -> list[int]:
    """The records of `capture` (classic pcap, Ethernet, IPv4, TCP) that carry TCP payload."""
    import struct

    data = capture.read_bytes()
    out, pos, n = [], 24, 0
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        frame = data[pos + 16 : pos + 16 + caplen]
        ihl = (frame[14] & 15) * 4
        total = struct.unpack_from(">H", frame, 16)[0]
        doff = (frame[14 + ihl + 12] >> 4) * 4
        if total - ihl - doff > 0:
            out.append(n)
        pos += 16 + caplen
        n += 1
    return out
