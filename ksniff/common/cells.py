"""How values become table cells and JSON text, the same in every table and in every room that makes rows.

List fields and evidence are compact, key-sorted JSON text (`to_json_text`), with what JSON lacks
(sets, tuples, bytes, enums) written as `json_default` says; durations are milliseconds to the
microsecond (`millis`).
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any


def to_json_text(value: Any) -> str:
    """Compact, key-sorted JSON for list and evidence cells; JSONable values as `json_default` allows."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=json_default)


def json_default(value: Any) -> Any:
    """What the exports accept besides JSON's own types; anything else is a bug and raises TypeError."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def millis(seconds: float | None) -> float | None:
    """Seconds as milliseconds, rounded to the microsecond."""
    # to the microsecond: float epochs subtract with sub-microsecond noise nobody wants in a table
    return None if seconds is None else round(seconds * 1000.0, 3)
