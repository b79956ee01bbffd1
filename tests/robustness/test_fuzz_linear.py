"""Fuzz targets that search for super-linear inputs of the reassembler and the resynchroniser.

Hypothesis builds a small pattern (segments relative to a span of the stream, or bytes made of plausible
frame headers and noise), tiles it `n` and `SCALE * n` times, and counts the lines of ksniff's capture
and decode code executed for each (a work counter, so the verdict does not depend on the machine's load).
Linear code does at most about SCALE times the work for SCALE times the input; `target` steers the search
toward the patterns with the worst ratio. CI runs a few dozen cases; KSNIFF_FUZZ_EXAMPLES runs more.
"""

from __future__ import annotations

import struct
import sys

import fuzz_counts
import pytest
from decode_builders import Stream
from hypothesis import HealthCheck, example, given, settings, target
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from robustness_support import fuzz_examples

from ksniff.capture import Reassembler
from ksniff.capture.packets import ACK, SYN, TRUNCATED
from ksniff.decode.decoder import Decoder

SCALE = 4
SLACK = 1.5  # allowed on top of SCALE: bookkeeping that grows like a logarithm, warm-up differences
BASE = 3000  # lines a run costs whatever its size (opening, closing, generated decoders' first calls)
WATCHED = ("ksniff/capture/", "ksniff/decode/")


def work(fn, *args) -> int:
    """Lines of the capture and decode rooms executed by `fn(*args)`."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def call(frame, event, arg):
        name = frame.f_code.co_filename
        return local if any(w in name for w in WATCHED) else None

    sys.settrace(call)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return count


def assert_linear(fn, build, n: int, per_byte: float | None = None) -> float:
    """`fn` does about SCALE times the work on SCALE times the input; or, with `per_byte`, on an input
    whose cost per byte depends on where it is (see RESYNC_LINES_PER_BYTE), at most that much work per
    byte of the larger input."""
    small_input, large_input = build(n), build(SCALE * n)
    small, large = work(fn, small_input), work(fn, large_input)
    ratio = large / max(small, 1)
    if currently_in_test_context():  # a hypothesis test: steer its search toward the worst ratios
        target(ratio)
    if per_byte is not None and large > SCALE * SLACK * small + BASE:
        assert large <= per_byte * len(large_input) + BASE, (small, large, len(large_input))
        return ratio
    assert large <= SCALE * SLACK * small + BASE, (small, large)
    return ratio


# -- the reassembler ---------------------------------------------------------------------------------

C, S = b"\x0a\0\0\x01", b"\x0a\0\0\x02"

PIECE = st.tuples(st.integers(0, 63), st.integers(1, 40), st.sampled_from(["data", "truncated", "ack"]))


def segments(pattern, span: int, withhold: bool, n: int) -> list[tuple]:
    out = [
        (0.0, C, 1, S, 9092, 999, 0, SYN, b""),
        (0.0, S, 9092, C, 1, 4999, 1000, SYN | ACK, b""),
        (0.0, C, 1, S, 9092, 1000, 5000, ACK, b""),
    ]
    ts = 0.0
    for t in range(n):
        for rel, length, kind in pattern:
            off = t * span + rel
            if withhold and off == 0:
                continue
            ts += 1e-6
            seq = 1000 + off
            if kind == "data":
                out.append((ts, C, 1, S, 9092, seq, 5000, ACK, b"z" * length))
            elif kind == "truncated":
                out.append((ts, C, 1, S, 9092, seq, 5000, ACK | TRUNCATED, length))
            else:  # the broker acknowledges up to here: holes before it were lost by the capture
                out.append((ts, S, 9092, C, 1, 5000, seq, ACK, b""))
    out.append((ts + 1, C, 1, S, 9092, 1000, 5000, ACK, b"z"))
    return out


def reassemble(segs) -> None:
    for _ in Reassembler().events(segs):
        pass


@settings(
    max_examples=fuzz_examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(PIECE, min_size=1, max_size=12), st.integers(8, 64), st.booleans())
def test_reassembler_work_is_linear(pattern, span, withhold):
    fuzz_counts.ran("linear: reassembler")
    assert_linear(reassemble, lambda n: segments(pattern, span, withhold, n), 40)


# -- the resynchroniser ------------------------------------------------------------------------------

# Request headers a resynchroniser believes at first sight (known API, valid version, null client id),
# with sizes reaching a few periods ahead or to the end, and noise between them.
BLOCK = st.one_of(
    st.tuples(
        st.just("request"), st.sampled_from([0, 3, 10, 18, 22, 24]), st.integers(0, 4), st.integers(-1, 6)
    ),
    st.tuples(st.just("noise"), st.binary(min_size=1, max_size=24)),
)


# A small frame cap bounds how long a candidate can make the resynchroniser wait (its client id, its
# frame), so the smaller input is already past every such threshold and the ratio compares like with like.
MAX_FRAME = 2048
# Correlation ids of the bait's requests: one per piece, growing by one as a client's do, from above the
# frame cap. A splitter out of step reads sizes from the middle of a request, its correlation id among
# them: ids under the cap are believed as sizes (their frames skipped), ids over it are not (the bytes
# searched), and the second costs more per byte. Ids from 1 would cross the cap after MAX_FRAME pieces,
# wherever that falls in the two inputs, and the ratio would compare the two regimes, not the sizes
# (hypothesis found such a bait: 4n cost 10x n, each regime linear on its own). The regime below the cap
# is held linear by test_resynchroniser_work_is_linear_below_the_frame_cap.
FIRST_ID = MAX_FRAME + 1
# The cost per byte of searching the bait depends on its correlation ids as well (hypothesis found it:
# with the pattern of the second example below, each tile costs about 50 lines with ids from 2,049, 400
# from 2,500, 128 from 2,600, 400 from 2,700, 99 from 10,000), each range linear on its own, so the
# larger input's ids, reaching further, may cost more per byte than the smaller one's: 4n cost 7.6x n
# there. What holds the search linear then is a bound on the work per byte of the larger input, twice
# the most measured.
RESYNC_LINES_PER_BYTE = 8


def bait(blocks, n: int, first_id: int = FIRST_ID) -> bytes:
    pieces = []
    for _ in range(n):
        for b in blocks:
            pieces.append(b)
    total = sum(len(b[1]) if b[0] == "noise" else 18 for b in pieces)
    out = bytearray()
    for cid, b in enumerate(pieces):
        if b[0] == "noise":
            out += b[1]
            continue
        _, key, version, reach = b
        size = total - len(out) - 4 if reach < 0 else 14 + 18 * reach
        out += struct.pack(">ihhih", size, key, version, first_id + cid, -1) + struct.pack(">i", 1 << 10)
    return bytes(out)


def resync(data: bytes, chunk: int) -> None:
    dec = Decoder(max_frame=MAX_FRAME)
    s = Stream()
    dec.feed(s.opened(handshake=False))
    for i in range(0, len(data), chunk):
        dec.feed(s.send(data[i : i + chunk]))
    dec.feed(s.closed())


@settings(
    max_examples=fuzz_examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(BLOCK, min_size=1, max_size=8), st.sampled_from([1, 7, 300, 1 << 16]))
# Found by hypothesis: a FindCoordinator whose body decodes with bytes left over, believed because the
# chunk ended right after it; the splitter then read sizes from the middle of the next request (its
# correlation id, which grows along the bait) and skipped what they claimed unsearched, until those ids
# passed the frame cap: the larger input was searched byte by byte for longer (4n cost 6.1x n). With ids
# from 1, as then, it is one of test_resynchroniser_work_is_linear_below_the_frame_cap's cases.
@example(blocks=[("noise", b"\x00\x08\x03E\x00"), ("request", 10, 0, 2)], chunk=7)
@example(
    blocks=[
        ("request", 0, 0, 0),
        ("noise", b"\x00\x00"),
        ("request", 0, 0, 0),
        ("noise", b"\x00\x00"),
        ("request", 0, 0, 0),
        ("request", 10, 0, 0),
        ("request", 0, 0, 3),
    ],
    chunk=300,
)
def test_resynchroniser_work_is_linear(blocks, chunk):
    fuzz_counts.ran("linear: resynchroniser")
    resync(bait(blocks, 2), chunk)  # generated decoders compiled before counting
    tiles = -(-8 * MAX_FRAME // len(bait(blocks, 1)))
    work_of = lambda data: resync(data, chunk)  # noqa: E731
    assert_linear(work_of, lambda n: bait(blocks, n), tiles, RESYNC_LINES_PER_BYTE)


@pytest.mark.parametrize(
    "blocks, chunk",
    [
        ([("noise", b"\x00" * 10), ("request", 10, 0, 0), ("request", 0, 0, 1)], 1 << 16),
        ([("noise", b"\x00\x08\x03E\x00"), ("request", 10, 0, 2)], 7),
    ],
)
def test_resynchroniser_work_is_linear_below_the_frame_cap(blocks, chunk):
    """Correlation ids from 1 that stay under the frame cap in both inputs: the regime where a splitter out
    of step believes sizes read from them (see FIRST_ID), compared with itself."""
    per_tile = len(blocks)
    tiles = (MAX_FRAME - 1) // (SCALE * per_tile)  # the larger input's last id is still under the cap
    resync(bait(blocks, 2, first_id=1), chunk)
    assert_linear(lambda data: resync(data, chunk), lambda n: bait(blocks, n, first_id=1), tiles)
