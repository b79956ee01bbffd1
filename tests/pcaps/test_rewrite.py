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
        (HERE / f"{name}.expect.json").read_text()
    )


@pytest.mark.parametrize("name", NAMES)
def test_only_the_edited_batch_header_and_checksums_differ(name: str) -> None:
    """Beside the relocation (a day later, sequence numbers moved), one packet's batch header differs."""
    scapy = pytest.importorskip("scapy.all")
    original = scapy.rdpcap(str(HERE / "consume_tansu.pcap"))
    edited = scapy.rdpcap(str(HERE / f"{name}.pcap"))
    assert len(original) == len(edited)
    moved = json.loads((HERE / f"{name}.expect.json").read_text())["relocated"]
    assert moved["seconds"] > 0 and moved["tcp_sequence"] > 0
    TCP = scapy.TCP
    for a, b in zip(original, edited, strict=True):
        assert b.time - a.time == moved["seconds"]
        if TCP in a:
            assert (b[TCP].seq - a[TCP].seq) % 2**32 == moved["tcp_sequence"]
    changed = [
        (a, b)
        for a, b in zip(original, edited, strict=True)
        if TCP in a and bytes(a[TCP].payload) != bytes(b[TCP].payload)
    ]
    assert len(changed) == 1
    ((a, b),) = changed
    x, y = bytes(a[TCP].payload), bytes(b[TCP].payload)
    assert len(x) == len(y)
    differing = [i for i, (p, q) in enumerate(zip(x, y, strict=True)) if p != q]
    # producer id or base sequence (up to 8 bytes) and the batch CRC (4)
    assert 0 < len(differing) <= 12


def test_a_rewritten_capture_is_a_capture_set_of_its_own() -> None:
    from ksniff.engine.sets import plan

    sets = plan([str(HERE / "consume_tansu.pcap"), *(str(HERE / f"{n}.pcap") for n in NAMES)])
    assert len(sets) == 3
