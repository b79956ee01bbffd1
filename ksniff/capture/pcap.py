"""The pcap walk: the file header, then one record after another, each frame into a segment tuple."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ksniff.capture import compiled
from ksniff.capture.packets import FAST_FIELDS, fast_path, is_supported, linktype_name, segment_of
from ksniff.capture.packets import parse_frame as parse  # for the frames the compiled walk cannot read
from ksniff.capture.source import CaptureBuffer
from ksniff.capture.walk import MAX_RECORD, PROGRESS_EVERY, WalkCounts, more_or_stop, out_of_line

PCAP_MAGICS = {  # first four bytes as read little-endian -> (byte order, fraction units per second)
    0xA1B2C3D4: ("<", 1e6),
    0xD4C3B2A1: (">", 1e6),
    0xA1B23C4D: ("<", 1e9),
    0x4D3CB2A1: (">", 1e9),
}


class PcapHeader:
    """What the file header says: byte order, timestamp unit, link type; or why the file is unusable."""

    def __init__(self, b: CaptureBuffer, magic: int) -> None:
        self.error: str | None = None
        if b.end < 24:
            self.error = "truncated pcap header"
            return
        self.order, self.unit = PCAP_MAGICS[magic]
        network = struct.unpack_from(self.order + "I", b.buf, 20)[0]
        self.link = network & 0xFFFF  # the upper bits carry FCS information, not the link type
        self.first_ts = None
        if b.end >= 32:
            sec, frac = struct.unpack_from(self.order + "II", b.buf, 24)
            self.first_ts = sec + frac / self.unit if frac < self.unit else float(sec)  # as the walk reads it
        if not is_supported(self.link):
            self.error = f"unsupported link type {self.link}"
        self.linktypes = [linktype_name(self.link)]


def pcap_segments(
    b: CaptureBuffer,
    head: PcapHeader,
    counts: WalkCounts,
    warnings: list[str],
    batched: bool = False,
    columns: bool = False,
) -> Iterator:
    """Every TCP segment of the file in order; damage ends the walk with a warning. With `batched`, in
    lists (each of the compiled walk's batches whole, a segment of the Python loop alone); with
    `columns` too, the compiled walk's batches are `_fastwalk.Segments` (the same segments, read as a
    list, kept in columns for the reassembler's hot loop). A damaged record time (a fraction of a second
    of a second or more, or `out_of_line` with the records around it, the next one's read ahead when its
    header is in hand) is replaced by the time of the record before it, and counted
    (`counts.damaged_times`)."""
    record = struct.Struct(head.order + "IIII").unpack_from
    stamp = struct.Struct(head.order + "II").unpack_from
    unit, link, segment = head.unit, head.link, segment_of
    fast = fast_path(link)
    buf, end, pos = b.buf, b.end, 24
    packets = damaged = 0
    # frames with no segment, by parse_frame code: not TCP, fragment, cut short, damaged header
    missed = [0, 0, 0, 0]
    ts = None  # the time given to the last record walked
    walk = compiled.fastwalk
    if walk is not None:
        batch = walk.pcap_batch
        columned = getattr(walk, "Segments", None) if columns else None  # None: an older build, lists
        big = head.order == ">"
        et_off, l2c = FAST_FIELDS.get(link, (0, -1))
        limit = compiled.BATCH
    try:
        while True:
            if walk is not None:
                # The compiled walk takes every whole record it can; the loop below then meets the first
                # one that runs past `end` (more bytes, a truncated file, a corrupt length).
                out = [] if columned is None else columned(limit)
                pos, n, *codes, last, bad = batch(
                    buf, pos, end, big, unit, link, et_off, l2c, parse, out, limit, ts
                )
                if n:
                    packets += n
                    damaged += bad
                    missed = [m + c for m, c in zip(missed, codes, strict=True)]
                    ts = last
                    b.parsed = pos
                    if batched:
                        yield out
                    else:
                        yield from out
                    continue
            if pos + 16 <= end:
                sec, frac, caplen, _wire = record(buf, pos)
                p = pos + 16
            else:
                caplen, p = 0, end + 1
            if p + caplen > end:  # the record runs past the bytes available: get more, or stop
                if caplen > MAX_RECORD:
                    warnings.append(b.corrupt(pos, "corrupt record"))
                    break
                new_pos = more_or_stop(b, pos, warnings)
                if new_pos is None:
                    break
                pos, buf, end = new_pos, b.buf, b.end
                continue
            pos = p + caplen
            raw = sec + frac / unit
            if frac >= unit:
                ts = float(sec) if ts is None else ts
                damaged += 1
            elif (
                ts is not None
                and pos + 8 <= end
                and (after := stamp(buf, pos))[1] < unit
                and out_of_line(ts, raw, after[0] + after[1] / unit)
            ):
                damaged += 1  # ts stays the time given to the record before
            else:
                ts = raw
            packets += 1
            if not packets & PROGRESS_EVERY:
                b.parsed = pos
            seg = segment(ts, buf, p, pos, link, fast)
            if seg.__class__ is tuple:
                yield [seg] if batched else seg
            else:
                missed[seg] += 1
    finally:
        # The first record's time was read with the header, so the loop does not test for it each time.
        counts.store(packets, *missed, head.first_ts if packets else None, ts, damaged)
