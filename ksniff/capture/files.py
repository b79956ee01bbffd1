"""Capture files into segment tuples: pcap and pcapng, plain or gzip, one pass with precompiled structs.

A file is opened (and its header checked) by `open_capture`, which raises `CaptureError` for anything
that is not a capture; iterating `CaptureFile.segments()` then walks the records. Damage found while
walking (a file cut mid-record, a corrupt block) ends that file early with a warning: a partial result.
"""

from __future__ import annotations

import gzip
import mmap
import os
import stat
import struct
import zlib
from collections.abc import Iterator

from ksniff.capture.errors import CaptureError
from ksniff.capture.packets import (
    CUT_SHORT,
    FAST_PATHS,
    FRAGMENT,
    is_supported,
    linktype_name,
    parse_frame,
)

PCAP_MAGICS = {  # first four bytes as read little-endian -> (byte order, fraction units per second)
    0xA1B2C3D4: ("<", 1e6), 0xD4C3B2A1: (">", 1e6),
    0xA1B23C4D: ("<", 1e9), 0x4D3CB2A1: (">", 1e9),
}
PCAPNG_SHB = 0x0A0D0D0A
GZIP_MAGIC = b"\x1f\x8b"
PROGRESS_EVERY = 0x3FF  # the walk notes its position every 1,024 packets (a mask: one AND per packet)
WINDOW = 32 << 20  # bytes parsed between progress updates (and read per step from a gzip stream)
MAX_RECORD = 1 << 28  # a record or block claiming more than this is corruption, not data

_LE32 = struct.Struct("<I").unpack_from


class _Counts:
    """What a file's walk saw, kept in locals while walking and written here at the end."""

    __slots__ = ("packets", "non_tcp", "fragments", "cut_short", "first_ts", "last_ts")

    def __init__(self) -> None:
        self.packets = self.non_tcp = self.fragments = self.cut_short = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None


class _Gunzip:
    """Decompresses a gzip file step by step; a cut or damaged stream just ends (the walk reports where)."""

    def __init__(self, file) -> None:
        self._file = file
        self._z = zlib.decompressobj(31)
        self.damaged = False

    def read(self, size: int) -> bytes:
        out = []
        have = 0
        while have < size:
            raw = self._file.read(1 << 20)
            if not raw:
                break
            try:
                data = self._z.decompress(raw)
                while self._z.eof and self._z.unused_data:  # concatenated gzip members
                    rest = self._z.unused_data
                    self._z = zlib.decompressobj(31)
                    data += self._z.decompress(rest)
            except zlib.error:
                self.damaged = True
                break
            out.append(data)
            have += len(data)
        return b"".join(out)


class _Buffer:
    """The bytes of one capture: a memory map for plain files, a sliding window for gzip streams."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # Checked before opening: opening a FIFO blocks until a writer comes, and pipes and devices
            # cannot be mapped or measured.
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise CaptureError(f"{path}: not a regular file (save the capture to a file first)")
            self._file = open(path, "rb")  # noqa: SIM115 - lives as long as the walk
            self.size = os.fstat(self._file.fileno()).st_size
            head = self._file.read(4)
        except OSError as exc:
            raise CaptureError(f"{path}: {exc.strerror or exc}") from None
        if not head:
            self._file.close()
            raise CaptureError(f"{path}: empty file")
        self.gz = head[:2] == GZIP_MAGIC
        self.base = 0  # offset in the (uncompressed) stream of buf[0]
        self.read_pos = 0  # bytes of the file on disk consumed so far, for progress
        self.parsed = 0  # the walk's position in `buf` at its last progress checkpoint
        self._gz: _Gunzip | None = None
        self._map: mmap.mmap | None = None
        self._released = 0
        try:
            self._open_view()
        except (OSError, ValueError) as exc:
            self.close()
            raise CaptureError(f"{path}: cannot read ({exc})") from None

    def _open_view(self) -> None:
        if self.gz:
            self._file.seek(0)
            self._gz = _Gunzip(self._file)
            data = self._gz.read(WINDOW)
            self.buf = memoryview(data)
            self.end = len(data)
        else:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self.buf = memoryview(self._map)
            self.end = min(self.size, WINDOW)
        self.read_pos = self._file.tell() if self.gz else self.end

    def more(self, pos: int) -> int | None:
        """Make more bytes available after `pos`; returns the new `pos` (the buffer may move), or None."""
        if self._gz is None:
            if self.end >= self.size:
                return None
            self._release(pos)
            self.end = min(self.size, self.end + WINDOW)
            self.read_pos = self.end
            return pos
        data = self._gz.read(WINDOW)
        if not data:
            return None
        tail = bytes(self.buf[pos:self.end])
        self.base += pos
        joined = tail + data
        self.buf = memoryview(joined)
        self.end = len(joined)
        self.read_pos = self._file.tell()
        return 0

    def _release(self, pos: int) -> None:
        """Drop mapped pages already parsed, so resident memory stays flat however big the file is.

        The pages are file-backed: a payload view still held downstream just reads them in again.
        """
        upto = pos - pos % mmap.PAGESIZE
        if self._map is not None and upto > self._released and hasattr(self._map, "madvise"):
            self._map.madvise(mmap.MADV_DONTNEED, self._released, upto - self._released)
            self._released = upto

    def close(self) -> None:
        self.buf = memoryview(b"")
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # payload views still held downstream keep the map alive until they go
        self._file.close()


class CaptureFile:
    """One opened capture file: its format and first link type are known before any packet is read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._buffer = _Buffer(path)
        self.size = self._buffer.size
        self.counts = _Counts()
        self.warnings: list[str] = []
        self.linktypes: list[str] = []
        b = self._buffer
        if b.end < 4:
            self._fail("not a pcap or pcapng file")
        magic = _LE32(b.buf, 0)[0]
        if magic in PCAP_MAGICS:
            self.format = "pcap"
            self._read_pcap_header(magic)
        elif magic == PCAPNG_SHB:
            self.format = "pcapng"
            self._read_pcapng_first_section()
        else:
            self._fail("not a pcap or pcapng file")

    def close(self) -> None:
        self._buffer.close()

    @property
    def bytes_read(self) -> int:
        """Bytes of the file walked so far, for progress: the walk's checkpoint in a plain file (the map
        itself grows by WINDOW, too coarse for a rate), the compressed bytes read from a gzip stream."""
        b = self._buffer
        return b.read_pos if b.gz else min(b.base + b.parsed, b.size)

    def _fail(self, why: str) -> None:
        self._buffer.close()
        raise CaptureError(f"{self.path}: {why}")

    def _read_pcap_header(self, magic: int) -> None:
        b = self._buffer
        if b.end < 24:
            self._fail("truncated pcap header")
        self._order, self._unit = PCAP_MAGICS[magic]
        network = struct.unpack_from(self._order + "I", b.buf, 20)[0]
        self._link = network & 0xFFFF  # the upper bits carry FCS information, not the link type
        self._first_record_ts = None
        if b.end >= 32:
            sec, frac = struct.unpack_from(self._order + "II", b.buf, 24)
            self._first_record_ts = sec + frac / self._unit
        if not is_supported(self._link):
            self._fail(f"unsupported link type {self._link}")
        self.linktypes.append(linktype_name(self._link))

    def _read_pcapng_first_section(self) -> None:
        b = self._buffer
        if b.end < 12:
            self._fail("truncated pcapng header")
        magic = _LE32(b.buf, 8)[0]
        if magic not in (0x1A2B3C4D, 0x4D3C2B1A):
            self._fail("not a pcapng file (bad byte-order magic)")
        head = struct.Struct(("<" if magic == 0x1A2B3C4D else ">") + "IIH").unpack_from
        pos = 0
        while pos + 16 <= b.end:  # interfaces of the first section, up to its first packet
            btype, blen, link = head(b.buf, pos)
            if btype in (2, 3, 6) or blen < 12 or (pos > 0 and btype == PCAPNG_SHB):
                break
            if btype == 1 and not is_supported(link):
                self._fail(f"unsupported link type {link}")
            pos += blen

    def segments(self) -> Iterator[tuple]:
        """Every TCP segment in the file, in file order; the walk's counts land in `counts`."""
        return self._pcap_segments() if self.format == "pcap" else self._pcapng_segments()

    def _truncated(self, pos: int) -> None:
        self.warnings.append(f"{self.path}: truncated at byte {self._buffer.base + pos}")

    def _corrupt(self, pos: int, what: str) -> None:
        self.warnings.append(f"{self.path}: {what} at byte {self._buffer.base + pos}; rest skipped")

    def _pcap_segments(self) -> Iterator[tuple]:
        b = self._buffer
        record = struct.Struct(self._order + "IIII").unpack_from
        unit, link, parse = self._unit, self._link, parse_frame
        l2, fast = FAST_PATHS.get(link, (0, None))
        fast_len = fast.size if fast else 1 << 30
        fast = fast.unpack_from if fast else None
        buf, end, pos = b.buf, b.end, 24
        packets = non_tcp = fragments = cut_short = 0
        ts = first_ts = None
        try:
            while True:
                if pos + 16 <= end:
                    sec, frac, caplen, _wire = record(buf, pos)
                    p = pos + 16
                else:
                    caplen, p = 0, end + 1
                if p + caplen > end:  # the record runs past the bytes available: get more, or stop
                    if caplen > MAX_RECORD:
                        self._corrupt(pos, "corrupt record")
                        break
                    new_pos = b.more(pos)
                    if new_pos is None:
                        if pos < end:
                            self._truncated(pos)
                        break
                    pos, buf, end = new_pos, b.buf, b.end
                    continue
                pos = p + caplen
                ts = sec + frac / unit
                packets += 1
                if not packets & PROGRESS_EVERY:
                    b.parsed = pos
                if caplen >= fast_len:
                    # Inlined common case (IPv4, no options, TCP, whole): one unpack for all headers.
                    et, vihl, total, frag, proto, src, dst, sp, dp, seq, ack, off, flags = fast(buf, p)
                    if et == 0x0800 and vihl == 0x45 and proto == 6 and not frag & 0x3FFF:
                        ip_end = p + l2 + total
                        d = p + l2 + 20 + (off >> 4) * 4
                        if d <= ip_end <= pos:
                            yield (ts, src, sp, dst, dp, seq, ack, flags, buf[d:ip_end])
                            continue
                seg = parse(ts, buf, p, pos, link)
                if seg.__class__ is tuple:
                    yield seg
                elif seg == FRAGMENT:
                    fragments += 1
                elif seg == CUT_SHORT:
                    cut_short += 1
                else:
                    non_tcp += 1
        finally:
            if packets:  # read at open, so the loop does not test for the first packet every time
                first_ts = self._first_record_ts
            self._store(packets, non_tcp, fragments, cut_short, first_ts, ts)
            b.parsed = b.size - b.base
            b.close()

    def _store(self, packets: int, non_tcp: int, fragments: int, cut_short: int,
               first_ts: float | None, last_ts: float | None) -> None:
        c = self.counts
        c.packets, c.non_tcp, c.fragments, c.cut_short = packets, non_tcp, fragments, cut_short
        c.first_ts, c.last_ts = first_ts, last_ts

    def _pcapng_segments(self) -> Iterator[tuple]:
        walk = _PcapngWalk(self)
        try:
            yield from walk.segments()
        finally:
            self._store(walk.packets, walk.non_tcp, walk.fragments, walk.cut_short, walk.first_ts,
                        walk.last_ts)
            self._buffer.parsed = self._buffer.size - self._buffer.base
            self._buffer.close()


class _PcapngWalk:
    """The state of a pcapng walk: byte order and interfaces change with each section."""

    def __init__(self, capture: CaptureFile) -> None:
        self.capture = capture
        self.packets = self.non_tcp = self.fragments = self.cut_short = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.links: list[int] = []
        self.units: list[float] = []
        self.offsets: list[float] = []
        self.snaplens: list[int] = []
        self.fasts: list[tuple | None] = []

    def _section(self, buf: memoryview, pos: int) -> str | None:
        magic = _LE32(buf, pos + 8)[0]
        if magic == 0x1A2B3C4D:
            order = "<"
        elif magic == 0x4D3C2B1A:
            order = ">"
        else:
            return None
        self.links, self.units, self.offsets, self.snaplens, self.fasts = [], [], [], [], []
        return order

    def _interface(self, buf: memoryview, pos: int, blen: int, order: str) -> None:
        link, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, pos + 8)
        if is_supported(link):
            name = linktype_name(link)
            if name not in self.capture.linktypes:
                self.capture.linktypes.append(name)
        else:  # the first section was checked at open; a later one only loses its own packets
            self.capture.warnings.append(
                f"{self.capture.path}: unsupported link type {link} in a later section; its packets skipped")
        unit, offset = 1e6, 0.0  # unit: timestamp ticks per second
        opt, stop = pos + 16, pos + blen - 4
        while opt + 4 <= stop:
            code, length = struct.unpack_from(order + "HH", buf, opt)
            if code == 0:
                break
            if code == 9 and length >= 1:  # if_tsresol: power of ten, or of two with the top bit set
                r = buf[opt + 4]
                unit = 2.0 ** (r & 0x7F) if r & 0x80 else 10.0 ** r
            elif code == 14 and length == 8:  # if_tsoffset: seconds added to every timestamp
                offset = float(struct.unpack_from(order + "q", buf, opt + 4)[0])
            opt += 4 + ((length + 3) & ~3)
        self.links.append(link)
        self.units.append(unit)
        self.offsets.append(offset)
        self.snaplens.append(snaplen or MAX_RECORD)
        fast = FAST_PATHS.get(link)
        self.fasts.append(None if fast is None else (fast[0], fast[1].unpack_from, fast[1].size))

    def segments(self) -> Iterator[tuple]:
        cap = self.capture
        b = cap._buffer
        buf, end, pos = b.buf, b.end, 0
        order = "<"
        head = block = None  # set by each section header, in its byte order
        parse = parse_frame
        links, units, offsets, fasts = self.links, self.units, self.offsets, self.fasts
        packets = non_tcp = fragments = cut_short = 0
        first_ts = None
        ts = 0.0
        try:
            while True:
                if pos + 28 <= end and block is not None:
                    btype, blen, iface, hi, lo, caplen, _wire = block(buf, pos)
                elif pos + 12 <= end:
                    btype, blen = head(buf, pos) if head else (PCAPNG_SHB, 0)
                else:
                    btype = blen = -1
                if btype == PCAPNG_SHB:  # a new section: its own byte order and interfaces
                    order = self._section(buf, pos)
                    if order is None:
                        cap._corrupt(pos, "corrupt section header")
                        break
                    head = struct.Struct(order + "II").unpack_from
                    block = struct.Struct(order + "IIIIIII").unpack_from
                    links, units, offsets, fasts = self.links, self.units, self.offsets, self.fasts
                    blen = head(buf, pos)[1]
                if blen != -1 and (blen < 12 or blen & 3 or blen > MAX_RECORD):
                    cap._corrupt(pos, "corrupt block")
                    break
                if blen == -1 or pos + blen > end:
                    new_pos = b.more(pos)
                    if new_pos is None:
                        if pos < end:
                            cap._truncated(pos)
                        break
                    pos, buf, end = new_pos, b.buf, b.end
                    continue
                if btype == 6:  # enhanced packet block
                    if iface >= len(links) or 28 + caplen > blen:
                        cap._corrupt(pos, "corrupt packet block")
                        break
                    ts = ((hi << 32) | lo) / units[iface] + offsets[iface]
                    p = pos + 28
                    link = links[iface]
                elif btype == 3:  # simple packet block: interface 0, no timestamp of its own
                    if not links:
                        cap._corrupt(pos, "packet block before any interface")
                        break
                    caplen = min(head(buf, pos + 8)[0], self.snaplens[0], blen - 16)
                    p, iface, link = pos + 12, 0, links[0]
                elif btype == 2:  # obsolete packet block: 16-bit interface id and drop count first
                    iface = struct.unpack_from(order + "H", buf, pos + 8)[0]
                    hi, lo, caplen = struct.unpack_from(order + "III", buf, pos + 12)
                    if iface >= len(links) or 28 + caplen > blen:
                        cap._corrupt(pos, "corrupt packet block")
                        break
                    ts = ((hi << 32) | lo) / units[iface] + offsets[iface]
                    p, link = pos + 28, links[iface]
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
                q = p + caplen
                fast = fasts[iface]
                if fast is not None and caplen >= fast[2]:
                    # Inlined common case (IPv4, no options, TCP, whole): one unpack for all headers.
                    et, vihl, total, frag, proto, src, dst, sp, dp, seq, ack, off, flags = fast[1](buf, p)
                    if et == 0x0800 and vihl == 0x45 and proto == 6 and not frag & 0x3FFF:
                        l2 = fast[0]
                        ip_end = p + l2 + total
                        d = p + l2 + 20 + (off >> 4) * 4
                        if d <= ip_end <= q:
                            yield (ts, src, sp, dst, dp, seq, ack, flags, buf[d:ip_end])
                            continue
                seg = parse(ts, buf, p, q, link)
                if seg.__class__ is tuple:
                    yield seg
                elif seg == FRAGMENT:
                    fragments += 1
                elif seg == CUT_SHORT:
                    cut_short += 1
                else:
                    non_tcp += 1
        finally:
            self.packets, self.non_tcp = packets, non_tcp
            self.fragments, self.cut_short = fragments, cut_short
            self.first_ts, self.last_ts = first_ts, (ts if packets else None)


def expand_paths(paths: list[str]) -> list[str]:
    """Files as given, and folders walked recursively (sorted) for files that look like captures."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = [f for f in _walk(path) if looks_like_capture(f)]
            if not found:
                raise CaptureError(f"{path}: no pcap or pcapng files in this folder")
            files.extend(found)
        elif os.path.exists(path) or os.path.islink(path):
            files.append(path)
        else:
            raise CaptureError(f"{path}: no such file or folder")
    return files


def _walk(folder: str) -> Iterator[str]:
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            yield os.path.join(root, name)


def looks_like_capture(path: str) -> bool:
    """Whether the first bytes are a capture magic (inside gzip, too); never raises."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO in a folder would block the walk
            return False
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] == GZIP_MAGIC:
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as g:
                    head = g.read(4)
    except (OSError, EOFError, zlib.error):
        return False
    return len(head) == 4 and (_LE32(head)[0] in PCAP_MAGICS or _LE32(head)[0] == PCAPNG_SHB)
