"""A test-only encoder driven by the tables: fixtures for every (API, version, direction).

It writes what the tables describe, including tagged fields (known and unknown) that no client library
fills in, so the compiled decoders can be held equal to the interpreter on inputs that exercise every
branch. Real-client encodings are tested elsewhere (test_apis_roundtrip, test_decoder).
"""

from __future__ import annotations

import itertools
import struct
import uuid
from typing import Any

from decode_builders import record_batch

from ksniff.decode.schema import FIXED_FORMATS, Api, Array, Field, Primitive

_FIXED = FIXED_FORMATS
INT_BITS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint16": 16, "uint32": 32}


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class Encoder:
    """Encodes sample values for one version; `nulls` makes nullable fields null, `tags` adds tagged
    fields (every known one plus an unknown tag 99) to each flexible struct."""

    def __init__(self, version: int, flexible: bool, *, nulls: bool = False, tags: bool = True) -> None:
        self.version, self.flexible, self.nulls, self.tags = version, flexible, nulls, tags
        self.counter = itertools.count(1)

    def struct(self, fields: tuple[Field, ...]) -> bytes:
        out = bytearray()
        tagged: list[tuple[int, bytes]] = []
        for f in fields:
            if f.tag is not None:
                if self.flexible and self.tags and f.tagged.contains(self.version):
                    tagged.append((f.tag, self.value(f, f.type)))
                continue
            if f.versions.contains(self.version):
                out += self.value(f, f.type)
        if self.flexible:
            if self.tags:
                tagged.append((99, b"\x01\x02\x03"))
            tagged.sort()
            out += uvarint(len(tagged))
            for tag, data in tagged:
                out += uvarint(tag) + uvarint(len(data)) + data
        return bytes(out)

    def length(self, n: int, fmt: str) -> bytes:
        return uvarint(n + 1) if self.flexible else struct.pack(">" + fmt, n)

    def value(self, f: Field, t: Any, element: bool = False) -> bytes:
        null = self.nulls and not element and f.nullable.contains(self.version)
        if isinstance(t, Array):
            if null:
                return self.length(-1, "i") if not self.flexible else b"\x00"
            items = [
                self.value(f, t.of, element=True) if isinstance(t.of, Primitive) else self.struct(t.of)
                for _ in range(2)
            ]
            return self.length(2, "i") + b"".join(items)
        if isinstance(t, tuple):
            if f.nullable.contains(self.version) and not element:
                return b"\xff" if null else b"\x01" + self.struct(t)
            return self.struct(t)
        kind = t.name
        n = next(self.counter)
        if kind in _FIXED:
            v = (
                (n % 2 == 1)
                if kind == "bool"
                else (n + 0.5 if kind == "float64" else n % (1 << INT_BITS[kind]))
            )
            return struct.pack(">" + _FIXED[kind], v)
        if kind == "uuid":
            return uuid.UUID(int=n).bytes
        if null:
            return b"\x00" if self.flexible else struct.pack(">h" if kind == "string" else ">i", -1)
        if kind == "string":
            data = f"{f.name}-{n}".encode()
            return (uvarint(len(data) + 1) if self.flexible else struct.pack(">h", len(data))) + data
        data = record_batch(1000 + n, n % 100, n) if kind == "records" else bytes([n % 256]) * 3
        return (uvarint(len(data) + 1) if self.flexible else struct.pack(">i", len(data))) + data


def fixture(api: Api, version: int, is_request: bool, *, nulls: bool = False, tags: bool = True) -> bytes:
    enc = Encoder(version, api.flexible.contains(version), nulls=nulls, tags=tags)
    return enc.struct(api.request if is_request else api.response)
