"""The fast path: a decoder generated once per (API, version, direction) from the same tables.

The interpreter (ksniff.decode.interp) walks the table for every message; this module walks it once,
writes a straight-line Python function for that exact version (no version checks left, runs of
fixed-size fields read with one precompiled struct, defaults baked in as constants) and `exec`s it.
Results, and the first error with its offset and field, equal the interpreter's; a test holds the two
to that on every fixture. Tagged fields are rare, so their values are decoded by the interpreter.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from ksniff.capture.compiled import load
from ksniff.common.codegen import define
from ksniff.decode import interp
from ksniff.decode.reader import MAX_BODY_ITEMS, Incomplete, Malformed, Reader, TooManyItems
from ksniff.decode.records import parse_batches, parse_batches_keeping_records
from ksniff.decode.schema import FIXED_FORMATS, Api, Array, Field, Primitive
from ksniff.decode.values import Struct, camel, default_of, struct_class

_FIXED = FIXED_FORMATS
_SIZES = {c: struct.calcsize(">" + c) for c in _FIXED.values()}
_PAST_END = "past the end of the frame"


def _short(at: int, field: str) -> Malformed:
    return Malformed(at, field, _PAST_END)


def _short_group(pos: int, end: int, layout: tuple[tuple[int, str], ...]) -> Malformed:
    """Which field of a run of fixed-size fields ran past the end, at the interpreter's offset."""
    for size, name in layout:
        if end - pos < size:
            return _short(pos, name)
        pos += size
    raise AssertionError("group fits")  # pragma: no cover - only called when it does not


def _uvarint(buf: Any, pos: int, end: int, field: str) -> tuple[int, int]:
    start = pos
    result = shift = 0
    while True:
        if pos >= end:
            raise _short(start, field)
        if pos - start >= 5:
            raise Malformed(start, field, "varint too long")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFF, pos
        shift += 7


def _bad_length(at: int, field: str, n: int) -> Malformed:
    return Malformed(at, field, "null where not nullable" if n == -1 else f"length {n}")


def _tagged(
    buf: Any, pos: int, end: int, known: dict, values: list, version: int, flexible: bool, budget: list[int]
) -> tuple[tuple, int]:
    """The tagged-field section: known tags into `values` (via the interpreter), unknown ones kept."""
    field = "_tagged_fields"
    count, pos = _uvarint(buf, pos, end, field)
    if count > end - pos:
        raise _short(pos, field)
    # The whole section is read before any value is decoded, as the interpreter does, so both report
    # the same first error.
    found = []
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end, field)
        at = pos
        size, pos = _uvarint(buf, pos, end, field)
        if size > end - pos:
            raise _short(at, field)
        found.append((tag, buf[pos : pos + size]))
        pos += size
    unknown = []
    for tag, data in found:
        hit = known.get(tag)
        if hit is None:
            unknown.append((tag, bytes(data)))
            continue
        i, f = hit
        sub = Reader(data, complete=True, items=budget[0], items_limit=budget[1])
        v = interp._value(sub, f, f.type, version, flexible)
        budget[0] = sub.items
        if isinstance(sub.error, TooManyItems):
            raise TooManyItems(pos, f.name, budget[1])
        if sub.error is not None:
            raise Malformed(pos, f.name, f"tagged field {tag}: {sub.error}")
        values[i] = v
    return tuple(unknown), pos


class _Gen:
    """Writes the source of one (API, version, direction) decoder."""

    def __init__(self, version: int, flexible: bool, keep_records: bool = False) -> None:
        self.version = version
        self.flexible = flexible
        self.ns: dict[str, Any] = {
            "_short": _short,
            "_short_group": _short_group,
            "_uvarint": _uvarint,
            "_bad_length": _bad_length,
            "_tagged": _tagged,
            "_parse_batches": parse_batches_keeping_records if keep_records else parse_batches,
            "_UUID": uuid.UUID,
            "_Malformed": Malformed,
            "_unpack_from": struct.unpack_from,
            "_too_many": TooManyItems,
            # Array elements and record batches this body may still make, and its cap (set per call).
            "_budget": [MAX_BODY_ITEMS, MAX_BODY_ITEMS],
        }
        self.funcs: list[str] = []
        self.n = 0

    def const(self, value: Any, prefix: str = "_k") -> str:
        self.n += 1
        name = f"{prefix}{self.n}"
        self.ns[name] = value
        return name

    def struct_fn(self, fields: tuple[Field, ...], cls: type[Struct]) -> str:
        fn = self.const(None, "_s")
        body: list[str] = []
        names: list[str] = []
        known: dict[int, tuple[int, Field]] = {}
        group: list[tuple[str, Field]] = []

        def flush() -> None:
            if group:
                self.fixed_group(body, group)
                group.clear()

        for i, f in enumerate(fields):
            var = f"v{i}"
            names.append(var)
            if f.tag is not None or not f.versions.contains(self.version):
                if f.tag is not None and self.flexible and f.tagged.contains(self.version):
                    known[f.tag] = (i, f)
                body.append(f"{var} = {self.const(default_of(f))}")
                continue
            t = f.type
            if isinstance(t, Primitive) and t.name in _FIXED:
                group.append((var, f))
                continue
            flush()
            self.value(body, var, f, t, "    ")
        flush()
        cls_name = self.const(cls, "_C")
        if self.flexible:
            known_name = self.const(known)
            # Almost every struct ends with an empty tagged-field section: one zero byte.
            body.append("if pos < end and buf[pos] == 0:")
            body.append(f"    return {cls_name}(({''.join(n + ', ' for n in names)}())), pos + 1")
            body.append(f"values = [{', '.join(names)}]")
            body.append(
                f"unknown, pos = _tagged(buf, pos, end, {known_name}, values, {self.version}, True, _budget)"
            )
            body.append("values.append(unknown)")
            body.append(f"return {cls_name}(values), pos")
        else:
            body.append(f"return {cls_name}(({''.join(n + ', ' for n in names)}())), pos")
        src = f"def {fn}(buf, pos, end):\n" + "".join(f"    {line}\n" for line in body)
        self.funcs.append(src)
        return fn

    def fixed_group(self, body: list[str], group: list[tuple[str, Field]]) -> None:
        fmt = ">" + "".join(_FIXED[f.type.name] for _, f in group)
        size = struct.calcsize(fmt)
        unpack = self.const(struct.Struct(fmt).unpack_from, "_u")
        layout = self.const(tuple((_SIZES[_FIXED[f.type.name]], f.name) for _, f in group))
        targets = "".join(f"{var}, " for var, _ in group)
        body.append(f"if end - pos < {size}: raise _short_group(pos, end, {layout})")
        body.append(f"{targets}= {unpack}(buf, pos)")
        body.append(f"pos += {size}")

    def length(self, body: list[str], var: str, name: str, int_fmt: str) -> None:
        """Read a length prefix into `var` (-1 for null), INT16/INT32 or, when flexible, uvarint - 1."""
        if self.flexible:
            body.append("if pos < end and buf[pos] < 0x80:")
            body.append(f"    {var} = buf[pos] - 1")
            body.append("    pos += 1")
            body.append("else:")
            body.append(f"    {var}, pos = _uvarint(buf, pos, end, {name!r})")
            body.append(f"    {var} -= 1")
        else:
            size = struct.calcsize(">" + int_fmt)
            body.append(f"if end - pos < {size}: raise _short(pos, {name!r})")
            body.append(f"{var}, = _unpack_from('>{int_fmt}', buf, pos)")
            body.append(f"pos += {size}")

    def value(self, body: list[str], var: str, f: Field, t: Any, indent: str, element: bool = False) -> None:
        name = f.name
        nullable = (not element) and f.nullable.contains(self.version)
        if isinstance(t, Primitive):
            self.primitive(body, var, f, t.name, nullable)
        elif isinstance(t, Array):
            self.array(body, var, f, t, nullable)
        else:
            fn = self.struct_fn(t, struct_class(t, camel(name)))
            if nullable:
                body.append(f"if end - pos < 1: raise _short(pos, {name!r})")
                body.append("if buf[pos] >= 0x80:")
                body.append(f"    {var} = None")
                body.append("    pos += 1")
                body.append("else:")
                body.append(f"    {var}, pos = {fn}(buf, pos + 1, end)")
            else:
                body.append(f"{var}, pos = {fn}(buf, pos, end)")

    def primitive(self, body: list[str], var: str, f: Field, kind: str, nullable: bool) -> None:
        name = f.name
        if kind in _FIXED:
            self.fixed_group(body, [(var, f)])
            return
        if kind == "uuid":
            body.append(f"if end - pos < 16: raise _short(pos, {name!r})")
            body.append(f"{var} = _UUID(bytes=bytes(buf[pos:pos + 16]))")
            body.append("pos += 16")
            return
        at, n = self.length_or_null(body, var, name, "h" if kind == "string" else "i", nullable)
        body.append(f"    if {n} > end - pos: raise _short({at}, {name!r})")
        if kind == "string":
            body.append(f"    {var} = str(buf[pos:pos + {n}], 'utf-8', 'replace')")
        elif kind == "records":
            body.append(f"    {var} = _parse_batches(buf[pos:pos + {n}], max(_budget[0], 0))")
            self.spend(body, f"len({var})", at, name)
        elif f.secret:
            body.append(f"    {var} = {n}")  # the length only: secrets are never kept
        else:
            body.append(f"    {var} = bytes(buf[pos:pos + {n}])")
        body.append(f"    pos += {n}")

    def length_or_null(
        self, body: list[str], var: str, name: str, width: str, nullable: bool
    ) -> tuple[str, str]:
        """Reads a length into `{var}_n`; -1 makes `var` None where the field is nullable, any other
        negative length is malformed. Leaves an open `else:` for the caller's non-null branch."""
        at, n = f"{var}_at", f"{var}_n"
        body.append(f"{at} = pos")
        self.length(body, n, name, width)
        body.append(f"if {n} < 0:")
        if nullable:
            body.append(f"    if {n} != -1: raise _bad_length({at}, {name!r}, {n})")
            body.append(f"    {var} = None")
        else:
            body.append(f"    raise _bad_length({at}, {name!r}, {n})")
        body.append("else:")
        return at, n

    @staticmethod
    def spend(body: list[str], count: str, at: str, name: str) -> None:
        """`count` items drawn from the body's budget; past it the body is refused (`TooManyItems`)."""
        body.append(f"    _budget[0] -= {count}")
        body.append(f"    if _budget[0] < 0: raise _too_many({at}, {name!r}, _budget[1])")

    def array(self, body: list[str], var: str, f: Field, t: Array, nullable: bool) -> None:
        name = f.name
        at, n = self.length_or_null(body, var, name, "i", nullable)
        of = t.of
        if isinstance(of, Primitive):
            min_size = interp.MIN_SIZE.get(of.name, 1)
            body.append(f"    if {n} * {min_size} > end - pos: raise _short({at}, {name!r})")
            self.spend(body, n, at, name)
            if of.name in _FIXED and of.name != "bool":
                # A whole array of one fixed-size type in one unpack.
                code = _FIXED[of.name]
                body.append(f"    {var} = _unpack_from('>' + str({n}) + '{code}', buf, pos)")
                body.append(f"    pos += {n} * {_SIZES[code]}")
                return
            inner: list[str] = []
            self.primitive(inner, "e", f, of.name, False)
            body.append("    items = []")
            body.append(f"    for _ in range({n}):")
            body.extend(f"        {line}" for line in inner)
            body.append("        items.append(e)")
            body.append(f"    {var} = tuple(items)")
            return
        fn = self.struct_fn(of, struct_class(of, camel(name)))
        body.append(f"    if {n} > end - pos: raise _short({at}, {name!r})")
        self.spend(body, n, at, name)
        body.append("    items = []")
        body.append("    append = items.append")
        body.append(f"    for _ in range({n}):")
        body.append(f"        e, pos = {fn}(buf, pos, end)")
        body.append("        append(e)")
        body.append(f"    {var} = tuple(items)")


def compile_body(api: Api, version: int, is_request: bool, keep_records: bool = False) -> Any:
    """Generate the decoder of one message; returns `decode(view) -> (Struct, end position)`.
    With `keep_records`, records fields are RecordSets that keep each batch's bytes."""
    gen = _Gen(version, api.flexible.contains(version), keep_records)
    fields = api.request if is_request else api.response
    top = gen.struct_fn(fields, interp.message_class(api, is_request))
    source = "\n".join(gen.funcs)
    source += (
        f"\ndef decode(buf, items={MAX_BODY_ITEMS}):\n    _budget[0] = _budget[1] = items\n"
        f"    return {top}(buf, 0, len(buf))\n"
    )
    fn = define(
        source, "decode", gen.ns, f"<ksniff {api.name} v{version} {'request' if is_request else 'response'}>"
    )
    fn.source = source
    return fn


_cache: dict[tuple[int, int, bool, bool], tuple[Api, Any]] = {}


def decoder_for(api: Api, version: int, is_request: bool, keep_records: bool = False) -> Any:
    key = (id(api), version, is_request, keep_records)
    hit = _cache.get(key)
    if hit is None or hit[0] is not api:
        hit = _cache[key] = (api, compile_body(api, version, is_request, keep_records))
    return hit[1]


def decode_body(
    api: Api,
    version: int,
    is_request: bool,
    view: memoryview | bytes,
    *,
    strict: bool = False,
    keep_records: bool = False,
    max_items: int = MAX_BODY_ITEMS,
) -> Struct:
    """Same contract as `interp.decode_body`, generated code underneath; `keep_records` keeps each
    record batch's bytes (see records.RecordSet)."""
    fn = decoder_for(api, version, is_request, keep_records)
    try:
        value, pos = fn(view, max_items)
    except struct.error as e:  # a group check missed a short read: still never an uncaught error
        raise Incomplete(0, str(e)) from None
    if strict and pos != len(view):
        raise Malformed(pos, "<end>", f"{len(view) - pos} bytes after the body")
    return value


# -- the compiled body reader ---------------------------------------------------------------------------
# `ksniff.decode._bodies` (Cython, optional as the capture walk is: absent without a compiler, not loaded
# with KSNIFF_PURE_PYTHON set) reads a body by walking a program made here from the same tables, field by
# field as `_Gen` writes them, tagged fields included; whatever it does not take (an error, the item
# budget passed) it hands to the generated decoder, which stays the reference.


_bodies = load("ksniff.decode._bodies")


def _program(m: Any, fields: tuple[Field, ...], cls: type[Struct], version: int, flexible: bool) -> Any:
    ops = []
    tags = {}  # as `_Gen.struct_fn`'s `known`: the tagged fields of this version, read when present
    for i, f in enumerate(fields):
        if f.tag is not None or not f.versions.contains(version):
            ops.append(m.Op(m.CONST, value=default_of(f)))
            if f.tag is not None and flexible and f.tagged.contains(version):
                tags[f.tag] = (i, _op(m, f, f.type, version, flexible, f.nullable.contains(version)))
        else:
            ops.append(_op(m, f, f.type, version, flexible, f.nullable.contains(version)))
    return m.Program(cls, flexible, tuple(ops), tags)


def _op(m: Any, f: Field, t: Any, version: int, flexible: bool, nullable: bool) -> Any:
    if isinstance(t, Primitive):
        kind = t.name
        if kind in _FIXED:
            return m.Op(m.FIXED, code=ord(_FIXED[kind]))
        if kind == "uuid":
            return m.Op(m.UUID)
        if kind == "string":
            return m.Op(m.STRING, nullable=nullable)
        if kind == "records":
            return m.Op(m.RECORDS, nullable=nullable, wide=True)
        return m.Op(m.SECRET if f.secret else m.BYTES, nullable=nullable, wide=True)
    if isinstance(t, Array):
        of = t.of
        if isinstance(of, Primitive):
            min_size = interp.MIN_SIZE.get(of.name, 1)
            if of.name in _FIXED and of.name != "bool":
                code = ord(_FIXED[of.name])
                return m.Op(m.ARRAY_FIXED, code=code, nullable=nullable, wide=True, min_size=min_size)
            element = _op(m, f, of, version, flexible, False)  # elements are never null
            return m.Op(m.ARRAY_OF, nullable=nullable, wide=True, element=element, min_size=min_size)
        sub = _program(m, of, struct_class(of, camel(f.name)), version, flexible)
        element = m.Op(m.STRUCT, sub=sub)
        return m.Op(m.ARRAY_OF, nullable=nullable, wide=True, element=element, min_size=1)
    return m.Op(
        m.STRUCT, nullable=nullable, sub=_program(m, t, struct_class(t, camel(f.name)), version, flexible)
    )


_fast_cache: dict[tuple[int, int, bool, bool], tuple[Api, Any]] = {}


def fast_decoder_for(api: Api, version: int, is_request: bool, keep_records: bool = False) -> Any:
    """`decoder_for`'s decoder (the same call and results), read by the compiled body reader when it is
    built; else the generated decoder itself."""
    m = _bodies
    if m is None:
        return decoder_for(api, version, is_request, keep_records)
    key = (id(api), version, is_request, keep_records)
    hit = _fast_cache.get(key)
    if hit is None or hit[0] is not api:
        flexible = api.flexible.contains(version)
        fields = api.request if is_request else api.response
        program = _program(m, fields, interp.message_class(api, is_request), version, flexible)
        parse = parse_batches_keeping_records if keep_records else parse_batches
        python = Generated(api, version, is_request, keep_records)
        hit = _fast_cache[key] = (api, m.Body(program, python, parse, uuid.UUID))
    return hit[1]


class Generated:
    """`decoder_for(api, version, is_request, keep_records)`, generated when first called: the compiled
    body reader hands it only the bodies it does not take itself (an error, the item budget passed),
    which most runs never meet, and writing and compiling a decoder costs about a millisecond."""

    __slots__ = ("key", "fn")

    def __init__(self, api: Api, version: int, is_request: bool, keep_records: bool) -> None:
        self.key = (api, version, is_request, keep_records)
        self.fn: Any = None

    def generated(self) -> Any:
        """The generated decoder (made now if it was not yet)."""
        if self.fn is None:
            self.fn = decoder_for(*self.key)
        return self.fn

    def __call__(self, view: Any, items: int) -> Any:
        return (self.fn or self.generated())(view, items)
