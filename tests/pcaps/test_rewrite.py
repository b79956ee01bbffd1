"""The rewritten captures are what tests/pcaps/rewrite.py makes of the real one, and only the edit differs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NAMES = ("lost_write_tansu", "duplicate_write_tansu")


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> Path:
    pytest.importorskip("scapy")
    sys.path.insert(0, str(HERE))
    import rewrite

    out = tmp_path_factory.mktemp("rewritten")
    rewrite.main(["--out", str(out)])
    return out


@pytest.mark.parametrize("name", NAMES)
def test_committed_capture_is_the_tools_output(rebuilt: Path, name: str) -> None:
    assert (rebuilt / f"{name}.pcap").read_bytes() == (HERE / f"{name}.pcap").read_bytes()
    assert json.loads((rebuilt / f"{name}.expect.json").read_text()) == json.loads(
        (HERE / f"{name}.expect.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_only_the_edited_batch_header_and_checksums_differ(name: str) -> None:
    scapy = pytest.importorskip("scapy.all")
    original = scapy.rdpcap(str(HERE / "consume_tansu.pcap"))
    edited = scapy.rdpcap(str(HERE / f"{name}.pcap"))
    assert len(original) == len(edited)
    changed = [(a, b) for a, b in zip(original, edited, strict=True) if bytes(a) != bytes(b)]
    assert len(changed) == 1
    (a, b), = changed
    assert a.time == b.time and len(bytes(a)) == len(bytes(b))
    differing = [i for i, (x, y) in enumerate(zip(bytes(a), bytes(b), strict=True)) if x != y]
    # producer id or base sequence (up to 8 bytes), the batch CRC (4), the TCP checksum (2)
    assert 0 < len(differing) <= 14
