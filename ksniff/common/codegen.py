"""Code generation: Python functions made from source text built out of ksniff's own tables and classes.

Three hot paths are generated once and then run per event: the slotted dataclasses' `__init__`
(`fast_init`, below), the compiled body decoders (ksniff.decode.compiled) and the CSV export's row
function (ksniff.report.stream). They all go through `define`, the one place that executes generated
source. The source is never made from captured bytes: only from field names, schema tables and
column names that ksniff itself defines.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


def define(source: str, name: str, namespace: dict[str, Any], filename: str = "<ksniff generated>") -> Any:
    """Executes `source` (one or more `def`s) in `namespace` and returns the function called `name`.
    `filename` names the source in tracebacks."""
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - source made from ksniff's own tables
    return namespace[name]


# -- fast_init ---------------------------------------------------------------------------------------
# A faster `__init__` for the frozen, slotted dataclasses that cross room boundaries once per event.
#
# A frozen dataclass's generated `__init__` stores each field with `object.__setattr__(self, name, value)`,
# which looks the attribute up by name every time; the events made per chunk and per exchange have up to
# twenty fields, and their construction was a tenth of a run over many small transactions. `fast_init`
# replaces that `__init__` with one that stores through each slot's descriptor directly: the same
# signature, defaults and frozenness (assignment still raises FrozenInstanceError), about twice as fast.
# A field with a `default_factory` gets a fresh value per instance, as with the dataclass's own `__init__`.


def fast_init(cls: T) -> T:
    """Class decorator, placed above `@frozen_dataclass(init=False)` (ksniff.common.frozen): the
    dataclass's own `__init__` would be generated only to be replaced (generating the dataclasses'
    methods from source was a third of every run's start-up, bench/README.md), so it must not be asked
    for."""
    if cls.__dataclass_params__.init:
        raise TypeError(f"fast_init: declare {cls.__name__} with @dataclass(..., init=False)")
    params, body, values = [], [], []
    namespace: dict[str, object] = {"_cls": cls}
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"fast_init: {cls.__name__}.{f.name} needs the dataclass's own __init__")
        namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__  # the slot's member descriptor
        if f.default_factory is not dataclasses.MISSING:
            # A sentinel default, replaced by a new value per instance: a shared `{}` would leak between them.
            namespace["_MISSING"] = dataclasses.MISSING
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            value = f"_factory_{f.name}() if {f.name} is _MISSING else {f.name}"
        elif f.default is dataclasses.MISSING:
            params.append(f.name)
            value = f.name
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            value = f.name
        body.append(f"    _set_{f.name}(self, {value})")
        values.append(f"({value})" if " " in value else value)
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init: {cls.__name__} has a __post_init__")
    # Pickled (the Spark engine ships every decode event between its stages) as the class and its field
    # values in order, remade through that `__init__`: a slotted dataclass's own `__getstate__` and
    # `__setstate__` look up its fields by name on every call (twice the time of the whole pickling).
    # All three functions from one source: one compile per class. `_compiled_init` has the same signature
    # and hands the values to the compiled store (`_slots.fill`, below) when it is built.
    fields = "".join(f"self.{f.name}, " for f in dataclasses.fields(cls))
    signature = f"(self, {', '.join(params)}):\n"
    source = (
        f"def __init__{signature}"
        + "\n".join(body or ["    pass"])
        + f"\n\n\ndef __reduce__(self):\n    return (_cls, ({fields}))\n"
    )
    if _slots is not None:
        namespace["_fill"], namespace["_layout"] = _slots.fill, _slots.Layout(cls, tuple(_names(cls)))
        source += f"\n\ndef _compiled_init{signature}    _fill(self, _layout, {', '.join(values)})\n"
    define(source, "__init__", namespace, f"<ksniff {cls.__name__}>")
    for name in ("__init__", "__reduce__", "_compiled_init"):
        function = namespace.get(name)
        if function is None:
            continue
        function.__name__ = "__init__" if name == "_compiled_init" else name
        function.__qualname__ = f"{cls.__qualname__}.{function.__name__}"
        function.__module__ = cls.__module__
    cls.__reduce__ = namespace["__reduce__"]
    _FAST_INITS[cls] = (namespace["__init__"], namespace.get("_compiled_init"))
    cls.__init__ = _FAST_INITS[cls][_slots is not None]
    return cls


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


# -- the compiled store -------------------------------------------------------------------------------
# `ksniff.common._slots` (Cython; optional as the capture walk is: absent without a compiler, not loaded
# with KSNIFF_PURE_PYTHON set) puts all the values of an `__init__` into their slots in one call, instead
# of a descriptor call per field: about a quarter of the time for the twenty fields of an event. The
# descriptor `__init__` is the reference; tests/common/test_compiled_init.py holds the two to the same
# objects, on their own and through whole audits of the corpus.


def _load_slots() -> Any:
    if os.environ.get("KSNIFF_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("ksniff.common._slots")
    except ImportError:
        return None


_slots = _load_slots()
# Every fast_init class: its descriptor `__init__` and its compiled one (None when not built).
_FAST_INITS: dict[type, tuple[Any, Any]] = {}


def compiled_inits(on: bool) -> bool:
    """Builds every fast_init class with the compiled store (`on`, when it is built) or the descriptors;
    returns whether the compiled store is now in use. For the tests and benchmarks that compare them."""
    use = on and _slots is not None
    for cls, (python_init, compiled_init) in _FAST_INITS.items():
        cls.__init__ = compiled_init if use else python_init
    return use


def compiled_init_in_use() -> bool:
    """Whether the fast_init classes are built through the compiled store."""
    return any(cls.__init__ is inits[1] for cls, inits in _FAST_INITS.items())
