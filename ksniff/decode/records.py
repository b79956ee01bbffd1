"""Record batches: the headers the audit needs, read without touching the records; records on request.

Magic 2 (Kafka 0.11+) batches have a fixed 61-byte header read with one precompiled struct. CRC-32C
covers attributes to the end of the batch and is checked when the whole batch is in the capture.
Control batches (transaction markers) carry one record whose key says COMMIT or ABORT and whose value
holds the coordinator epoch. Magic 0/1 message sets are recognised too; they predate idempotence, so
they have no producer fields (producer id -1).
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Iterator

from ksniff.capture.compiled import load
from ksniff.common.frozen import frozen_dataclass
from ksniff.decode.crc import crc32c
from ksniff.decode.events import RecordBatchHeader, made_by_position
from ksniff.decode.reader import Reader

# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h, lastOffsetDelta i,
# baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h, baseSequence i, recordsCount i.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert BATCH_HEADER.size == 61
HEADER_SIZE = BATCH_HEADER.size
# batchLength counts the bytes after itself: everything but baseOffset and batchLength.
LOG_OVERHEAD = 12
# The CRC covers attributes (offset 21) to the end of the batch.
CRC_START = 21
MAGIC_OFFSET = 16

# Attribute bits of a magic-2 batch.
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 0 create time, 1 log append time
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

# Magic 0/1 message: offset q, size i, crc I, magic b, attributes b (+ timestamp q in magic 1).
_LEGACY_HEADER = struct.Struct(">qiIbb")
_LEGACY_TS = struct.Struct(">q")
_LEGACY_MIN = _LEGACY_HEADER.size - LOG_OVERHEAD + 4 + 4  # crc..attributes + key len + value len

_unpack_header = BATCH_HEADER.unpack_from


def codec_name(attributes: int) -> str:
    c = attributes & CODEC_MASK
    return CODECS[c] if c < len(CODECS) else "unknown"


class RecordSet(tuple):
    """The batch headers of a records field, and each batch's bytes in `raw` (only when records were
    asked for: they hold keys and values)."""

    raw: tuple[bytes, ...] = ()


NO_LIMIT = 1 << 62


def parse_batches_python(view: memoryview | bytes, limit: int = NO_LIMIT) -> tuple[RecordBatchHeader, ...]:
    """Headers of every batch in a records field, in order. A trailing partial batch (Fetch responses may
    end with one) is reported with crc_ok=None when its header is whole, and otherwise ignored. With
    `limit`, at most `limit + 1` headers are made: more than `limit` means over the caller's budget."""
    return tuple([h for h, _, _ in _walk(view, limit)])  # a list first: cheaper than a generator into tuple()


# `parse_batches`: the compiled walk of the headers (ksniff.decode._bodies.BatchWalk) when it is built,
# which hands a field with message sets or a whole control batch to `parse_batches_python`, the
# reference it is held to (tests/decode/test_compiled_bodies.py); else that function itself.
_compiled = load("ksniff.decode._bodies")
parse_batches = (
    parse_batches_python
    if _compiled is None
    else _compiled.BatchWalk(made_by_position(RecordBatchHeader), crc32c, CODECS, parse_batches_python)
)


def parse_batches_keeping_records(view: memoryview | bytes, limit: int = NO_LIMIT) -> RecordSet:
    """Like `parse_batches`, with each batch's bytes kept in `.raw`."""
    walked = list(_walk(view, limit))
    out = RecordSet(h for h, _, _ in walked)
    out.raw = tuple(bytes(view[start:stop]) for _, start, stop in walked)
    return out


def _walk(view: memoryview | bytes, limit: int = NO_LIMIT) -> Iterator[tuple[RecordBatchHeader, int, int]]:
    pos, end = 0, len(view)
    made = 0
    while end - pos >= LOG_OVERHEAD + 5:  # up to and including magic
        if made > limit:  # one past the budget made: the caller refuses the body
            break
        made += 1
        batch_length = struct.unpack_from(">i", view, pos + 8)[0]
        if batch_length < 0:
            break
        magic = view[pos + MAGIC_OFFSET]
        if magic == 2:
            header = _magic2(view, pos, end, batch_length)
        elif magic in (0, 1):
            header = _legacy(view, pos, end, batch_length, magic)
        else:
            break  # not a batch we know: stop rather than guess at the rest
        if header is None:
            break
        stop = pos + LOG_OVERHEAD + batch_length
        yield header, pos, min(stop, end)
        pos = stop


def _magic2(view, pos: int, end: int, batch_length: int) -> RecordBatchHeader | None:
    if end - pos < HEADER_SIZE or batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return None
    (
        base_offset,
        batch_length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    ) = _unpack_header(view, pos)
    batch_end = pos + LOG_OVERHEAD + batch_length
    whole = batch_end <= end
    crc_ok = (crc32c(view[pos + CRC_START : batch_end]) == crc) if whole else None
    control = bool(attributes & CONTROL_BIT)
    control_type = coordinator_epoch = None
    if control and whole:
        control_type, coordinator_epoch = _control_marker(view, pos + HEADER_SIZE, batch_end)
    # Once per batch: positional, in RecordBatchHeader's field order (keywords cost a fifth more here).
    return RecordBatchHeader(
        base_offset,
        batch_length,
        leader_epoch,  # partition_leader_epoch
        magic,
        crc,
        crc_ok,
        attributes,
        last_offset_delta,
        base_ts,  # base_timestamp
        max_ts,  # max_timestamp
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
        codec_name(attributes),
        bool(attributes & TRANSACTIONAL_BIT),  # transactional
        control,
        control_type,
        coordinator_epoch,
    )


def _control_marker(view, start: int, end: int) -> tuple[str | None, int | None]:
    """The COMMIT/ABORT marker of a control batch's single record (control batches are never
    compressed): key = (version i16, type i16), value = (version i16, coordinator epoch i32)."""
    r = Reader(view, start, end, complete=True)
    r.varint("length")
    r.int8("attributes")
    r.varlong("timestamp_delta")
    r.varint("offset_delta")
    key = r.raw(max(r.varint("key_length"), 0), "key")
    value_len = r.varint("value_length")
    value = r.raw(max(value_len, 0), "value")
    if r.error is not None or len(key) < 4:
        return None, None
    ctype = struct.unpack_from(">h", key, 2)[0]
    epoch = struct.unpack_from(">i", value, 2)[0] if len(value) >= 6 else None
    return CONTROL_TYPES.get(ctype, f"UNKNOWN({ctype})"), epoch


def _legacy(view, pos: int, end: int, size: int, magic: int) -> RecordBatchHeader | None:
    if size < _LEGACY_MIN or end - pos < _LEGACY_HEADER.size:
        return None
    offset, size, crc, magic, attributes = _LEGACY_HEADER.unpack_from(view, pos)
    timestamp = -1
    if magic == 1 and end - pos >= _LEGACY_HEADER.size + 8:
        timestamp = _LEGACY_TS.unpack_from(view, pos + _LEGACY_HEADER.size)[0]
    msg_end = pos + LOG_OVERHEAD + size
    whole = msg_end <= end
    # Magic 0/1 use CRC-32 (zlib's) over magic..end of the message.
    crc_ok = (zlib.crc32(view[pos + 16 : msg_end]) == crc) if whole else None
    return RecordBatchHeader(
        base_offset=offset,
        batch_length=size,
        partition_leader_epoch=-1,
        magic=magic,
        crc=crc,
        crc_ok=crc_ok,
        attributes=attributes,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        records_count=1,
        codec=codec_name(attributes & 0x03),
        transactional=False,
        control=False,
        control_type=None,
        coordinator_epoch=None,
    )


# -- records, on request only -----------------------------------------------------------------------


@frozen_dataclass
class Record:
    """One record of a record batch (read only when records are asked for)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


_XERIAL_MAGIC = b"\x82SNAPPY\x00"

# The most bytes one batch may decompress to. Kafka's own batches are bounded by max.message.bytes
# (1 MiB by default); a few bytes on the wire must never become gigabytes in memory.
MAX_DECOMPRESSED = 64 << 20
MAX_DECOMPRESSED_REQUEST = 128 << 20  # all the batches of one Produce request
MAX_DECOMPRESSED_RUN = 1 << 30  # all the batches of a run


class Inflation:
    """The decompression budget of a run (--records): caps per batch, per Kafka request and per run. A
    batch that would pass one is not decompressed (no rows; its header row remains) and counted in
    `stats` by the cap that stopped it."""

    def __init__(
        self,
        stats,
        per_batch: int = MAX_DECOMPRESSED,
        per_request: int = MAX_DECOMPRESSED_REQUEST,
        per_run: int = MAX_DECOMPRESSED_RUN,
    ) -> None:
        self.stats = stats  # a DecodeStats
        self.per_batch, self.per_request, self.per_run = per_batch, per_request, per_run
        self.run_used = 0
        self.request_used = 0
        # With `peak` not None, the most of the run's budget any batch needed to be treated as it was:
        # its run usage before it plus what it decompressed to (the cap its size is judged by), or, for a
        # batch cut or damaged, the cap it met. The same audit started `used` bytes into the run's budget
        # treats every batch alike iff used + peak <= per_run (the Spark engine's tasks check that).
        self.peak: int | None = None

    def new_request(self) -> None:
        self.request_used = 0

    def cap(self) -> tuple[int, str]:
        """The most the next batch may decompress to, and the name of the cap that sets it."""
        return min(
            (self.per_batch, "batch"),
            (self.per_request - self.request_used, "request"),
            (self.per_run - self.run_used, "run"),
        )

    def used(self, n: int) -> None:
        self.request_used += n
        self.run_used += n
        self.stats.records_inflated_bytes += n

    def needed(self, before: int, need: int) -> None:
        """A batch that started `before` bytes into the run's budget needed `need` of it (see `peak`)."""
        if self.peak is not None and before + need > self.peak:
            self.peak = before + need

    def cut(self, which: str) -> None:
        setattr(
            self.stats, f"records_cut_by_{which}_cap", getattr(self.stats, f"records_cut_by_{which}_cap") + 1
        )


def inflation_warnings(
    stats,
    per_batch: int = MAX_DECOMPRESSED,
    per_request: int = MAX_DECOMPRESSED_REQUEST,
    per_run: int = MAX_DECOMPRESSED_RUN,
) -> list[str]:
    """What the decompression caps cut (in a DecodeStats), one line each."""
    notes = []
    for which, cap in (("batch", per_batch), ("request", per_request), ("run", per_run)):
        n = getattr(stats, f"records_cut_by_{which}_cap")
        if n:
            notes.append(
                f"records decompression limit per {which} ({cap} bytes) reached: {n} batches' "
                "records not decoded (their batch rows remain)"
            )
    return notes


class TooLarge(ValueError):
    """A compressed batch claims to decompress to more than the cap: it is not decompressed."""


def _uvarint(data: bytes, pos: int = 0) -> int:
    value = shift = 0
    for i in range(pos, min(pos + 5, len(data))):
        value |= (data[i] & 0x7F) << shift
        if data[i] < 0x80:
            return value
        shift += 7
    raise ValueError("bad snappy length")


def _snappy_raw(block: bytes, cap: int) -> bytes:
    if _uvarint(block) > cap:  # a raw snappy block starts with its decompressed length
        raise TooLarge("snappy block larger than the cap")
    return bytes(_cramjam().snappy.decompress_raw(block))


def _snappy(data: bytes, cap: int) -> bytes:
    # The Java client writes xerial-framed snappy (magic, version, compatible version, then blocks of
    # i32 length + raw snappy); other clients write plain raw snappy. Accept both.
    if data[:8] != _XERIAL_MAGIC:
        return _snappy_raw(data, cap)
    out = bytearray()
    pos = 16
    while pos + 4 <= len(data):
        n = struct.unpack_from(">i", data, pos)[0]
        pos += 4
        out += _snappy_raw(data[pos : pos + n], cap - len(out))
        pos += n
    return bytes(out)


def _gzip(data: bytes, cap: int) -> bytes:
    # One byte past the cap is asked for: zlib reads a limit of 0 as none, and output that ends exactly at
    # the limit may leave the stream's trailer unread.
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = z.decompress(data, max(cap, 0) + 1)
    if len(out) > cap:
        raise TooLarge("gzip data larger than the cap")
    return out


def _zstd_frame(data: bytes, pos: int) -> tuple[int, int]:
    """(content size, end) of the zstd frame at `pos`. The frame header tells the content size when the
    writer knew it (Kafka's clients do); without it the size cannot be bounded before decompressing, so
    the batch is refused. The blocks are walked (3-byte headers) to find where the frame ends."""
    if len(data) - pos < 6 or data[pos : pos + 4] != b"\x28\xb5\x2f\xfd":
        raise ValueError("not a zstd frame")
    descriptor = data[pos + 4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, descriptor >> 5 & 1, descriptor & 3
    at = pos + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if at + width > len(data):
        raise ValueError("zstd frame cut short")
    size = -1 if width == 0 else int.from_bytes(data[at : at + width], "little") + (256 if width == 2 else 0)
    at += width
    while True:
        if at + 3 > len(data):
            raise ValueError("zstd frame cut short")
        head = int.from_bytes(data[at : at + 3], "little")
        at += 3 + (1 if head >> 1 & 3 == 1 else head >> 3)  # an RLE block holds one byte
        if head & 1:
            return size, at + (4 if descriptor & 4 else 0)


def _zstd(data: bytes, cap: int) -> bytes:
    # Every frame is sized before any is decompressed: concatenated frames share the one cap. A frame
    # that does not tell its size (-1) is inflated as a stream, stopped one byte past the cap.
    total, pos, unsized = 0, 0, False
    while pos < len(data):
        size, pos = _zstd_frame(data, pos)
        unsized |= size < 0
        total += max(size, 0)
        if total > cap:
            raise TooLarge("zstd frames larger than the cap")
    if not unsized:
        return bytes(_cramjam().zstd.decompress(data, output_len=total))
    # zstandard only here, for frames that do not state their size (Kafka's clients state it): loading
    # it costs every run about 5 ms. Without it the batch is one that does not decompress, as corrupt data.
    try:
        import zstandard
    except ImportError as e:
        raise ValueError(f"zstd data does not decompress: {e}") from None
    try:
        with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
            pieces, have = [], 0
            while have <= cap:
                piece = reader.read(cap + 1 - have)
                if not piece:
                    break
                pieces.append(piece)
                have += len(piece)
            out = b"".join(pieces)
    except zstandard.ZstdError as e:
        raise ValueError(f"zstd data does not decompress: {e}") from None
    if len(out) > cap:
        raise TooLarge("zstd data larger than the cap")
    return out


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4(data: bytes, cap: int) -> bytes:
    _lz4_bound(data, cap)
    return bytes(_cramjam().lz4.decompress(data))


def _lz4_bound(data: bytes, cap: int) -> int:
    # An LZ4 frame is blocks of at most the block maximum its header names: their count times that size
    # bounds the output, whether or not the optional content size is there.
    bound, pos = 0, 0
    while pos < len(data):  # concatenated frames share the one cap
        if len(data) - pos < 7 or data[pos : pos + 4] != b"\x04\x22\x4d\x18":
            raise ValueError("not an lz4 frame")
        flags, block_max = data[pos + 4], _LZ4_BLOCK_MAX.get(data[pos + 5] >> 4 & 7)
        if block_max is None:
            raise ValueError("bad lz4 block size")
        pos += 7 + (8 if flags & 0x08 else 0)
        while True:
            if pos + 4 > len(data):
                raise ValueError("lz4 frame cut short")
            size = struct.unpack_from("<I", data, pos)[0]
            pos += 4
            if size == 0:
                pos += 4 if flags & 0x04 else 0  # content checksum
                break
            bound += block_max
            pos += (size & 0x7FFFFFFF) + (4 if flags & 0x10 else 0)
        if bound > cap:
            raise TooLarge("lz4 frames larger than the cap")
    return bound


def _uncompressed(data: bytes, cap: int) -> bytes:
    if len(data) > cap:
        raise TooLarge("records larger than the cap")
    return bytes(data)


_DECOMPRESS = {
    "none": lambda d, cap: _uncompressed(d, cap),
    "gzip": _gzip,
    "snappy": _snappy,
    "lz4": _lz4,
    "zstd": _zstd,
}


def decompress(codec: str, data: bytes, cap: int = MAX_DECOMPRESSED) -> bytes:
    """Decompresses one batch's records; raises TooLarge, without decompressing, past `cap` bytes."""
    try:
        decompressor = _DECOMPRESS[codec]
    except KeyError:
        raise ValueError(f"unknown compression codec {codec!r}") from None
    try:
        return decompressor(data, cap)
    except zlib.error as e:
        raise ValueError(f"{codec} data does not decompress: {e}") from None
    except Exception as e:
        codecs = sys.modules.get("cramjam")  # loaded by the codec that raised, if it was cramjam's
        if codecs is not None and isinstance(e, codecs.DecompressionError):
            raise ValueError(f"{codec} data does not decompress: {e}") from None
        raise


def _cramjam():
    """The snappy, lz4 and zstd codecs, loaded by the first batch that needs them (about a millisecond of
    every run's start-up otherwise)."""
    import cramjam

    return cramjam


def iter_records(
    raw_batch: bytes | memoryview, cap: int = MAX_DECOMPRESSED, inflated: list[int] | None = None
) -> Iterator[Record]:
    """The records of one magic-2 batch (its full bytes, header included), decompressing as needed, to
    at most `cap` bytes (TooLarge past it); `inflated`, when given, receives the size decompressed.
    Raises ValueError on bytes that do not decode."""
    view = memoryview(raw_batch)
    if len(view) < HEADER_SIZE or view[MAGIC_OFFSET] != 2:
        raise ValueError("not a magic-2 record batch")
    fields = _unpack_header(view, 0)
    base_offset, batch_length, attributes, base_ts, count = (
        fields[0],
        fields[1],
        fields[5],
        fields[7],
        fields[12],
    )
    body = bytes(view[HEADER_SIZE : LOG_OVERHEAD + batch_length])
    data = decompress(codec_name(attributes), body, cap)
    if inflated is not None:
        inflated.append(len(data))
    r = Reader(data, complete=True)
    for _ in range(max(count, 0)):
        r.varint("length")
        r.int8("attributes")
        ts_delta = r.varlong("timestamp_delta")
        offset_delta = r.varint("offset_delta")
        key = _varbytes(r, "key")
        value = _varbytes(r, "value")
        n_headers = r.varint("headers")
        if n_headers > r.remaining:
            raise ValueError("record claims more headers than bytes")
        headers = []
        for _ in range(max(n_headers, 0)):
            hkey = _varbytes(r, "header_key")
            headers.append((str(hkey or b"", "utf-8", "replace"), _varbytes(r, "header_value")))
        if r.error is not None:
            raise ValueError(str(r.error))
        yield Record(base_offset + offset_delta, base_ts + ts_delta, key, value, tuple(headers))


def cap_needed(raw_batch: bytes | memoryview, inflated: int) -> int:
    """The smallest cap under which `iter_records(raw_batch, cap)` raises no TooLarge, for a batch that
    decompressed to `inflated` bytes under a larger cap: that size, except for lz4, whose frames are
    judged by their blocks' bound, and zstd, whose frames are judged by the sizes they declare, before
    any is decompressed."""
    view = memoryview(raw_batch)
    fields = _unpack_header(view, 0)
    codec = codec_name(fields[5])
    if codec not in ("lz4", "zstd"):
        return inflated
    body = bytes(view[HEADER_SIZE : LOG_OVERHEAD + fields[1]])
    if codec == "lz4":
        return _lz4_bound(body, 1 << 62)
    declared, pos, unsized = 0, 0, False
    while pos < len(body):
        size, pos = _zstd_frame(body, pos)
        unsized |= size < 0
        declared += max(size, 0)
    return max(declared, inflated) if unsized else declared


def _varbytes(r: Reader, field: str) -> bytes | None:
    n = r.varint(field)
    return None if n < 0 else bytes(r.raw(n, field))
