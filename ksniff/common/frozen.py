"""`frozen_dataclass` and `slotted_dataclass`: classes that behave as `@dataclass(frozen=True, slots=True)`
and `@dataclass(slots=True)`, made without generating source when they are defined.

`dataclasses` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__` and
`__delattr__` as source text and compiles it when the class is defined, and makes a slotted class twice;
for the ~70 classes an audit loads that was over a third of every run's start-up (bench/README.md,
"Start-up"). Here the class is made once, from its annotations, by these decorators alone:

- its fields are `dataclasses.Field`s in `__dataclass_fields__`, so `dataclasses.fields`, `replace`,
  `asdict`, `astuple` and `is_dataclass` work on it as on a dataclass; `__match_args__` and
  `__dataclass_params__` are there too;
- equality, hash and repr are closures over one `operator.attrgetter` of the fields: equal when the other
  object is of the same class and the tuples of their fields are equal, the hash of that tuple (a frozen
  class; a mutable one is unhashable, as a dataclass with `eq` is), and `Name(field=value!r, ...)` with
  `...` for a value that contains itself;
- a frozen class's `__setattr__` and `__delattr__` are one shared pair that raises FrozenInstanceError;
- pickling and copying go through `__init__` with the field values in order (`__reduce__`);
- `__init__` has the dataclass's signature, defaults and default factories, and is generated
  (ksniff.common.codegen) on the class's first use, not at its definition: a run compiles the
  `__init__`s of the classes it makes, not of every class it imports.

Fields must not opt out of comparison, hash, repr or init (`field(compare=False)` and the like), be
keyword-only, ClassVar or InitVar, and the class must not define the methods made here nor
`__post_init__`: such a class is declared with `@dataclass`. tests/common/test_frozen.py holds these
classes to the dataclass's own behaviour.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from typing import Any, TypeVar, dataclass_transform

from ksniff.common import codegen

T = TypeVar("T", bound=type)
_MADE = ("__eq__", "__hash__", "__repr__", "__init__", "__setattr__", "__delattr__", "__reduce__")
_MISSING = dataclasses.MISSING
# The mark `dataclasses.fields` selects a class's fields by (the module's own, since Python 3.7).
_FIELD = dataclasses._FIELD  # noqa: SLF001
_NOT_FIELDS = ("ClassVar", "InitVar", "KW_ONLY")
# The modules whose classes the compiled audit fold reads and writes: its own (setup.py's
# COMPILED_SOURCES, which every exchange goes through) and the decode events. The slots of their classes
# are reached by name through the compiled table of their offsets (`ksniff.common._slots.fast_attributes`)
# when it is built. Not every class: the interpreter reads a slot faster by its own specialisation, which
# a class with the table's attribute lookup no longer gets (bench/README.md, "The fold's attribute reads").
_FOLD = ("auditor", "fold", "idempotence", "identity", "keys", "offsets", "partlog", "produce", "state")
READ_COMPILED = frozenset([*(f"ksniff.audit.{m}" for m in (*_FOLD, "transactions")), "ksniff.decode.events"])


@dataclass_transform(frozen_default=True)
def frozen_dataclass(cls: T | None = None, /, *, init: bool = True) -> Any:
    """Class decorator: `@frozen_dataclass`, or `@frozen_dataclass(init=False)` under `fast_init`."""

    def wrap(c: T) -> T:
        return _make(c, frozen=True, init=init)

    return wrap if cls is None else wrap(cls)


@dataclass_transform()
def slotted_dataclass(cls: T) -> T:
    """Class decorator: `@dataclass(slots=True)`, a mutable class (unhashable, as the dataclass's)."""
    return _make(cls, frozen=False, init=True)


class _Params:
    """How the class was made, as `dataclasses` records it (`__dataclass_params__`)."""

    __slots__ = ("init", "repr", "eq", "order", "unsafe_hash", "frozen", "match_args", "kw_only", "slots")

    def __init__(self, init: bool, frozen: bool) -> None:
        self.init, self.frozen = init, frozen
        self.repr = self.eq = self.match_args = self.slots = True
        self.order = self.unsafe_hash = self.kw_only = False

    def __repr__(self) -> str:
        return f"_Params(init={self.init}, frozen={self.frozen}, slots=True)"


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _make(cls: T, frozen: bool, init: bool) -> T:
    for name in _MADE:
        if name in cls.__dict__:
            raise TypeError(f"{cls.__name__} defines {name}: use @dataclass")
    if "__post_init__" in cls.__dict__ or "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__} has its own __post_init__ or __slots__: use @dataclass")
    fields: dict[str, dataclasses.Field] = {}
    for base in cls.__mro__[-1:0:-1]:
        fields.update(base.__dict__.get("__dataclass_fields__", {}))
    own = []
    for name, kind in cls.__dict__.get("__annotations__", {}).items():
        fields[name] = _field(cls, name, kind)
        own.append(name)
    required_after_default = False
    for f in fields.values():
        if f.default is _MISSING and f.default_factory is _MISSING:
            if required_after_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        else:
            required_after_default = True
    names = tuple(fields)
    body = {k: v for k, v in cls.__dict__.items() if k not in own and k not in ("__dict__", "__weakref__")}
    body["__slots__"] = tuple(own)
    body["__dataclass_fields__"] = fields
    body["__dataclass_params__"] = _Params(init, frozen)
    body["__match_args__"] = names
    made = type(cls)(cls.__name__, cls.__bases__, body)
    made.__qualname__ = cls.__qualname__
    if frozen:
        made.__setattr__ = _frozen_setattr
        made.__delattr__ = _frozen_delattr
    _compare_and_show(made, names, hashable=frozen)
    if init:
        codegen.deferred_init(made)
    if codegen._slots is not None and made.__module__ in READ_COMPILED:
        codegen._slots.fast_attributes(made)
    return made


def _field(cls: type, name: str, kind: Any) -> dataclasses.Field:
    text = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
    if text.split("[")[0].strip().rpartition(".")[2] in _NOT_FIELDS:
        raise TypeError(f"{cls.__name__}.{name} is a ClassVar, InitVar or KW_ONLY: use @dataclass")
    default = cls.__dict__.get(name, _MISSING)
    f = default if isinstance(default, dataclasses.Field) else dataclasses.field(default=default)
    if not (f.compare and f.repr and f.hash is None and f.init) or f.kw_only is True:
        raise TypeError(f"{cls.__name__}.{name} opts out of compare, hash, repr or init: use @dataclass")
    if f.default is not _MISSING and f.default.__class__.__hash__ is None:  # the dataclass's own rule
        raise ValueError(f"mutable default {type(f.default)} for field {name}: use default_factory")
    f.name, f.type, f._field_type = name, kind, _FIELD  # noqa: SLF001
    f.kw_only = False
    return f


def _compare_and_show(cls: type, names: tuple[str, ...], hashable: bool) -> None:
    if len(names) > 1:
        values = operator.attrgetter(*names)
    elif names:
        one = operator.attrgetter(names[0])

        def values(obj: Any) -> tuple:
            return (one(obj),)
    else:

        def values(obj: Any) -> tuple:
            return ()

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(values(self))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in zip(names, values(self), strict=True))
        return f"{self.__class__.__qualname__}({shown})"

    def __reduce__(self: Any) -> tuple:
        # Pickled (the Spark engine ships events between its stages) and copied as the class and its
        # field values in order, remade through `__init__`.
        return (self.__class__, values(self))

    for method in (__eq__, __hash__, __repr__, __reduce__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        method.__module__ = cls.__module__
        setattr(cls, method.__name__, method)
    if not hashable:
        cls.__hash__ = None  # type: ignore[assignment]
