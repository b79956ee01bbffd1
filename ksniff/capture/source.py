"""The bytes of one capture file: a memory map for plain files, a sliding window over a gzip stream.

Walks read `buf[pos:end]` and call `more(pos)` when a record runs past `end`. A gzip stream is inflated
a window at a time, so memory follows the window, not the file; the total it may inflate to is capped
(`max_inflated`), and a stream cut there ends the walk with the cap named in a warning. A mapped file is
served a window at a time too: from the second window on, the pages of the window after the walk's are
mapped in ahead of it, and those of the windows it has left are dropped (ksniff.capture.readahead). A
file is opened and closed again before its walk (its header, its first packet's time): nothing is read
ahead for those.
"""

from __future__ import annotations

import mmap
import os
import stat
import zlib

from ksniff.capture import readahead
from ksniff.capture.errors import CaptureError

GZIP_MAGIC = b"\x1f\x8b"
# Bytes parsed between progress updates, inflated per step from a gzip stream, and of a mapped file the
# step of its readahead: at most about two windows of a file are mapped at once (the one walked, the one
# after it), however big it is.
WINDOW = 16 << 20


class Gunzip:
    """Inflates a gzip file step by step; a cut or damaged stream just ends (the walk reports where)."""

    def __init__(self, file, max_out: int | None = None) -> None:
        self._file = file
        self._z = zlib.decompressobj(31)
        self.damaged = False
        self.capped = False
        self.inflated = 0
        self._max_out = max_out
        self._rest = b""  # compressed input not yet inflated (held back by the step's output bound)

    def read(self, size: int) -> bytes:
        """Up to about `size` more inflated bytes (never more than `size` from one input step)."""
        out = []
        have = 0
        while have < size and not self.capped:
            raw = self._rest or self._file.read(1 << 20)
            self._rest = b""
            if not raw:
                break
            want = size - have
            if self._max_out is not None:
                want = min(want, self._max_out - self.inflated)
                if want <= 0:
                    self.capped = True
                    break
            try:
                data = self._z.decompress(raw, want)
                self._rest = self._z.unconsumed_tail
                if self._z.eof and self._z.unused_data:  # concatenated gzip members
                    self._rest = self._z.unused_data + self._rest
                    self._z = zlib.decompressobj(31)
            except zlib.error:
                self.damaged = True
                break
            out.append(data)
            have += len(data)
            self.inflated += len(data)
        return b"".join(out)


class CaptureBuffer:
    """Opens `path` (regular files only) and serves its bytes, inflated when it is gzip."""

    def __init__(self, path: str, max_inflated: int | None = None) -> None:
        self.path = path
        try:
            # Checked before opening: opening a FIFO blocks until a writer comes, and pipes and devices
            # cannot be mapped or measured.
            if not stat.S_ISREG(os.stat(path).st_mode):
                raise CaptureError(f"{path}: not a regular file (save the capture to a file first)")
            self._file = open(path, "rb")  # noqa: SIM115 - lives as long as the walk
            st = os.fstat(self._file.fileno())
            self.size = st.st_size
            self.stamp = (st.st_size, st.st_mtime_ns)  # to tell the file changed between two readings
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
        self._gz: Gunzip | None = None
        self._max_inflated = max_inflated
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
            self._gz = Gunzip(self._file, self._max_inflated)
            data = self._gz.read(WINDOW)
            self.buf = memoryview(data)
            self.end = len(data)
        else:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self.buf = memoryview(self._map)
            self.end = min(self.size, WINDOW)
        self.read_pos = self._file.tell() if self.gz else self.end

    @property
    def inflate_capped(self) -> bool:
        """The gzip stream was cut at the inflation cap (the walk's end is the cap's, not the file's)."""
        return self._gz is not None and self._gz.capped

    def more(self, pos: int) -> int | None:
        """Make more bytes available after `pos`; returns the new `pos` (the buffer may move), or None."""
        if self._gz is None:
            if self.end >= self.size:
                return None
            self._release(pos)
            self.end = min(self.size, self.end + WINDOW)
            readahead.ahead(self.buf, self.end, min(self.size, self.end + WINDOW))
            self.read_pos = self.end
            return pos
        data = self._gz.read(WINDOW)
        if not data:
            return None
        tail = bytes(self.buf[pos : self.end])
        self.base += pos
        joined = tail + data
        self.buf = memoryview(joined)
        self.end = len(joined)
        self.read_pos = self._file.tell()
        return 0

    def _release(self, pos: int) -> None:
        """Drop mapped pages already parsed, so resident memory stays flat however big the file is.

        The pages are file-backed: a payload view still held downstream just reads them in again (the
        decoder holds a large frame's segments until it is whole). Pages read in again are dropped at
        the next window as well: every page before `pos` is dropped each time, not only those parsed
        since the last window (unmapped ranges cost the kernel next to nothing to walk).
        """
        upto = pos - pos % mmap.PAGESIZE
        if self._map is not None and upto > self._released:
            readahead.behind(self._map, self.buf, upto)
            self._released = upto

    def truncated(self, pos: int) -> str:
        return f"{self.path}: truncated at byte {self.base + pos}"

    def corrupt(self, pos: int, what: str) -> str:
        return f"{self.path}: {what} at byte {self.base + pos}; rest skipped"

    @property
    def is_mapped(self) -> bool:
        """`buf` is the whole file mapped (not gzip, not closed)."""
        return self._map is not None

    def close(self) -> None:
        self.buf = memoryview(b"")
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # payload views still held downstream keep the map alive until they go
            self._map = None  # and then it closes itself (and its descriptor) as it is freed
        self._file.close()
