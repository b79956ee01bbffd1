"""Adding one set of counters into another: the one way every engine sums what its parts counted."""

from __future__ import annotations

import dataclasses
from typing import Any

# Field metadata for a counter that is not a sum: `field(default=None, metadata=MIN)` keeps the least.
MIN = {"merge": min}
MAX = {"merge": max}


def add_counters(total: Any, part: Any) -> None:
    """Adds the counters dataclass `part` into `total`, field by field: numbers add, sets unite, dicts of
    counters add by key, a field whose metadata is MIN or MAX keeps the least or greatest, None is no
    value. A new key of a dict gets a fresh copy, never `part`'s own object."""
    for f in dataclasses.fields(total):
        name = f.name
        value = getattr(part, name)
        if value is None:
            continue
        mine = getattr(total, name)
        if mine is None:
            setattr(total, name, _copy(value))
        elif "merge" in f.metadata:
            setattr(total, name, f.metadata["merge"](mine, value))
        elif isinstance(value, set):
            mine |= value
        elif isinstance(value, dict):
            for key, counts in value.items():
                if key not in mine:
                    mine[key] = _copy(counts)
                elif dataclasses.is_dataclass(counts):
                    add_counters(mine[key], counts)
                else:
                    mine[key] += counts
        else:
            setattr(total, name, mine + value)


def _copy(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        fresh = type(value)()
        add_counters(fresh, value)
        return fresh
    if isinstance(value, set | dict):
        return type(value)((k, _copy(v)) for k, v in value.items()) if isinstance(value, dict) else set(value)
    return value
