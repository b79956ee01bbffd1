"""The compiled capture walk (`ksniff.capture._fastwalk`) for the tests that hold it to the pure-Python
code: it must be built in CI; elsewhere its tests are skipped when it is not."""

from __future__ import annotations

import importlib
import os

import pytest


def fastwalk():
    try:
        return importlib.import_module("ksniff.capture._fastwalk")
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the compiled capture walk was not built (pip install -e . needs Cython and gcc)")
        pytest.skip("the compiled capture walk is not built here")
