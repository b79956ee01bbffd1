"""Capture-stage benchmark: ksniff's reader + reassembler against a plain struct loop over the same file.

Generates a large pcap (MTU-1500 segments over many connections, with pure ACKs in between), then times
(a) a plain loop reading each record header, the IPv4 header and the TCP header fields with structs, and
(b) `read_files(...)` iterated to the end (reassembly included). Run by hand:

    python bench/bench_capture.py [--size-mb 400] [--connections 200] [--path FILE] [--repeat 3]
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ksniff.capture import read_files  # noqa: E402

MSS = 1448
ETH = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00"


def _headers(src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int, n: int) -> bytes:
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + 32 + n,
        0,
        0x4000,
        64,
        6,
        0,
        src.to_bytes(4, "big"),
        dst.to_bytes(4, "big"),
    )
    tcp = (
        struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 8 << 4, flags, 501, 0, 0)
        + b"\x01\x01\x08\x0a"
        + b"\0" * 8
    )  # NOP NOP timestamps, as Linux sends
    return ETH + ip + tcp


def generate(path: str, size_mb: int, connections: int) -> int:
    """Writes the capture; returns its packet count. Two data segments, then one ACK, per connection turn."""
    payload = bytes(range(256)) * (MSS // 256) + bytes(MSS % 256)
    rec = struct.Struct("<IIII")
    target = size_mb << 20
    written = packets = 0
    seqs = [1000 * i for i in range(connections)]
    t = 1_700_000_000.0
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        while written < target:
            batch = []
            for c in range(connections):
                client, server = 0x0A000000 + c + 1, 0x0A010001
                sport = 10000 + c
                for _ in range(2):
                    frame = _headers(server, client, 9092, sport, seqs[c], 1, 0x18, MSS) + payload
                    seqs[c] += MSS
                    batch.append(rec.pack(int(t), int(t * 1e6) % 1_000_000, len(frame), len(frame)) + frame)
                    t += 0.00001
                ack = _headers(client, server, sport, 9092, 1, seqs[c], 0x10, 0)
                batch.append(rec.pack(int(t), int(t * 1e6) % 1_000_000, len(ack), len(ack)) + ack)
                t += 0.00001
            data = b"".join(batch)
            out.write(data)
            written += len(data)
            packets += len(batch)
    return packets


def plain_loop(path: str) -> tuple[int, int]:
    """Record headers, IPv4 header and TCP header fields: the floor any Python reader pays."""
    rec = struct.Struct("<IIII").unpack_from
    ip = struct.Struct("!BxHxxHxBxx4s4s").unpack_from
    tcp = struct.Struct("!HHIIBB").unpack_from
    payload_bytes = packets = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        mv = memoryview(mm)
        pos, end = 24, len(mm)
        while pos + 16 <= end:
            _s, _us, caplen, _wire = rec(mv, pos)
            p = pos + 16
            vihl, total, _frag, _proto, _src, _dst = ip(mv, p + 14)
            t = p + 14 + (vihl & 15) * 4
            _sport, _dport, _seq, _ack, off, _flags = tcp(mv, t)
            payload_bytes += total - (vihl & 15) * 4 - (off >> 4) * 4
            packets += 1
            pos = p + caplen
        del mv
    return packets, payload_bytes


def ksniff_capture(path: str) -> tuple[int, int]:
    run = read_files([path])
    data = 0
    for event in run:
        d = getattr(event, "data", None)
        if d is not None:
            data += len(d)
    return run.stats.packets, data


def timed(fn, path: str) -> tuple[float, tuple[int, int]]:
    start = time.perf_counter()
    result = fn(path)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--path", help="capture file to use (generated there if missing)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile the capture stage once (cProfile)")
    args = parser.parse_args()

    tmp = None
    path = args.path
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "bench.pcap")
    if not os.path.exists(path):
        start = time.perf_counter()
        n = generate(path, args.size_mb, args.connections)
        print(
            f"generated {path}: {n:,} packets, {os.path.getsize(path) / 1e6:,.0f} MB "
            f"in {time.perf_counter() - start:.1f}s"
        )
    size_mb = os.path.getsize(path) / 1e6

    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx("ksniff_capture(path)", globals(), {"path": path}, filename=path + ".prof")
        pstats.Stats(path + ".prof").sort_stats("tottime").print_stats(15)
        return

    plain, ours = [], []
    for _ in range(args.repeat):  # alternate so cache and frequency effects hit both alike
        t, (packets, plain_payload) = timed(plain_loop, path)
        plain.append(t)
        t, (ks_packets, ks_payload) = timed(ksniff_capture, path)
        ours.append(t)
    if (ks_packets, ks_payload) != (packets, plain_payload):  # the two loops must have read the same thing
        sys.exit(f"mismatch: ksniff {ks_packets}, {ks_payload}; plain {packets}, {plain_payload}")
    best_plain, best_ours = min(plain), min(ours)
    print(f"{'':24}{'seconds':>10}{'packets/s':>14}{'MB/s':>10}")
    for name, t in (("plain struct loop", best_plain), ("ksniff capture stage", best_ours)):
        print(f"{name:24}{t:10.2f}{packets / t:14,.0f}{size_mb / t:10,.0f}")
    print(
        f"ratio capture stage / plain loop: {best_ours / best_plain:.2f}x "
        f"({packets:,} packets, {size_mb:,.0f} MB, {ks_payload / 1e6:,.0f} MB of stream data)"
    )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
