"""The optional compiled modules (the capture walk, the slot store, the body reader) for the tests that
hold them to the pure-Python code: each must be built in CI; elsewhere its tests skip when it is not."""

from __future__ import annotations

import importlib
import os

import pytest


def require_compiled(name: str, what: str):
    """The compiled module `name` (`what` it is, for the message), or the test skipped (failed in CI)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{what} was not built (pip install -e . needs Cython and gcc)")
        pytest.skip(f"{what} is not built here")
