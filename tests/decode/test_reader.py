"""The sticky-error reader: primitives, varints, lengths, short reads and malformed lengths."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ksniff.decode.reader import Incomplete, Malformed, Reader


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def test_fixed_primitives():
    u = uuid.uuid4()
    data = struct.pack(">?bhHiIqd", True, -2, -3, 65535, -5, 2**32 - 1, -(2**63), 1.5) + u.bytes
    r = Reader(data)
    got = (r.bool(), r.int8(), r.int16(), r.uint16(), r.int32(), r.uint32(), r.int64(), r.float64(), r.uuid())
    assert got == (True, -2, -3, 65535, -5, 2**32 - 1, -(2**63), 1.5, u)
    assert r.ok and r.remaining == 0


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_roundtrip(n):
    assert Reader(uvarint(zigzag(n) & 0xFFFFFFFF)).varint() == n


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_roundtrip(n):
    assert Reader(uvarint(zigzag(n) & 0xFFFFFFFFFFFFFFFF)).varlong() == n


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_uvarint_roundtrip(n):
    r = Reader(uvarint(n))
    assert r.uvarint() == n and r.ok and r.remaining == 0


def test_varint_too_long_is_malformed():
    r = Reader(b"\x01" + b"\xff" * 6 + b"\x01")
    r.int8()
    assert r.uvarint("count") == 0
    assert r.error == Malformed(1, "count", "varint too long")


def test_varint_cut_is_incomplete():
    r = Reader(b"\xff\xff")
    assert r.uvarint("n") == 0
    assert r.error == Incomplete(0, "n")


def test_short_read_is_sticky_and_returns_zero_values():
    r = Reader(b"\x00\x01\x00")
    assert r.int16("a") == 1
    assert r.int32("b") == 0
    assert r.int16("c") == 0 and r.string("d") == "" and r.array(Reader.int8, "e") == ()
    assert r.error == Incomplete(2, "b")  # the first error only


def test_short_read_in_a_complete_frame_is_malformed():
    r = Reader(b"\x00\x01\x00", complete=True)
    r.int16()
    r.int32("b")
    assert isinstance(r.error, Malformed) and (r.error.offset, r.error.field) == (2, "b")


def test_strings():
    data = struct.pack(">h", 3) + b"abc" + struct.pack(">h", -1) + uvarint(4) + b"xyz" + uvarint(0)
    r = Reader(data)
    assert r.string() == "abc"
    assert r.string(nullable=True) is None
    assert r.compact_string() == "xyz"
    assert r.compact_string(nullable=True) is None
    assert r.ok


def test_invalid_utf8_never_raises():
    assert Reader(struct.pack(">h", 2) + b"\xff\xfe").string() == "\ufffd\ufffd"


def test_null_where_not_nullable_is_malformed():
    r = Reader(b"\x00\x00" + struct.pack(">h", -1))
    r.int16()
    assert r.string("name") == ""
    assert r.error == Malformed(2, "name", "null where not nullable")


def test_negative_length_is_malformed():
    r = Reader(struct.pack(">i", -7))
    assert r.bytes("records", nullable=True) is None
    assert r.error == Malformed(0, "records", "length -7")


def test_length_past_the_end():
    data = struct.pack(">h", 100) + b"abc"
    r = Reader(data)
    r.string("s")
    assert r.error == Incomplete(0, "s")
    r = Reader(data, complete=True)
    r.string("s")
    assert r.error == Malformed(0, "s", "past the end of the frame")


def test_bytes_and_compact_bytes():
    data = struct.pack(">i", 2) + b"\x01\x02" + struct.pack(">i", -1) + uvarint(3) + b"\x03\x04" + uvarint(0)
    r = Reader(data)
    assert r.bytes() == b"\x01\x02"
    assert r.bytes(nullable=True) is None
    assert r.compact_bytes() == b"\x03\x04"
    assert r.compact_bytes(nullable=True) is None
    assert r.ok


def test_arrays():
    data = struct.pack(">iii", 2, 7, 8) + struct.pack(">i", -1) + uvarint(3) + b"\x05\x06" + uvarint(0)
    r = Reader(data)
    assert r.array(Reader.int32) == (7, 8)
    assert r.array(Reader.int32, nullable=True) is None
    assert r.compact_array(Reader.int8) == (5, 6)
    assert r.compact_array(Reader.int8, nullable=True) is None
    assert r.ok


def test_array_claiming_millions_is_refused_before_reading():
    calls = []

    def one(rr: Reader) -> int:
        calls.append(1)
        return rr.int32()

    r = Reader(struct.pack(">i", 50_000_000) + b"\x00" * 40)
    assert r.array(one, "topics", min_size=4) == ()
    assert calls == [] and r.error == Incomplete(0, "topics")
    r = Reader(uvarint(2**31) + b"\x00" * 4, complete=True)
    assert r.compact_array(one, "topics") == ()
    assert calls == [] and isinstance(r.error, Malformed) and r.error.offset == 0


def test_tagged_fields_kept_raw():
    data = uvarint(2) + uvarint(0) + uvarint(2) + b"\x01\x02" + uvarint(300) + uvarint(1) + b"\x09"
    r = Reader(data)
    assert [(t, bytes(v)) for t, v in r.tagged_fields()] == [(0, b"\x01\x02"), (300, b"\x09")]
    assert r.ok and r.remaining == 0


def test_tagged_field_past_the_end():
    r = Reader(uvarint(1) + uvarint(5) + uvarint(10) + b"\x00")
    assert r.tagged_fields() == []
    assert r.error == Incomplete(2, "_tagged_fields")


@pytest.mark.parametrize("n", range(0, 12))
def test_every_truncation_of_a_struct_is_incomplete(n):
    data = struct.pack(">hi", 1, 2) + struct.pack(">h", 3) + b"abc"
    r = Reader(data[:n])
    r.int16("a")
    r.int32("b")
    r.string("c")
    assert (r.error is None) == (n == len(data))
    assert r.error is None or isinstance(r.error, Incomplete)


@given(st.binary(max_size=64))
def test_random_bytes_never_raise(data):
    r = Reader(data)
    r.compact_string()
    r.array(lambda rr: (rr.varlong(), rr.compact_bytes(nullable=True)), compact=True)
    r.tagged_fields()
    r.uuid()
    assert r.error is None or isinstance(r.error, Incomplete | Malformed)
