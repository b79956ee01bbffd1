"""Whether the compiled capture walk is in use (and how compiled modules are loaded).

`ksniff.capture._fastwalk` is built from `_fastwalk.pyx` by the project's build when Cython and a C
compiler are there; when it is missing (no compiler), or `KSNIFF_PURE_PYTHON` is set to anything but
empty or 0, the walks run their pure-Python loops, which are the reference the compiled one is tested
against.
"""

from __future__ import annotations

import importlib
import os

BATCH = 1024  # records walked per call of the compiled walk (its segments are then yielded one by one)


def load(module: str):
    """The compiled module `module`, or None when it is not built or KSNIFF_PURE_PYTHON is set (also the
    decode room's CRC-32C, ksniff.decode.crc)."""
    if os.environ.get("KSNIFF_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


fastwalk = load("ksniff.capture._fastwalk")


def engine_name() -> str:
    """ "compiled" or "python": which capture walk this process runs."""
    return "python" if fastwalk is None else "compiled"
