"""Per-byte and per-segment paths are linear whatever the segmentation: hostile captures of two sizes, the
larger four times the smaller, must take less than twice four times as long (a quadratic path takes
sixteen). Times are this process's CPU time, the best of five runs, in one test, so the machine's load
cancels out."""

from __future__ import annotations

import time

import pytest
from decode_builders import Stream
from hostile import PERIOD, one_byte_out_of_order, resync_bait

from ksniff.capture import CaptureLimits, Reassembler
from ksniff.decode.decoder import Decoder

SCALE = 4
LINEAR_BOUND = 2 * SCALE


def best_time(fn, arg) -> float:
    """The least CPU time of this process over five runs: other processes on the machine (a loaded CI
    runner, two cores) move wall times, not this."""
    times = []
    for _ in range(5):
        t = time.process_time()
        fn(arg)
        times.append(time.process_time() - t)
    return min(times)


def assert_linear(fn, small, large) -> None:
    fn(small)  # warm up: generated decoders, imports
    t_small, t_large = best_time(fn, small), best_time(fn, large)
    assert t_large < LINEAR_BOUND * max(t_small, 0.005), (t_small, t_large)


# Per-direction buffer cap of the test: 8k held one-byte pieces. Inserting a piece moves the pieces after
# it (a C memmove), so the bound per segment is the cap's, not the capture's: the two sizes below straddle
# it, as a long hostile capture does.
CAP = CaptureLimits(ooo_bytes_per_direction=1 << 20)


@pytest.mark.parametrize("order", ["ascending", "descending", "interleaved", "shuffled"])
def test_one_byte_out_of_order_segments(order):
    def reassemble(segments):
        r = Reassembler(CAP)
        n = sum(len(e.data) if hasattr(e, "data") else getattr(e, "length", 0) for e in r.events(segments))
        assert n == len(segments) - 3  # every byte delivered or, past the cap, a counted gap

    assert_linear(reassemble, one_byte_out_of_order(5000, order), one_byte_out_of_order(5000 * SCALE, order))


def decode_mid_stream(data: bytes, chunk: int = 1448) -> Decoder:
    dec = Decoder()
    s = Stream()
    dec.feed(s.opened(handshake=False))
    for i in range(0, len(data), chunk):
        dec.feed(s.send(data[i : i + chunk]))
    dec.feed(s.closed())
    return dec


@pytest.mark.parametrize("frame", [None, 1000], ids=["to_the_end", "short_frames"])
def test_resynchronisation_over_bait(frame):
    small = resync_bait(64 * PERIOD * 64, frame)
    assert_linear(decode_mid_stream, small, resync_bait(len(small) * SCALE, frame))


def test_resynchronisation_one_byte_chunks():
    """A candidate waiting for its frame is judged again when the frame is there, not at every byte."""
    small = resync_bait(8 * 1024)
    assert_linear(lambda d: decode_mid_stream(d, chunk=1), small, resync_bait(len(small) * SCALE))
