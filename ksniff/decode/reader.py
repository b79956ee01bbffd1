"""A sticky-error reader of Kafka protocol primitives over a memoryview.

Modelled on franz-go's kbin.Reader: every read returns a value; after the first short or bad read the
reader keeps returning zero values and remembers one typed error, which the caller checks once at the end
of a struct (`reader.error`). That keeps decoding code free of per-field error handling.

Two errors: `Incomplete` (the bytes ran out: more may come) and `Malformed` (the bytes can never be
valid: negative lengths, over-long varints, lengths that run past the end of a complete frame). Claimed
lengths are checked against the bytes that remain before anything is read or allocated, so a frame that
claims a billion array elements costs nothing.
"""

from __future__ import annotations

import struct
import uuid

_I8 = struct.Struct(">b").unpack_from
_I16 = struct.Struct(">h").unpack_from
_U16 = struct.Struct(">H").unpack_from
_I32 = struct.Struct(">i").unpack_from
_U32 = struct.Struct(">I").unpack_from
_I64 = struct.Struct(">q").unpack_from
_F64 = struct.Struct(">d").unpack_from

ZERO_UUID = uuid.UUID(int=0)

# Kafka's varints are at most 5 bytes (32-bit) or 10 bytes (64-bit); anything longer is garbage.
_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


class DecodeError(Exception):
    """Why bytes could not be decoded. Compares by value so tests and the two decoders can agree."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.args == other.args  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((type(self), self.args))


# Array elements and record batches one body may hold in all. Each becomes a Python object; the frame cap
# alone (100 MiB) would let one body of 4-byte elements make 26 million of them. Real bodies stay far under:
# a Metadata answer naming 140,000 partitions, each with three replicas in sync, is about a million.
MAX_BODY_ITEMS = 1_000_000


class Incomplete(DecodeError):
    """The bytes ended before the value did: wait for more (or, in a whole frame, the frame is short)."""

    def __init__(self, offset: int = 0, field: str = "") -> None:
        super().__init__(offset, field)
        self.offset = offset
        self.field = field


class Malformed(DecodeError):
    """The bytes can never decode: a bad length, an over-long varint, a value out of its domain."""

    def __init__(self, offset: int, field: str, why: str = "") -> None:
        super().__init__(offset, field, why)
        self.offset = offset
        self.field = field
        self.why = why


class TooManyItems(Malformed):
    """The body holds more array elements and record batches than the item cap lets one body make."""

    def __init__(self, offset: int, field: str, limit: int) -> None:
        super().__init__(offset, field, f"more than {limit} array elements and record batches in one body")
        self.limit = limit

    def __reduce__(self):  # pickled with its own arguments (errors travel between Spark's processes)
        return TooManyItems, (self.offset, self.field, self.limit)

    def __str__(self) -> str:
        return f"malformed {self.field or 'value'} at offset {self.offset}" + (
            f": {self.why}" if self.why else ""
        )


def _utf8(data) -> str:
    # Network bytes: never let a bad code point raise.
    return str(data, "utf-8", "replace")


class Reader:
    """Reads primitives from `view[pos:end]`.

    `complete=True` says the view holds a whole frame: a length running past its end is then Malformed
    rather than Incomplete. `items`: array elements and record batches the reader may still produce
    (`items_limit` the body's budget, named in the error when it runs out).
    """

    __slots__ = ("view", "pos", "end", "complete", "error", "items", "items_limit")

    def __init__(
        self,
        view: memoryview | bytes,
        pos: int = 0,
        end: int | None = None,
        *,
        complete: bool = False,
        items: int = MAX_BODY_ITEMS,
        items_limit: int | None = None,
    ) -> None:
        self.view = view if isinstance(view, memoryview) else memoryview(view)
        self.pos = pos
        self.end = len(self.view) if end is None else end
        self.complete = complete
        self.error: DecodeError | None = None
        self.items = items
        self.items_limit = items if items_limit is None else items_limit

    # -- bookkeeping -----------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    @property
    def ok(self) -> bool:
        return self.error is None

    def fail(self, error: DecodeError) -> None:
        """Remember the first error only; later reads return zero values."""
        if self.error is None:
            self.error = error
        self.pos = self.end

    def _short(self, field: str, at: int | None = None) -> None:
        at = self.pos if at is None else at
        self.fail(
            Malformed(at, field, "past the end of the frame") if self.complete else Incomplete(at, field)
        )

    def _take(self, n: int, field: str) -> int:
        """Reserve n bytes; return their start, or -1 after recording the short read."""
        if self.error is not None:
            return -1
        start = self.pos
        if n > self.end - start:
            self._short(field)
            return -1
        self.pos = start + n
        return start

    # -- fixed-size primitives -------------------------------------------------------------------

    def bool(self, field: str = "") -> bool:
        at = self._take(1, field)
        return at >= 0 and self.view[at] != 0

    def int8(self, field: str = "") -> int:
        at = self._take(1, field)
        return 0 if at < 0 else _I8(self.view, at)[0]

    def int16(self, field: str = "") -> int:
        at = self._take(2, field)
        return 0 if at < 0 else _I16(self.view, at)[0]

    def uint16(self, field: str = "") -> int:
        at = self._take(2, field)
        return 0 if at < 0 else _U16(self.view, at)[0]

    def int32(self, field: str = "") -> int:
        at = self._take(4, field)
        return 0 if at < 0 else _I32(self.view, at)[0]

    def uint32(self, field: str = "") -> int:
        at = self._take(4, field)
        return 0 if at < 0 else _U32(self.view, at)[0]

    def int64(self, field: str = "") -> int:
        at = self._take(8, field)
        return 0 if at < 0 else _I64(self.view, at)[0]

    def float64(self, field: str = "") -> float:
        at = self._take(8, field)
        return 0.0 if at < 0 else _F64(self.view, at)[0]

    def uuid(self, field: str = "") -> uuid.UUID:
        at = self._take(16, field)
        return ZERO_UUID if at < 0 else uuid.UUID(bytes=bytes(self.view[at : at + 16]))

    def raw(self, n: int, field: str = "") -> memoryview:
        """n bytes as a view into the buffer (no copy)."""
        at = self._take(n, field)
        return self.view[0:0] if at < 0 else self.view[at : at + n]

    # -- varints ---------------------------------------------------------------------------------

    def _uvarint(self, limit: int, field: str) -> int:
        if self.error is not None:
            return 0
        view, pos, end = self.view, self.pos, self.end
        start = pos
        result = shift = 0
        while True:
            if pos >= end:
                self._short(field, start)
                return 0
            if pos - start >= limit:
                self.fail(Malformed(start, field, "varint too long"))
                return 0
            b = view[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return result
            shift += 7

    def uvarint(self, field: str = "") -> int:
        """Unsigned varint (flexible versions' lengths, counts and tags)."""
        return self._uvarint(_MAX_VARINT_BYTES, field) & 0xFFFFFFFF

    def varint(self, field: str = "") -> int:
        """Zigzag-encoded signed 32-bit varint (records)."""
        n = self._uvarint(_MAX_VARINT_BYTES, field) & 0xFFFFFFFF
        return (n >> 1) ^ -(n & 1)

    def varlong(self, field: str = "") -> int:
        """Zigzag-encoded signed 64-bit varint (records)."""
        n = self._uvarint(_MAX_VARLONG_BYTES, field) & 0xFFFFFFFFFFFFFFFF
        return (n >> 1) ^ -(n & 1)

    # -- lengths ---------------------------------------------------------------------------------

    def _check_len(self, n: int, at: int, nullable: bool, field: str) -> int:
        if self.error is not None:
            return -1
        if n < 0:
            if n == -1 and nullable:
                return -1
            self.fail(Malformed(at, field, "null where not nullable" if n == -1 else f"length {n}"))
            return -1
        return n

    # -- strings and bytes -----------------------------------------------------------------------

    def _sized(self, n: int, at: int, field: str) -> memoryview | None:
        if n > self.end - self.pos:
            # The claimed length runs past what we have: never read or allocate it.
            self._short(field, at)
            return None
        start = self.pos
        self.pos = start + n
        return self.view[start : start + n]

    def string(self, field: str = "", *, nullable: bool = False) -> str | None:
        """INT16-length string; -1 is null."""
        at = self.pos
        n = self._check_len(self.int16(field), at, nullable, field)
        if n < 0:
            return None if nullable else ""
        data = self._sized(n, at, field)
        return "" if data is None else _utf8(data)

    def compact_string(self, field: str = "", *, nullable: bool = False) -> str | None:
        """Unsigned-varint (length + 1) string; 0 is null."""
        at = self.pos
        n = self._check_len(self.uvarint(field) - 1, at, nullable, field)
        if n < 0:
            return None if nullable else ""
        data = self._sized(n, at, field)
        return "" if data is None else _utf8(data)

    def bytes_view(
        self, field: str = "", *, nullable: bool = False, compact: bool = False
    ) -> memoryview | None:
        """INT32-length (or compact) bytes as a view into the buffer; None for null."""
        at = self.pos
        raw_n = self.uvarint(field) - 1 if compact else self.int32(field)
        n = self._check_len(raw_n, at, nullable, field)
        if n < 0:
            return None
        return self._sized(n, at, field)

    def bytes(self, field: str = "", *, nullable: bool = False) -> bytes | None:
        data = self.bytes_view(field, nullable=nullable)
        return None if data is None else bytes(data)

    def compact_bytes(self, field: str = "", *, nullable: bool = False) -> bytes | None:
        data = self.bytes_view(field, nullable=nullable, compact=True)
        return None if data is None else bytes(data)

    # -- arrays ----------------------------------------------------------------------------------

    def array_len(
        self, field: str = "", *, nullable: bool = False, compact: bool = False, min_size: int = 1
    ) -> int:
        """An array's element count; -1 for null. A count that cannot fit in the bytes left is refused
        here, before any element is read, so a claimed length never drives an allocation."""
        at = self.pos
        raw_n = self.uvarint(field) - 1 if compact else self.int32(field)
        n = self._check_len(raw_n, at, nullable, field)
        if n > 0 and n * min_size > self.end - self.pos:
            self._short(field, at)
            return 0
        if n > 0:
            self.items -= n
            if self.items < 0:
                self.fail(TooManyItems(at, field, self.items_limit))
                return 0
        return n

    def array(
        self, read_one, field: str = "", *, nullable: bool = False, compact: bool = False, min_size: int = 1
    ) -> tuple | None:
        """Read an array, calling `read_one(reader)` per element; None for null."""
        n = self.array_len(field, nullable=nullable, compact=compact, min_size=min_size)
        if n < 0:
            return None if nullable else ()
        out = []
        for _ in range(n):
            if self.error is not None:
                break
            out.append(read_one(self))
        return tuple(out)

    def compact_array(
        self, read_one, field: str = "", *, nullable: bool = False, min_size: int = 1
    ) -> tuple | None:
        return self.array(read_one, field, nullable=nullable, compact=True, min_size=min_size)

    # -- tagged fields ---------------------------------------------------------------------------

    def tagged_fields(self, field: str = "_tagged_fields") -> list[tuple[int, memoryview]]:
        """The tagged-field section of a flexible struct: (tag, raw bytes) in wire order."""
        count = self.uvarint(field)
        if count > self.end - self.pos:
            self._short(field)
            return []
        out = []
        for _ in range(count):
            tag = self.uvarint(field)
            at = self.pos
            size = self.uvarint(field)
            data = self._sized(size, at, field) if self.error is None else None
            if data is None:
                break
            out.append((tag, data))
        return out
