"""The compiled capture walk (`ksniff.capture._fastwalk`) against the pure-Python walk, the reference:
the same segments, counts and warnings for every capture of the corpus and for frames of every shape the
walk meets, and the same audit document for every capture of the corpus.

Where the project is built without a C compiler the compiled walk is missing and these tests skip; in CI
(`CI` set) it must have been built, so there they fail instead."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pytest
from capture_builders import LINKS, Flow, ipv4, ipv6, pcap_bytes, pcapng_section, summed, tcp
from compiled_walk import fastwalk

from ksniff.capture import compiled, packets
from ksniff.capture.files import CaptureFile
from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))


@pytest.fixture
def walks(monkeypatch):
    """Runs a function once with the compiled walk and once with the pure-Python one."""
    fast = fastwalk()

    def both(fn):
        monkeypatch.setattr(compiled, "fastwalk", fast)
        a = fn()
        monkeypatch.setattr(compiled, "fastwalk", None)
        b = fn()
        return a, b

    return both


def walk(path, limits=None) -> tuple:
    """The file's segments (types, fields, payload bytes), counts and warnings. With the compiled walk
    in use, the file is walked a second time in its columns (`segments(batched=True, columns=True)`,
    what the reassembler's hot loop reads), which must read as the same segments, counts and warnings."""
    got = _walked(path, limits)
    if compiled.fastwalk is not None:
        columns = _walked(path, limits, columns=True)
        assert columns == got
    return got


def _walked(path, limits=None, columns: bool = False) -> tuple:
    f = CaptureFile(str(path), limits)
    segs = []
    kinds = set()
    if columns:
        batches = list(f.segments(batched=True, columns=True))
        kinds = {type(b).__name__ for b in batches}
        assert kinds <= {"Segments", "list"}  # a list: a segment of the Python loop, alone
        walked = (s for b in batches for s in b)
    else:
        walked = f.segments()
    for s in walked:
        # the payload view becomes bytes; the tuple's types must agree too (float, bytes, int, ...)
        payload = s[8] if isinstance(s[8], int) else bytes(s[8])
        segs.append((tuple(type(x).__name__ for x in s), s[:8], payload))
    c = f.counts
    counted = (c.packets, c.non_tcp, c.fragments, c.cut_short, c.damaged_headers, c.first_ts, c.last_ts)
    counted += (c.damaged_times,)
    return segs, counted, list(f.warnings)


def _views(path) -> list:
    """Every payload view of the file's segments as a user of it sees it: what it is a view of, its
    layout, its bytes, and its bytes read through a slice of it."""
    f = CaptureFile(str(path))
    out = []
    for s in f.segments():
        v = s[8]
        if not isinstance(v, memoryview):
            continue
        out.append(
            (
                type(v.obj).__name__,
                (v.format, v.itemsize, v.ndim, v.shape, v.strides, v.nbytes, v.readonly, v.contiguous),
                (v.c_contiguous, v.f_contiguous, len(v), v.tobytes(), bytes(v[1:-1]), hash(v)),
            )
        )
    f.close()
    return out


@pytest.mark.parametrize("path", CORPUS[:3], ids=lambda p: p.name)
def test_payload_views_are_made_as_slices_of_the_map(walks, path):
    """The compiled walk makes each payload view itself, not by slicing the map's view: every view
    looks and reads as the slice the pure walk makes, a view of the mapped file."""
    fast, pure = walks(lambda: _views(path))
    assert len(fast) == len(pure) > 0
    assert fast == pure
    assert {kind for kind, *_ in fast} == {"mmap"}


def test_payload_views_of_the_map_hold_it_open_and_let_it_go(tmp_path):
    fastwalk()
    path = CORPUS[0]
    f = CaptureFile(str(path))
    views = [s[8] for s in f.segments() if isinstance(s[8], memoryview) and len(s[8])]
    mapped = views[0].obj
    f.close()
    assert not mapped.closed  # views still held keep the map
    with pytest.raises(BufferError):
        mapped.close()
    first = views[0].tobytes()
    views[0].release()  # one view let go: the others still read
    assert views[1].tobytes() == bytes(views[1])
    del views
    mapped.close()  # none left: the map closes
    assert mapped.closed and first


def test_a_batch_in_columns_reads_as_the_list_of_its_segments():
    """A `Segments` batch is a sequence of the segment tuples the list walk makes: its length, each
    index from either end, slices, iteration, and an index past either end refused."""
    fast = fastwalk()
    path = next(p for p in CORPUS if p.suffix == ".pcap")
    listed = [b for b in CaptureFile(str(path)).segments(batched=True)]
    columned = [b for b in CaptureFile(str(path)).segments(batched=True, columns=True)]
    assert len(listed) == len(columned) and type(columned[0]) is fast.Segments
    for a, b in zip(listed, columned, strict=True):
        assert len(a) == len(b)
        assert [s[:8] for s in a] == [s[:8] for s in b]
        assert [bytes(s[8]) for s in a] == [bytes(s[8]) for s in b]
        assert b[-1][:8] == a[-1][:8] and b[0][:8] == a[0][:8] and b[-len(a)][:8] == a[0][:8]
        assert [s[:8] for s in b[1:-1:2]] == [s[:8] for s in a[1:-1:2]]
        for bad in (len(a), -len(a) - 1):
            with pytest.raises(IndexError):
                b[bad]
    with pytest.raises(ValueError):  # a batch without room for the records asked for
        fast.pcap_batch(
            memoryview(path.read_bytes()), 24, 1 << 20, False, 1e6, 1, 12, 14, None, fast.Segments(3), 4, None
        )


def test_codes_agree_with_the_pure_walk():
    fast = fastwalk()
    assert fast.CODES == (packets.FRAGMENT, packets.CUT_SHORT, packets.DAMAGED)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_segments_identical(walks, path):
    fast, pure = walks(lambda: walk(path))
    assert fast[1] == pure[1]
    assert fast[2] == pure[2]
    assert len(fast[0]) == len(pure[0]) > 0
    assert fast[0] == pure[0]


def test_corpus_audit_documents_identical(walks):
    """The whole audit of every capture of the corpus: the same JSON document, byte for byte."""
    config = EngineConfig(keep_tables=False)

    def documents():
        return [json.dumps(audit_paths([str(p)], config).as_contract(), sort_keys=True) for p in CORPUS]

    fast, pure = walks(documents)
    assert len(fast) == len(CORPUS) == len(list(PCAPS.glob("*.expect.json")))
    for path, a, b in zip(CORPUS, fast, pure, strict=True):
        assert a == b, path.name


def _frames() -> list[bytes]:
    """IP packets of every shape the walk treats differently: the common frame, IPv4 options, TCP
    options, a zero total length (offload), a fragment, not TCP, IPv6 with extension headers, a frame
    whose IP length runs past the bytes captured, and a header cut short."""
    flow = Flow()
    frames = flow.handshake() + [flow.send(True, b"x" * 300), flow.send(False, b"y" * 40)]
    frames += [
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 7, 1, "PA", b"opt"), options=b"\x01\x01\x01\x00"),
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 10, 1, "PA", b"tcpopt", options=b"\x01\x01\x01\x00")),
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 16, 1, "PA", b"zero"), total=0),
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 20, 1, "PA", b"frag"), frag=0x2000),
        ipv4("10.0.0.1", "10.0.0.2", b"\0" * 28, proto=17),
        ipv6("fd00::1", "fd00::2", tcp(40001, 9092, 1, 1, "PA", b"six"), ext=[(0, b"\0" * 6)]),
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 24, 1, "PA", b"long"), total=400),
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 28, 1, "PA", b"short"))[:30],
    ]
    return frames


@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("order, nsec", [("<", False), (">", True)])
def test_every_link_type_and_frame_shape_identical(walks, tmp_path, link, order, nsec):
    linktype, frame = LINKS[link]
    path = tmp_path / "shapes.pcap"
    recs = [(1000.0 + i * 0.000123, frame(p)) for i, p in enumerate(_frames())]
    path.write_bytes(pcap_bytes(recs, linktype, order=order, nsec=nsec))
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert fast[1][0] == len(recs)


def test_many_addresses_and_ports_identical(walks, tmp_path):
    """The compiled walk hands out the same address and port objects again while they hold their slots:
    thousands of addresses and ports (more than its slots, so they replace each other back and forth)
    still come out equal to the pure walk's, each segment its own."""
    import random

    rng = random.Random(5)
    frame = LINKS["EN10MB"][1]
    recs = []
    for i in range(6000):
        a = f"10.{rng.randrange(4)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        b = f"192.168.{rng.randrange(3)}.{rng.randrange(1, 255)}"
        ports = (rng.randrange(1024, 65536), rng.choice((9092, 9093, rng.randrange(1, 65536))))
        recs.append((1000.0 + i / 1000, frame(ipv4(a, b, tcp(*ports, i, i + 1, "PA", bytes([i % 256]) * 3)))))
    path = tmp_path / "many.pcap"
    path.write_bytes(pcap_bytes(recs))
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert len({s[1][1:5] for s in fast[0]}) > 5000


@pytest.mark.parametrize("cut", [1, 7, 16, 30, 100])
def test_truncated_and_corrupt_files_identical(walks, tmp_path, cut):
    """A file cut inside its last record, and one whose record length is corrupt, end the same way."""
    flow = Flow()
    recs = [(1000.0 + i, LINKS["EN10MB"][1](p)) for i, p in enumerate(flow.handshake() * 700)]
    data = pcap_bytes(recs)
    (tmp_path / "cut.pcap").write_bytes(data[:-cut])
    fast, pure = walks(lambda: walk(tmp_path / "cut.pcap"))
    assert fast == pure and fast[2] and "truncated" in fast[2][0]
    corrupt = bytearray(data)
    at = 24 + 16 * 5 + sum(len(r[1]) for r in recs[:5]) + 8  # the sixth record's captured length
    corrupt[at : at + 4] = b"\xff\xff\xff\x7f"
    (tmp_path / "corrupt.pcap").write_bytes(bytes(corrupt))
    fast, pure = walks(lambda: walk(tmp_path / "corrupt.pcap"))
    assert fast == pure and fast[1][0] == 5


@pytest.mark.parametrize("gz", [False, True])
def test_records_across_buffer_windows_identical(walks, tmp_path, monkeypatch, gz):
    """Records that straddle the end of the bytes in hand: the compiled walk stops before them and the
    buffer moves on (a plain file's map grows, a gzip stream's window slides)."""
    from ksniff.capture import source

    monkeypatch.setattr(source, "WINDOW", 4096)
    flow = Flow()
    frames = flow.handshake() + [flow.send(True, bytes([i % 251]) * (37 * i % 1400)) for i in range(300)]
    data = pcap_bytes([(1.0 + i / 7, LINKS["EN10MB"][1](p)) for i, p in enumerate(frames)])
    path = tmp_path / ("w.pcap.gz" if gz else "w.pcap")
    path.write_bytes(gzip.compress(data) if gz else data)
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert fast[1][0] == len(frames) and not fast[2]


def _pcapng(order: str) -> bytes:
    """Two sections: interfaces of every link type with microsecond, nanosecond and power-of-two clocks,
    packets of every shape on each, simple packet blocks and blocks a reader skips between them."""
    names = sorted(LINKS)
    clocks = [None, 9, 0x80 | 20, 6, 3, None, 9, 0x80 | 10]
    ifaces = [(LINKS[n][0], r) for n, r in zip(names, clocks, strict=True)]
    pkts: list[tuple] = []
    for i, frame in enumerate(_frames() * 3):
        k = i % len(names)
        pkts.append((k, 1700000000.0 + i * 0.001, LINKS[names[k]][1](frame)))
        if i % 7 == 0:
            pkts.append(("spb", LINKS[names[0]][1](frame)))
    first = pcapng_section(ifaces, pkts, order=order)
    epbs = [(len(names) - 1 - k, ts + 10, f) for k, ts, f in (p for p in pkts if p[0] != "spb")]
    second = pcapng_section(ifaces[::-1], epbs, order=">" if order == "<" else "<")
    return first + second


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_sections_interfaces_and_shapes_identical(walks, tmp_path, order):
    path = tmp_path / "shapes.pcapng"
    data = _pcapng(order)
    path.write_bytes(data)
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert fast[1][0] == 84 and not fast[2]
    # cut inside the last block, and a corrupt block length in the middle
    path.write_bytes(data[:-9])
    fast, pure = walks(lambda: walk(path))
    assert fast == pure and "truncated" in fast[2][0]
    at, seen = 0, 0  # the 20th enhanced packet block of the first section: its length made 13
    while True:
        btype, blen = struct.unpack_from(order + "II", data, at)
        seen += btype == 6
        if seen == 20:
            break
        at += blen
    path.write_bytes(data[: at + 4] + struct.pack(order + "I", 13) + data[at + 8 :])
    fast, pure = walks(lambda: walk(path))
    assert fast == pure and fast[2]


def test_pcapng_interfaces_beyond_the_cap_identical(walks, tmp_path):
    from ksniff.capture.errors import CaptureLimits

    path = tmp_path / "shapes.pcapng"
    path.write_bytes(_pcapng("<"))
    limits = CaptureLimits(max_interfaces=3)
    fast, pure = walks(lambda: walk(path, limits))
    assert fast == pure
    assert any("interface limit" in w for w in fast[2])


def test_pcapng_across_buffer_windows_identical(walks, tmp_path, monkeypatch):
    from ksniff.capture import source

    monkeypatch.setattr(source, "WINDOW", 4096)
    for gz in (False, True):
        path = tmp_path / ("w.pcapng.gz" if gz else "w.pcapng")
        data = _pcapng("<")
        path.write_bytes(gzip.compress(data) if gz else data)
        fast, pure = walks(lambda path=path: walk(path))
        assert fast == pure and not fast[2]


# Packet times as a damaged capture leaves them: (index: shift) spikes a flipped bit makes (days, seconds,
# half a second, 8 ms, each way), a reorder of half a millisecond and a clock stepped back 5 s, neither
# of which is damage. Spikes at the walk's batch edges too (the batch cut to 4 records below).
SPIKES = {3: 2**24, 9: -(2**23), 15: 4.0, 22: -0.5, 26: 0.008, 40: 2.0}
REORDERED, STEPPED = 30, 50


def _times(n: int) -> list[float]:
    times = [1700000000.0 + i * 0.003 for i in range(n)]
    times[REORDERED] -= 0.0035  # 0.5 ms before the packet ahead of it: a queue's reorder, left alone
    for i in range(STEPPED, n):
        times[i] -= 5.0  # the clock stepped back: out of line with the past only, left alone
    for i, shift in SPIKES.items():
        times[i] += shift
    return times


@pytest.mark.parametrize("order, nsec", [("<", False), (">", True)])
def test_damaged_record_times_identical(walks, tmp_path, monkeypatch, order, nsec):
    """A record time out of line with both neighbours (which agree), or one that cannot be (a fraction
    of a second of a second or more), is given the time of the record before it, by both walks alike,
    across the compiled walk's batches; a queue's reorder and a clock stepped back are kept as written."""
    monkeypatch.setattr(compiled, "BATCH", 4)
    frame = LINKS["EN10MB"][1]
    flow = Flow()
    frames = flow.handshake() + [flow.send(True, bytes([i]) * 20) for i in range(60)]
    times = _times(len(frames))
    data = bytearray(pcap_bytes(list(zip(times, map(frame, frames), strict=True)), order=order, nsec=nsec))
    at = 24 + sum(16 + len(frame(f)) for f in frames[:45]) + 4  # record 45's fraction: one second and more
    struct.pack_into(order + "I", data, at, 1_000_000_001 if nsec else 1_000_001)
    path = tmp_path / "times.pcap"
    path.write_bytes(bytes(data))
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    given = [s[1][0] for s in fast[0]]
    # Every spike and the impossible fraction repaired; the spike's neighbour is its predecessor's time.
    assert fast[1][7] == len(SPIKES) + 1  # and record 45's fraction
    for i in (*SPIKES, 45):
        assert given[i] == given[i - 1]
    assert given[REORDERED] == pytest.approx(times[REORDERED], abs=1e-6)
    assert given[STEPPED] == pytest.approx(times[STEPPED], abs=1e-6)
    assert max(given) - min(given) < 6


def test_damaged_packet_times_in_pcapng_identical(walks, tmp_path, monkeypatch):
    """The same rule in a pcapng file, its next packet's time read from the next enhanced packet block
    on whichever interface (two here, one clock in microseconds and one in nanoseconds)."""
    monkeypatch.setattr(compiled, "BATCH", 4)
    frame = LINKS["EN10MB"][1]
    flow = Flow()
    frames = flow.handshake() + [flow.send(True, bytes([i]) * 20) for i in range(60)]
    times = _times(len(frames))
    pkts = [(i % 2, ts, frame(f)) for i, (ts, f) in enumerate(zip(times, frames, strict=True))]
    path = tmp_path / "times.pcapng"
    path.write_bytes(pcapng_section([(1, None), (1, 9)], pkts))
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert fast[1][7] == len(SPIKES)
    given = [s[1][0] for s in fast[0]]
    for i in SPIKES:
        assert given[i] == given[i - 1]


def test_the_slack_is_the_references():
    from ksniff.capture.walk import TIME_SLACK

    assert fastwalk().SLACK == TIME_SLACK


@pytest.mark.parametrize("link", sorted(LINKS))
def test_damaged_ip_headers_identical(walks, tmp_path, link):
    """A packet whose IPv4 header fails its checksum is left out and counted, by both walks alike, on
    the compiled walk's fast path (20-byte header) and off it (options, VLAN tags, other links); a
    header whose checksum is 0 (left to the NIC) is taken as written."""
    linktype, frame = LINKS[link]
    good = [
        summed(ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 1, 1, "PA", b"whole"))),
        summed(ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 6, 1, "PA", b"opts"), options=b"\x01" * 4)),
        ipv4("10.0.0.1", "10.0.0.2", tcp(40000, 9092, 10, 1, "PA", b"nosum")),
    ]
    damaged = []
    for ip, at in ((good[0], 15), (good[1], 9), (good[0], 19), (good[1], 22)):
        flipped = bytearray(ip)
        flipped[at] ^= 0x10  # a source address bit, the protocol, a destination bit, an option byte
        damaged.append(bytes(flipped))
    frames = good + damaged + good
    path = tmp_path / "sums.pcap"
    path.write_bytes(pcap_bytes([(1000.0 + i / 100, frame(ip)) for i, ip in enumerate(frames)], linktype))
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert fast[1][4] == len(damaged)  # damaged_headers
    assert [bytes(s[2]) for s in fast[0]] == [b"whole", b"opts", b"nosum"] * 2


def test_header_checksums_of_every_shape_judged_as_the_reference(walks, tmp_path):
    """Thousands of IPv4 headers on the compiled walk's fast path, their fields drawn at random (all-ones
    and all-zero bytes among them, so the sum carries out of its 16 bits several times): each with its
    checksum right, with one or two bits flipped, or with its checksum's ones' complement "negative
    zero" twin. Both walks keep and leave out the same packets."""
    import random

    rng = random.Random(11)
    frame = LINKS["EN10MB"][1]
    records = []
    for i in range(3000):
        byte = rng.choice((0x00, 0xFF, None))
        octets = [byte if byte is not None else rng.randrange(256) for _ in range(8)]
        src, dst = ".".join(map(str, octets[:4])), ".".join(map(str, octets[4:]))
        ip = bytearray(summed(ipv4(src, dst, tcp(40000, 9092, i, 1, "PA", b"x" * (i % 7)))))
        ip[4:6], ip[8] = rng.randbytes(2), rng.randrange(256)  # the id and the time to live
        ip[10:12] = b"\0\0"
        ip = bytearray(summed(bytes(ip)))
        roll = rng.random()
        if roll < 0.3:
            for _ in range(rng.choice((1, 2))):
                bit = rng.randrange(160)
                ip[bit // 8] ^= 0x80 >> (bit % 8)
        elif roll < 0.4:  # the other encoding of the same sum: 0x0000 and 0xFFFF swapped
            twin = int.from_bytes(ip[10:12], "big") ^ 0xFFFF
            if twin in (0, 0xFFFF):
                ip[10:12] = twin.to_bytes(2, "big")
        records.append((1000.0 + i / 1000, frame(bytes(ip))))
    path = tmp_path / "sums.pcap"
    path.write_bytes(pcap_bytes(records))
    fast, pure = walks(lambda: walk(path))
    assert fast == pure
    assert 500 < fast[1][4] < 1500  # damaged headers left out, and most kept
