"""Whether the compiled capture walk is in use.

`ksniff.capture._fastwalk` is built from `_fastwalk.pyx` by the project's build when Cython and a C
compiler are there; when it is missing (no compiler), or `KSNIFF_PURE_PYTHON` is set to anything but
empty or 0, the walks run their pure-Python loops, which are the reference the compiled one is tested
against.
"""

from __future__ import annotations

import importlib
import os

BATCH = 1024  # records walked per call of the compiled walk (its segments are then yielded one by one)


def _load():
    if os.environ.get("KSNIFF_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("ksniff.capture._fastwalk")
    except ImportError:
        return None


fastwalk = _load()


def engine_name() -> str:
    """ "compiled" or "python": which capture walk this process runs."""
    return "python" if fastwalk is None else "compiled"
