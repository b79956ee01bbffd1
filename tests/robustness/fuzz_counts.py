"""How many cases each fuzz target ran in this session (printed by conftest.py at the end)."""

from __future__ import annotations

from collections import Counter

COUNTS: Counter[str] = Counter()


def ran(name: str) -> None:
    COUNTS[name] += 1
