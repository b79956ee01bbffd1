"""The frame splitter over chunks cut anywhere: large frames arrive as several reassembled chunks (bulk
Produce requests of hundreds of KB in chunks of 256 KiB); what it holds while a frame is incomplete is
counted, and a gap gives it up."""

from __future__ import annotations

import random
import struct

from ksniff.decode.frames import FrameSplitter


def _stream(sizes: list[int]) -> tuple[bytes, list[tuple[int, bytes]]]:
    """Frames of these body sizes back to back: the stream and (offset, body) of each frame."""
    out, frames, pos = [], [], 0
    for i, size in enumerate(sizes):
        body = bytes([i % 251]) * size
        out.append(struct.pack(">i", size) + body)
        frames.append((pos, body))
        pos += 4 + size
    return b"".join(out), frames


def test_frames_cut_anywhere_come_out_whole_with_their_times_and_offsets():
    rng = random.Random(17)
    sizes = [rng.choice((8, 40, 700, 70_000, 300_000, 900_000)) for _ in range(60)]
    data, frames = _stream(sizes)
    splitter = FrameSplitter(min_size=4)
    got, pos, chunk_no = [], 0, 0
    starts = {}  # stream offset of each chunk -> its time
    while pos < len(data):
        n = rng.choice((1, 3, 1448, 65_536, 262_144, 262_144))
        chunk = data[pos : pos + n]
        ts = 1000.0 + chunk_no
        starts[pos] = ts
        out = splitter.feed(chunk, ts, ts, pos)
        got.extend(out)
        pos += len(chunk)
        chunk_no += 1
        held = pos - (got[-1].offset + 4 + len(got[-1].payload) if got else 0)
        assert splitter.buffered == held
    assert splitter.buffered == 0
    assert [(f.offset, bytes(f.payload)) for f in got] == frames
    for f in got:  # a frame's first time is that of the chunk holding its first byte
        first_chunk = max(off for off in starts if off <= f.offset)
        assert f.first_ts == starts[first_chunk]


def test_a_gap_inside_a_frame_held_in_several_chunks_gives_it_up():
    data, _frames = _stream([600_000, 50])
    splitter = FrameSplitter(min_size=4)
    assert splitter.feed(data[:200_000], 1.0, 1.0, 0) == []
    assert splitter.feed(data[200_000:400_000], 2.0, 2.0, 200_000) == []
    assert splitter.buffered == 400_000
    splitter.gap()
    assert splitter.buffered == 0 and splitter.skipped == 400_000


def test_a_frames_times_are_its_own_segments_however_the_segments_were_merged_into_chunks():
    # The reassembler merges consecutive segments into one chunk until other traffic cuts it, and says
    # where the capture time changes inside it (StreamChunk.marks). Whatever the merging, a frame's
    # times are those of the segments holding its first and last bytes: a request's time is when it was
    # sent, not when the chunk it shares with the request before it started.
    rng = random.Random(29)
    sizes = [rng.choice((8, 40, 700, 3000, 70_000)) for _ in range(200)]
    data, frames = _stream(sizes)
    segments, pos = [], 0  # (offset, time) of each segment
    while pos < len(data):
        segments.append((pos, 5000.0 + len(segments)))
        pos += rng.choice((1, 5, 90, 1448, 9000))
    ends = [off for off, _ts in segments[1:]] + [len(data)]
    for cut_every in (1, 3, 50):  # segments per chunk
        splitter = FrameSplitter(min_size=4)
        got = []
        for first in range(0, len(segments), cut_every):
            mine = segments[first : first + cut_every]
            start, stop = mine[0][0], ends[first + len(mine) - 1]
            marks = tuple(mine[1:])
            got += splitter.feed(data[start:stop], mine[0][1], mine[-1][1], start, marks)
        assert [(f.offset, bytes(f.payload)) for f in got] == frames

        def time_at(offset: int) -> float:
            return max((s for s in segments if s[0] <= offset), key=lambda s: s[0])[1]

        assert [(f.first_ts, f.last_ts) for f in got] == [
            (time_at(f.offset), time_at(f.offset + 3 + len(f.payload))) for f in got
        ]


def test_what_a_partial_frame_keeps_alive_is_at_most_twice_what_is_counted_as_held():
    # The start of a frame left at the end of a chunk is held as a view of the chunk when it is at least
    # half of it (no copy of a large frame's first part), else copied: a byte held never keeps a whole
    # chunk alive.
    data, frames = _stream([1000, 300_000])
    for cut in (1004 + 5, 1004 + 600, 1004 + 5000, 150_000, 250_000):
        splitter = FrameSplitter(min_size=4)
        got = splitter.feed(data[:cut], 1.0, 1.0, 0)
        assert [(f.offset, bytes(f.payload)) for f in got] == frames[:1]
        held = splitter.buf
        assert splitter.buffered == cut - 1004
        kept_alive = len(held.obj) if isinstance(held, memoryview) else len(held)
        assert kept_alive <= 2 * splitter.buffered
        got = splitter.feed(data[cut:], 2.0, 2.0, cut)
        assert [(f.offset, bytes(f.payload)) for f in got] == frames[1:]
        assert splitter.buffered == 0
