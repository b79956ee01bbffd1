"""Link, IP and TCP headers of one captured frame, read with precompiled structs.

`parse_frame` turns a frame into a flat segment tuple
`(ts, src_ip, src_port, dst_ip, dst_port, seq, ack, flags, payload)` or, when the frame carries no TCP
segment we can use, into one of the small integer codes below so the caller can count it without
building anything. Addresses are packed bytes (4 or 16); they become strings only when a connection
opens. `payload` is a memoryview slice of the capture buffer (no copy). When the capture cut the
payload short (snaplen), the segment still comes out, with `TRUNCATED` set in `flags` and `payload`
holding the number of bytes the segment claimed, so the reassembler can report exactly that gap.
"""

from __future__ import annotations

import struct

# TCP flag bits, plus one of ours above the byte the wire uses.
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
TRUNCATED = 0x100
TICK = 0x200  # not a segment: the clock moved on (live capture idle); flush merged data, expire idle

# What a frame was, when it was not a usable TCP segment. DAMAGED: an IPv4 header whose checksum fails
# (bytes the capture holds that did not cross the wire: the packet is left out, a gap of its connection).
NOT_TCP, FRAGMENT, CUT_SHORT, DAMAGED = 0, 1, 2, 3

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
VLAN_TAGS = frozenset((0x8100, 0x88A8, 0x9100, 0x9200))

LINKTYPE_NAMES = {
    0: "NULL",
    1: "EN10MB",
    12: "RAW",
    14: "RAW",
    101: "RAW",
    108: "LOOP",
    113: "LINUX_SLL",
    228: "IPV4",
    229: "IPV6",
    276: "LINUX_SLL2",
}
_RAW = frozenset((12, 14, 101, 228, 229))
_NULL_IPV4 = 2
_NULL_IPV6 = frozenset((10, 24, 28, 30))  # AF_INET6 on Linux, NetBSD/OpenBSD, FreeBSD, macOS

_U16 = struct.Struct("!H").unpack_from
_IPV4 = struct.Struct("!BxHxxHxBxx4s4s").unpack_from  # ver/ihl, total length, frag, proto, src, dst
_IPV6 = struct.Struct("!4xHB1x16s16s").unpack_from  # payload length, next header, src, dst
_TCP = struct.Struct("!HHIIBB").unpack_from  # ports, seq, ack, data offset, flags
_NULL_LE = struct.Struct("<I").unpack_from
_NULL_BE = struct.Struct(">I").unpack_from

# An IPv4 header's 16-bit words, by header length (20 to 60 bytes), for its checksum.
_WORDS = {n: struct.Struct(f"!{n // 2}H").unpack_from for n in range(20, 61, 4)}


def _fold(total: int) -> int:
    """A sum of at most 30 16-bit words folded to 16 bits, one's complement (two carries at most)."""
    total = (total & 0xFFFF) + (total >> 16)
    return (total & 0xFFFF) + (total >> 16)


def header_sum(mv, p: int, n: int) -> int:
    """The checksum the IPv4 header of `n` bytes at `mv[p:]` should carry (for tools that rewrite one)."""
    words = _WORDS[n](mv, p)
    return ~_fold(sum(words) - words[5]) & 0xFFFF


def header_sum_ok(mv, p: int, n: int) -> bool:
    """The IPv4 header of `n` bytes at `mv[p:]` has a checksum that holds, or 0 in its place: left to the
    NIC by capture hosts that offload it (Linux fills it in before the capture point, so a capture of
    a Linux host has it everywhere; TCP's own checksum is offloaded too often to be read this way)."""
    words = _WORDS[n](mv, p)
    return not words[5] or _fold(sum(words)) == 0xFFFF


_IPV6_EXT = frozenset((0, 43, 60))  # hop-by-hop, routing, destination options: length in 8-byte units
_IPV6_FRAG, _IPV6_AH, _PROTO_TCP = 44, 51, 6


# The common frame, IPv4 without options carrying TCP, read with one struct per link type:
# (link header length, struct over link type field + IPv4 header + TCP header).
_FAST_TAIL = "BxHxxHxBxx4s4sHHIIBB"
FAST_PATHS = {
    1: (14, struct.Struct("!12xH" + _FAST_TAIL)),
    113: (16, struct.Struct("!14xH" + _FAST_TAIL)),
    276: (20, struct.Struct("!H18x" + _FAST_TAIL)),
}


# The same frame for the compiled walk (ksniff.capture._fastwalk): (offset of the link type field, link
# header length) per FAST_PATHS link type.
FAST_FIELDS = {1: (12, 14), 113: (14, 16), 276: (0, 20)}


def linktype_name(linktype: int) -> str:
    return LINKTYPE_NAMES.get(linktype, f"LINKTYPE_{linktype}")


def is_supported(linktype: int) -> bool:
    return linktype in LINKTYPE_NAMES


def parse_frame(ts: float, mv: memoryview, p: int, end: int, link: int):
    """The segment in frame bytes `mv[p:end]` captured with link type `link`, or a code."""
    if link == 1:
        if p + 14 > end:
            return CUT_SHORT
        et = _U16(mv, p + 12)[0]
        p += 14
        while et in VLAN_TAGS:
            if p + 4 > end:
                return CUT_SHORT
            et = _U16(mv, p + 2)[0]
            p += 4
    elif link == 276:
        if p + 20 > end:
            return CUT_SHORT
        et = _U16(mv, p)[0]
        p += 20
    elif link == 113:
        if p + 16 > end:
            return CUT_SHORT
        et = _U16(mv, p + 14)[0]
        p += 16
    elif link == 0 or link == 108:
        if p + 4 > end:
            return CUT_SHORT
        # The family is in the writer's byte order; it is small, so whichever order gives a small value.
        family = _NULL_LE(mv, p)[0]
        if family > 0xFFFF:
            family = _NULL_BE(mv, p)[0]
        et = ETH_IPV4 if family == _NULL_IPV4 else ETH_IPV6 if family in _NULL_IPV6 else 0
        p += 4
    elif link in _RAW:
        if p >= end:
            return CUT_SHORT
        version = mv[p] >> 4
        et = ETH_IPV4 if version == 4 else ETH_IPV6 if version == 6 else 0
    else:
        return NOT_TCP
    if et == ETH_IPV4:
        return _ipv4(ts, mv, p, end)
    if et == ETH_IPV6:
        return _ipv6(ts, mv, p, end)
    return NOT_TCP


def _ipv4(ts: float, mv: memoryview, p: int, end: int):
    if p + 20 > end:
        return CUT_SHORT
    vihl, total, frag, proto, src, dst = _IPV4(mv, p)
    ihl = (vihl & 15) * 4
    if vihl >> 4 == 4 and 20 <= ihl <= end - p and not header_sum_ok(mv, p, ihl):
        return DAMAGED
    if proto != _PROTO_TCP or vihl >> 4 != 4:
        return NOT_TCP
    if frag & 0x3FFF:
        return FRAGMENT
    # A zero total length is what segmentation offload leaves in outgoing frames: the frame is the packet.
    ip_end = p + total if total else end
    return _tcp(ts, mv, p + ihl, ip_end, end, src, dst)


def _ipv6(ts: float, mv: memoryview, p: int, end: int):
    if p + 40 > end:
        return CUT_SHORT
    plen, nh, src, dst = _IPV6(mv, p)
    ip_end = p + 40 + plen if plen else end  # zero: jumbogram or offload; the frame is the packet
    q = p + 40
    while nh != _PROTO_TCP:
        if q + 8 > end:
            return CUT_SHORT
        if nh in _IPV6_EXT:
            nh, q = mv[q], q + (mv[q + 1] + 1) * 8
        elif nh == _IPV6_FRAG:
            if _U16(mv, q + 2)[0] != 0:  # offset or more-fragments set: a real fragment
                return FRAGMENT
            nh, q = mv[q], q + 8
        elif nh == _IPV6_AH:
            nh, q = mv[q], q + (mv[q + 1] + 2) * 4
        else:
            return NOT_TCP
    return _tcp(ts, mv, q, ip_end, end, src, dst)


def _tcp(ts: float, mv: memoryview, t: int, ip_end: int, end: int, src: bytes, dst: bytes):
    if t + 20 > end or t + 20 > ip_end:
        return CUT_SHORT if t + 20 > end else NOT_TCP
    sport, dport, seq, ack, off, flags = _TCP(mv, t)
    d = t + (off >> 4) * 4
    if d > ip_end:
        return NOT_TCP
    if ip_end > end:
        if d > end:
            return CUT_SHORT
        return (ts, src, sport, dst, dport, seq, ack, flags | TRUNCATED, ip_end - d)
    return (ts, src, sport, dst, dport, seq, ack, flags, mv[d:ip_end])


def fast_path(link: int) -> tuple | None:
    """What `segment_of` needs for the fast path of link type `link`: (link header length, the
    FAST_PATHS struct's unpack_from, the frame length it reads), or None when there is none."""
    fast = FAST_PATHS.get(link)
    return None if fast is None else (fast[0], fast[1].unpack_from, fast[1].size)


def segment_of(ts: float, buf, p: int, end: int, link: int, fast: tuple | None):
    """The segment in frame bytes `buf[p:end]`, or a code, as `parse_frame` says; the common frame (IPv4
    without options carrying TCP, whole) is read with the one unpack of `fast` (a `fast_path(link)`).
    Both capture walks call it per frame; the compiled walk (_fastwalk.pyx) reads the same frame the same
    way, straight from the bytes."""
    if fast is not None:
        l2, unpack, size = fast
        if end - p < size:
            return parse_frame(ts, buf, p, end, link)
        et, vihl, total, frag, proto, src, dst, sp, dp, seq, ack, off, flags = unpack(buf, p)
        if et == 0x0800 and vihl == 0x45 and proto == 6 and not frag & 0x3FFF:
            if not header_sum_ok(buf, p + l2, 20):
                return DAMAGED
            ip_end = p + l2 + total
            d = p + l2 + 20 + (off >> 4) * 4
            if d <= ip_end <= end:
                return (ts, src, sp, dst, dp, seq, ack, flags, buf[d:ip_end])
    return parse_frame(ts, buf, p, end, link)
