"""A module compiled from a .pyx is not older than its .pyx where both are there.

When a .pyx no longer translates, the build says so in one line and goes on with what is there: in a
fresh checkout that is no compiled module at all (its tests then fail in CI, `compiled_support`), but in a
working tree it is the module built from the earlier .pyx, which the tests would then check instead of
the code as it is. This test says so at once: rebuild (`pip install -e .`) and read the build's output."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ksniff"


def test_no_compiled_module_is_older_than_its_pyx():
    sources = sorted(PACKAGE.rglob("*.pyx"))
    assert len(sources) >= 7
    stale = []
    for pyx in sources:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            built = pyx.with_name(pyx.stem + suffix)
            if built.exists() and built.stat().st_mtime < pyx.stat().st_mtime:
                stale.append(str(built.relative_to(PACKAGE.parent)))
    assert stale == [], f"built before their .pyx changed (rebuild: pip install -e .): {stale}"
