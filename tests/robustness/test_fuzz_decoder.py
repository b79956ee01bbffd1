"""The decoder over untrusted bytes: mutated real frames from the corpus, random bytes, hostile sizes.

The frames come from the corpus captures (read by the capture room, split by the decode framing), so
the mutations start from what real clients and brokers send. Whatever the bytes, the decoder must not
raise, must end every connection cleanly, must mark what follows a gap unverified, and must never
allocate from a size it read off the wire.
"""

from __future__ import annotations

import functools
import struct
import tracemalloc

import fuzz_counts
from decode_builders import Stream, frame, produce_request, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from robustness_support import corpus, fuzz_examples, kafka_frames

from ksniff.decode import Decoder
from ksniff.decode.events import ConnectionEnded, ConnectionLost, Exchange

STATUSES = {"ok", "no_response", "unanswered"}


@functools.cache
def connections() -> list[tuple[list[bytes], list[bytes]]]:
    """(requests, responses) of every Kafka connection of the corpus, in capture order."""
    out = []
    for capture in corpus():
        directions = kafka_frames(capture)
        for i in range(0, len(directions) - 1, 2):
            a, b = directions[i], directions[i + 1]
            requests, responses = (a, b) if a.to_broker else (b, a)
            if requests.to_broker and not responses.to_broker and requests.frames:
                out.append((requests.frames, responses.frames))
    return out


def test_the_corpus_gives_frames_to_mutate():
    conns = connections()
    assert len(conns) >= 20
    assert sum(len(r) for r, _ in conns) >= 200


# A mutation of one frame: (kind, which frame, where in it, value).
MUTATION = st.tuples(
    st.sampled_from(["flip", "byte", "size", "truncate", "duplicate", "delete", "swap", "gap"]),
    st.integers(0, 1 << 16),
    st.integers(0, 1 << 16),
    st.integers(-(1 << 31), (1 << 31) - 1),
)


def mutate(frames: list[bytes], mutations) -> list[bytes | int]:
    """The frames after the mutations; an int in the list is a gap of that many bytes."""
    out: list[bytes | int] = list(frames)
    for kind, which, where, value in mutations:
        if not out:
            break
        i = which % len(out)
        f = out[i]
        if isinstance(f, int):
            continue
        b = bytearray(f)
        if not b:
            continue
        if kind == "flip":
            b[where % len(b)] ^= 1 << (value & 7)
        elif kind == "byte":
            b[where % len(b)] = value & 0xFF
        elif kind == "size":  # a size prefix claiming anything, up to gigabytes or negative
            b[0:4] = struct.pack(">i", value)
        elif kind == "truncate":
            del b[where % len(b) :]
        elif kind == "duplicate":
            out.insert(i, bytes(b))
        elif kind == "delete":
            del out[i]
            continue
        elif kind == "swap":
            j = where % len(out)
            out[i], out[j] = out[j], out[i]
            continue
        elif kind == "gap":
            out.insert(i, 1 + where % 4096)
            continue
        out[i] = bytes(b)
    return out


def feed_connection(dec: Decoder, requests, responses, chunk: int, handshake: bool) -> list:
    """Requests and responses interleaved as a client and broker exchange them, cut into chunks."""
    s = Stream()
    events = [s.opened(handshake)]
    for i in range(max(len(requests), len(responses))):
        for items, from_src in ((requests, True), (responses, False)):
            if i >= len(items):
                continue
            item = items[i]
            if isinstance(item, int):
                events.append(s.gap(item, from_src))
                continue
            for j in range(0, len(item), chunk):
                events.append(s.send(item[j : j + chunk], from_src))
    events.append(s.closed())
    return run(dec, events) + dec.finish()


def check_events(dec: Decoder, out: list) -> None:
    assert all(isinstance(e, Exchange | ConnectionLost | ConnectionEnded) for e in out)
    # A connection that never carried a byte was never started, so it has no end either.
    assert sum(isinstance(e, ConnectionEnded) for e in out) <= 1
    assert not dec._conns  # every connection ended, nothing left pending
    seen_gap = False
    for e in out:
        if isinstance(e, ConnectionLost):
            seen_gap = True
        elif isinstance(e, Exchange):
            assert e.status in STATUSES
            # An exchange whose request came after lost bytes rests on a resynchronised stream.
            if seen_gap and e.status == "ok":
                assert e.unverified
            for b in e.batches:
                assert b.unverified == e.unverified


@settings(max_examples=fuzz_examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Chunks from a few bytes (frames split everywhere) to whole segments; byte by byte is tests/decode's.
@given(st.data(), st.lists(MUTATION, max_size=8), st.integers(7, 3000), st.booleans())
def test_mutated_corpus_frames(data, mutations, chunk, handshake):
    fuzz_counts.ran("decoder: mutated corpus frames")
    requests, responses = data.draw(st.sampled_from(connections()))
    half = len(mutations) // 2
    requests = mutate(requests, mutations[:half])
    responses = mutate(responses, mutations[half:])
    dec = Decoder(ports=(9092,), keep_records=handshake)  # keep_records exercises the raw-batch path too
    out = feed_connection(dec, requests, responses, chunk, handshake)
    check_events(dec, out)


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(
    st.lists(st.tuples(st.binary(min_size=1, max_size=600), st.booleans()), max_size=12),
    st.booleans(),
    st.booleans(),
)
def test_random_bytes(chunks, handshake, on_port):
    fuzz_counts.ran("decoder: random bytes")
    s = Stream()
    dec = Decoder(ports=(9092,) if on_port else (1,))  # off port: through auto-detection
    events = [s.opened(handshake)] + [s.send(data, from_src) for data, from_src in chunks] + [s.closed()]
    out = run(dec, events) + dec.finish()
    assert all(isinstance(e, Exchange | ConnectionLost | ConnectionEnded) for e in out)
    assert not dec._conns


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(st.binary(min_size=0, max_size=64), st.integers(0, 11), st.integers(0, 12))
def test_random_bodies_behind_real_headers(body, api_version, api_key_index):
    """Real request headers for the APIs the audit reads, followed by random bodies."""
    fuzz_counts.ran("decoder: random bodies")
    api_key = (0, 1, 3, 10, 18, 22, 24, 25, 26, 28, 36, 17, 61)[api_key_index]
    header = struct.pack(">hhih", api_key, api_version, 7, 1) + b"c" + b"\0"  # client id "c", no tags
    payload = header + body
    s = Stream()
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(),
            s.send(struct.pack(">i", len(payload)) + payload),
            s.send(struct.pack(">ii", 4 + len(body), 7) + body, from_src=False),
            s.closed(),
        ],
    )
    out += dec.finish()
    events = [e for e in out if not isinstance(e, ConnectionEnded)]
    assert [type(e) for e in events] in ([Exchange], [], [ConnectionLost, Exchange])
    if len(events) == 2:  # a body that could not be read: a span of the connection lost, the exchange on it
        assert events[0].damaged == "malformed" and events[1].unverified
        assert events[1].decode_error.startswith("malformed")


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_frames_claiming_gigabytes_are_not_allocated():
    """A size prefix of 2 GB, and one just under the frame cap followed by only 1 MB: memory follows the
    bytes that arrived, never the size claimed."""
    junk = bytes(range(256)) * 4096  # 1 MiB

    def claims(size: int) -> None:
        s = Stream()
        dec = Decoder()
        out = run(dec, [s.opened(), s.send(struct.pack(">i", size) + junk), s.closed()])
        out += dec.finish()
        assert not any(isinstance(e, Exchange) for e in out)

    for size in (0x7FFFFFFF, 0x7FFFFFF0, dec_max() - 1, -5):
        assert _peak(functools.partial(claims, size)) < 8 * len(junk), hex(size)


def dec_max() -> int:
    return Decoder().max_frame


def test_arrays_claiming_millions_of_elements_are_refused_quickly():
    """Produce requests whose counts claim millions of topics, partitions or batches in a few bytes."""
    good = frame(produce_request(9), 9, 1)
    header_end = 4 + 10 + len("ksniff-test")
    body = bytearray(good[header_end:])
    # v9 is flexible: transactional id (compact string), acks, timeout, then the topics' compact count.
    tid_len = body[0] - 1
    topics_at = 1 + tid_len + 2 + 4
    hostile = []
    for count in (b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x01"):  # uvarints ~2^31 and 2^28
        hostile.append(bytes(body[:topics_at]) + count + bytes(body[topics_at + 1 :]))
    frames = []
    for b in hostile:
        payload = good[4:header_end] + b
        frames.append(struct.pack(">i", len(payload)) + payload)

    def decode_all() -> None:
        s = Stream()
        dec = Decoder()
        out = run(dec, [s.opened(), *(s.send(f) for f in frames), s.closed()]) + dec.finish()
        decoded = [e for e in out if isinstance(e, Exchange)]
        assert len(decoded) == len(frames)
        assert all(e.request is None and e.decode_error.startswith("malformed") for e in decoded)

    assert _peak(decode_all) < 1 << 20
