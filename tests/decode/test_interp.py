"""The reference interpreter: defaults outside version ranges, flexible versions, tagged fields, secrets."""

from __future__ import annotations

import struct

import pytest
from decode_encoder import fixture, uvarint

from ksniff.decode import compiled, interp
from ksniff.decode.apis import ALL_APIS
from ksniff.decode.reader import Malformed
from ksniff.decode.schema import API, ARRAY, BYTES, INT16, INT32, INT64, STRING, STRUCT, F
from ksniff.decode.values import Struct

TOY = API(
    1000,
    "Toy",
    valid="0-3",
    flexible="2+",
    request=[
        F("name", STRING, "0+"),
        F("transactional_id", STRING, "1+", nullable="1+"),
        F("producer_id", INT64, "1+", default=-1),
        F("count", INT32, "3+"),
        F("ids", ARRAY(INT32), "0+"),
        F("parts", ARRAY([F("index", INT32, "0+"), F("note", STRING, "1+", nullable="1+")]), "0+"),
        F("secret", BYTES, "0+", secret=True),
        F("leader", STRUCT([F("id", INT32, "2+", default=-1), F("epoch", INT16, "2+")]), "2+", tag=0),
    ],
    response=[F("error_code", INT16, "0+")],
)

BOTH = [interp.decode_body, compiled.decode_body]


def v0_body() -> bytes:
    return (
        struct.pack(">h", 3)
        + b"abc"
        + struct.pack(">iii", 2, 1, 2)
        + struct.pack(">ii", 1, 9)
        + struct.pack(">i", 4)
        + b"pass"
    )


@pytest.mark.parametrize("decode", BOTH)
def test_absent_fields_take_defaults(decode):
    s = decode(TOY, 0, True, v0_body(), strict=True)
    assert isinstance(s, Struct)
    assert (s.name, s.transactional_id, s.producer_id, s.count, s.ids) == ("abc", None, -1, 0, (1, 2))
    assert s.parts[0].index == 9 and s.parts[0].note is None
    assert s.leader.id == -1 and s.leader.epoch == 0  # a tagged struct absent: its own defaults
    assert s._unknown_tags == ()


@pytest.mark.parametrize("decode", BOTH)
def test_secrets_are_replaced_by_their_length(decode):
    s = decode(TOY, 0, True, v0_body(), strict=True)
    assert s.secret == 4
    assert b"pass" not in repr(s).encode() and "pass" not in str(s.as_dict())


@pytest.mark.parametrize("decode", BOTH)
def test_flexible_version_with_known_and_unknown_tags(decode):
    leader = struct.pack(">ih", 5, 6) + uvarint(0)
    tags = uvarint(2) + uvarint(0) + uvarint(len(leader)) + leader + uvarint(7) + uvarint(2) + b"\xaa\xbb"
    body = (
        uvarint(4)
        + b"abc"
        + uvarint(0)
        + struct.pack(">q", 77)
        + struct.pack(">i", 3)
        + uvarint(2)
        + struct.pack(">i", 8)
        + uvarint(1)
        + uvarint(2)
        + b"x"
        + tags
    )
    s = decode(TOY, 3, True, body, strict=True)
    got = (s.name, s.transactional_id, s.producer_id, s.count, s.ids, s.secret)
    assert got == ("abc", None, 77, 3, (8,), 1)
    assert s.parts == ()
    assert (s.leader.id, s.leader.epoch) == (5, 6)
    assert s._unknown_tags == ((7, b"\xaa\xbb"),)


@pytest.mark.parametrize("decode", BOTH)
def test_strict_refuses_trailing_bytes(decode):
    with pytest.raises(Malformed):
        decode(TOY, 0, True, v0_body() + b"\x00", strict=True)
    assert decode(TOY, 0, True, v0_body() + b"\x00").name == "abc"


@pytest.mark.parametrize("decode", BOTH)
def test_malformed_at_the_right_offset(decode):
    body = bytearray(v0_body())
    struct.pack_into(">i", body, 5, -3)  # the ids array's count
    with pytest.raises(Malformed) as e:
        decode(TOY, 0, True, bytes(body))
    assert (e.value.offset, e.value.field) == (5, "ids")


def test_every_field_present_at_every_version():
    produce = ALL_APIS[0]
    for v in range(produce.valid.low, produce.valid.high + 1):
        s = interp.decode_body(produce, v, True, fixture(produce, v, True))
        assert s._fields == tuple(f.name for f in produce.request) + ("_unknown_tags",)
        if v < 3:
            assert s.transactional_id is None


def test_struct_is_immutable_and_exports_plainly():
    s = interp.decode_body(TOY, 0, True, v0_body())
    with pytest.raises(AttributeError):
        s.name = "x"
    d = s.as_dict()
    assert d["parts"] == [{"index": 9, "note": None, "_unknown_tags": []}]
    assert s._replace(name="z").name == "z"
