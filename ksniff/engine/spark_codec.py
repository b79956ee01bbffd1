"""Pickling decode events for the trip between Spark stages.

Message bodies are `Struct` records whose classes the schema machinery makes at run time, one per schema
struct; pickle cannot find such a class by name. Here a Struct travels as (class name, field names,
values) and comes back as an instance of a class rebuilt from those names (cached), which reads the same
by attribute and compares equal, which is all the audit and the exports ask of a body. Stray memoryviews
(zero-copy slices of a capture buffer) travel as bytes.
"""

from __future__ import annotations

import io
import pickle
from operator import itemgetter
from typing import Any

from ksniff.decode.values import Struct

_rebuilt: dict[tuple[str, tuple[str, ...]], type[Struct]] = {}


def _struct(name: str, fields: tuple[str, ...], values: tuple) -> Struct:
    cls = _rebuilt.get((name, fields))
    if cls is None:
        attrs: dict[str, Any] = {"__slots__": (), "_fields": fields}
        for i, n in enumerate(fields):
            attrs[n] = property(itemgetter(i))
        cls = _rebuilt[(name, fields)] = type(name, (Struct,), attrs)
    return cls(values)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Struct):
            return _struct, (type(obj).__name__, obj._fields, tuple(obj))
        if isinstance(obj, memoryview):
            return bytes, (obj.tobytes(),)
        return NotImplemented


def dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


loads = pickle.loads
