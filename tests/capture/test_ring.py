"""The copy out of the TPACKET_V3 ring: blocks laid out as the kernel lays them out (tpacket_block_desc,
then per packet a tpacket3_hdr, its sockaddr_ll and the frame) become a pcap file in memory that the
pcap walk reads back to the same frames and times; the compiled copy (`_fastwalk.ring_block`) gives
byte for byte what the reference (`ring.block_records`) gives, on good blocks and on random bytes.

Where the compiled module is not built the comparisons skip (in CI they fail: see test_compiled_walk).
"""

from __future__ import annotations

import struct

import pytest
from capture_builders import Flow, ethernet
from compiled_walk import fastwalk
from hypothesis import given, settings
from hypothesis import strategies as st

from ksniff.capture import ring
from ksniff.capture.files import CaptureFile

BLOCK = 1 << 16
LINK_ETHERNET = 1
OUTGOING_ETHERNET = 0x104  # a packet leaving through an Ethernet device: kept (seen only once)


def block(
    packets: list[tuple[int, int, bytes, int, int]], size: int = BLOCK, count: int | None = None
) -> bytearray:
    """A ring block holding `packets`: (seconds, nanoseconds, frame, wire length, sll_pkttype)."""
    b = bytearray(size)
    first = 48  # the block descriptor, rounded up as the kernel does
    p = first
    for i, (sec, nsec, frame, wire, pkttype) in enumerate(packets):
        mac = 80  # TPACKET_ALIGN(48 + 20) + 16 bytes the kernel keeps free before the link header
        length = (mac + len(frame) + 15) & ~15
        nxt = length if i + 1 < len(packets) else 0
        struct.pack_into("=IIIIIIHH", b, p, nxt, sec, nsec, len(frame), wire, 1, mac, mac + 14)
        hatype = 772 if pkttype == ring.PACKET_OUTGOING else 1
        if pkttype == OUTGOING_ETHERNET:
            pkttype = ring.PACKET_OUTGOING
        struct.pack_into("=HHiHBB", b, p + 48, 17, 0x0300, 1, hatype, pkttype, 6)
        b[p + mac : p + mac + len(frame)] = frame
        p += length
    n = len(packets) if count is None else count
    struct.pack_into("=IIIIII", b, 0, 3, 0, ring.TP_STATUS_USER, n, first, p)
    return b


def frames(n: int) -> list[bytes]:
    f = Flow()
    return [ethernet(f.send(True, bytes([65 + i % 26]) * (10 + 37 * i))) for i in range(n)]


def test_the_layouts_agree():
    assert fastwalk().RING_LAYOUT == ring.RING_LAYOUT


@pytest.mark.parametrize("skip_outgoing", [False, True])
def test_a_block_reads_back_as_a_pcap_file(tmp_path, skip_outgoing):
    fs = frames(6)
    # to this host, leaving through loopback, to this host, to another host, leaving through loopback,
    # leaving through Ethernet
    kinds = [0, ring.PACKET_OUTGOING, 0, 3, ring.PACKET_OUTGOING, OUTGOING_ETHERNET]
    b = block(
        [
            (1_700_000_000 + i, 123_456_789 * i % 10**9, f, len(f) + 4 * (i == 2), k)
            for i, (f, k) in enumerate(zip(fs, kinds, strict=True))
        ]
    )
    head = ring.pcap_header(65535, LINK_ETHERNET)
    out, kept, skipped = ring.block_records(b, 0, BLOCK, skip_outgoing, 100, head)
    keep = [i for i, k in enumerate(kinds) if not (skip_outgoing and k == ring.PACKET_OUTGOING)]
    assert (kept, skipped) == (len(keep), len(fs) - len(keep))
    path = tmp_path / "block.pcap"
    path.write_bytes(out)
    f = CaptureFile(str(path))
    segs = list(f.segments())
    assert [bytes(s[8]) for s in segs] == [bytes(fs[i][54:]) for i in keep]  # the TCP payloads
    assert [s[0] for s in segs] == pytest.approx(
        [1_700_000_000 + i + 123_456_789 * i % 10**9 / 1e9 for i in keep], abs=1e-6
    )
    # the wire length is kept: the third frame was captured 4 bytes short of it
    records = _records(out)
    assert [(cap, wire) for cap, wire in records] == [(len(fs[i]), len(fs[i]) + 4 * (i == 2)) for i in keep]


def _records(pcap: bytes) -> list[tuple[int, int]]:
    out, p = [], 24
    while p < len(pcap):
        _sec, _nsec, cap, wire = struct.unpack_from("=IIII", pcap, p)
        out.append((cap, wire))
        p += 16 + cap
    return out


@pytest.mark.parametrize("limit", [0, 1, 3, 100])
@pytest.mark.parametrize("skip_outgoing", [False, True])
def test_compiled_copy_equals_the_reference(limit, skip_outgoing):
    fast = fastwalk()
    fs = frames(8)
    b = block([(10 + i, i, f, len(f), ring.PACKET_OUTGOING if i % 3 == 1 else 0) for i, f in enumerate(fs)])
    head = ring.pcap_header(262144, LINK_ETHERNET)
    for off in (0, BLOCK):  # the second block of a ring of two
        buf = bytearray(BLOCK) + b if off else b + bytearray(BLOCK)
        want = ring.block_records(buf, off, BLOCK, skip_outgoing, limit, head)
        assert fast.ring_block(buf, off, BLOCK, skip_outgoing, limit, head) == want
        assert want[1] == min(limit, len(fs) - (3 if skip_outgoing else 0))


def test_a_damaged_block_ends_the_copy_where_the_damage_is():
    fast = fastwalk()
    fs = frames(4)
    head = ring.pcap_header(262144, LINK_ETHERNET)
    good = block([(1, 0, f, len(f), 0) for f in fs])
    cases = {
        "count beyond the packets": block([(1, 0, f, len(f), 0) for f in fs], count=50),
        "frame past the block": _poke(good, 48 + 12, 10**6),  # the first packet's snaplen
        "next offset out of the block": _poke(good, 48, BLOCK),
        "first packet out of the block": _poke(good, 16, BLOCK - 10),
        "first packet inside the descriptor": _poke(good, 16, 4),
    }
    for name, b in cases.items():
        want = ring.block_records(b, 0, BLOCK, False, 100, head)
        assert fast.ring_block(b, 0, BLOCK, False, 100, head) == want, name
    assert ring.block_records(cases["count beyond the packets"], 0, BLOCK, False, 100, head)[1] == 4
    assert ring.block_records(cases["frame past the block"], 0, BLOCK, False, 100, head)[1] == 0
    assert ring.block_records(cases["next offset out of the block"], 0, BLOCK, False, 100, head)[1] == 1
    with pytest.raises(ValueError):
        fast.ring_block(good, BLOCK // 2, BLOCK, False, 100, head)
    with pytest.raises(ValueError):
        ring.block_records(good, BLOCK // 2, BLOCK, False, 100, head)


def _poke(b: bytearray, at: int, value: int) -> bytearray:
    c = bytearray(b)
    struct.pack_into("=I", c, at, value)
    return c


@settings(deadline=None, max_examples=300)
@given(st.binary(min_size=68, max_size=4096), st.booleans(), st.integers(0, 50))
def test_random_blocks_copy_alike(data, skip_outgoing, limit):
    fast = fastwalk()
    head = b"H" * 24
    b = bytearray(data)
    # steer the descriptor into the block often enough that packets are walked
    struct.pack_into("=II", b, 12, b[0] % 8, 48 + (b[1] % 4) * 16)
    want = ring.block_records(b, 0, len(b), skip_outgoing, limit, head)
    assert fast.ring_block(b, 0, len(b), skip_outgoing, limit, head) == want
