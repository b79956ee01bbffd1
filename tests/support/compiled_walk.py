"""The compiled capture walk (`ksniff.capture._fastwalk`) for the tests that hold it to the pure-Python
code: it must be built in CI; elsewhere its tests are skipped when it is not."""

from __future__ import annotations

from compiled_support import require_compiled


def fastwalk():
    return require_compiled("ksniff.capture._fastwalk", "the compiled capture walk")
