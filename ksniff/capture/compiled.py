"""Whether the compiled capture walk is in use (`load`, how every compiled module is loaded, is
ksniff.common.sources', kept here for the rooms that import it from here).

`ksniff.capture._fastwalk` is built from `_fastwalk.pyx` by the project's build when Cython and a C
compiler are there; when it is missing (no compiler), or `KSNIFF_PURE_PYTHON` is set to anything but
empty or 0, the walks run their pure-Python loops, which are the reference the compiled one is tested
against.
"""

from __future__ import annotations

from ksniff.common.sources import load

__all__ = ["BATCH", "engine_name", "fastwalk", "load"]

BATCH = 1024  # records walked per call of the compiled walk (its segments are then yielded one by one)

fastwalk = load("ksniff.capture._fastwalk")


def engine_name() -> str:
    """ "compiled" or "python": which capture walk this process runs."""
    return "python" if fastwalk is None else "compiled"
