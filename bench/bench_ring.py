"""The capture ring's copy-out alone: one 2 MiB TPACKET_V3 block copied out as pcap bytes, compiled
(`_fastwalk.ring_block`) against the pure-Python reference (`ring.block_records`), and then walked into
segments by the pcap walk (compiled, as `ksniff live` does). Blocks are laid out as the kernel lays them
out, full of 1514-byte frames (bulk) or of 130-byte frames (small transactions). Run by hand:

    python bench/bench_ring.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ksniff.capture import compiled, ring  # noqa: E402
from ksniff.capture.live import PCAP_NS_MAGIC_LE, _InMemory  # noqa: E402
from ksniff.capture.pcap import PcapHeader, pcap_segments  # noqa: E402
from ksniff.capture.walk import WalkCounts  # noqa: E402

BLOCK = 2 << 20
ETH = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00"


def frame(size: int, seq: int) -> bytes:
    payload = size - 54
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        40 + payload,
        0,
        0x4000,
        64,
        6,
        0,
        bytes([10, 0, 0, 1]),
        bytes([10, 0, 0, 2]),
    )
    tcp = struct.pack("!HHIIBBHHH", 40000, 9092, seq, 1, 0x50, 0x18, 512, 0, 0)
    return ETH + ip + tcp + b"k" * payload


def full_block(size: int) -> tuple[bytearray, int]:
    """A block as the kernel hands it over, as full of `size`-byte frames as it gets."""
    b = bytearray(BLOCK)
    p, n, mac = 48, 0, 80
    step = (mac + size + 15) & ~15
    while p + step <= BLOCK:
        f = frame(size, n * (size - 54))
        nxt = step if p + 2 * step <= BLOCK else 0
        struct.pack_into("=IIIIIIHH", b, p, nxt, 1_700_000_000, n, size, size, 1, mac, mac + 14)
        struct.pack_into("=HHiHBB", b, p + 48, 17, 0x0300, 1, 1, 0, 6)
        b[p + mac : p + mac + size] = f
        p += step
        n += 1
    struct.pack_into("=IIIIII", b, 0, 3, 0, ring.TP_STATUS_USER, n, 48, p)
    return b, n


def timed(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeat):
            fn()
        best = min(best, (time.process_time() - start) / repeat)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    fast = compiled.fastwalk
    if fast is None:
        sys.exit("the compiled module is not built (pip install -e . with Cython and a C compiler)")
    head = ring.pcap_header(262144, 1)
    print(f"{'frames':>8}{'per block':>10}{'copy, compiled':>16}{'copy, Python':>14}{'walk (compiled)':>17}")
    for size in (1514, 130):
        b, n = full_block(size)
        out = fast.ring_block(b, 0, BLOCK, True, -1, head)[0]
        assert out == ring.block_records(b, 0, BLOCK, True, -1, head)[0]

        def walk(out=out):
            chunk = _InMemory(out)
            for _ in pcap_segments(chunk, PcapHeader(chunk, PCAP_NS_MAGIC_LE), WalkCounts(), []):
                pass

        c = timed(lambda b=b: fast.ring_block(b, 0, BLOCK, True, -1, head), args.repeat)
        py = timed(lambda b=b: ring.block_records(b, 0, BLOCK, True, -1, head), max(1, args.repeat // 20))
        w = timed(walk, max(1, args.repeat // 10))
        us = 1e6 / n
        print(f"{size:>7}B{n:>10,}{c * us:>13.3f} µs{py * us:>11.3f} µs{w * us:>14.3f} µs   (per packet)")


if __name__ == "__main__":
    main()
