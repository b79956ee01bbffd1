"""Kafka framing: one direction's byte stream into size-prefixed frames, and request/response headers.

`FrameSplitter` is a per-direction parser in Suricata's style: each chunk yields the frames it
completes; a partial frame waits in a capped buffer (need more); a size outside [minimum, cap] is
malformed and switches the splitter to resynchronising, where a finder supplied by the connection
(which knows the APIs and the requests in flight) locates the next plausible frame. Frames are never
allocated from a claimed size: bytes are buffered only as they arrive, and a frame above the cap is never
buffered at all.
"""

from __future__ import annotations

import mmap
import struct
from bisect import bisect_right
from collections.abc import Callable
from operator import attrgetter, itemgetter

from ksniff.capture.compiled import load
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.decode.reader import Reader

DEFAULT_MAX_FRAME = 100 * 2**20  # Kafka's socket.request.max.bytes
MIN_REQUEST = 8  # api_key, api_version, correlation_id
MIN_RESPONSE = 4  # correlation_id

_SIZE = struct.Struct(">i").unpack_from
_REQUEST_HEAD = struct.Struct(">hhi").unpack_from
_I16 = struct.Struct(">h").unpack_from
_CORRELATION = struct.Struct(">i").unpack_from
_HEAD_WITH_CLIENT_ID = 14  # size, api key, version, correlation id, client id length

# What a resync finder answers: the next plausible frame starts at `pos` (FOUND); a candidate at `pos`
# needs more bytes to judge (WAIT); nothing plausible before `pos`, keep bytes from there (NONE).
FOUND, WAIT, NONE = 0, 1, 2
Finder = Callable[[bytes, int], tuple[int, int]]
# Whether a frame header plausibly starts at `pos`: (FOUND or NONE, 0), or (WAIT, bytes from `pos` it needs).
Confirm = Callable[[bytes, int], tuple[int, int]]


@slotted_dataclass
class Frame:
    """One Kafka frame's bytes (after the size prefix) with its stream offset and capture times."""

    payload: memoryview  # the bytes after the size prefix
    first_ts: float  # capture time of the frame's first byte
    last_ts: float  # ... and of its last byte
    offset: int  # stream offset of the size prefix
    resynced: bool  # the first frame found by resynchronisation


class FrameSplitter:
    """Splits one direction of a connection into frames."""

    __slots__ = (
        "max_frame",
        "min_size",
        "max_buffer",
        "buf",
        "buf_ts",
        "buf_marks",
        "buf_offset",
        "need",
        "syncing",
        "finder",
        "confirm",
        "confirm_at",
        "malformed",
        "oversized",
        "skipped",
        "next_offset",
        "later",
        "later_len",
    )

    def __init__(
        self,
        *,
        min_size: int,
        max_frame: int = DEFAULT_MAX_FRAME,
        max_buffer: int | None = None,
        finder: Finder | None = None,
        syncing: bool = False,
        confirm: Confirm | None = None,
    ) -> None:
        """`confirm`: judges the header of the frame after one found by resynchronisation; without it,
        that frame is believed as any frame in step is."""
        self.max_frame = max_frame
        self.min_size = min_size
        # A partial frame is buffered up to its own size; the cap only bounds what resync scanning keeps.
        self.max_buffer = max_buffer if max_buffer is not None else 1 << 20
        # The bytes held from the start of a partial frame (or a resynchronisation tail): a copy, or a view
        # of the chunk they came from when they are at least half of it (`_held`).
        self.buf: bytes | memoryview = b""
        # Chunks that came after `buf` while the frame it starts still needs more: held as they are and
        # joined once when the frame is whole (appending each to `buf` copied a large frame's bytes again
        # at every growth of the bytearray: a fifth of a run over large Produce requests).
        self.later: list[bytes] = []
        self.later_len = 0
        self.buf_ts = 0.0  # capture time of the buffered bytes' first byte
        # Where the capture time changes in the buffered bytes and the chunks held in `later`: as
        # StreamChunk.marks, so each frame gets the times of the segments carrying its first and last bytes.
        self.buf_marks: list[tuple[int, float]] = []
        self.buf_offset = 0
        self.need = 0  # bytes the buffered frame needs in all (0: size not yet known)
        self.syncing = syncing
        self.finder = finder
        self.confirm = confirm
        # Stream offset of the frame after one found by resynchronisation, until `confirm` judged it.
        self.confirm_at: int | None = None
        self.malformed = 0  # frames whose size was out of range
        self.oversized = 0  # ... of which above the cap (max_frame)
        self.skipped = 0  # bytes skipped while resynchronising
        self.next_offset: int | None = None

    @property
    def buffered(self) -> int:
        return len(self.buf) + self.later_len

    def gap(self) -> None:
        """Bytes were lost: whatever is buffered can no longer complete; find the next frame afresh."""
        self.skipped += len(self.buf) + self.later_len
        self.buf = b""
        self.buf_marks.clear()
        self.later.clear()
        self.later_len = 0
        self.need = 0
        self.syncing = True
        self.next_offset = None
        self.confirm_at = None

    def feed(
        self, data: bytes, first_ts: float, last_ts: float, offset: int = 0, marks: tuple = ()
    ) -> list[Frame]:
        """Frames completed by this chunk (StreamChunk's fields), in order."""
        return [Frame(*f) for f in self.take(data, first_ts, last_ts, offset, marks)]

    def take(self, data: bytes, first_ts: float, last_ts: float, offset: int = 0, marks: tuple = ()) -> list:
        """`feed`'s frames as plain tuples of Frame's fields (the decoder's path: no object per frame)."""
        if self.next_offset is not None and offset != self.next_offset and self.buf:
            # Chunks must be contiguous; a jump without a gap event is treated as one.
            self.gap()
        self.next_offset = offset + len(data)
        if not self.buf and not self.syncing and self.confirm_at is None and len(data) >= 4:
            # The common case: a chunk holding exactly one whole frame (a small request or response).
            size = _SIZE(data, 0)[0]
            if size + 4 == len(data) and self.min_size <= size <= self.max_frame:
                return [(memoryview(data)[4:], first_ts, last_ts, offset, False)]
        if self.buf:
            held = self.buf_marks
            held.append((offset, first_ts))
            held.extend(marks)
            need = self.need
            if need and len(self.buf) + self.later_len + len(data) < need:
                self.later.append(data)
                self.later_len += len(data)
                return []
            rest = need - len(self.buf) - self.later_len
            if need and not self.syncing and self.confirm_at is None:
                # The frame in step completes in this chunk: only its own bytes are joined, and the
                # chunk's bytes after it are split where they are (not copied with the frame, nor their
                # tail once more into the buffer).
                frame = b"".join((self.buf, *self.later, memoryview(data)[:rest]))
                frames = self._drop_held(frame, held)
                frames += self.split(data, first_ts, offset, marks, rest)
                return frames
            data = b"".join((self.buf, *self.later, data))
            first_ts, offset = self.buf_ts, self.buf_offset
            self._drop_held(b"", held)
            return self.split(data, first_ts, offset, held)
        return self.split(data, first_ts, offset, marks)

    def take_parts(self, parts: tuple, first_ts: float, last_ts: float, offset: int, marks: tuple) -> list:
        """`take` for a chunk handed on as its segments' payloads (StreamChunk.data a tuple, while a
        frame is held): the pieces of the frame in step are held as they are (`_kept`) and the frame
        joined once, from them; the chunk's bytes after it, when it ends here, are taken as a new chunk.
        Anything else (resynchronising, a jump, a frame not in step) joins the pieces and takes them."""
        need = self.need
        if not need or self.syncing or self.confirm_at is not None or offset != self.next_offset:
            return self.take(b"".join(parts), first_ts, last_ts, offset, marks)
        n, mapped = measure(parts)
        self.next_offset = offset + n
        held = self.buf_marks
        held.append((offset, first_ts))
        held.extend(marks)
        have = len(self.buf) + self.later_len
        if have + n < need:
            self.later += _kept(parts, mapped)
            self.later_len += n
            return []
        rest = need - have
        head, after = _cut(parts, rest)
        frames = self._drop_held(b"".join((self.buf, *self.later, *head)), held)
        if rest < n:
            at = offset + rest
            if not self.start_parts(after, n - rest, _time_at(marks, 0, first_ts, at)[0], at, marks, mapped):
                frames += self.split(b"".join(after), first_ts, at, marks)
        return frames

    def start_parts(
        self, parts, n: int, first_ts: float, offset: int, marks: tuple, mapped: bool | None = None
    ) -> bool:
        """With nothing held: holds the pieces `parts` (`n` bytes from stream offset `offset`, capture
        time `first_ts` there, changing at `marks`; `mapped`: as `measure` says, found here when not
        given) without joining them when they begin a frame in step that runs past them, as `split`
        would keep them; False, and nothing done, otherwise."""
        if self.syncing or self.confirm_at is not None or n < 4:
            return False
        size = _SIZE(_first_bytes(parts, 4), 0)[0]
        if size < self.min_size or size > self.max_frame or 4 + size <= n:
            return False
        kept = _kept(parts, _mapped(parts) if mapped is None else mapped)
        if not kept[0]:
            return False
        self.buf = kept[0]
        self.later = kept[1:]
        self.later_len = n - len(kept[0])
        self.next_offset = offset + n
        self.need = 4 + size
        self.buf_offset = offset
        self._keep_marks(offset, marks, 0, first_ts)
        return True

    def _drop_held(self, frame: bytes, held: list) -> list:
        """The held bytes are let go; `frame` (when given) is the one whole frame they began."""
        self.later.clear()
        self.later_len = 0
        first_ts, offset = self.buf_ts, self.buf_offset
        self.buf = b""
        self.buf_marks = []
        self.need = 0
        return self.split(frame, first_ts, offset, held) if frame else []

    def split(self, data: bytes, first_ts: float, offset: int, marks, pos: int = 0) -> list:
        """Frames of `data` from `pos` (stream offset `offset` at data[0], capture time `first_ts` at its
        first byte, changing at `marks`), as tuples of Frame's fields. The one loop over a chunk's frames:
        `take` calls it for what is not a single whole frame, and so does the decoder's connection when
        nothing is held."""
        view = memoryview(data)
        end = len(data)
        frames: list[Frame] = []
        resynced = False
        # The capture time at stream offset `offset + pos`, marks[m:] still ahead: from `pos`, as after
        # a frame that ended at pos - 1.
        ts, m, n_marks = first_ts, 0, len(marks)
        if pos:
            ts, m = _time_at(marks, 0, first_ts, offset + pos - 1)
        while True:
            if self.confirm_at is not None:
                verdict = self._confirm(data, pos, offset)
                if verdict == WAIT:
                    self._keep(data, pos, offset, marks, m, ts)
                    return frames
                if verdict == NONE:  # the frame found was an accident: the search goes on from here
                    self.syncing = True
            if self.syncing:
                pos = self._resync(data, pos, offset, marks, m, ts)
                if self.syncing:
                    return frames
                resynced = True
            if end - pos < 4:
                break
            size = _SIZE(data, pos)[0]
            if size < self.min_size or size > self.max_frame:
                self.malformed += 1
                if size > self.max_frame:
                    self.oversized += 1
                self.syncing = True
                pos += 1
                continue
            stop = pos + 4 + size
            if stop > end:
                self.need = 4 + size
                break
            if m < n_marks and marks[m][0] < offset + stop:
                # The capture time changes within this frame's bytes (the chunk merged segments of
                # several times): the frame's own. Otherwise it is `ts` throughout, as `_time_at` says.
                frame_first, m = _time_at(marks, m, ts, offset + pos)
                if m < n_marks and marks[m][0] < offset + stop:
                    ts, m = _time_at(marks, m, frame_first, offset + stop - 1)
                else:
                    ts = frame_first
            else:
                frame_first = ts
            frames.append((view[pos + 4 : stop], frame_first, ts, offset + pos, resynced))
            if resynced and self.confirm is not None:
                # A frame found by resynchronisation may be a plausible accident (a body that decodes while
                # the bytes after it are not yet seen): the header after it must be plausible too before
                # the splitter is back in step. Unchecked, sizes read from the middle of other frames would
                # be believed, and the bytes they claim skipped unsearched.
                self.confirm_at = offset + stop
            resynced = False
            pos = stop
        if pos < end:
            self._keep(data, pos, offset, marks, m, ts)
        return frames

    def _confirm(self, data: bytes, pos: int, offset: int) -> int:
        """FOUND, NONE or WAIT (`need` set) for the header after a resynchronised frame at `pos`."""
        verdict, need = self.confirm(data, pos) if offset + pos == self.confirm_at else (NONE, 0)
        if verdict == WAIT:
            self.need = need
        else:
            self.confirm_at = None
        return verdict

    def _keep(self, data: bytes, pos: int, offset: int, marks, m: int, ts: float) -> None:
        """Buffer data[pos:] (no bytes are buffered), with its capture times: `ts` before marks[m:]."""
        self.buf = _held(data, pos)
        self.buf_offset = offset + pos
        self._keep_marks(offset + pos, marks, m, ts)

    def _keep_marks(self, at: int, marks, m: int, ts: float) -> None:
        self.buf_ts, m = _time_at(marks, m, ts, at)
        kept = marks[m:]  # a list, or the compiled walk's marks (`_fastwalk.Marks`), which extend the same
        self.buf_marks = list(kept) if kept.__class__ is tuple else kept

    def _resync(self, data: bytes, pos: int, offset: int, marks, m: int, ts: float) -> int:
        """Advance to the next plausible frame; when none is found, keep a tail for the next chunk (with
        its capture times: `ts` at data[pos], changing at marks[m:])."""
        if self.finder is None:
            self.syncing = False
            return pos
        status, at = self.finder(data, pos)
        if status == FOUND:
            self.skipped += at - pos
            self.syncing = False
            return at
        keep_from = at
        if len(data) - keep_from > self.max_buffer:
            keep_from = len(data) - self.max_buffer
        elif status == WAIT:
            self.need = _wait_need(data, at)
        self.skipped += keep_from - pos
        self.buf = _held(data, keep_from)
        self.buf_offset = (self.next_offset or 0) - len(self.buf)
        self._keep_marks(self.buf_offset, marks, m, ts)
        return len(data)


_OFFSET = itemgetter(0)  # a mark's stream offset


_OWNER = attrgetter("obj")  # what a memoryview is a view of


def _kept(parts, mapped: bool) -> list:
    """The pieces to hold for `parts`: themselves when each is a view of a mapped capture file (`mapped`,
    as `measure` says: its pages are the file's, holding them holds no copy, and the kernel may drop
    them and read them again), else one copy. A view of anything else (a window inflated from gzip, a
    block of the live ring) would keep all of it alive; pieces of bytes (not what the hot loop gives) are
    joined too."""
    return list(parts) if mapped else [b"".join(parts)]


def _mapped(parts) -> bool:
    """Whether every piece of `parts` is a view of a mapped capture file."""
    return set(map(type, parts)) == {memoryview} and all(o.__class__ is mmap.mmap for o in map(_OWNER, parts))


def measure_python(parts) -> tuple[int, bool]:
    """(bytes in the pieces `parts`, whether each is a view of a mapped capture file): the reference of
    `measure`."""
    return sum(map(len, parts)), _mapped(parts)


def _measure_compiled(parts) -> tuple[int, bool]:
    return _pieces(parts, mmap.mmap) or measure_python(parts)


# `measure`: in C when the compiled capture walk is built (ksniff.capture._fastwalk.pieces, one pass over
# the pieces instead of four: ~0.7 us instead of ~9 us for a bulk chunk's couple of hundred pieces).
_pieces = getattr(load("ksniff.capture._fastwalk"), "pieces", None)
measure = measure_python if _pieces is None else _measure_compiled


def _cut(parts, n: int) -> tuple[list, list]:
    """`parts` cut after their first `n` bytes (0 < n <= their length): the pieces before and after."""
    for i, p in enumerate(parts):
        size = len(p)
        if n < size:
            view = memoryview(p)
            return [*parts[:i], view[:n]], [view[n:], *parts[i + 1 :]]
        n -= size
        if n == 0:
            return list(parts[: i + 1]), list(parts[i + 1 :])
    return list(parts), []


def _first_bytes(parts, n: int) -> bytes:
    """The first `n` bytes of the pieces `parts` (they hold at least `n`)."""
    first = parts[0]
    if len(first) >= n:
        return bytes(first[:n])
    out = bytearray()
    for p in parts:
        out += p[: n - len(out)]
        if len(out) >= n:
            break
    return bytes(out)


def _held(data: bytes, pos: int) -> bytes | memoryview:
    """data[pos:] to hold until more comes: a view when `data` is bytes (immutable) and the part is at
    least half of it, so what is held alive is at most twice what is counted as held; else a copy."""
    if data.__class__ is bytes and 2 * (len(data) - pos) >= len(data):
        return memoryview(data)[pos:]
    return bytes(memoryview(data)[pos:])


def _time_at(marks, m: int, ts: float, at: int) -> tuple[float, int]:
    """The capture time of stream offset `at`, given `ts` before marks[m:] (StreamChunk.marks), and the
    index of the first mark after `at`. Marks are in stream order, so a binary search: bulk data has a
    mark per segment, up to a couple of hundred per chunk, and a frame of bulk data spans hundreds. The
    compiled walk's marks (`_fastwalk.Marks`) search their numbers themselves."""
    if marks.__class__ is not tuple and marks.__class__ is not list:
        return marks.time_at(m, ts, at)
    after = bisect_right(marks, at, m, key=_OFFSET)
    return (marks[after - 1][1] if after > m else ts), after


def _wait_need(data: bytes, at: int) -> int:
    """Bytes from `at` before a waiting candidate can be judged again: its header up to the client id
    (requests), or else its whole frame. Judging it at every chunk instead would rescan the buffer each
    time (1-byte chunks: quadratic)."""
    have = len(data) - at
    if have < _HEAD_WITH_CLIENT_ID:
        return _HEAD_WITH_CLIENT_ID
    need = 4 + _SIZE(data, at)[0]
    n = _I16(data, at + 12)[0]
    if n > 0 and have < _HEAD_WITH_CLIENT_ID + n:  # a request's client id is not all there yet
        need = min(need, _HEAD_WITH_CLIENT_ID + n)
    return need


@frozen_dataclass
class RequestHeader:
    """The header of a request: API key and version, correlation id, client id."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts in the frame payload
    unknown_tags: tuple = ()


def parse_request_header(payload: memoryview | bytes, flexible: bool) -> RequestHeader | None:
    """Request header v1 (v2 when the API version is flexible: the client id stays an INT16-length
    string, then tagged fields). None when the payload is too short for it."""
    if len(payload) < MIN_REQUEST + 2:
        if len(payload) < MIN_REQUEST:
            return None
        api_key, api_version, correlation_id = _REQUEST_HEAD(payload, 0)
        return RequestHeader(api_key, api_version, correlation_id, None, len(payload))
    api_key, api_version, correlation_id = _REQUEST_HEAD(payload, 0)
    n = _I16(payload, 8)[0]
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(payload):
            return None
        client_id = str(payload[pos : pos + n], "utf-8", "replace")
        pos += n
    elif n != -1:
        return None
    tags: tuple = ()
    if flexible:
        r = Reader(payload, pos, complete=True)
        found = r.tagged_fields()
        if r.error is not None:
            return None
        tags = tuple((t, bytes(d)) for t, d in found)
        pos = r.pos
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos, tags)


def request_head_python(payload: memoryview | bytes, flexible: bool) -> tuple[int, str | None, int] | None:
    """(correlation_id, client_id, body offset): `parse_request_header` without the header object, for
    the decoder's per-request path; the same answers (header tags are not kept). The reference of
    `request_head`."""
    size = len(payload)
    if size >= MIN_REQUEST + 2:
        n = _I16(payload, 8)[0]
        pos = 10
        client_id = None
        if n >= 0:
            if pos + n > size:
                return None
            client_id = str(payload[pos : pos + n], "utf-8", "replace")
            pos += n
        elif n != -1:
            return None
        if not flexible:
            return _CORRELATION(payload, 4)[0], client_id, pos
        if pos < size and payload[pos] == 0:  # no tagged fields, as nearly always
            return _CORRELATION(payload, 4)[0], client_id, pos + 1
    header = parse_request_header(payload, flexible)
    return None if header is None else (header.correlation_id, header.client_id, header.body_offset)


# `request_head`: in C when the compiled body reader is built (ksniff.decode._bodies.request_head, which
# hands what is off the plain path to `request_head_python`, the reference it is held to); else that one.
_compiled = load("ksniff.decode._bodies")
request_head = getattr(_compiled, "request_head", None) or request_head_python


def parse_response_header(payload: memoryview | bytes, flexible: bool) -> tuple[int, int] | None:
    """(correlation_id, body offset) of a response header v0, or v1 (tagged fields) when flexible."""
    if len(payload) < MIN_RESPONSE:
        return None
    correlation_id = _SIZE(payload, 0)[0]
    if not flexible:
        return correlation_id, 4
    if len(payload) > 4 and payload[4] == 0:  # no tagged fields, as nearly always
        return correlation_id, 5
    r = Reader(payload, 4, complete=True)
    r.tagged_fields()
    if r.error is not None:
        return None
    return correlation_id, r.pos
