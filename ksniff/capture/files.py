"""Capture files into segment tuples: pcap and pcapng, plain or gzip, one pass with precompiled structs.

A file is opened (and its header checked) by `CaptureFile`, which raises `CaptureError` for anything
that is not a capture; iterating `CaptureFile.segments()` then walks the records. Damage found while
walking (a file cut mid-record, a corrupt block) ends that file early with a warning: a partial result.
The bytes come from `source` (memory map or gzip window), the walks from `pcap` and `pcapng`, folder
expansion from `folders`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from ksniff.capture.errors import CaptureError, CaptureLimits
from ksniff.capture.folders import expand_inputs, expand_paths, looks_like_capture
from ksniff.capture.pcap import PCAP_MAGICS, PcapHeader, pcap_segments
from ksniff.capture.pcapng import PCAPNG_SHB, PcapngWalk, first_section_error
from ksniff.capture.source import CaptureBuffer
from ksniff.capture.walk import WalkCounts

__all__ = ["CaptureFile", "expand_inputs", "expand_paths", "looks_like_capture"]

_LE32 = struct.Struct("<I").unpack_from


class CaptureFile:
    """One opened capture file: its format and first link type are known before any packet is read."""

    def __init__(self, path: str, limits: CaptureLimits | None = None) -> None:
        self.path = path
        self.limits = limits or CaptureLimits()
        self._buffer = b = CaptureBuffer(path, self._inflate_cap(path))
        self.size = b.size
        self.counts = WalkCounts()
        self.warnings: list[str] = []
        self.linktypes: list[str] = []
        if b.end < 4:
            self._fail("not a pcap or pcapng file")
        magic = _LE32(b.buf, 0)[0]
        if magic in PCAP_MAGICS:
            self.format = "pcap"
            self._pcap = PcapHeader(b, magic)
            if self._pcap.error:
                self._fail(self._pcap.error)
            self.linktypes.extend(self._pcap.linktypes)
        elif magic == PCAPNG_SHB:
            self.format = "pcapng"
            error = first_section_error(b)
            if error:
                self._fail(error)
        else:
            self._fail("not a pcap or pcapng file")
        # Opened again by the walk (`segments`): a run over thousands of files holds open only those its
        # merge is in (ksniff.capture.run.segments), not every file it was given.
        b.close()
        b.read_pos = 0  # nothing walked yet, for the progress
        self._walked = False

    def _inflate_cap(self, path: str) -> int:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        return max(self.limits.gunzip_floor, size * self.limits.gunzip_ratio)

    def close(self) -> None:
        self._buffer.close()

    @property
    def stamp(self) -> tuple[int, int]:
        """(size, modification time in ns) of the file as it was opened last."""
        return self._buffer.stamp

    def mapped(self) -> memoryview | None:
        """While the walk goes: the whole file's bytes as it maps them, of which the payloads it gives
        are views (ksniff.capture._fastwalk.payload_offsets); None for a gzip file, whose bytes are
        inflated window by window."""
        b = self._buffer
        return b.buf if b.is_mapped else None

    @property
    def bytes_read(self) -> int:
        """Bytes of the file walked so far, for progress: the walk's checkpoint in a plain file (the map
        itself grows by WINDOW, too coarse for a rate), the compressed bytes read from a gzip stream."""
        b = self._buffer
        return b.read_pos if b.gz else min(b.base + b.parsed, b.size)

    def first_ts(self) -> float | None:
        """The timestamp of the file's first TCP segment, read with the file closed again after it and its
        walk not begun (`segments` starts from the top). None when it has no TCP segment: then it was
        walked to its end, and `counts` and `warnings` are its walk's."""
        linktypes, warnings = list(self.linktypes), list(self.warnings)
        walk = self.segments()
        first = next(walk, None)
        if first is None:
            return None
        walk.close()
        self.counts = WalkCounts()
        self.linktypes[:], self.warnings[:] = linktypes, warnings
        self._buffer.parsed = self._buffer.read_pos = 0  # nothing read yet, for the progress
        self._walked = False
        return first[0]

    def _fail(self, why: str) -> None:
        self._buffer.close()
        raise CaptureError(f"{self.path}: {why}")

    def segments(self, batched: bool = False, columns: bool = False) -> Iterator:
        """Every TCP segment in the file, in file order; the walk's counts land in `counts`. With
        `batched`, the segments come in lists (Reassembler.batch_events); with `columns` too, the compiled
        walk's lists are its `Segments` columns (read as lists, kept for the reassembler's hot loop). The
        file is opened for the walk and closed at its end; a file is walked once."""
        if not self._walked:
            self._walked = True
            self._buffer = CaptureBuffer(self.path, self._inflate_cap(self.path))
        b = self._buffer
        try:
            if self.format == "pcap":
                yield from pcap_segments(b, self._pcap, self.counts, self.warnings, batched, columns)
            else:
                walk = PcapngWalk(b, self.counts, self.warnings, self.linktypes, self.limits.max_interfaces)
                yield from walk.segments(batched, columns)
        finally:
            if b.inflate_capped:
                self.warnings.append(
                    f"{self.path}: gzip inflation limit ({self.limits.gunzip_ratio}x the file, at least "
                    f"{self.limits.gunzip_floor} bytes) reached: the rest of the file was not read"
                )
            b.parsed = b.size - b.base
            b.close()
