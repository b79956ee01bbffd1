"""Captures edited for tests: the same traffic again later, between other hosts."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from ksniff.capture.packets import header_sum

CLASSIC_LE_MICROS = b"\xd4\xc3\xb2\xa1"


def _records(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """(seconds, microseconds, length on the wire, frame) of each record of a classic pcap's bytes."""
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, caplen, wire = struct.unpack_from("<IIII", data, pos)
        yield sec, usec, wire, data[pos + 16 : pos + 16 + caplen]
        pos += 16 + caplen


def _record(sec: int, usec: int, wire: int, frame: bytes) -> bytes:
    return struct.pack("<IIII", sec, usec, len(frame), wire) + frame


def again_later(capture: Path, out: Path, seconds: int, first: int | None = None) -> Path:
    """`capture` (classic little-endian pcap, Ethernet, IPv4) followed in one file by its own packets
    `seconds` later, between other hosts (each address's second octet flipped, `nat`): other connections.
    `first`: only the capture's first packets come before (its connections left open, mid-traffic)."""
    data = capture.read_bytes()
    assert data[:4] == CLASSIC_LE_MICROS and struct.unpack_from("<I", data, 20)[0] == 1
    records = list(_records(data))
    before = records if first is None else records[:first]
    later = [(sec + seconds, usec, wire, nat(frame)) for sec, usec, wire, frame in records]
    out.write_bytes(data[:24] + b"".join(_record(*r) for r in (*before, *later)))
    return out


def split(capture: Path, out: Path, parts: int) -> list[Path]:
    """`capture` (classic pcap) cut into `parts` files of about equal packet counts in `out`, as a
    rotating capture (tcpdump -C) cuts a long one: connections go on from one file into the next."""
    data = capture.read_bytes()
    records = [_record(*r) for r in _records(data)]
    per = -(-len(records) // parts)
    paths = []
    for n in range(parts):
        path = out / f"{capture.stem}_{n:02d}.pcap"
        path.write_bytes(data[:24] + b"".join(records[n * per : (n + 1) * per]))
        paths.append(path)
    return paths


def record_batches(data: bytes) -> list[tuple[int, int]]:
    """(position, CRC-32C) of every magic-2 record batch lying whole in a capture's bytes, found by its
    header and checked by its CRC (so no other bytes pass for one), in file order."""
    from ksniff.decode.crc import crc32c

    found = []
    pos = data.find(b"\x02", 16)
    while pos != -1:
        start = pos - 16  # the magic byte is the batch's 17th
        length = struct.unpack_from(">i", data, start + 8)[0]
        end = start + 12 + length
        if 49 <= length and end <= len(data):
            crc = struct.unpack_from(">I", data, start + 17)[0]
            if crc32c(data[start + 21 : end]) == crc:
                found.append((start, crc))
        pos = data.find(b"\x02", pos + 1)
    return found


# Where a magic-2 batch header keeps what the audit judges (offsets from the batch's first byte).
PRODUCER_ID_LOW_BYTE = 50
BASE_SEQUENCE_LOW_BYTE = 56


def damaged(capture: Path, out: Path, copy: int, field: int, bit: int = 4) -> Path:
    """`capture` with one bit flipped in one record batch's header field, as a damaged file or capture
    path would: the batch fails its CRC-32C. A batch's bytes come twice in a capture that holds its
    Produce and a Fetch answer that reads it (the broker sets only the base offset and leader epoch,
    which the CRC does not cover): `copy` 0 is the Produce request's, 1 the Fetch answer's, of the first
    batch that comes twice (of any batch, for copy 0 of a capture with no Fetch)."""
    data = bytearray(capture.read_bytes())
    batches = record_batches(bytes(data))
    seen: dict[int, list[int]] = {}
    for start, crc in batches:
        seen.setdefault(crc, []).append(start)
    twice = [starts for starts in seen.values() if len(starts) > 1]
    starts = twice[0] if twice else [batches[0][0]]
    data[starts[copy] + field] ^= 1 << bit
    out.write_bytes(bytes(data))
    return out


def retimed(capture: Path, out: Path, record: int, bit: int) -> Path:
    """`capture` (classic little-endian pcap) with one bit of record `record`'s time flipped: bits 0-31
    of its seconds, 32-63 of its fraction, as a failing disk leaves it."""
    data = bytearray(capture.read_bytes())
    pos = 24
    for _n in range(record):
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    at = pos + (4 if bit >= 32 else 0)
    struct.pack_into("<I", data, at, struct.unpack_from("<I", data, at)[0] ^ (1 << (bit % 32)))
    out.write_bytes(bytes(data))
    return out


def frame_bit_flipped(capture: Path, out: Path, record: int, at: int, bit: int) -> Path:
    """`capture` (classic little-endian pcap) with bit `bit` of byte `at` of record `record`'s frame
    flipped, as a failing disk leaves it."""
    data = bytearray(capture.read_bytes())
    pos = 24
    for _n in range(record):
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    data[pos + 16 + at] ^= 1 << bit
    out.write_bytes(bytes(data))
    return out


def without(capture: Path, out: Path, record: int) -> Path:
    """`capture` (classic little-endian pcap) without record `record`: a packet the capture lost."""
    data = capture.read_bytes()
    pos = 24
    for _n in range(record):
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    end = pos + 16 + struct.unpack_from("<I", data, pos + 8)[0]
    out.write_bytes(data[:pos] + data[end:])
    return out


def shifted(
    capture: Path, out: Path, micros: int, keep=lambda record, frame: True, translated: bool | str = False
) -> Path:
    """`capture` (classic little-endian pcap, microsecond times) with every record's time `micros` later
    (earlier when negative), keeping the records `keep(n, frame)` accepts: the same packets as another
    capture point with another clock records them. `translated`: seen on the far side of an address
    translation, every IPv4 address's second octet flipped (`nat`); "ports": the ports moved too."""
    data = capture.read_bytes()
    assert data[:4] == CLASSIC_LE_MICROS, "a classic little-endian pcap with microsecond times"
    parts = [data[:24]]
    for n, (sec, usec, wire, frame) in enumerate(_records(data)):
        if keep(n, frame):
            if translated:
                frame = nat(frame, translated == "ports")
            parts.append(_record(*divmod(sec * 1_000_000 + usec + micros, 1_000_000), wire, frame))
    out.write_bytes(b"".join(parts))
    return out


def merged(captures: list[Path], out: Path) -> Path:
    """One classic pcap of every record of `captures` (each classic little-endian, microsecond times,
    the same link type), in time order, a record of an earlier file first at equal times: what one
    capture on every interface of a host records (`tcpdump -i any` sees a forwarded packet on its way in
    and again on its way out)."""
    records = []
    head = None
    for n, capture in enumerate(captures):
        data = capture.read_bytes()
        assert data[:4] == CLASSIC_LE_MICROS, "a classic little-endian pcap with microsecond times"
        assert head is None or data[20:24] == head[20:24], "the same link type"
        head = head or data[:24]
        for k, (sec, usec, wire, frame) in enumerate(_records(data)):
            records.append((sec * 1_000_000 + usec, n, k, _record(sec, usec, wire, frame)))
    records.sort(key=lambda r: r[:3])
    out.write_bytes(head + b"".join(r[3] for r in records))
    return out


def nat(frame: bytes, ports: bool = False) -> bytes:
    """An Ethernet IPv4 frame as the far side of an address translation sees it: both addresses' second
    octet flipped (the header checksum made right again); with `ports`, both TCP ports moved by 256 (a
    service's port mapped to the broker's, a client's source port rewritten); TCP's sequence numbers as
    they were, as Linux's connection tracking leaves them."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return frame
    out = bytearray(frame)
    out[27] ^= 0x80
    out[31] ^= 0x80
    at = 14 + (out[14] & 15) * 4
    if ports and out[23] == 6 and len(out) >= at + 4:
        out[at] ^= 0x01
        out[at + 2] ^= 0x01
    if out[24:26] != b"\0\0":
        out[24:26] = header_sum(out, 14, (out[14] & 15) * 4).to_bytes(2, "big")
    return bytes(out)
