"""The pcapng walk: sections (each with its own byte order and interfaces), interface descriptions, and
enhanced, simple and obsolete packet blocks, each frame into a segment tuple."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ksniff.capture import compiled
from ksniff.capture.packets import FAST_FIELDS, fast_path, is_supported, linktype_name, segment_of
from ksniff.capture.packets import parse_frame as parse  # for the frames the compiled walk cannot read
from ksniff.capture.source import CaptureBuffer
from ksniff.capture.walk import MAX_RECORD, PROGRESS_EVERY, WalkCounts, more_or_stop, out_of_line

PCAPNG_SHB = 0x0A0D0D0A
_LE32 = struct.Struct("<I").unpack_from


def first_section_error(b: CaptureBuffer) -> str | None:
    """Why the first section cannot be read (bad byte-order magic, an unsupported link type before the
    first packet), or None."""
    if b.end < 12:
        return "truncated pcapng header"
    magic = _LE32(b.buf, 8)[0]
    if magic not in (0x1A2B3C4D, 0x4D3C2B1A):
        return "not a pcapng file (bad byte-order magic)"
    head = struct.Struct(("<" if magic == 0x1A2B3C4D else ">") + "IIH").unpack_from
    pos = 0
    while pos + 16 <= b.end:  # interfaces of the first section, up to its first packet
        btype, blen, link = head(b.buf, pos)
        if btype in (2, 3, 6) or blen < 12 or (pos > 0 and btype == PCAPNG_SHB):
            break
        if btype == 1 and not is_supported(link):
            return f"unsupported link type {link}"
        pos += blen
    return None


class PcapngWalk:
    """The state of a pcapng walk: byte order and interfaces change with each section. At most
    `max_interfaces` interfaces are kept per section; packets of later ones are skipped and counted."""

    def __init__(
        self,
        b: CaptureBuffer,
        counts: WalkCounts,
        warnings: list[str],
        linktypes: list[str],
        max_interfaces: int,
    ) -> None:
        self.b = b
        self.counts = counts
        self.warnings = warnings
        self.linktypes = linktypes
        self.max_interfaces = max_interfaces
        self.beyond_cap = 0  # packets on interfaces past the cap
        self.links: list[int] = []
        self.units: list[float] = []
        self.offsets: list[float] = []
        self.snaplens: list[int] = []
        self.fasts: list[tuple | None] = []
        self.fields: list[tuple[int, int] | None] = []  # the compiled walk's view of the fast path

    def _section(self, buf: memoryview, pos: int) -> str | None:
        magic = _LE32(buf, pos + 8)[0]
        if magic == 0x1A2B3C4D:
            order = "<"
        elif magic == 0x4D3C2B1A:
            order = ">"
        else:
            return None
        self.links, self.units, self.offsets, self.snaplens, self.fasts = [], [], [], [], []
        self.fields = []
        return order

    def _interface(self, buf: memoryview, pos: int, blen: int, order: str) -> None:
        if len(self.links) >= self.max_interfaces:
            return
        link, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, pos + 8)
        if is_supported(link):
            name = linktype_name(link)
            if name not in self.linktypes:
                self.linktypes.append(name)
        else:  # the first section was checked at open; a later one only loses its own packets
            self.warnings.append(
                f"{self.b.path}: unsupported link type {link} in a later section; its packets skipped"
            )
        unit, offset = 1e6, 0.0  # unit: timestamp ticks per second
        opt, stop = pos + 16, pos + blen - 4
        while opt + 4 <= stop:
            code, length = struct.unpack_from(order + "HH", buf, opt)
            if code == 0:
                break
            if code == 9 and length >= 1:  # if_tsresol: power of ten, or of two with the top bit set
                r = buf[opt + 4]
                unit = 2.0 ** (r & 0x7F) if r & 0x80 else 10.0**r
            elif code == 14 and length == 8:  # if_tsoffset: seconds added to every timestamp
                offset = float(struct.unpack_from(order + "q", buf, opt + 4)[0])
            opt += 4 + ((length + 3) & ~3)
        self.links.append(link)
        self.units.append(unit)
        self.offsets.append(offset)
        self.snaplens.append(snaplen or MAX_RECORD)
        self.fasts.append(fast_path(link))
        self.fields.append(FAST_FIELDS.get(link))

    def _beyond_cap(self, iface: int) -> bool:
        """A packet on an interface past the cap (skipped, counted) rather than one never described."""
        if iface >= self.max_interfaces and len(self.links) >= self.max_interfaces:
            self.beyond_cap += 1
            return True
        return False

    def segments(self, batched: bool = False, columns: bool = False) -> Iterator:
        """Every TCP segment of the file in order; with `batched`, in lists, with `columns` too in the
        compiled walk's columns (as `pcap_segments`)."""
        b = self.b
        warnings = self.warnings
        buf, end, pos = b.buf, b.end, 0
        order = "<"
        head = block = None  # set by each section header, in its byte order
        segment = segment_of
        links, units, offsets, fasts = self.links, self.units, self.offsets, self.fasts
        fields = self.fields
        packets = damaged = 0
        # frames with no segment, by parse_frame code: not TCP, fragment, cut short, damaged header
        missed = [0, 0, 0, 0]
        first_ts = None
        ts = 0.0  # the time given to the last packet walked
        walk = compiled.fastwalk
        batch = walk.pcapng_batch if walk is not None else None
        columned = getattr(walk, "Segments", None) if columns else None  # None: an older build, lists
        limit = compiled.BATCH
        try:
            while True:
                if batch is not None and block is not None:
                    # The compiled walk takes the enhanced packet blocks it can; every other block, and
                    # anything to judge (lengths, interfaces, the end of the bytes in hand), is below.
                    out = [] if columned is None else columned(limit)
                    pos, n, nt, fr, cs, dm, first, last, bad = batch(
                        buf,
                        pos,
                        end,
                        order == ">",
                        links,
                        units,
                        offsets,
                        fields,
                        parse,
                        out,
                        limit,
                        MAX_RECORD,
                        ts if packets else None,
                    )
                    if n:
                        packets += n
                        damaged += bad
                        missed = [m + c for m, c in zip(missed, (nt, fr, cs, dm), strict=True)]
                        if first_ts is None:
                            first_ts = first
                        ts = last
                        b.parsed = pos
                        if batched:
                            yield out
                        else:
                            yield from out
                        continue
                if pos + 28 <= end and block is not None:
                    btype, blen, iface, hi, lo, caplen, _wire = block(buf, pos)
                elif pos + 12 <= end:
                    btype, blen = head(buf, pos) if head else (PCAPNG_SHB, 0)
                else:
                    btype = blen = -1
                if btype == PCAPNG_SHB:  # a new section: its own byte order and interfaces
                    order = self._section(buf, pos)
                    if order is None:
                        warnings.append(b.corrupt(pos, "corrupt section header"))
                        break
                    head = struct.Struct(order + "II").unpack_from
                    block = struct.Struct(order + "IIIIIII").unpack_from
                    block_head = struct.Struct(order + "IIIII").unpack_from
                    links, units, offsets, fasts = self.links, self.units, self.offsets, self.fasts
                    fields = self.fields
                    blen = head(buf, pos)[1]
                if blen != -1 and (blen < 12 or blen & 3 or blen > MAX_RECORD):
                    warnings.append(b.corrupt(pos, "corrupt block"))
                    break
                if blen == -1 or pos + blen > end:
                    new_pos = more_or_stop(b, pos, warnings)
                    if new_pos is None:
                        break
                    pos, buf, end = new_pos, b.buf, b.end
                    continue
                if btype == 6 or btype == 2:  # enhanced packet block, or the obsolete one
                    if btype == 2:  # obsolete: a 16-bit interface id and drop count first
                        iface = struct.unpack_from(order + "H", buf, pos + 8)[0]
                        hi, lo, caplen = struct.unpack_from(order + "III", buf, pos + 12)
                    if iface >= len(links) or 28 + caplen > blen:
                        if self._beyond_cap(iface):
                            pos += blen
                            continue
                        warnings.append(b.corrupt(pos, "corrupt packet block"))
                        break
                    raw = ((hi << 32) | lo) / units[iface] + offsets[iface]
                    after = pos + blen  # the next block's time, when it is a packet's, for out_of_line
                    if packets and after + 20 <= end:
                        nxt_type, _n, nxt_iface, nxt_hi, nxt_lo = block_head(buf, after)
                        if (
                            nxt_type == 6
                            and nxt_iface < len(links)
                            and out_of_line(
                                ts, raw, ((nxt_hi << 32) | nxt_lo) / units[nxt_iface] + offsets[nxt_iface]
                            )
                        ):
                            damaged += 1  # ts stays the time given to the packet before
                            raw = ts
                    ts = raw
                    p, link = pos + 28, links[iface]
                elif btype == 3:  # simple packet block: interface 0, no timestamp of its own
                    if not links:
                        warnings.append(b.corrupt(pos, "packet block before any interface"))
                        break
                    caplen = min(head(buf, pos + 8)[0], self.snaplens[0], blen - 16)
                    p, iface, link = pos + 12, 0, links[0]
                else:
                    if btype == 1:
                        self._interface(buf, pos, blen, order)
                    pos += blen
                    continue
                pos += blen
                packets += 1
                if not packets & PROGRESS_EVERY:
                    b.parsed = pos
                if first_ts is None:
                    first_ts = ts
                seg = segment(ts, buf, p, p + caplen, link, fasts[iface])
                if seg.__class__ is tuple:
                    yield [seg] if batched else seg
                else:
                    missed[seg] += 1
        finally:
            self.counts.store(packets, *missed, first_ts, ts if packets else None, damaged)
            if self.beyond_cap:
                warnings.append(
                    f"{b.path}: interface limit ({self.max_interfaces} per section) reached: "
                    f"{self.beyond_cap} packets of later interfaces skipped"
                )
