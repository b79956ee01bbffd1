"""The Kafka protocol as data: declarative message schemas, one table per API (see ksniff/decode/apis).

A schema is a list of fields in wire order. Each field has a type, the versions it is present in, the
versions where it may be null, and, for tagged fields, its tag and the versions it may appear in. Adding a
version to an API is a change to its table, never to decoding code. The reader (ksniff.decode.interp) and
the compiled fast path (ksniff.decode.compiled) both read these tables.

Field names are Kafka's own (from its message JSON specs) in snake_case: `TransactionalId` becomes
`transactional_id`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ksniff.common.frozen import frozen_dataclass

MAX_VERSION = 0x7FFF


@frozen_dataclass
class VersionRange:
    """An inclusive range of versions, written like Kafka's specs: "3+", "0-12", "none"."""

    low: int
    high: int  # inclusive; MAX_VERSION for open-ended

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        text = text.strip()
        if text == "none":
            return NONE
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def contains(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __str__(self) -> str:
        if self.low > self.high:
            return "none"
        if self.high == MAX_VERSION:
            return f"{self.low}+"
        return f"{self.low}" if self.low == self.high else f"{self.low}-{self.high}"


NONE = VersionRange(1, 0)


@frozen_dataclass
class Primitive:
    """A field type of the protocol tables that is read in one step."""

    name: str  # "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string",
    # "bytes", "uuid", "records"


BOOL = Primitive("bool")
INT8 = Primitive("int8")
INT16 = Primitive("int16")
UINT16 = Primitive("uint16")
INT32 = Primitive("int32")
UINT32 = Primitive("uint32")
INT64 = Primitive("int64")
FLOAT64 = Primitive("float64")
STRING = Primitive("string")
BYTES = Primitive("bytes")
UUID = Primitive("uuid")
RECORDS = Primitive("records")  # record batches: parsed into RecordBatchHeader tuples, not kept as bytes

# The fixed-width primitives by name, as `struct` format characters (the wire is big-endian).
FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
}


@frozen_dataclass
class Array:
    """An array of a primitive or of a struct (a list of fields)."""

    of: Primitive | tuple[Field, ...]


def ARRAY(of: Primitive | list[Field]) -> Array:  # noqa: N802 - reads like a type in the tables
    return Array(of if isinstance(of, Primitive) else tuple(of))


def STRUCT(fields: list[Field]) -> tuple[Field, ...]:  # noqa: N802
    """A nested struct that is not an array (Kafka's `"type": "SomeStruct"` fields)."""
    return tuple(fields)


@frozen_dataclass
class Field:
    """One field of a protocol message: name, type and the versions that carry it."""

    name: str
    type: Primitive | Array | tuple[Field, ...]
    versions: VersionRange
    nullable: VersionRange = NONE
    tag: int | None = None  # a tagged field when set
    tagged: VersionRange = NONE  # versions where the tagged field may appear
    default: Any = None  # value outside `versions`; None means the type's natural default
    secret: bool = False  # never kept (SASL auth bytes): the value is replaced by its length


def F(
    name: str,
    type_,
    versions: str,
    *,
    nullable: str = "none",
    tag: int | None = None,  # noqa: N802
    tagged: str | None = None,
    default: Any = None,
    secret: bool = False,
) -> Field:
    """One field, in the tables' shorthand: F("producer_id", INT64, "0+", default=-1)."""
    if isinstance(type_, list):
        type_ = tuple(type_)
    return Field(
        name=name,
        type=type_,
        versions=VersionRange.parse(versions),
        nullable=VersionRange.parse(nullable),
        tag=tag,
        tagged=VersionRange.parse(tagged)
        if tagged is not None
        else (VersionRange.parse(versions) if tag is not None else NONE),
        default=default,
        secret=secret,
    )


@frozen_dataclass
class Api:
    """One API: its key, Kafka's name for it, the versions the tables know, and where it is flexible."""

    key: int
    name: str
    valid: VersionRange
    flexible: VersionRange
    request: tuple[Field, ...]
    response: tuple[Field, ...]
    # ApiVersions answers with response header v0 even in flexible versions.
    response_header_v0: bool = False
    notes: str = ""
    extra: dict = field(default_factory=dict)


def API(
    key: int,
    name: str,
    *,
    valid: str,
    flexible: str,
    request: list[Field],  # noqa: N802
    response: list[Field],
    response_header_v0: bool = False,
    notes: str = "",
) -> Api:
    return Api(
        key,
        name,
        VersionRange.parse(valid),
        VersionRange.parse(flexible),
        tuple(request),
        tuple(response),
        response_header_v0,
        notes,
    )
