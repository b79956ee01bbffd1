"""Small deterministic generators of hostile captures: what an attacker near a broker can make ksniff read.

Each returns either the reassembler's segment tuples (to time the capture room alone) or pcap bytes (to
run the whole CLI). Sizes are parameters so tests can compare two sizes of the same attack.
"""

from __future__ import annotations

import struct

from capture_builders import Flow, ethernet, pcap_bytes

from ksniff.capture.packets import ACK, SYN

CLIENT, SERVER = b"\x0a\0\0\x01", b"\x0a\0\0\x02"


def one_byte_out_of_order(n: int, order: str = "ascending") -> list[tuple]:
    """A connection whose first data byte is missing and whose next `n` bytes come as 1-byte segments,
    ascending, descending, interleaved (even offsets, then odd) or shuffled (a fixed permutation). Then the
    missing byte arrives and everything can be delivered."""
    head = [
        (0.0, CLIENT, 40000, SERVER, 9092, 999, 0, SYN, b""),
        (0.0, SERVER, 9092, CLIENT, 40000, 4999, 1000, SYN | ACK, b""),
        (0.0, CLIENT, 40000, SERVER, 9092, 1000, 5000, ACK, b""),
    ]
    idx = list(range(1, n + 1))
    if order == "descending":
        idx.reverse()
    elif order == "interleaved":
        idx = idx[::2] + idx[1::2]
    elif order == "shuffled":
        # 7919 is prime: a fixed permutation whenever n is not a multiple of it
        idx = [idx[(k * 7919) % n] for k in range(n)]
    segs = [(1e-6 * k, CLIENT, 40000, SERVER, 9092, 1000 + i, 5000, ACK, b"x") for k, i in enumerate(idx)]
    return head + segs + [(1.0, CLIENT, 40000, SERVER, 9092, 1000, 5000, ACK, b"y")]


PERIOD = 61


def resync_bait(size: int, frame: int | None = None) -> bytes:
    """Client-to-broker bytes in which every PERIOD bytes a Metadata v1 request header starts whose claimed
    size reaches exactly the end of the data and whose body (an array of topic names, each name running
    into the next period) decodes up to that end before it fails. Read from the middle of a stream, a
    resynchroniser that decodes every candidate frame whole does work quadratic in `size`. With `frame`,
    each candidate claims that many bytes instead (and still fails at its end): the most work a
    candidate can cost when only a bounded prefix of its body is decoded."""
    periods = size // PERIOD
    total = periods * PERIOD
    out = bytearray()
    for k in range(periods):
        at = k * PERIOD
        body = total - at - 4 if frame is None else min(frame, total - at - 4)
        strings = (body - 14) // PERIOD + 2  # one more topic name than the frame holds: it fails at the end
        head = struct.pack(">ihhih", body, 3, 1, k + 1, -1) + struct.pack(">i", strings)
        # Offset 18: a topic name's length that carries the walk to offset 18 of the next period.
        out += head + struct.pack(">h", PERIOD - 2) + bytes(range(0x41, 0x41 + PERIOD - 20))
    return bytes(out)


def mid_stream_pcap(client_bytes: bytes, segment: int = 1448) -> bytes:
    """One connection to port 9092 seen from the middle (no handshake), carrying `client_bytes`."""
    flow = Flow()
    packets = [flow.send(True, client_bytes[i : i + segment]) for i in range(0, len(client_bytes), segment)]
    return pcap_bytes([(1000 + i * 1e-4, ethernet(p)) for i, p in enumerate(packets)])
