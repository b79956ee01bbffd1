"""Decoded message bodies: `Struct` records and the schema defaults that fill fields absent at a version.

A Struct is an immutable tuple with attribute access by the schema's field names. Every field of the
schema is present at every version, so the audit reads `request.transactional_id` of any Produce version
without asking which version it was. One Struct class is made per schema struct and shared by the
interpreter and the compiled decoders, so their results compare equal exactly when their values do.

Structs pickle (for engines that ship events between processes) as their class and values; the class, once
per pickle, by the number of its schema struct's place in the protocol tables ((API key, request or
response, path of field names), numbered alike by every process of one ksniff). Unpickling makes or finds
the very class the decoders use for that struct, in any process.
"""

from __future__ import annotations

import copyreg
from operator import itemgetter
from typing import Any

from ksniff.capture.compiled import load
from ksniff.decode.reader import ZERO_UUID
from ksniff.decode.schema import Array, Field, Primitive

UNKNOWN_TAGS = "_unknown_tags"


class _StructClass(type):
    """The type of the generated record classes: pickled by place (see `_reduce_class`)."""


class Struct(tuple, metaclass=_StructClass):
    """Base of the generated record classes. `_fields` lists names in wire order; `_unknown_tags` holds
    (tag, raw bytes) of tagged fields the schema does not know."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _schema: tuple[Field, ...] | None = None  # the schema struct the class was made for (struct_class)

    def __repr__(self) -> str:
        pairs = zip(self._fields, self, strict=True)
        inner = ", ".join(f"{n}={v!r}" for n, v in pairs if n != UNKNOWN_TAGS or v)
        return f"{type(self).__name__}({inner})"

    def _replace(self, **changes: Any) -> Struct:
        return type(self)(changes.get(n, v) for n, v in zip(self._fields, self, strict=True))

    def __reduce__(self) -> tuple:
        # The class itself goes by `_reduce_class`, once per pickle (pickle's memo): each record is then
        # its values only.
        return type(self), (tuple(self),)

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts and lists all the way down (for JSON and tabular exports)."""
        return {n: _plain(v) for n, v in zip(self._fields, self, strict=True)}


def _plain(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.as_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


_classes: dict[int, tuple[tuple[Field, ...], type[Struct]]] = {}


def struct_class(fields: tuple[Field, ...], name: str) -> type[Struct]:
    """The Struct class of one schema struct, made once (keyed by the identity of its field tuple)."""
    hit = _classes.get(id(fields))
    if hit is not None and hit[0] is fields:
        return hit[1]
    cls = _new_class(name, tuple(f.name for f in fields) + (UNKNOWN_TAGS,), fields)
    _classes[id(fields)] = (fields, cls)  # keeps `fields` alive so its id is never reused
    return cls


def _new_class(name: str, names: tuple[str, ...], fields: tuple[Field, ...] | None = None) -> type[Struct]:
    attrs: dict[str, Any] = {"__slots__": (), "_fields": names, "_schema": fields}
    for i, n in enumerate(names):
        attrs[n] = property(itemgetter(i), doc=f"field {i}") if _FIELD is None else _FIELD(i)
    return _StructClass(name, (Struct,), attrs)


# A field read in C when the compiled body reader is built (ksniff.decode._bodies.Field: the item by
# position, without the property's call of its itemgetter); else the property, the reference.
_FIELD = getattr(load("ksniff.decode._bodies"), "Field", None)


def _reduce_class(cls: type[Struct]) -> tuple:
    # The class was made at run time, so pickle cannot find it by its name: send the number of its schema
    # struct's place in the protocol tables instead (every process running this ksniff numbers them
    # alike; pickles never outlive a run). A class made outside the tables travels by its field names.
    number = struct_number(cls)
    if number is None:
        return class_by_names, (cls.__name__, cls._fields)
    return numbered_class, (number,)


copyreg.pickle(_StructClass, _reduce_class)


Place = tuple[int, bool, tuple[str, ...]]  # (API key, is request, field names from the message down)
_place_of: dict[int, Place] = {}
_class_at: dict[Place, type[Struct]] = {}


def _places() -> dict[int, Place]:
    """Every schema struct of the protocol tables, by the identity of its field tuple: its place."""
    if not _place_of:
        from ksniff.decode.apis import ALL_APIS

        def visit(fields: tuple[Field, ...], place: Place) -> None:
            _place_of.setdefault(id(fields), place)
            for f in fields:
                inner = f.type.of if isinstance(f.type, Array) else f.type
                if isinstance(inner, tuple):
                    visit(inner, (place[0], place[1], (*place[2], f.name)))

        for api in ALL_APIS.values():
            visit(api.request, (api.key, True, ()))
            visit(api.response, (api.key, False, ()))
    return _place_of


_numbered: list[Place] = []
_number_of: dict[Place, int] = {}
_class_of_number: dict[int, type[Struct]] = {}


def _numbers() -> dict[Place, int]:
    """Every place of the protocol tables, numbered in the order the tables list them."""
    if not _number_of:
        for place in _places().values():
            if place not in _number_of:
                _number_of[place] = len(_numbered)
                _numbered.append(place)
    return _number_of


def struct_number(cls: type[Struct]) -> int | None:
    """The number of a Struct class's schema struct among every place of the protocol tables (the same in
    every process running this ksniff), or None for a class made outside the tables (`class_by_names`)."""
    place = None if cls._schema is None else _places().get(id(cls._schema))
    return None if place is None else _numbers()[place]


def numbered_class(n: int) -> type[Struct]:
    cls = _class_of_number.get(n)
    if cls is None:
        _numbers()
        cls = _class_of_number[n] = class_at(*_numbered[n])
    return cls


def class_at(api_key: int, is_request: bool, path: tuple[str, ...]) -> type[Struct]:
    """The Struct class of the schema struct at `path` (field names) in an API's request or response."""
    place = (api_key, is_request, path)
    cls = _class_at.get(place)
    if cls is None:
        from ksniff.decode.apis import ALL_APIS

        api = ALL_APIS[api_key]
        fields = api.request if is_request else api.response
        name = api.name + ("Request" if is_request else "Response")
        for step in path:
            t = next(f.type for f in fields if f.name == step)
            fields, name = (t.of if isinstance(t, Array) else t), camel(step)
        cls = _class_at[place] = struct_class(fields, name)
    return cls


_by_name: dict[tuple[str, tuple[str, ...]], type[Struct]] = {}


def class_by_names(name: str, names: tuple[str, ...]) -> type[Struct]:
    """The class of Structs made outside the tables, rebuilt from its name and field names (cached)."""
    cls = _by_name.get((name, names))
    if cls is None:
        cls = _by_name[(name, names)] = _new_class(name, names)
    return cls


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def ever_nullable(f: Field) -> bool:
    return f.nullable.low <= f.nullable.high


_NATURAL = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "uuid": ZERO_UUID,
}


def default_of(f: Field) -> Any:
    """A field's value at versions where it is absent: the table's default, else the type's natural one
    (Kafka's rule: zero, false, empty; null for strings, bytes and records that can be null)."""
    if f.default is not None:
        return f.default
    t = f.type
    if f.secret:
        return None
    if isinstance(t, Primitive):
        if t.name in _NATURAL:
            return _NATURAL[t.name]
        if t.name == "string":
            return None if ever_nullable(f) else ""
        if t.name == "bytes":
            return None if ever_nullable(f) else b""
        return None  # records
    if isinstance(t, Array):
        return ()
    # A nested struct: all its own defaults.
    cls = struct_class(t, camel(f.name))
    return cls(tuple(default_of(g) for g in t) + ((),))


def version_defaults(fields: tuple[Field, ...]) -> list[Any]:
    return [default_of(f) for f in fields]
