"""The compact encoding of the decode events the Spark engine's stages hand each other.

Pickle spends most of its time on an event in Python: a call per record class to reduce it and one per
generated body class to name it, again in every event's pickle. Here each value is one tag byte and its
payload, written in one walk over the event with no call back into Python per object in the compiled
codec (`ksniff.engine._pack`, built from _pack.pyx; this module is its reference and its fallback, and
both write the same bytes). It is also smaller: fields go by position, classes as small numbers, and a
string that comes again in one event (a broker, a client id, a topic in every batch) as its number.

A blob is MAGIC, then one value:

    NONE, FALSE, TRUE            nothing more
    INT                          zigzag LEB128 (any size)
    FLOAT                        8 bytes, IEEE 754 little-endian
    STR                          LEB128 length, UTF-8 (lone surrogates kept); the blob's next string number
    STR_AGAIN                    LEB128 number of a string met before in this blob
    BYTES                        LEB128 length, the bytes
    TUPLE, LIST, FROZENSET, SET  LEB128 count, the items
    DICT                         LEB128 count, key and value of each
    STRUCT                       LEB128 number of its schema struct (ksniff.decode.values.struct_number),
                                 LEB128 count, the fields
    STRUCT_NAMED                 a Struct made outside the protocol tables: its name (a value), its field
                                 names (a value), LEB128 count, the fields
    RECORD                       LEB128 place of its class in the codec's `classes`, its fields in order
                                 (a dataclass: `__match_args__`)
    UUID                         16 bytes
    PICKLED                      LEB128 length, a pickle: any other value (an int subclass, an enum, ...)

Only the classes a codec is given, the protocol tables' Struct classes and the builtins above are made
when a blob is read, by calling them with their fields, as unpickling them did; anything else is in a
pickle, written and read by pickle.
"""

from __future__ import annotations

import operator
import pickle
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from ksniff.decode import values

MAGIC = 0xA7  # not a pickle's first byte (0x80): `is_packed` tells the two apart
NONE, FALSE, TRUE, INT, FLOAT, STR, STR_AGAIN, BYTES = range(8)
TUPLE, LIST, FROZENSET, SET, DICT, STRUCT, STRUCT_NAMED, RECORD, UUID, PICKLED = range(8, 18)
_DOUBLE = struct.Struct("<d")
_UUID = uuid.UUID
_STRUCT_CLASS = values.Struct.__class__


def is_packed(blob: bytes) -> bool:
    return len(blob) > 0 and blob[0] == MAGIC


def fields_of(cls: type) -> Any:
    """The function giving a dataclass instance's field values as a tuple, in order."""
    names = cls.__match_args__
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)


class Codec:
    """Packs and unpacks values; `classes`: the dataclasses written as RECORDs, by their place in it
    (every process must give the same classes in the same order). `renamed`: the field of those classes
    whose values `unpack` can rename as it reads them (the Spark engine's connection numbers)."""

    def __init__(self, classes: Sequence[type], renamed: str | None = None) -> None:
        self.classes = tuple(classes)
        self.place = {cls: n for n, cls in enumerate(self.classes)}
        self.getters = tuple(fields_of(cls) for cls in self.classes)
        self.widths = tuple(len(cls.__match_args__) for cls in self.classes)
        self.renamed = renamed
        self.renamed_at = tuple(_place_of(cls, renamed) for cls in self.classes)

    def pack(self, obj: Any) -> bytes:
        out = bytearray((MAGIC,))
        self._value(out, obj, {})
        return bytes(out)

    def _value(self, out: bytearray, v: Any, strings: dict) -> None:
        cls = v.__class__
        if cls is str:
            n = strings.get(v)
            if n is None:
                strings[v] = len(strings)
                data = v.encode("utf-8", "surrogatepass")
                out.append(STR)
                _varint(out, len(data))
                out += data
            else:
                out.append(STR_AGAIN)
                _varint(out, n)
        elif cls is int:
            out.append(INT)
            _varint(out, v << 1 if v >= 0 else ((-v) << 1) - 1)
        elif v is None:
            out.append(NONE)
        elif cls is bool:
            out.append(TRUE if v else FALSE)
        elif cls.__class__ is _STRUCT_CLASS:
            number = values.struct_number(cls)
            if number is None:
                out.append(STRUCT_NAMED)
                self._value(out, cls.__name__, strings)
                self._value(out, cls._fields, strings)
            else:
                out.append(STRUCT)
                _varint(out, number)
            self._items(out, v, strings)
        elif cls in self.place:
            n = self.place[cls]
            out.append(RECORD)
            _varint(out, n)
            for item in self.getters[n](v):
                self._value(out, item, strings)
        elif cls is tuple:
            out.append(TUPLE)
            self._items(out, v, strings)
        elif cls is float:
            out.append(FLOAT)
            out += _DOUBLE.pack(v)
        elif cls is bytes:
            out.append(BYTES)
            _varint(out, len(v))
            out += v
        elif cls is list:
            out.append(LIST)
            self._items(out, v, strings)
        elif cls is _UUID:
            out.append(UUID)
            out += v.bytes
        elif cls is dict:
            out.append(DICT)
            _varint(out, len(v))
            for key, item in v.items():
                self._value(out, key, strings)
                self._value(out, item, strings)
        elif cls is frozenset or cls is set:
            out.append(FROZENSET if cls is frozenset else SET)
            self._items(out, v, strings)
        else:
            data = pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
            out.append(PICKLED)
            _varint(out, len(data))
            out += data

    def _items(self, out: bytearray, items: Any, strings: dict) -> None:
        _varint(out, len(items))
        for item in items:
            self._value(out, item, strings)

    def unpack(self, blob: bytes, names: dict | None = None) -> Any:
        """The value packed in `blob`; with `names`, each record's `renamed` field holds names[value]
        instead of its value, when `names` has one (as if the record had been made with it)."""
        if not is_packed(blob):
            raise ValueError("not a packed value")
        reader = _Reader(self, memoryview(blob), names)
        reader.at = 1
        try:
            obj = reader.value()
        except IndexError:  # a byte read past the end, or a string or class number never given
            raise ValueError("a packed value cut short") from None
        if reader.at != len(blob):
            raise ValueError("bytes after the packed value")
        return obj


def _place_of(cls: type, name: str | None) -> int:
    return cls.__match_args__.index(name) if name in cls.__match_args__ else -1


class _Reader:
    def __init__(self, codec: Codec, data: memoryview, names: dict | None = None) -> None:
        self.codec, self.data, self.at, self.names = codec, data, 0, names
        self.strings: list[str] = []

    def varint(self) -> int:
        data, at = self.data, self.at
        n = shift = 0
        while True:
            byte = data[at]
            at += 1
            n |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.at = at
                return n
            shift += 7

    def take(self, n: int) -> bytes:
        start = self.at
        self.at = start + n
        if self.at > len(self.data):
            raise ValueError("a packed value cut short")
        return bytes(self.data[start : self.at])

    def value(self) -> Any:
        tag = self.data[self.at]
        self.at += 1
        if tag == STR:
            text = self.take(self.varint()).decode("utf-8", "surrogatepass")
            self.strings.append(text)
            return text
        if tag == STR_AGAIN:
            return self.strings[self.varint()]
        if tag == INT:
            z = self.varint()
            return z >> 1 if not z & 1 else -((z + 1) >> 1)
        if tag == NONE:
            return None
        if tag == TRUE or tag == FALSE:
            return tag == TRUE
        if tag == STRUCT:
            cls = values.numbered_class(self.varint())
            return cls(self.items())
        if tag == RECORD:
            n = self.varint()
            codec = self.codec
            fields = [self.value() for _ in range(codec.widths[n])]
            at = codec.renamed_at[n]
            if self.names is not None and at >= 0:
                fields[at] = self.names.get(fields[at], fields[at])
            return codec.classes[n](*fields)
        if tag == TUPLE:
            return self.items()
        if tag == FLOAT:
            return _DOUBLE.unpack(self.take(8))[0]
        if tag == BYTES:
            return self.take(self.varint())
        if tag == LIST:
            return list(self.items())
        if tag == UUID:
            return _UUID(bytes=self.take(16))
        if tag == DICT:
            n = self.varint()
            out = {}
            for _ in range(n):
                key = self.value()
                out[key] = self.value()
            return out
        if tag == FROZENSET:
            return frozenset(self.items())
        if tag == SET:
            return set(self.items())
        if tag == STRUCT_NAMED:
            name = self.value()
            names = self.value()
            return values.class_by_names(name, names)(self.items())
        if tag == PICKLED:
            return pickle.loads(self.take(self.varint()))
        raise ValueError(f"unknown tag {tag} in a packed value")

    def items(self) -> tuple:
        return tuple([self.value() for _ in range(self.varint())])


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
