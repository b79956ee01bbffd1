"""Captures edited for tests: the same traffic again later, between other hosts."""

from __future__ import annotations

from pathlib import Path


def again_later(capture: Path, out: Path, seconds: int, first: int | None = None) -> Path:
    """`capture` (classic little-endian pcap, Ethernet, IPv4) followed in one file by its own packets
    `seconds` later, between other hosts (each address's second octet flipped): other connections.
    `first`: only the capture's first packets come before (its connections left open, mid-traffic)."""
    import struct

    data = capture.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1" and struct.unpack_from("<I", data, 20)[0] == 1
    later = bytearray()
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, caplen, length = struct.unpack_from("<IIII", data, pos)
        frame = bytearray(data[pos + 16 : pos + 16 + caplen])
        if caplen >= 34 and frame[12:14] == b"\x08\x00":
            frame[27] ^= 0x80  # source address, second octet
            frame[31] ^= 0x80  # destination address
        later += struct.pack("<IIII", sec + seconds, usec, caplen, length) + frame
        pos += 16 + caplen
    head = 24
    for _n in range(len(data) if first is None else first):
        if head + 16 > len(data):
            break
        head += 16 + struct.unpack_from("<I", data, head + 8)[0]
    out.write_bytes(data[:head] + bytes(later))
    return out


def split(capture: Path, out: Path, parts: int) -> list[Path]:
    """`capture` (classic pcap) cut into `parts` files of about equal packet counts in `out`, as a
    rotating capture (tcpdump -C) cuts a long one: connections go on from one file into the next."""
    import struct

    data = capture.read_bytes()
    records = []
    pos = 24
    while pos + 16 <= len(data):
        end = pos + 16 + struct.unpack_from("<I", data, pos + 8)[0]
        records.append(data[pos:end])
        pos = end
    per = -(-len(records) // parts)
    paths = []
    for n in range(parts):
        path = out / f"{capture.stem}_{n:02d}.pcap"
        path.write_bytes(data[:24] + b"".join(records[n * per : (n + 1) * per]))
        paths.append(path)
    return paths
