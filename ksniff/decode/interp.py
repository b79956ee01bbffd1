"""The reference schema interpreter: walks an API's table field by field to decode a message body.

Slow and simple on purpose: it is the definition of what a body decodes to. The compiled fast path
(ksniff.decode.compiled) must give equal results, and a test holds it to that on every fixture.
"""

from __future__ import annotations

from typing import Any

from ksniff.decode.reader import MAX_BODY_ITEMS, Malformed, Reader, TooManyItems
from ksniff.decode.records import parse_batches
from ksniff.decode.schema import Api, Array, Field, Primitive
from ksniff.decode.values import Struct, camel, default_of, struct_class

# Bytes a primitive takes at least: bounds how many array elements the remaining bytes can hold.
MIN_SIZE = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}


def message_class(api: Api, is_request: bool) -> type[Struct]:
    fields = api.request if is_request else api.response
    return struct_class(fields, api.name + ("Request" if is_request else "Response"))


def decode_body(
    api: Api,
    version: int,
    is_request: bool,
    view: memoryview | bytes,
    *,
    strict: bool = False,
    max_items: int = MAX_BODY_ITEMS,
) -> Struct:
    """Decode a request or response body (the bytes after the header) of `api` at `version`.

    Raises the reader's first error (`Incomplete`/`Malformed`). With `strict`, bytes left over after the
    body are Malformed too (tests use that to catch table mistakes; live traffic is read leniently).
    More than `max_items` array elements and record batches in all is `TooManyItems`.
    """
    fields = api.request if is_request else api.response
    r = Reader(view, complete=True, items=max_items)
    value = _struct(r, fields, message_class(api, is_request), version, api.flexible.contains(version))
    if r.error is not None:
        raise r.error
    if strict and r.pos != r.end:
        raise Malformed(r.pos, "<end>", f"{r.end - r.pos} bytes after the body")
    return value


def _struct(r: Reader, fields: tuple[Field, ...], cls: type[Struct], version: int, flexible: bool) -> Struct:
    values: list[Any] = []
    tagged: dict[int, int] = {}
    for i, f in enumerate(fields):
        if f.tag is not None:
            if flexible and f.tagged.contains(version):
                tagged[f.tag] = i
            values.append(default_of(f))
        elif f.versions.contains(version):
            values.append(_value(r, f, f.type, version, flexible))
        else:
            values.append(default_of(f))
    unknown: tuple = ()
    if flexible:
        extra = []
        for tag, data in r.tagged_fields():
            i = tagged.get(tag)
            if i is None:
                extra.append((tag, bytes(data)))
                continue
            f = fields[i]
            sub = Reader(data, complete=True, items=r.items, items_limit=r.items_limit)
            v = _value(sub, f, f.type, version, flexible)
            r.items = sub.items
            if isinstance(sub.error, TooManyItems):
                r.fail(TooManyItems(r.pos, f.name, r.items_limit))
            elif sub.error is not None:
                r.fail(Malformed(r.pos, f.name, f"tagged field {tag}: {sub.error}"))
            values[i] = v
        unknown = tuple(extra)
    values.append(unknown)
    return cls(values)


def _value(r: Reader, f: Field, t, version: int, flexible: bool) -> Any:
    name = f.name
    if isinstance(t, Primitive):
        return _primitive(r, f, t.name, version, flexible)
    if isinstance(t, Array):
        nullable = f.nullable.contains(version)
        if isinstance(t.of, Primitive):
            prim = t.of.name

            def one(rr: Reader) -> Any:
                return _primitive(rr, f, prim, version, flexible, element=True)

            size = MIN_SIZE.get(prim, 1)
        else:
            cls = struct_class(t.of, camel(name))
            of = t.of

            def one(rr: Reader) -> Any:
                return _struct(rr, of, cls, version, flexible)

            size = 1
        return r.array(one, name, nullable=nullable, compact=flexible, min_size=size)
    # A nested struct; a nullable one is preceded by an int8 marker (-1 null).
    if f.nullable.contains(version) and r.int8(name) < 0:
        return None
    return _struct(r, t, struct_class(t, camel(name)), version, flexible)


def _primitive(r: Reader, f: Field, kind: str, version: int, flexible: bool, element: bool = False) -> Any:
    name = f.name
    if kind == "int32":
        return r.int32(name)
    if kind == "int16":
        return r.int16(name)
    if kind == "int64":
        return r.int64(name)
    if kind == "int8":
        return r.int8(name)
    if kind == "bool":
        return r.bool(name)
    if kind == "uint16":
        return r.uint16(name)
    if kind == "uint32":
        return r.uint32(name)
    if kind == "float64":
        return r.float64(name)
    if kind == "uuid":
        return r.uuid(name)
    nullable = (not element) and f.nullable.contains(version)
    if kind == "string":
        if flexible:
            return r.compact_string(name, nullable=nullable)
        return r.string(name, nullable=nullable)
    at = r.pos
    data = r.bytes_view(name, nullable=nullable, compact=flexible)
    if kind == "records":
        if data is None:
            return None
        batches = parse_batches(data, max(r.items, 0))
        r.items -= len(batches)
        if r.items < 0:
            r.fail(TooManyItems(at, name, r.items_limit))
        return batches
    if f.secret:
        return None if data is None else len(data)
    return None if data is None else bytes(data)
