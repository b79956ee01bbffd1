"""Where a Kafka frame plausibly starts: resynchronisation after gaps, mid-stream starts and detection.

A request is plausible when its size is in range, its API key is known, its version is one the API
defines, its correlation id is non-negative (and after the last one seen on the connection), and its
client id is a sane string. A response is plausible when its size is in range and its correlation id is
that of a request in flight (responses carry nothing else to check). Candidates are found with a regular
expression scan in C, then checked in Python, so skipping a megabyte of lost context stays cheap.

A candidate's body is decoded only over its first `VERIFY_PREFIX` bytes (a body longer than that passes
when its prefix decodes so far): each candidate costs a bounded amount of work, so scanning stays linear
in the bytes scanned however many overlapping candidates a hostile stream packs in. A body that decodes
with bytes left over (clients add fields a schema does not have) is believed when what follows it is
itself plausible: a frame header, or the end of the bytes seen so far.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Callable, Collection, Mapping

from ksniff.decode.frames import FOUND, MIN_REQUEST, MIN_RESPONSE, NONE, WAIT
from ksniff.decode.reader import Incomplete, Malformed
from ksniff.decode.schema import Api

_HEAD = struct.Struct(">ihhih").unpack_from  # size, api_key, api_version, correlation_id, client id len
_HEAD_SIZE = 14
_SIZE = struct.Struct(">i").unpack_from
_SIZE_CORR = struct.Struct(">ii").unpack_from
_I16 = struct.Struct(">h").unpack_from
# Versions accepted for APIs the tables know only by name (no version range to check against).
_ANY_VERSION = 64
# Correlation ids grow by one per request; a jump beyond this after a gap is not believed.
MAX_CORRELATION_JUMP = 1 << 20
# Bytes of a candidate's body decoded to believe it: its bounded cost keeps resynchronisation linear.
VERIFY_PREFIX = 1024
# What a verification says: the body decodes (or its prefix does), decodes with bytes left over, or not.
BODY_OK, BODY_LEFTOVER, BODY_BAD = 0, 1, 2


def body_verdict(decode: Callable[..., object], body: memoryview) -> int:
    """BODY_OK, BODY_LEFTOVER or BODY_BAD for `decode(view, strict=True)` over at most VERIFY_PREFIX
    bytes of `body`: a prefix that runs out of bytes mid-value is as good as a whole body."""
    cut = len(body) > VERIFY_PREFIX
    try:
        decode(body[:VERIFY_PREFIX] if cut else body, strict=True)
    except Incomplete:
        return BODY_OK if cut else BODY_BAD
    except Malformed as e:
        if e.field == "<end>":
            return BODY_LEFTOVER
        return BODY_OK if cut and e.why == "past the end of the frame" else BODY_BAD
    except Exception:  # noqa: BLE001 - any other failure means "not a frame"
        return BODY_BAD
    return BODY_OK


@functools.lru_cache(maxsize=16)
def _request_pattern(max_frame: int, keys: tuple[int, ...]) -> re.Pattern[bytes]:
    # Cached: building the expression costs more than a whole short connection's decoding, and an engine
    # that runs one Decoder per connection (Spark) makes thousands of decoders with the same tables.
    top = min(max_frame >> 24, 0x7F)
    size = (
        (
            rb"(?:[\x01-" + re.escape(bytes([top])) + rb"][\s\S]{3}|\x00[\x01-\xff][\s\S]{2}"
            rb"|\x00\x00[\x01-\xff][\s\S]|\x00\x00\x00[\x0a-\xff])"
        )
        if top
        else (rb"(?:\x00[\x01-\xff][\s\S]{2}|\x00\x00[\x01-\xff][\s\S]|\x00\x00\x00[\x0a-\xff])")
    )
    small = sorted(k for k in keys if 0 <= k < 256)
    key = b"\\x00[" + b"".join(re.escape(bytes([k])) for k in small) + b"]"
    # size, api key (known), version (< 256), correlation id (non-negative)
    return re.compile(b"(?=" + size + key + rb"\x00[\s\S][\x00-\x7f])")


def _versions_ok(api: Api, version: int) -> bool:
    # Versions below the range were retired (KIP-896) but old clients still send them.
    return 0 <= version <= (api.valid.high if api.valid.low <= api.valid.high else _ANY_VERSION)


def _printable(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.isprintable()


class RequestCheck:
    """Plausibility of request frames for one set of APIs.

    `verify(payload)`, when given, judges a candidate's body (BODY_OK, BODY_LEFTOVER or BODY_BAD, see
    `body_verdict`): a frame found by scanning is believed only when its body decodes, which random bytes
    almost never do.
    """

    def __init__(
        self,
        apis: Mapping[int, Api],
        max_frame: int,
        verify: Callable[[memoryview], int] | None = None,
        max_wait: int = 1 << 20,
    ) -> None:
        self.apis = apis
        self.max_frame = max_frame
        self.verify = verify
        self.max_wait = max_wait
        self.pattern = _request_pattern(max_frame, tuple(sorted(apis.keys())))

    def header_at(self, data: bytes, i: int, last_correlation: int | None = None) -> int:
        """FOUND, WAIT (not enough bytes to judge) or NONE for a request header starting at `i`."""
        if len(data) - i < _HEAD_SIZE:
            return WAIT
        size, key, version, corr, n = _HEAD(data, i)
        if size < MIN_REQUEST + 2 or size > self.max_frame or corr < 0:
            return NONE
        api = self.apis.get(key)
        if api is None or not _versions_ok(api, version):
            return NONE
        if last_correlation is not None and not 0 < corr - last_correlation <= MAX_CORRELATION_JUMP:
            return NONE
        if n < -1 or n > size - 10:
            return NONE
        if n > 0:
            if len(data) - i < _HEAD_SIZE + n:
                return WAIT
            if not _printable(data[i + _HEAD_SIZE : i + _HEAD_SIZE + n]):
                return NONE
        return FOUND

    def at(self, data: bytes, i: int, last_correlation: int | None = None) -> int:
        """Like `header_at`, and the whole frame must be there and decode."""
        verdict = self.header_at(data, i, last_correlation)
        if verdict != FOUND or self.verify is None:
            return verdict
        size = _SIZE(data, i)[0]
        stop = i + 4 + size
        if stop > len(data):
            return WAIT if size <= self.max_wait else NONE
        body = self.verify(memoryview(data)[i + 4 : stop])
        if body == BODY_LEFTOVER:
            return FOUND if self.header_at(data, stop) != NONE else NONE
        return FOUND if body == BODY_OK else NONE

    def confirmer(
        self, last_correlation: Callable[[], int | None]
    ) -> Callable[[bytes, int], tuple[int, int]]:
        """Judges the header after a resynchronised request (`frames.Confirm`): `header_at`, the body
        unread (the frame may be large, its body a version this schema lacks)."""

        def confirm(data: bytes, i: int) -> tuple[int, int]:
            verdict = self.header_at(data, i, last_correlation())
            if verdict != WAIT:
                return verdict, 0
            have = len(data) - i
            return WAIT, _HEAD_SIZE if have < _HEAD_SIZE else _HEAD_SIZE + _I16(data, i + 12)[0]

        return confirm

    def finder(self, last_correlation: Callable[[], int | None]) -> Callable[[bytes, int], tuple[int, int]]:
        def find(data: bytes, pos: int) -> tuple[int, int]:
            last = last_correlation()
            for m in self.pattern.finditer(data, pos):
                i = m.start()
                verdict = self.at(data, i, last)
                if verdict != NONE:
                    return verdict, i
            return NONE, max(pos, len(data) - (_HEAD_SIZE - 1))

        return find


def response_finder(
    max_frame: int,
    pending: Callable[[], Collection[int]],
    verify: Callable[[memoryview, int], bool] | None = None,
    max_wait: int = 1 << 20,
) -> Callable[[bytes, int], tuple[int, int]]:
    """Finds the next response whose correlation id is in flight (`pending()` lists them in order) and,
    with `verify(payload, correlation_id)` (a `body_verdict`), whose body decodes as the answer to that
    request; one with bytes left over is believed when the bytes after it are a plausible response too."""

    def plausible_size(size: int) -> bool:
        return MIN_RESPONSE <= size <= max_frame

    def verdict(data: bytes, i: int, cid: int) -> int:
        size = _SIZE(data, i)[0]
        if not plausible_size(size):
            return NONE
        stop = i + 4 + size
        if stop > len(data):
            return WAIT if size <= max_wait else NONE
        if verify is None:
            return FOUND
        body = verify(memoryview(data)[i + 4 : stop], cid)
        if body == BODY_LEFTOVER:
            # Only the next frame's size is judged, and only its 4 bytes are sure to be there.
            return FOUND if len(data) - stop < 4 or plausible_size(_SIZE(data, stop)[0]) else NONE
        return FOUND if body == BODY_OK else NONE

    def find(data: bytes, pos: int) -> tuple[int, int]:
        best, best_verdict = -1, NONE
        for cid in pending():
            needle = struct.pack(">i", cid)
            j = data.find(needle, pos + 4)
            while j >= 0 and (best < 0 or j - 4 < best):
                v = verdict(data, j - 4, cid)
                if v != NONE:
                    best, best_verdict = j - 4, v
                    break
                j = data.find(needle, j + 1)
        if best >= 0:
            return best_verdict, best
        return NONE, max(pos, len(data) - 7)

    return find


def response_confirmer(
    max_frame: int, pending: Callable[[], Collection[int]]
) -> Callable[[bytes, int], tuple[int, int]]:
    """Judges the header after a resynchronised response (`frames.Confirm`): its size is in range and
    its correlation id is that of a request in flight."""

    def confirm(data: bytes, i: int) -> tuple[int, int]:
        if len(data) - i < 8:
            return WAIT, 8
        size, cid = _SIZE_CORR(data, i)
        return (FOUND if MIN_RESPONSE <= size <= max_frame and cid in pending() else NONE), 0

    return confirm


def looks_like_tls(data: bytes) -> bool:
    """A TLS record header: content type 20-23, version 3.x. As a Kafka size this would be >300 MiB."""
    return len(data) >= 3 and 0x14 <= data[0] <= 0x17 and data[1] == 0x03 and data[2] <= 0x04
