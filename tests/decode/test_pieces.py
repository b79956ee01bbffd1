"""Chunks handed to the decoder as their segments' payloads (ChunkMerger.pieces_from, which the local
engine turns on): the decode events are those of the same chunks joined, over the corpus and over large
frames cut anywhere, and what the splitter holds of a frame in pieces is never a view of anything but a
mapped capture file."""

from __future__ import annotations

import gzip
import json
import mmap
import pickle
import random
import shutil
import struct
from pathlib import Path

import pytest
from compiled_walk import fastwalk

from ksniff.capture import read_files
from ksniff.decode import Decoder, connection, frames
from ksniff.decode.frames import FrameSplitter, measure, measure_python

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"


def _corpus():
    for exp in sorted(PCAPS.glob("*.expect.json")):
        doc = json.loads(exp.read_text())
        path = PCAPS / doc["capture"]
        if path.exists():
            yield pytest.param(path, doc["kafka_ports"], id=path.name)


def _decode(path: Path, ports: list[int], pieces_from: int) -> list:
    run = read_files([str(path)])
    run.reassembler.hand_pieces(pieces_from)
    dec = Decoder(ports=tuple(ports), on_not_kafka=run.drop)
    out = []
    for ev in run:
        out += dec.feed(ev)
    out += dec.finish()
    return [*out, dec.stats.as_contract()]


@pytest.mark.parametrize("path, ports", list(_corpus()))
def test_the_corpus_decodes_the_same_from_pieces_as_from_joined_chunks(path, ports, tmp_path, monkeypatch):
    joined = _decode(path, ports, 0)
    assert _decode(path, ports, 1) == joined  # every chunk in pieces: views of the mapped file
    packed = tmp_path / (path.name + ".gz")  # views of an inflated window: held as copies
    with path.open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert _decode(packed, ports, 1) == joined
    # The pieces measured by the pure-Python reference instead of the compiled pass (when it is built).
    monkeypatch.setattr(frames, "measure", measure_python)
    monkeypatch.setattr(connection, "measure", measure_python)
    assert _decode(path, ports, 1) == joined
    assert _decode(packed, ports, 1) == joined


def test_pieces_are_measured_in_c_as_by_the_reference(tmp_path):
    pieces = fastwalk().pieces
    capture = tmp_path / "stream"
    capture.write_bytes(bytes(range(256)) * 64)
    with capture.open("rb") as f:
        view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        other = memoryview(bytes(1000))
        shapes = [
            (),
            [],
            (view[0:1448],),
            tuple(view[a : a + 1448] for a in range(0, 14480, 1514)),
            [view[5:9], view[9:9], view[100:4000]],
            (view[0:10], other[0:10]),
            (b"abc", view[0:3]),
            (b"", b"xyz"),
            (other[3:900],),
            (memoryview(bytearray(7)),),
            (view[0:40:2], view[1:3]),
        ]
        for parts in shapes:
            assert pieces(parts, mmap.mmap) == measure_python(parts), parts
            assert measure(parts) == measure_python(parts)
        # What the one pass does not measure, it leaves to the reference: the same answers.
        for parts in (
            (view.cast("I")[0:3],),
            (bytearray(3),),
            [view[0:4], memoryview(b"ab").cast("B", (1, 2))],
        ):
            assert pieces(parts, mmap.mmap) is None
            assert measure(parts) == measure_python(parts)
        assert pieces("not pieces", mmap.mmap) is None


def _take(splitter: FrameSplitter, data, first_ts, last_ts, offset, marks) -> list:
    """A chunk as the decoder's connection gives it to its splitter (bytes, or a tuple of pieces)."""
    if data.__class__ is tuple:
        if splitter.buf:
            return splitter.take_parts(data, first_ts, last_ts, offset, marks)
        if splitter.start_parts(data, sum(map(len, data)), first_ts, offset, marks):
            return []
        data = b"".join(data)
    return splitter.take(data, first_ts, last_ts, offset, marks)


def _frames(splitter: FrameSplitter, chunks: list) -> list:
    out = []
    for data, first_ts, last_ts, offset, marks in chunks:
        out += [
            (bytes(p), f, t, o, r)
            for p, f, t, o, r in _take(splitter, data, first_ts, last_ts, offset, marks)
        ]
        out.append(
            (splitter.buffered, splitter.need, splitter.buf_offset, splitter.buf_ts, list(splitter.buf_marks))
        )
    return out


def test_large_frames_in_pieces_cut_anywhere_split_as_the_joined_chunks(tmp_path):
    rng = random.Random(17)
    body = [rng.choice((8, 40, 1400, 70_000, 300_000)) for _ in range(40)]
    stream = b"".join(struct.pack(">i", n) + bytes([i % 251]) * n for i, n in enumerate(body))
    capture = tmp_path / "stream"
    capture.write_bytes(stream)
    with capture.open("rb") as f:  # the map stays open as long as views of it live
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        for kind in ("mapped", "bytes", "window"):
            window = memoryview(bytes(stream))
            joined, pieces, pos, t = [], [], 0, 1.0
            while pos < len(stream):
                n = rng.choice((1, 3, 1448, 65_536, 262_144))
                cuts = sorted(
                    {pos, *(rng.randrange(pos, pos + n) for _ in range(rng.randint(0, 30))), pos + n}
                )
                cuts[-1] = min(cuts[-1], len(stream))
                marks = tuple((c, t + i) for i, c in enumerate(cuts[1:-1], 1))
                last = marks[-1][1] if marks else t
                source = {"mapped": view, "window": window}.get(kind)
                parts = tuple(
                    source[a:b] if source is not None else stream[a:b]
                    for a, b in zip(cuts, cuts[1:], strict=False)
                    if b > a
                )
                joined.append((stream[cuts[0] : cuts[-1]], t, last, pos, marks))
                pieces.append((parts, t, last, pos, marks))
                pos, t = cuts[-1], last + 1
            splitter = FrameSplitter(min_size=4)
            assert _frames(splitter, pieces) == _frames(FrameSplitter(min_size=4), joined)
            assert splitter.buffered == 0
            # The marks as the compiled hot loop keeps them (`_fastwalk.Marks`): the same frames and times.
            fast = fastwalk()
            kept = [(parts, t, last, at, fast.Marks(marks)) for parts, t, last, at, marks in pieces]
            splitter = FrameSplitter(min_size=4)
            assert _frames(splitter, kept) == _frames(FrameSplitter(min_size=4), joined)
            assert splitter.buffered == 0


def test_marks_kept_as_numbers_read_as_the_pairs_they_hold():
    """`_fastwalk.Marks` against the tuple of (offset, time) pairs it stands for: length, indexes from
    either end, slices (a new Marks), iteration, equality, append and extend as a list's, the time at
    any offset as `frames._time_at` finds it in the tuple, and values of other types kept as given."""
    fast = fastwalk()
    rng = random.Random(3)
    pairs, at = [], 100
    for _ in range(500):
        at += rng.choice((0, 1, 1448, 70_000))
        pairs.append((at, 1700000000.0 + rng.random()))
    marks = fast.Marks()
    for pair in pairs[:300]:
        marks.append(pair)
    marks.extend(fast.Marks(pairs[300:400]))
    marks.extend(pairs[400:])
    ref = tuple(pairs)
    assert len(marks) == len(ref) and marks == ref and tuple(marks) == ref and list(marks) == list(ref)
    assert marks[0] == ref[0] and marks[-1] == ref[-1] and marks[-500] == ref[0]
    assert type(marks[7][0]) is int and type(marks[7][1]) is float
    part = marks[123:456]
    assert type(part) is fast.Marks and part == ref[123:456] and marks[::7] == ref[::7]
    part.append((10**9, 1.5))
    assert len(marks) == len(ref)  # a slice is a copy
    for bad in (len(ref), -len(ref) - 1):
        with pytest.raises(IndexError):
            marks[bad]
    for m in (0, 1, 250, 499, 500):
        for probe in (0, 100, ref[m - 1][0] if m else 5, ref[min(m, 499)][0] + 1, at + 5, 10**30):
            assert marks.time_at(m, 1.25, probe) == frames._time_at(ref, m, 1.25, probe)
    assert pickle.loads(pickle.dumps(marks)) == ref
    assert fast.Marks() == () and not fast.Marks() and marks != ref[1:]
    # a mark of other types (a test's integer time, a huge offset): kept as given, the rest unchanged
    odd = fast.Marks(pairs[:3])
    odd.append((5, 7))
    odd.append((2**70, 8.5))
    assert tuple(odd) == (*pairs[:3], (5, 7), (2**70, 8.5)) and type(odd[3][1]) is int
    assert odd.time_at(0, 0.5, 6) == frames._time_at(tuple(odd), 0, 0.5, 6)
    assert odd[1:] == (*pairs[1:3], (5, 7), (2**70, 8.5))
    odd.clear()
    assert len(odd) == 0 and odd == ()


def test_a_frame_held_in_pieces_holds_views_of_a_mapped_file_only(tmp_path):
    stream = struct.pack(">i", 100_000) + bytes(100_000)
    capture = tmp_path / "stream"
    capture.write_bytes(stream)
    with capture.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        window = memoryview(bytes(stream) + bytes(10_000_000))  # a large inflated window
        for source, mapped_views in ((view, True), (window, False)):
            splitter = FrameSplitter(min_size=4)
            parts = tuple(source[a : a + 1000] for a in range(0, 50_000, 1000))
            assert _take(splitter, parts, 1.0, 1.0, 0, ()) == []
            assert splitter.buffered == 50_000
            held = [splitter.buf, *splitter.later]
            if mapped_views:
                assert all(isinstance(p, memoryview) and p.obj is mapped for p in held)
            else:  # one copy of the pieces: the window is not kept alive
                assert [type(p) for p in held] == [bytes]
            rest = tuple(source[a : min(a + 1000, len(stream))] for a in range(50_000, len(stream), 1000))
            frames = _take(splitter, rest, 2.0, 2.0, 50_000, ())
            assert [bytes(p) for p, *_ in frames] == [bytes(100_000)]
            assert splitter.buffered == 0
