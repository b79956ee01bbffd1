"""Which code runs: ksniff's compiled modules, or the pure-Python code they are tested against.

`load` gives a module written for compiling (a .pyx: the capture walk, the body reader, ...), or None
when it is not built or `KSNIFF_PURE_PYTHON` is set, and its callers then run their Python code.

Other modules are also compiled from their own .py by the project's build (setup.py's
COMPILED_SOURCES), and the compiled module sits beside the source. Python's own import takes the
compiled one. `install` puts a finder before it that takes the source instead when:

- `KSNIFF_PURE_PYTHON` is set (to anything but empty or 0): the pure-Python run, the reference the
  compiled modules are tested against; or
- the source is newer than the compiled module: the source was changed after the build, and the
  compiled module no longer is that source (`pip install -e .` builds it again).

Every other import goes on as usual.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys


def pure_python() -> bool:
    return os.environ.get("KSNIFF_PURE_PYTHON", "") not in ("", "0")


def load(module: str):
    """The compiled module `module`, or None when it is not built or KSNIFF_PURE_PYTHON is set."""
    if pure_python():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


class SourceFinder:
    """Finds ksniff's compiled-from-source modules as their source where it must (the module docstring).
    A meta path finder by its `find_spec` (importlib.abc, and importlib.util until a source is found
    this way, are not imported: they cost every run about 9 ms of start-up)."""

    def __init__(self, pure: bool) -> None:
        self.pure = pure
        self._compiled: dict[str, dict[str, str]] = {}  # folder -> {module: its compiled file}

    def _compiled_in(self, folder: str) -> dict[str, str]:
        known = self._compiled.get(folder)
        if known is None:
            known = self._compiled[folder] = {}
            try:
                names = os.listdir(folder)
            except OSError:
                names = []
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                for name in names:
                    if name.endswith(suffix):
                        known.setdefault(name[: -len(suffix)], os.path.join(folder, name))
        return known

    def find_spec(self, name, path, target=None):
        if path is None or not name.startswith("ksniff."):
            return None
        leaf = name.rpartition(".")[2]
        for folder in path:
            built = self._compiled_in(folder).get(leaf)
            if built is None:
                continue
            source = os.path.join(folder, leaf + ".py")
            try:
                stale = os.stat(built).st_mtime < os.stat(source).st_mtime
            except OSError:
                return None  # written in C only (a .pyx): the usual import
            if self.pure or stale:
                import importlib.util

                return importlib.util.spec_from_file_location(name, source)
            return None
        return None


def install() -> None:
    """Puts the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder(pure_python()))
