"""Round trips through a real client's protocol layer: kafka-python encodes, our tables decode.

Two independent encoders: kafka-python's message classes (every version of every fully tabled API,
including versions Kafka 4.0 removed from its specs, which kafka-python still encodes) and its legacy
hand-written structs (the older versions it carries). Values are generated from our table for each
version, encoded by kafka-python, decoded strictly (no byte left over) and compared field by field.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest

from ksniff.decode import interp
from ksniff.decode.apis import FULL_BODY
from ksniff.decode.schema import Api, Array, Field, Primitive

pytest.importorskip("kafka.protocol.api_message")

from decode_builders import record_batch  # noqa: E402
from decode_encoder import INT_BITS  # noqa: E402
from kafka.protocol.api_message import ApiMessage  # noqa: E402


class Sample:
    """Distinct values for every field present at a version; `nulls` sets every nullable field to null."""

    def __init__(self, version: int, flexible: bool, nulls: bool, tags: bool = True):
        self.version, self.flexible, self.nulls, self.tags = version, flexible, nulls, tags
        self.counter = itertools.count(1)

    def present(self, f: Field) -> bool:
        if f.tag is not None:
            return self.tags and self.flexible and f.tagged.contains(self.version)
        return f.versions.contains(self.version)

    def struct(self, fields: tuple[Field, ...]) -> dict[str, Any]:
        return {f.name: self.value(f) for f in fields if self.present(f)}

    def value(self, f: Field) -> Any:
        if self.nulls and f.nullable.contains(self.version) and f.tag is None:
            return None
        t = f.type
        if isinstance(t, Array):
            if isinstance(t.of, Primitive):
                return [self.primitive(t.of.name, f) for _ in range(2)]
            return [self.struct(t.of) for _ in range(2)]
        if isinstance(t, tuple):
            return self.struct(t)
        return self.primitive(t.name, f)

    def primitive(self, kind: str, f: Field) -> Any:
        n = next(self.counter)
        if kind in INT_BITS:
            return n % (1 << INT_BITS[kind])
        if kind == "bool":
            return n % 2 == 1
        if kind == "float64":
            return n + 0.5
        if kind == "string":
            return f"{f.name}-{n}"
        if kind == "bytes":
            return bytes([n % 256]) * 3
        if kind == "uuid":
            return uuid.UUID(int=n)
        if kind == "records":
            return record_batch(1000 + n, n % 100, n)  # two records, transactional
        raise AssertionError(kind)


def _check(decoded: Any, expected: dict[str, Any], fields: tuple[Field, ...], where: str) -> None:
    for f in fields:
        if f.name not in expected:
            continue
        got, want = getattr(decoded, f.name), expected[f.name]
        here = f"{where}.{f.name}"
        if want is None:
            assert got is None, here
            continue
        t = f.type
        if isinstance(t, Array) and isinstance(t.of, tuple):
            assert len(got) == len(want), here
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                _check(g, w, t.of, f"{here}[{i}]")
        elif isinstance(t, tuple):
            _check(got, want, t, here)
        elif isinstance(t, Array):
            assert list(got) == want, here
        elif t.name == "records":
            (batch,) = got
            producer_id = int.from_bytes(want[43:51], "big", signed=True)  # the batch header's field
            assert (batch.producer_id, batch.records_count, batch.transactional) == (producer_id, 2, True), (
                here
            )
        elif f.secret:
            assert got == len(want), here
        else:
            assert got == want, here


def _message_classes() -> dict[tuple[int, bool], type[ApiMessage]]:
    import importlib
    import inspect
    import pkgutil

    import kafka.protocol as kp

    found = {}
    for mod in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" in mod.name or "generate" in mod.name:
            continue
        module = importlib.import_module(mod.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, ApiMessage) and cls is not ApiMessage and getattr(cls, "_json", None):
                found[(cls.API_KEY, cls.is_request())] = cls
    return found


MESSAGES = _message_classes()


def _kp_build(
    cls, fields: tuple[Field, ...], data: dict[str, Any], version: int, flexible: bool, top: bool = True
):
    """A kafka-python message (or nested data object) from a dict of our field names.

    Fields are matched by wire position, not by name: kafka-python renames a few (Metadata's
    topic_authorized_operations is its authorized_operations), and the layout is what is under test.
    """
    ours = [f for f in fields if f.name in data]
    theirs = [
        f for f in cls._struct.fields.values() if f.for_version_q(version) and (f._tag is None or flexible)
    ]
    assert len(ours) == len(theirs), (cls.__name__, [f.name for f in ours], [f.name for f in theirs])
    kwargs = {}
    for mine, field in zip(ours, theirs, strict=True):
        value = data[mine.name]
        if value is not None and (field.is_struct() or field.is_struct_array()):
            inner = mine.type.of if isinstance(mine.type, Array) else mine.type
            sub = field.data_class

            def build(v, sub=sub, inner=inner):
                return _kp_build(sub, inner, v, version, flexible, top=False)

            value = build(value) if field.is_struct() else [build(v) for v in value]
        elif value is not None and getattr(field, "type_str", "") == "bitfield":
            value = {bit for bit in range(32) if value >> bit & 1}  # kafka-python's authorized operations
        kwargs[field.name] = value
    return cls(version=version, **kwargs) if top else cls(**kwargs)


CASES = [
    pytest.param(
        api,
        v,
        is_request,
        nulls,
        id=f"{api.name}-v{v}-{'req' if is_request else 'resp'}" + ("-nulls" if nulls else ""),
    )
    for api in FULL_BODY
    for v in range(api.valid.low, api.valid.high + 1)
    for is_request in (True, False)
    for nulls in (False, True)
]


@pytest.mark.parametrize("api, version, is_request, nulls", CASES)
def test_kafka_python_messages(api: Api, version: int, is_request: bool, nulls: bool):
    cls = MESSAGES[(api.key, is_request)]
    fields = api.request if is_request else api.response
    sample = Sample(version, api.flexible.contains(version), nulls).struct(fields)
    wire = _kp_build(cls, fields, sample, version, api.flexible.contains(version)).encode(version=version)
    decoded = interp.decode_body(api, version, is_request, memoryview(wire), strict=True)
    _check(decoded, sample, fields, f"{api.name}v{version}")


def _legacy_classes(package: str) -> dict[tuple[int, bool, int], type]:
    """The hand-written per-version structs of a client: (API key, is request, version) -> class."""
    import importlib
    import inspect
    import pkgutil

    found = {}
    root = importlib.import_module(package)
    for mod in pkgutil.iter_modules(root.__path__):
        module = importlib.import_module(f"{package}.{mod.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            key = getattr(cls, "API_KEY", None)
            version = getattr(cls, "API_VERSION", None)
            schema = getattr(cls, "SCHEMA", None)
            if isinstance(key, int) and isinstance(version, int) and schema is not None:
                is_request = cls.__name__.split("_v")[0].endswith("Request")
                found[(key, is_request, version)] = cls
    return found


# kafka-python's legacy layer and aiokafka's protocol module: written by hand per version, independently
# of the JSON specs our tables were read from.
LEGACY = {package: _legacy_classes(package) for package in ("kafka.protocol.old", "aiokafka.protocol")}
BY_KEY = {api.key: api for api in FULL_BODY}
# Where a hand-written struct contradicts Kafka's spec, the struct is wrong, not our table.
_EPOCH_BUG = "aiokafka encodes ListOffsets current_leader_epoch as int64; Kafka's spec says int32"
LEGACY_BUGS = {
    ("aiokafka.protocol", 2, True, 4): _EPOCH_BUG,
    ("aiokafka.protocol", 2, True, 5): _EPOCH_BUG,
}
LEGACY_CASES = [
    pytest.param(
        package,
        BY_KEY[key],
        version,
        is_request,
        id=f"{package.split('.')[0]}-{BY_KEY[key].name}-v{version}-{'req' if is_request else 'resp'}",
        marks=[pytest.mark.xfail(reason=bug, strict=True)]
        if (bug := LEGACY_BUGS.get((package, key, is_request, version)))
        else [],
    )
    for package, classes in LEGACY.items()
    for (key, is_request, version) in sorted(classes)
    if key in BY_KEY and BY_KEY[key].valid.contains(version)
]


def _positional(fields: tuple[Field, ...], data: dict[str, Any], schema) -> list[Any]:
    """Our sample as a legacy struct wants it: values in wire order, nested structs as lists, and a
    one-field struct as its bare value where the legacy schema declares an array of a primitive (the
    same bytes: Metadata v0-8 requests name topics as an array of strings)."""
    out = []
    for f in fields:
        if f.name not in data:
            continue
        value = data[f.name]
        t = f.type
        if value is not None and isinstance(t, Array) and isinstance(t.of, tuple):
            inner = schema.fields[len(out)].array_of
            if type(inner).__name__ == "Schema":
                value = [_positional(t.of, v, inner) for v in value]
            else:
                value = [next(iter(v.values())) for v in value]
        elif getattr(schema.fields[len(out)], "__name__", "") == "BitField":
            value = {bit for bit in range(32) if value >> bit & 1}
        out.append(value)
    return out


@pytest.mark.parametrize("package, api, version, is_request", LEGACY_CASES)
def test_hand_written_structs(package: str, api: Api, version: int, is_request: bool):
    cls = LEGACY[package][(api.key, is_request, version)]
    fields = api.request if is_request else api.response
    sample = Sample(version, api.flexible.contains(version), nulls=False, tags=False).struct(fields)
    values = _positional(fields, sample, cls.SCHEMA)
    wire = cls.SCHEMA.encode(values)
    decoded = interp.decode_body(api, version, is_request, memoryview(wire), strict=True)
    _check(decoded, sample, fields, f"{api.name}v{version}")
