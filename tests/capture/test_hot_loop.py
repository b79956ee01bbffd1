"""The reassembler's hot loop in C (`_fastwalk.inorder`, run by `Reassembler.batch_events` over the
compiled walk's batches) against the Python loop of `Reassembler.events`, the reference: the same
events (every field, chunk bytes and time marks included), counters and warnings, on every capture of
the corpus and on crafted traffic that leaves the hot path in every way it can (handshakes, several
connections interleaved, retransmissions, reordering, loss, a chunk filling up, idle sweeps, a
connection dropped while its events are read, a 4-tuple used again).

Where the project is built without a C compiler these tests skip; in CI they fail instead."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from capture_builders import Flow, write_ip_packets
from compiled_walk import fastwalk

from ksniff.capture import CaptureLimits, chunks, compiled, read_files, reassembly
from ksniff.capture.chunks import ChunkMerger
from ksniff.capture.events import ConnectionOpened, StreamChunk
from ksniff.capture.files import CaptureFile
from ksniff.capture.halves import MASK, Half
from ksniff.capture.reassembly import Reassembler

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))


@pytest.fixture
def hot():
    """The compiled walk with the hot loop in it: a build older than the loop counts as not built."""
    fast = fastwalk()
    if not hasattr(fast, "inorder"):
        if os.environ.get("CI"):
            pytest.fail("the compiled capture walk was built without the hot loop (pip install -e .)")
        pytest.skip("the compiled capture walk here was built before the hot loop: build it again")
    return fast


def described(event) -> tuple:
    """An event as its class and every field's value (a payload view as bytes), types included; the
    compiled walk's time marks (`_fastwalk.Marks`, on a chunk handed on as its pieces) as the tuple of
    pairs they read as."""
    values = []
    for name in event.__slots__:
        value = getattr(event, name)
        if type(value).__name__ == "Marks":
            value = tuple(value)
        values.append((name, type(value).__name__, bytes(value) if isinstance(value, memoryview) else value))
    return (type(event).__name__, *values)


def read(path, limits=None, on_event=None) -> tuple:
    """Every event of one capture read as `ksniff audit` reads it, then the run's counters and warnings.
    `on_event(run, event)` is called as each event comes (a decoder dropping a connection)."""
    run = read_files([str(path)], limits)
    events = []
    for event in run:
        events.append(described(event))
        if on_event is not None:
            on_event(run, event)
    stats = {k: getattr(run.stats, k) for k in run.stats.__slots__}
    return events, stats, list(run.warnings)


def both(monkeypatch, hot, fn):
    """`fn()` with the hot loop, then with the compiled walk off (the Python walk and loop)."""
    monkeypatch.setattr(compiled, "fastwalk", hot)
    assert reassembly.hot_loop() is not None
    a = fn()
    monkeypatch.setattr(compiled, "fastwalk", None)
    assert reassembly.hot_loop() is None
    b = fn()
    return a, b


def test_slow_flags_agree_with_the_reassembler(hot):
    assert hot.SLOW_FLAGS == reassembly._SLOW_FLAGS


def test_slot_layout_refuses_classes_without_the_slots(hot):
    hot.HotSlots(Half)
    with pytest.raises(TypeError):
        hot.HotSlots(ChunkMerger)

    class NoSlots:
        pass

    with pytest.raises(TypeError):
        hot.HotSlots(NoSlots)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_events_identical(monkeypatch, hot, path):
    fast, pure = both(monkeypatch, hot, lambda: read(path))
    assert fast == pure
    assert any(e[0] == "StreamChunk" for e in fast[0])


def _traffic(seed: int) -> list[tuple[float, bytes]]:
    """Three connections interleaved at random: handshakes, bursts of in-order segments both ways
    (several per capture time, so chunks carry time marks), pure ACKs, retransmissions, segments sent
    late (reordering), lost ones, a pause longer than the idle timeout, closes, and a 4-tuple opened
    again after its close."""
    rng = random.Random(seed)
    flows = [Flow(client=("10.0.0.1", 40000 + i), isn_c=1000 + 7 * i, isn_s=0xFFFFF000 + i) for i in range(3)]
    packets: list[tuple[float, bytes]] = []
    ts = 1000.0
    late: list[bytes] = []
    for f in flows:
        packets += [(ts, p) for p in f.handshake()]
    for step in range(1500):
        if rng.random() < 0.6:
            ts += rng.choice((0.0, 0.0001, 0.002))
        if step == 700:
            ts += 200.0  # every connection idle past the timeout: swept, later bytes open new ones
        f = rng.choice(flows)
        way = rng.random() < 0.7
        roll = rng.random()
        payload = bytes([step % 251]) * rng.choice((1, 60, 1448, 1448, 1448))
        if roll < 0.03:
            late.append(f.send(way, payload))  # sent later: the receiver sees a hole first
        elif roll < 0.04:
            f.send(way, payload)  # lost: a gap when the peer's ACK passes it, or at the end
        elif roll < 0.07 and late:
            packets.append((ts, late.pop(0)))
        elif roll < 0.09:
            packets.append((ts, f.raw(way, f.seq[way] - len(payload), "PA", payload)))  # retransmitted
        elif roll < 0.13:
            packets.append((ts, f.send(way, flags="A")))  # a pure ACK
        else:
            packets.append((ts, f.send(way, payload)))
        if step == 1100:
            packets += [(ts, p) for p in flows[0].close()]
            flows[0] = Flow(client=flows[0].client, isn_c=77, isn_s=99)
            packets += [(ts, p) for p in flows[0].handshake()]
    packets += [(ts, p) for p in late]
    return packets


def _write(path, packets: list[tuple[float, bytes]]) -> None:
    from capture_builders import LINKS, pcap_bytes

    linktype, frame = LINKS["EN10MB"]
    path.write_bytes(pcap_bytes([(t, frame(p)) for t, p in packets], linktype))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_chunk", [256 << 10, 3000])
@pytest.mark.parametrize("small_merger", [False, True], ids=["merger", "small_merger"])
def test_crafted_traffic_identical(monkeypatch, hot, tmp_path, seed, max_chunk, small_merger):
    if small_merger:  # every chunk start past the bound of chunks being merged; tails cut short
        monkeypatch.setattr(chunks, "MAX_PENDING", 2)
        monkeypatch.setattr(chunks, "TAIL_KEPT", 100)
    path = tmp_path / "t.pcap"
    _write(path, _traffic(seed))
    limits = CaptureLimits(max_chunk_bytes=max_chunk, idle_timeout=60.0)
    fast, pure = both(monkeypatch, hot, lambda: read(path, limits))
    assert fast == pure
    kinds = {e[0] for e in fast[0]}
    assert {"ConnectionOpened", "StreamChunk", "StreamGap", "ConnectionClosed"} <= kinds
    assert fast[1]["gaps"] and fast[1]["connections"] > 3  # holes, and the idle ones opened again


def test_connection_dropped_while_read_identical(monkeypatch, hot, tmp_path):
    """The decoder drops a connection at its second chunk (not Kafka): nothing more of it comes, with
    the hot loop as without, and its later bytes are counted under the port asked for."""
    path = tmp_path / "t.pcap"
    _write(path, _traffic(7))
    limits = CaptureLimits(max_chunk_bytes=4000)

    def run():
        seen: dict[int, int] = {}

        def on_event(capture, event):
            if event.__class__ is StreamChunk and event.conn in (1, 2):
                seen[event.conn] = seen.get(event.conn, 0) + 1
                if seen[event.conn] == 2:
                    capture.drop(event.conn, tally=9093 if event.conn == 2 else 0)

        return read(path, limits, on_event)

    fast, pure = both(monkeypatch, hot, run)
    assert fast == pure
    assert fast[1]["kafka_elsewhere_bytes"].get(9093)


def _bulk(folder, answer_every: int = 0):
    """A capture of the bulk shape: 3,000 full segments one way, an ACK the other way every four and,
    with `answer_every`, a small answer every that many segments."""
    f = Flow()
    packets = f.handshake()
    for i in range(3000):
        packets.append(f.send(True, bytes([i % 256]) * 1448))
        if i % 4 == 3:
            packets.append(f.send(False, flags="A"))
        if answer_every and i % answer_every == answer_every - 1:
            packets.append(f.send(False, b"answer" * 10))
    packets += f.close()
    path = folder / "bulk.pcap"
    write_ip_packets(path, packets, step=0.00001)
    return path


def test_one_whole_file_of_in_order_segments(monkeypatch, hot, tmp_path):
    """The bulk shape: long runs of full segments one way and ACKs the other, chunks filling up."""
    path = _bulk(tmp_path)
    fast, pure = both(monkeypatch, hot, lambda: read(path))
    assert fast == pure
    chunks = [e for e in fast[0] if e[0] == "StreamChunk"]
    assert len(chunks) > 10 and all(dict((n, v) for n, _t, v in e[1:])["marks"] for e in chunks[:-1])


def _halves_hold_their_numbers(run) -> int:
    """Checks every direction the reassembler tracks as Python code sees it between two events: its
    sequence number is its stream offset's, and the chunk it is merging ends where its bytes do. The hot
    loop keeps these numbers in C while a run of segments lasts; they must be stored back by then."""
    checked = 0
    for conn in run.reassembler._conns.conns.values():
        for h in conn.halves:
            if h.base is None:
                continue
            assert h.nxt32 == (h.base + h.nxt) & MASK
            if h.parts is not None:
                assert h.p_len == sum(map(len, h.parts))
                assert h.p_off + h.p_len == h.nxt
            checked += 1
    return checked


@pytest.mark.parametrize("pieces", [0, 8], ids=["joined", "pieces"])
def test_directions_hold_their_numbers_between_events(monkeypatch, hot, tmp_path, pieces):
    """The bulk shape through the hot loop: at every event handed out, each direction's `nxt`, `nxt32`
    and chunk length are in their slots, as the Python loop keeps them."""
    path = _bulk(tmp_path, answer_every=500)
    monkeypatch.setattr(compiled, "fastwalk", hot)
    run = read_files([str(path)], CaptureLimits(max_chunk_bytes=32 << 10))
    run.reassembler.hand_pieces(pieces)
    checked = sum(_halves_hold_their_numbers(run) for _ in run)
    assert checked > 200


def test_batches_of_any_segments_match_events(hot):
    """`batch_events` over lists of segment tuples of other types than the walk's (integer times, bytes
    payloads) and with a TICK among them gives what `events` gives over the same segments."""
    client, server = (b"\n\0\0\1", 40000), (b"\n\0\0\2", 9092)
    segs = [(0, *client, *server, 1000, 0, 0x02, b"")]  # the SYN
    seq, t = 1001, 0
    for i in range(400):
        t += i % 3 == 0
        data = bytes([i % 200]) * (50 + i % 7)
        segs.append((t, *client, *server, seq, 5001, 0x18, data))
        seq += len(data)
        if i == 200:
            segs.append((t + 0.5, b"", 0, b"", 0, 0, 0, 0x200, b""))  # the clock moved: flush
    batches = [segs[i : i + 37] for i in range(0, len(segs), 37)]
    a = [described(e) for e in Reassembler(CaptureLimits(max_chunk_bytes=2000)).batch_events(batches)]
    b = [described(e) for e in Reassembler(CaptureLimits(max_chunk_bytes=2000)).events(segs)]
    assert a == b
    assert a[0][0] == ConnectionOpened.__name__ and sum(e[0] == "StreamChunk" for e in a) > 5


def test_a_build_whose_slots_do_not_fit_runs_the_python_loop(monkeypatch, hot, tmp_path):
    """A compiled walk that cannot place the fields it needs (built against other classes) leaves every
    segment to the Python loop: the same events, no error."""

    class Stale:
        def __getattr__(self, name):
            return getattr(hot, name)

        @staticmethod
        def HotSlots(half):  # noqa: N802 - the compiled module's class name
            raise TypeError("Half.fast is not a slot of the class itself")

    path = tmp_path / "t.pcap"
    _write(path, _traffic(3))
    limits = CaptureLimits(max_chunk_bytes=3000, idle_timeout=60.0)
    monkeypatch.setattr(compiled, "fastwalk", Stale())
    stale = read(path, limits)
    monkeypatch.setattr(compiled, "fastwalk", None)
    assert stale == read(path, limits)


def test_chunks_start_and_leave_in_c(monkeypatch, hot, tmp_path):
    """The compiled hot loop starts and lets go the chunks of in-order traffic itself (`Chunks`), without
    the merger's Python methods, which stay the reference the tests above hold it to."""
    if not hasattr(hot, "Chunks"):
        if os.environ.get("CI"):
            pytest.fail("the compiled capture walk was built without its chunk merger (pip install -e .)")
        pytest.skip("the compiled capture walk here was built before its chunk merger: build it again")
    f = Flow()
    packets = f.handshake()
    for i in range(300):  # requests and responses in turn: each segment starts a chunk, the other leaves
        packets.append(f.send(i % 2 == 0, bytes([i % 256]) * (40 + i % 9)))
    packets += f.close()
    path = tmp_path / "pingpong.pcap"
    write_ip_packets(path, packets, step=0.00001)  # all within one chunk cell: no cell's end to sweep
    called = []
    for name in ("start", "flush_half"):
        method = getattr(ChunkMerger, name)

        def counted(self, *args, _method=method, _name=name):
            called.append(_name)
            return _method(self, *args)

        monkeypatch.setattr(ChunkMerger, name, counted)
    monkeypatch.setattr(compiled, "fastwalk", hot)
    events = read(path)[0]
    assert sum(e[0] == "StreamChunk" for e in events) == 300
    assert len(called) <= 2  # the Python loop's, for the segments it takes: the close lets go the last chunk


def read_flows_on_the_clock(path, limits=None, lists=(1 << 30,), seed=0) -> tuple:
    """Every flow (connections on one 4-tuple) of one capture through a reassembler of its own, on the
    whole capture's clock (`Reassembler.clocked_events`, as the Spark engine's stage 2 runs them), the
    segments handed over in lists of sizes drawn from `lists`: each event with its place and clock, then
    every reassembler's counters and the flow's end."""
    from ksniff.capture.files import CaptureFile

    f = CaptureFile(str(path))
    flows: dict[tuple, list] = {}
    pm = float("-inf")
    try:
        for seg in f.segments():
            pm = max(pm, seg[0])
            payload = seg[8] if isinstance(seg[8], int) else bytes(seg[8])
            a, b = (seg[1], seg[2]), (seg[3], seg[4])
            flows.setdefault((a, b) if a <= b else (b, a), []).append((pm, (*seg[:8], payload)))
    finally:
        f.close()
    rng = random.Random(seed)
    out = []
    for flow in flows.values():
        r = Reassembler(limits)
        i = 0
        while i < len(flow):
            n = rng.choice(lists)
            part = flow[i : i + n]
            i += n
            for event in r.clocked_events([s for _pm, s in part], [p for p, _s in part]):
                out.append((described(event), r.place, r.clock))
        for now, kind in r.sweeps(pm):  # the rest of the capture's clock, then its end
            while r.out:
                out.append((described(r.out.popleft()), ("swept", now, kind)))
        r.finish(pm)
        while r.out:
            out.append((described(r.out.popleft()), "end"))
        out.append({k: getattr(r.stats, k) for k in r.stats.__slots__})
    return out


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_flows_on_the_capture_clock_identical(monkeypatch, hot, path):
    """Each flow alone on the whole capture's clock: the hot loop between the sweeps gives what the Python
    loop gives segment by segment (the reference), events, places, clocks and counters."""
    fast, pure = both(monkeypatch, hot, lambda: read_flows_on_the_clock(path, lists=(1, 3, 64, 1 << 30)))
    assert fast == pure
    assert any(e[0][0] == "StreamChunk" for e in fast if isinstance(e, tuple))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("max_chunk", [256 << 10, 3000])
def test_crafted_flows_on_the_capture_clock_identical(monkeypatch, hot, tmp_path, seed, max_chunk):
    path = tmp_path / "t.pcap"
    _write(path, _traffic(seed))
    limits = CaptureLimits(max_chunk_bytes=max_chunk, idle_timeout=60.0)
    fast, pure = both(monkeypatch, hot, lambda: read_flows_on_the_clock(path, limits, (1, 7, 500), seed))
    assert fast == pure
    places = {e[1][2] for e in fast if isinstance(e, tuple) and e[1][0] == 0}
    assert {0, -1} <= places  # let go by segments, and by sweeps and cells' ends before one


# -- several files in one run ----------------------------------------------------------------------------


def _split(tmp_path, seed: int, files: int = 3) -> list[Path]:
    """`_traffic(seed)` as captured by `files` hosts at once: each packet in one file chosen at random
    (so the files' times interleave and tie), some neighbours in a file with their times swapped (a
    file's clock going back), and a last file of the same traffic an hour later (a rotated file)."""
    rng = random.Random(seed)
    parts: list[list[tuple[float, bytes]]] = [[] for _ in range(files)]
    packets = _traffic(seed)
    for ts, packet in packets:
        parts[rng.randrange(files)].append((ts, packet))
    for part in parts:
        for i in range(1, len(part)):
            if rng.random() < 0.05:
                (a, p), (b, q) = part[i - 1], part[i]
                part[i - 1], part[i] = (b, p), (a, q)
    parts.append([(ts + 3600.0, packet) for ts, packet in packets[:400]])
    paths = []
    for n, part in enumerate(parts):
        paths.append(tmp_path / f"host{n}.pcap")
        _write(paths[-1], part)
    return paths


def _segments(batches) -> list[tuple]:
    return [(*seg[:-1], bytes(seg[-1])) for batch in batches for seg in batch]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("offsets", [(), (0.0, 0.0015, -0.002, 0.0, 0.0)], ids=["own clocks", "aligned"])
@pytest.mark.parametrize("walk", ["compiled", "python"])
def test_several_files_in_lists_merge_as_one_at_a_time(monkeypatch, hot, tmp_path, seed, offsets, walk):
    """`batched_segments`: the files' segments in runs of one file's lists, exactly the merge of
    `segments` (by timestamp, ties to the earlier file, each file's clock shifted by its offset)."""
    from ksniff.capture.files import CaptureFile
    from ksniff.capture.run import batched_segments, segments

    monkeypatch.setattr(compiled, "fastwalk", hot if walk == "compiled" else None)
    paths = _split(tmp_path, seed, files=4)
    one_at_a_time = [(*s[:-1], bytes(s[-1])) for s in segments([CaptureFile(str(p)) for p in paths], offsets)]
    lists = list(batched_segments([CaptureFile(str(p)) for p in paths], offsets))
    assert _segments(lists) == one_at_a_time
    assert len(one_at_a_time) > 1500
    if walk == "compiled":  # the Python walk's lists hold one segment each
        assert 1 < len(lists) < len(one_at_a_time) / 2  # runs of several segments, several runs


def _read_run(paths, limits=None, offsets=()) -> tuple:
    """`read` of several files as one run (`CaptureRun`, the files' clocks shifted by `offsets`)."""
    from ksniff.capture.files import CaptureFile
    from ksniff.capture.run import CaptureRun

    run = CaptureRun([CaptureFile(str(p), limits) for p in paths], limits, offsets=offsets)
    events = [described(event) for event in run]
    stats = {k: getattr(run.stats, k) for k in run.stats.__slots__}
    return events, stats, list(run.warnings)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("offsets", [(), (0.0, 0.0015, -0.002, 0.0)], ids=["own clocks", "aligned"])
def test_several_files_through_the_hot_loop_identical(monkeypatch, hot, tmp_path, seed, offsets):
    """Hosts captured at once and a rotated file, read as one run: with the hot loop over the merged
    lists, the events, counters and warnings of the Python loop over the merge one segment at a time."""
    paths = _split(tmp_path, seed)
    limits = CaptureLimits(max_chunk_bytes=3000, idle_timeout=60.0)
    fast, pure = both(monkeypatch, hot, lambda: _read_run(paths, limits, offsets))
    assert fast == pure
    assert {"StreamChunk", "StreamGap", "ConnectionClosed"} <= {e[0] for e in fast[0]}


def test_the_corpus_as_one_run_identical(monkeypatch, hot):
    """Every capture of the corpus read as one run (`ksniff audit` of the folder as one capture set)."""
    fast, pure = both(monkeypatch, hot, lambda: _read_run(CORPUS))
    assert fast == pure
    assert sum(e[0] == "StreamChunk" for e in fast[0]) > 1000


# -- the walk's batches in columns (`_fastwalk.Segments`) -----------------------------------------------


class _Spied:
    """The compiled walk, with its hot loop counting the kinds of batch it is given."""

    def __init__(self, hot):
        self._hot = hot
        self.kinds: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self._hot, name)

    def inorder(self, segs, *args):
        self.kinds[type(segs).__name__] = self.kinds.get(type(segs).__name__, 0) + 1
        return self._hot.inorder(segs, *args)


def test_one_file_reaches_the_hot_loop_in_columns(monkeypatch, hot):
    """A single file read on its own clock hands the hot loop its walk's columns, not lists of tuples;
    several files merged by time, lists (the merge reads each segment's time)."""
    spied = _Spied(hot)
    monkeypatch.setattr(compiled, "fastwalk", spied)
    path = next(p for p in CORPUS if p.suffix == ".pcap")
    read(path)
    assert spied.kinds.get("Segments", 0) > 0 and "list" not in spied.kinds
    spied.kinds.clear()
    _read_run(CORPUS[:2])
    assert spied.kinds.get("list", 0) > 0 and "Segments" not in spied.kinds


def _mixed_shapes(tmp_path, link: str) -> Path:
    """Three connections through the same batches: IPv4 of the common shape (read from the columns),
    IPv4 with options and IPv6 (both made into tuples by the Python parser), in turn, each with bursts
    of several segments per capture time (time marks), pure ACKs and a retransmission."""
    from capture_builders import ipv4, tcp

    flows = [Flow(client=("10.0.0.1", 40000)), Flow(client=("fd00::1", 40001), server=("fd00::2", 9092))]
    optioned = Flow(client=("10.0.0.3", 40002))
    packets: list[bytes] = []
    for f in (*flows, optioned):
        packets += f.handshake()
    for i in range(900):
        k = i % 3
        payload = bytes([i % 251]) * (1 + (i * 37) % 1448)
        if k < 2:
            f = flows[k]
            packets.append(f.send(i % 5 != 4, payload) if i % 11 else f.send(False, flags="A"))
            if i % 97 == 0:
                packets.append(f.raw(True, f.seq[True] - len(payload), "PA", payload))
        else:  # IP options: the walk's parser, not its common frame
            seq = optioned.seq[True]
            optioned.seq[True] = (seq + len(payload)) & MASK
            segment = tcp(40002, 9092, seq, optioned.seq[False], "PA", payload)
            packets.append(ipv4("10.0.0.3", "10.0.0.2", segment, options=b"\x01\x01\x01\x00"))
    path = tmp_path / "mixed.pcap"
    write_ip_packets(path, packets, link=link, step=0.0000004)  # several segments per microsecond
    return path


@pytest.mark.parametrize("link", ["EN10MB", "LINUX_SLL2", "RAW"])
@pytest.mark.parametrize("max_chunk", [256 << 10, 3000])
def test_columns_and_parsed_tuples_in_one_batch_identical(monkeypatch, hot, tmp_path, link, max_chunk):
    """Batches in columns that also hold tuples the Python parser made (IPv6, IP options): the same
    events, counters and warnings as the Python loop, and every kind of segment reached the hot loop."""
    path = _mixed_shapes(tmp_path, link)
    limits = CaptureLimits(max_chunk_bytes=max_chunk)
    fast, pure = both(monkeypatch, hot, lambda: read(path, limits))
    assert fast == pure
    chunks = [dict((n, v) for n, _t, v in e[1:]) for e in fast[0] if e[0] == "StreamChunk"]
    assert {c["conn"] for c in chunks} == {1, 2, 3} and any(c["marks"] for c in chunks)
    monkeypatch.setattr(compiled, "fastwalk", hot)
    batches = list(CaptureFile(str(path)).segments(batched=True, columns=True))
    inside = [s for b in batches if type(b) is hot.Segments for s in b]
    assert {len(s[1]) for s in inside} == {4, 16}  # IPv4 from the columns and IPv6 from the parser


def _directions(run) -> list[tuple]:
    """Every direction's state that the hot loop writes, as Python code sees it between two events."""
    out = []
    for conn in run.reassembler._conns.conns.values():
        for h in conn.halves:
            parts = None if h.parts is None else [bytes(p) for p in h.parts]
            marks = None if h.p_marks is None else list(h.p_marks)
            out.append((conn.id, h.from_src, h.last_ts, h.ack_out, h.nxt, h.nxt32, parts, h.p_off, h.p_len))
            out.append((h.p_first, h.p_last, marks, h.p_at, h.tail, h.tail_off))
    return out


@pytest.mark.parametrize("pieces", [0, 8], ids=["joined", "pieces"])
def test_directions_between_events_as_the_python_loop_leaves_them(monkeypatch, hot, tmp_path, pieces):
    """At every event handed out, every direction's time of its last segment, acknowledgement number,
    sequence numbers and chunk being merged are what the Python loop leaves there: the hot loop keeps
    some of them in C while a run of segments lasts (and the columns' times and acknowledgements as C
    numbers), and must have stored them back by then."""
    path = _mixed_shapes(tmp_path, "EN10MB")

    def states():
        run = read_files([str(path)], CaptureLimits(max_chunk_bytes=8 << 10))
        run.reassembler.hand_pieces(pieces)
        return [(described(event), _directions(run)) for event in run]

    fast, pure = both(monkeypatch, hot, states)
    assert len(fast) == len(pure) > 100
    for a, b in zip(fast, pure, strict=True):
        assert a == b


def test_chunks_in_pieces_keep_the_hot_loops_marks(monkeypatch, hot, tmp_path):
    """Bulk traffic through the hot loop: the time marks of a chunk of many segments are kept as numbers
    (`Marks`) on a chunk handed on as its pieces; joined chunks, and chunks of a few marks, carry the
    tuple of their pairs."""
    monkeypatch.setattr(compiled, "fastwalk", hot)
    path = _bulk(tmp_path, answer_every=500)
    for pieces, kinds in ((1, {hot.Marks, tuple}), (0, {tuple})):
        run = read_files([str(path)])
        run.reassembler.hand_pieces(pieces)
        marks = [e.marks for e in run if type(e) is StreamChunk and e.marks]
        assert {type(m) for m in marks} == kinds
        assert all(len(m) > 8 for m in marks if type(m) is hot.Marks)


def test_many_connections_interleaved_identical(monkeypatch, hot, tmp_path):
    """Hundreds of connections sending in turn (more directions than the hot loop's table of directions
    has slots, so they share slots and replace each other), some closed and opened again on the same
    4-tuple: the hot loop over columns gives the Python loop's events."""
    rng = random.Random(9)
    # a few client hosts, each with many connections (directions that differ only by their port)
    flows = [Flow(client=(f"10.1.0.{1 + i % 5}", 30000 + i)) for i in range(700)]
    packets: list[bytes] = []
    for f in flows:
        packets += f.handshake()
    for step in range(6000):
        i = rng.randrange(len(flows))
        f = flows[i]
        packets.append(f.send(rng.random() < 0.6, bytes([step % 251]) * rng.choice((1, 90, 1448))))
        if step % 997 == 0:  # closed, then the same 4-tuple opened again
            packets += f.close()
            flows[i] = Flow(client=f.client, isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
            packets += flows[i].handshake()
    path = tmp_path / "many.pcap"
    write_ip_packets(path, packets, step=0.0000003)
    fast, pure = both(monkeypatch, hot, lambda: read(path, CaptureLimits(max_chunk_bytes=4000)))
    assert fast == pure
    chunks = [dict((n, v) for n, _t, v in e[1:]) for e in fast[0] if e[0] == "StreamChunk"]
    assert len({c["conn"] for c in chunks}) > 700
