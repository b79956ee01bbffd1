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

On a Spark cluster's executors ksniff comes as a zip of its Python source (ksniff.engine.spark_session),
from which no compiled module can be imported. The driver ships its compiled modules beside it as
files (`shipped_files`, SparkContext.addFile, one per module, named by the module), and on an executor
the finder takes each from there (`_shipped`) when it fits the executor's Python: the same code as on
the driver, instead of the pure-Python code, which is several times slower.
"""

from __future__ import annotations

import contextlib
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


def made(module: str, name: str, *args):
    """An object of the class `name` of the compiled module `module`, made from `args`; None when the
    module is not built (or KSNIFF_PURE_PYTHON is set), has no such class (a build older than it), or the
    class refuses what it is given (TypeError: its build reads fields the classes given no longer have).
    How the Python code takes up a compiled step beside itself: None means its own functions run."""
    m = load(module)
    cls = getattr(m, name, None)
    if cls is None:
        return None
    try:
        return cls(*args)
    except TypeError:
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
        if not self.pure and ".zip" + os.sep in path[0] + os.sep:  # an executor's zip of the source
            return _shipped(name)
        leaf = name.rpartition(".")[2]
        for folder in path:
            built = self._compiled_in(folder).get(leaf)
            if built is None:
                continue
            source = os.path.join(folder, leaf + ".py")
            try:
                stale = _stale(built, source)
            except OSError:
                return None  # written in C only (a .pyx): the usual import
            if self.pure or stale:
                import importlib.util

                return importlib.util.spec_from_file_location(name, source)
            return None
        return None


def _stale(built: str, source: str) -> bool:
    """The compiled module `built` is older than its source (OSError when either is not there)."""
    return os.stat(built).st_mtime < os.stat(source).st_mtime


def install() -> None:
    """Puts the finder first on sys.meta_path (once)."""
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder(pure_python()))


def shipped_files(package_dir: str) -> list[tuple[str, str]]:
    """(file, the name it is shipped as) of each compiled module of the package in `package_dir` that
    this process would use (none when KSNIFF_PURE_PYTHON is set; not one older than its source)."""
    if pure_python():
        return []
    out = []
    root = os.path.dirname(package_dir)
    for folder, _dirs, names in sorted(os.walk(package_dir)):
        for name in sorted(names):
            suffix = next((x for x in importlib.machinery.EXTENSION_SUFFIXES if name.endswith(x)), None)
            if suffix is None:
                continue
            built = os.path.join(folder, name)
            with contextlib.suppress(OSError):  # no source: written in C only (a .pyx)
                if _stale(built, built[: -len(suffix)] + ".py"):
                    continue  # this process runs the source
            module = os.path.relpath(built[: -len(suffix)], root).replace(os.sep, ".")
            out.append((built, module + suffix))
    return out


def _shipped(name: str):
    """The spec of compiled module `name` as the driver shipped it to this Spark executor (a file named
    by the module, `shipped_files`, in the folder of the files added to the run), when it is there for
    this Python (its suffix says the interpreter and platform it was built for)."""
    files = sys.modules.get("pyspark.core.files")  # set up by pyspark's worker before it reads a task
    spark_files = getattr(files, "SparkFiles", None)
    root = getattr(spark_files, "_root_directory", None)
    if not root or not getattr(spark_files, "_is_running_on_worker", False):
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        built = os.path.join(root, name + suffix)
        if os.path.exists(built):
            from importlib.util import spec_from_file_location

            return spec_from_file_location(name, built)
    return None
