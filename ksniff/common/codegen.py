"""Code generation: Python functions made from source text built out of ksniff's own tables and classes.

Three hot paths are generated once and then run per event: the slotted classes' `__init__` (`fast_init`
and `deferred_init`, below: on each class's first use), the compiled body decoders (ksniff.decode.compiled)
and the CSV export's row function (ksniff.report.stream). They all go through `define`, the one place that
executes generated source. The source is never made from captured bytes: only from field names, schema
tables and column names that ksniff itself defines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import marshal
import operator
import os
import sys
import zlib
from importlib.util import MAGIC_NUMBER
from typing import Any, TypeVar

from ksniff.common import sources

T = TypeVar("T", bound=type)


def define(source: str, name: str, namespace: dict[str, Any], filename: str = "<ksniff generated>") -> Any:
    """Executes `source` (one or more `def`s) in `namespace` and returns the function called `name`.
    `filename` names the source in tracebacks."""
    exec(_code(source, filename), namespace)  # noqa: S102 - source made from ksniff's own tables
    return namespace[name]


# -- the code kept between runs ------------------------------------------------------------------------
# Compiling the generated source was a twentieth of a run over a capture of a hundred megabytes (the
# `__init__`s of the classes it makes and its decoders, ~40 functions: bench/README.md, "Start-up"), and
# every run made the same ones again. As Python keeps a module's bytecode in `__pycache__`, the code of
# each generated source is kept there once compiled (`__pycache__/generated/`, one file per source, named
# by its filename and a checksum) and read back by the next run: a file is used only when it was written
# by this interpreter's version and holds this very source and filename, otherwise the source is
# compiled again. Where the folder cannot be written (an installation that is not the user's) or Python
# writes no bytecode (PYTHONDONTWRITEBYTECODE), each run compiles, as before.

_STORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", "generated")


def _code(source: str, filename: str) -> Any:
    path = _kept_path(source, filename)
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data.startswith(MAGIC_NUMBER):
            kept_filename, kept_source, code = marshal.loads(memoryview(data)[len(MAGIC_NUMBER) :])
            if kept_source == source and kept_filename == filename:
                return code
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, filename, "exec")
    if not sys.dont_write_bytecode:
        _keep(path, marshal.dumps((filename, source, code)))
    return code


def _kept_path(source: str, filename: str) -> str:
    slug = "".join(c if c.isalnum() else "_" for c in filename).strip("_")[:80]
    checksum = zlib.crc32(source.encode())
    return os.path.join(_STORE, f"{slug}-{checksum:08x}-{len(source)}.{sys.implementation.cache_tag}")


def _keep(path: str, data: bytes) -> None:
    """Writes the file whole or not at all (runs side by side may write the same one)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(_STORE, exist_ok=True)
        with open(temporary, "wb") as f:
            f.write(MAGIC_NUMBER + data)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)


# -- fast_init and deferred __init__s ------------------------------------------------------------------
# A frozen dataclass's generated `__init__` stores each field with `object.__setattr__(self, name, value)`,
# which looks the attribute up by name every time; the events made per chunk and per exchange have up to
# twenty fields, and their construction was a tenth of a run over many small transactions. The
# `__init__` made here stores through each slot's descriptor directly: the same signature, defaults and
# frozenness (assignment still raises FrozenInstanceError), about twice as fast. A field with a
# `default_factory` gets a fresh value per instance, as with the dataclass's own `__init__`.
#
# It is generated on the class's first use (`deferred_init`): until then the class's `__init__` is a
# `_Deferred`, which builds the function, puts it on the class in its own place and hands it out; every
# later call finds the plain function. Compiling the `__init__` of every class an audit imports was a
# fifth of every run's start-up, and a run makes instances of fewer than half of them.


def fast_init(cls: T) -> T:
    """Class decorator, placed above `@frozen_dataclass(init=False)` (ksniff.common.frozen) or
    `@dataclass(frozen=True, slots=True, init=False)`: the classes made per event, whose `__init__` goes
    through the compiled store (below) when it is built. The dataclass's own `__init__` would be
    generated only to be replaced, so it must not be asked for."""
    if cls.__dataclass_params__.init:
        raise TypeError(f"fast_init: declare {cls.__name__} with @dataclass(..., init=False)")
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"fast_init: {cls.__name__}.{f.name} needs the dataclass's own __init__")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init: {cls.__name__} has a __post_init__")
    if "__reduce__" not in cls.__dict__:  # a frozen_dataclass has made the same one (ksniff.common.frozen)
        _reduce_by_position(cls)
    _FAST_INITS[cls] = None
    return deferred_init(cls)


def _reduce_by_position(cls: type) -> None:
    """Gives a slotted dataclass a `__reduce__`: pickled (the Spark engine ships every decode event between
    its stages) as the class and its field values in order, remade through its `__init__`. The
    dataclass's own `__getstate__` and `__setstate__` look up its fields by name on every call (twice the
    time of the whole pickling)."""
    names = _names(cls)
    if len(names) > 1:
        values = operator.attrgetter(*names)
    else:

        def values(obj: Any) -> tuple:
            return tuple(getattr(obj, name) for name in names)

    def __reduce__(self: Any) -> tuple:
        return (cls, values(self))

    __reduce__.__qualname__ = f"{cls.__qualname__}.__reduce__"
    __reduce__.__module__ = cls.__module__
    cls.__reduce__ = __reduce__


def deferred_init(cls: T) -> T:
    """Gives `cls` (a dataclass asked for no `__init__`) its `__init__`, generated on first use."""
    cls.__init__ = _Deferred(cls)
    return cls


class _Deferred:
    """A class's `__init__` before its first use: reading it (to make an instance, or `cls.__init__`,
    `inspect.signature(cls)`) builds the function and puts it in its place."""

    __slots__ = ("cls",)

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        init = _install(self.cls)
        return init if obj is None else init.__get__(obj, owner)


def _install(cls: type) -> Any:
    if cls in _FAST_INITS:
        python_init, compiled_init = fast_inits(cls)
        init = compiled_init if _compiled[0] and compiled_init is not None else python_init
    else:
        init = _make_init(cls, compiled=False)[0]
    cls.__init__ = init
    return init


def fast_inits(cls: type) -> tuple[Any, Any]:
    """A fast_init class's descriptor `__init__` and its compiled one (None when the store is not built),
    generated on the first call."""
    made = _FAST_INITS[cls]
    if made is None:
        made = _FAST_INITS[cls] = _make_init(cls, compiled=_slots is not None)
    return made


def _make_init(cls: type, compiled: bool) -> tuple[Any, Any]:
    params, body, values = [], [], []
    namespace: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__  # the slot's member descriptor
        if f.default_factory is not dataclasses.MISSING:
            # A sentinel default, replaced by a new value per instance: a shared `{}` would leak between them.
            namespace["_FACTORY"] = _FACTORY
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            value = f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
        elif f.default is dataclasses.MISSING:
            params.append(f.name)
            value = f.name
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            value = f.name
        body.append(f"    _set_{f.name}(self, {value})")
        values.append(f"({value})" if " " in value else value)
    # Both functions from one source: one compile per class. `_compiled_init` has the same signature and
    # hands the values to the compiled store (`_slots.fill`, below).
    signature = f"(self, {', '.join(params)}):\n"
    source = f"def __init__{signature}" + "\n".join(body or ["    pass"]) + "\n"
    if compiled:
        namespace["_fill"], namespace["_layout"] = _slots.fill, _slots.Layout(cls, tuple(_names(cls)))
        source += f"\n\ndef _compiled_init{signature}    _fill(self, _layout, {', '.join(values)})\n"
    define(source, "__init__", namespace, f"<ksniff {cls.__name__}>")
    made = (namespace["__init__"], namespace.get("_compiled_init"))
    annotations = {f.name: f.type for f in dataclasses.fields(cls)}
    for function in made:
        if function is not None:
            function.__annotations__ = {**annotations, "return": None}  # as the dataclass's, for signature
            function.__name__ = "__init__"
            function.__qualname__ = f"{cls.__qualname__}.__init__"
            function.__module__ = cls.__module__
    return made


class _Factory:
    """The default of a field made by its default factory, shown as the dataclass shows it."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


# -- the compiled store -------------------------------------------------------------------------------
# `ksniff.common._slots` (Cython; optional as the capture walk is: absent without a compiler, not loaded
# with KSNIFF_PURE_PYTHON set) puts all the values of an `__init__` into their slots in one call, instead
# of a descriptor call per field: about a quarter of the time for the twenty fields of an event. The
# descriptor `__init__` is the reference; tests/common/test_compiled_init.py holds the two to the same
# objects, on their own and through whole audits of the corpus.


_slots = sources.load("ksniff.common._slots")
# Every fast_init class: its descriptor `__init__` and its compiled one (None when not built), or None
# until its first use.
_FAST_INITS: dict[type, tuple[Any, Any] | None] = {}
_compiled = [_slots is not None]  # whether the fast_init classes are made through the compiled store


def compiled_inits(on: bool) -> bool:
    """Builds every fast_init class with the compiled store (`on`, when it is built) or the descriptors;
    returns whether the compiled store is now in use. For the tests and benchmarks that compare them."""
    _compiled[0] = on and _slots is not None
    for cls, made in _FAST_INITS.items():
        if made is not None:
            cls.__init__ = made[1] if _compiled[0] else made[0]
    return _compiled[0]


def compiled_init_in_use() -> bool:
    """Whether the fast_init classes are made through the compiled store."""
    return _compiled[0]
