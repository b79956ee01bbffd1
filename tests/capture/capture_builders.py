"""Builds frames and capture files byte by byte, so tests control every header field."""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Sequence

FLAG_BITS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10}


def tcp(
    sport: int,
    dport: int,
    seq: int,
    ack: int = 0,
    flags: str = "A",
    payload: bytes = b"",
    options: bytes = b"",
) -> bytes:
    bits = sum(FLAG_BITS[c] for c in flags)
    doff = (20 + len(options)) // 4
    return (
        struct.pack(
            "!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, doff << 4, bits, 65535, 0, 0
        )
        + options
        + payload
    )


def ipv4(
    src: str,
    dst: str,
    l4: bytes,
    proto: int = 6,
    options: bytes = b"",
    frag: int = 0,
    total: int | None = None,
) -> bytes:
    ihl = (20 + len(options)) // 4
    length = 20 + len(options) + len(l4) if total is None else total
    return (
        struct.pack(
            "!BBHHHBBH4s4s",
            0x40 | ihl,
            0,
            length,
            1,
            frag,
            64,
            proto,
            0,
            ipaddress.IPv4Address(src).packed,
            ipaddress.IPv4Address(dst).packed,
        )
        + options
        + l4
    )


def summed(ip: bytes) -> bytes:
    """The IPv4 packet `ip` with its header checksum filled in (the builder above leaves it 0, which the
    walk takes as not filled in, as a host that leaves it to its NIC does)."""
    n = (ip[0] & 15) * 4
    header = bytearray(ip[:n])
    header[10:12] = b"\0\0"
    total = sum(struct.unpack(f"!{n // 2}H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    header[10:12] = struct.pack("!H", ~total & 0xFFFF)
    return bytes(header) + ip[n:]


def ipv6(src: str, dst: str, l4: bytes, ext: Sequence[tuple[int, bytes]] = (), proto: int = 6) -> bytes:
    """`ext`: (header type, body) pairs; each body is padded so the header is a multiple of 8 bytes."""
    chain = b""
    types = [t for t, _ in ext] + [proto]
    for i, (htype, body) in enumerate(ext):
        nxt = types[i + 1]
        if htype == 44:  # fragment header: fixed 8 bytes
            chain += struct.pack("!BB", nxt, 0) + body[:6].ljust(6, b"\0")
        else:
            raw = body.ljust(((len(body) + 2 + 7) // 8) * 8 - 2, b"\0")
            chain += struct.pack("!BB", nxt, (len(raw) + 2) // 8 - 1) + raw
    first = types[0]
    return (
        struct.pack(
            "!IHBB16s16s",
            0x60000000,
            len(chain) + len(l4),
            first,
            64,
            ipaddress.IPv6Address(src).packed,
            ipaddress.IPv6Address(dst).packed,
        )
        + chain
        + l4
    )


def ethernet(ip: bytes, vlans: Sequence[int] = (), tpid: int = 0x8100) -> bytes:
    etype = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
    tags = b""
    for i, vid in enumerate(vlans):
        tags += struct.pack("!HH", tpid if i == 0 else 0x8100, vid)
    return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01" + tags + struct.pack("!H", etype) + ip


def sll(ip: bytes) -> bytes:
    etype = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
    return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01\0\0", etype) + ip


def sll2(ip: bytes) -> bytes:
    etype = 0x0800 if ip[0] >> 4 == 4 else 0x86DD
    return struct.pack("!HHIHBB8s", etype, 0, 1, 1, 0, 6, b"\x02\0\0\0\0\x01\0\0") + ip


def null(ip: bytes, order: str = "<", family6: int = 30) -> bytes:
    return struct.pack(order + "I", 2 if ip[0] >> 4 == 4 else family6) + ip


LINKS = {  # name -> (linktype, framing)
    "EN10MB": (1, ethernet),
    "LINUX_SLL": (113, sll),
    "LINUX_SLL2": (276, sll2),
    "NULL": (0, null),
    "LOOP": (108, lambda ip: null(ip, ">")),
    "RAW": (101, lambda ip: ip),
    "IPV4": (228, lambda ip: ip),
    "IPV6": (229, lambda ip: ip),
}

Packet = tuple[float, bytes] | tuple[float, bytes, int]  # (ts, frame[, original length])


def pcap_bytes(
    packets: Iterable[Packet], linktype: int = 1, order: str = "<", nsec: bool = False, snaplen: int = 262144
) -> bytes:
    magic = 0xA1B23C4D if nsec else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    scale = 1_000_000_000 if nsec else 1_000_000
    for pkt in packets:
        ts, frame = pkt[0], pkt[1]
        wire = pkt[2] if len(pkt) > 2 else len(frame)
        ticks = round(ts * scale)
        out.append(struct.pack(order + "IIII", ticks // scale, ticks % scale, len(frame), wire) + frame)
    return b"".join(out)


def _block(order: str, btype: int, body: bytes) -> bytes:
    body = body + b"\0" * (-len(body) % 4)
    length = 12 + len(body)
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


def _option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def pcapng_section(
    interfaces: Sequence[tuple[int, int | None]],
    packets: Iterable[tuple],
    order: str = "<",
    extra_blocks: bool = True,
) -> bytes:
    """One section. `interfaces`: (linktype, if_tsresol byte or None); `packets`: (iface, ts, frame) for
    EPBs or ("spb", frame) for simple packet blocks. Adds blocks a reader must skip when `extra_blocks`."""
    out = [_block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))]
    resolutions = []
    for linktype, tsresol in interfaces:
        options = b""
        if tsresol is not None:
            options = _option(order, 9, bytes([tsresol])) + _option(order, 0, b"")
        out.append(_block(order, 1, struct.pack(order + "HHI", linktype, 0, 0) + options))
        resolutions.append(tsresol)
    if extra_blocks:
        out.append(_block(order, 4, struct.pack(order + "HH", 0, 0)))  # empty name resolution block
        out.append(_block(order, 0x40000BAD, b"custom!"))
    for pkt in packets:
        if pkt[0] == "spb":
            frame = pkt[1]
            out.append(_block(order, 3, struct.pack(order + "I", len(frame)) + frame))
            continue
        iface, ts, frame = pkt
        r = resolutions[iface]
        per_second = 10**6 if r is None else (2 ** (r & 0x7F) if r & 0x80 else 10**r)
        ticks = round(ts * per_second)
        body = struct.pack(order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame))
        out.append(_block(order, 6, body + frame))
    if extra_blocks:
        out.append(_block(order, 5, struct.pack(order + "III", 0, 0, 0)))  # interface statistics
    return b"".join(out)


class Flow:
    """A TCP conversation with sequence numbers tracked, producing raw IP packets."""

    def __init__(
        self,
        client: tuple[str, int] = ("10.0.0.1", 40000),
        server: tuple[str, int] = ("10.0.0.2", 9092),
        isn_c: int = 1000,
        isn_s: int = 5000,
    ) -> None:
        self.client, self.server = client, server
        self.seq = {True: isn_c, False: isn_s}  # next sequence number per direction (True: client)
        self.v6 = ":" in client[0]

    def _ip(self, from_client: bool, l4: bytes) -> bytes:
        a, b = (self.client, self.server) if from_client else (self.server, self.client)
        return (ipv6 if self.v6 else ipv4)(a[0], b[0], l4)

    def raw(
        self, from_client: bool, seq: int, flags: str = "PA", payload: bytes = b"", ack: int | None = None
    ) -> bytes:
        """A segment with an explicit sequence number (no tracking)."""
        a, b = (self.client, self.server) if from_client else (self.server, self.client)
        ack = self.seq[not from_client] if ack is None else ack
        return self._ip(from_client, tcp(a[1], b[1], seq, ack, flags, payload))

    def send(self, from_client: bool, payload: bytes = b"", flags: str = "PA") -> bytes:
        seq = self.seq[from_client]
        pkt = self.raw(from_client, seq, flags, payload)
        self.seq[from_client] = (seq + len(payload) + ("S" in flags) + ("F" in flags)) & 0xFFFFFFFF
        return pkt

    def handshake(self) -> list[bytes]:
        return [self.send(True, flags="S"), self.send(False, flags="SA"), self.send(True, flags="A")]

    def close(self) -> list[bytes]:
        return [self.send(True, flags="FA"), self.send(False, flags="FA"), self.send(True, flags="A")]


def run_file(path, limits=None):
    """Reads one capture with ksniff; returns (events, run)."""
    from ksniff.capture import read_files

    run = read_files([str(path)], limits)
    return list(run), run


def write_ip_packets(
    path, ip_packets: Sequence[bytes], link: str = "EN10MB", start: float = 1000.0, step: float = 0.001
) -> None:
    linktype, frame = LINKS[link]
    path.write_bytes(pcap_bytes([(start + i * step, frame(p)) for i, p in enumerate(ip_packets)], linktype))


def streams(events) -> dict[tuple[int, bool], bytes]:
    """Concatenated data per (conn, from_src), checking chunks are contiguous; gaps appear as markers."""
    from ksniff.capture.events import StreamChunk, StreamGap

    out: dict[tuple[int, bool], bytearray] = {}
    pos: dict[tuple[int, bool], int] = {}
    for e in events:
        if isinstance(e, StreamChunk | StreamGap):
            key = (e.conn, e.from_src)
            assert e.offset == pos.get(key, 0), f"not contiguous: {e}"
            piece = e.data if isinstance(e, StreamChunk) else f"<gap {e.length}>".encode()
            out.setdefault(key, bytearray()).extend(piece)
            pos[key] = e.offset + (len(e.data) if isinstance(e, StreamChunk) else e.length)
    return {k: bytes(v) for k, v in out.items()}
