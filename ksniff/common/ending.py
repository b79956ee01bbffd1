"""What a process that ends without the interpreter's teardown (ksniff.cli.program) may leave as it is.

Such a process gives its memory back to the system whole when it ends, so taking a run's state apart
object by object just before (the fold's producers, transactions and partition logs, the decoder's
tables: ~0.3 M objects and 30-40 ms of a run over 13,200 small transactions) is work nobody sees the
end of. The program says at its start that it will end that way (`arm`); an engine then hands the state
of its finished run here (`keep`) instead of letting it go, and the collector's walks leave it alone
from then on. Only the latest run's state is kept: a run of several capture sets lets each earlier set's
state go as before, so what is held stays one set's. A process that never armed it (the tests, a
notebook, a library caller) keeps nothing and changes nothing.
"""

from __future__ import annotations

import gc

__all__ = ["arm", "armed", "keep", "normal_end"]

_kept: list | None = None


def arm() -> None:
    """Said by a program before its work, when it will end without the interpreter's teardown."""
    global _kept
    if _kept is None:
        _kept = []


def armed() -> bool:
    return _kept is not None


def keep(*objects: object) -> None:
    """`objects`, the state of a finished run, stay until the process ends (armed), else nothing: the
    caller lets them go as usual. The run kept before them is let go now."""
    if _kept is None:
        return
    _kept[:] = objects
    gc.freeze()  # alive to the end: out of every later collection's walk


def normal_end() -> None:
    """The process ends through the interpreter's teardown after all: what was kept out of the
    collector's walks goes back to them, so that the teardown finalises it as it finalises the rest."""
    if _kept is not None:
        gc.unfreeze()
