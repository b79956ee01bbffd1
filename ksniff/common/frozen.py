"""`frozen_dataclass` and `slotted_dataclass`: `@dataclass(frozen=True, slots=True)` and
`@dataclass(slots=True)` whose comparison, hash and repr are made without generating source.

`dataclasses` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__` and
`__delattr__` as source text and compiles it when the class is defined: for the classes an audit loads
that was a third of every run's start-up (bench/README.md, "Start-up"). Here the dataclass is asked for
no `__repr__` or `__eq__` (so no `__hash__` either), and each class gets the same behaviours as
closures over one `operator.attrgetter` of its fields: equal when the other object is of the same class
and the tuples of their fields are equal, the hash of that tuple (a frozen class; a mutable one is
unhashable, as a dataclass with `eq` is), and `Name(field=value!r, ...)` with `...` for a value that
contains itself. Everything else is the dataclass's own (fields, `replace`, frozenness, slots,
pickling, `__match_args__`). Fields must not opt out of comparison, hash or repr (`field(compare=False)`
and the like) and the class must not define those methods itself: such a class is declared with
`@dataclass`.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T", bound=type)
_MADE = ("__eq__", "__hash__", "__repr__")


@dataclass_transform(frozen_default=True)
def frozen_dataclass(cls: T | None = None, /, *, init: bool = True) -> Any:
    """Class decorator: `@frozen_dataclass`, or `@frozen_dataclass(init=False)` under `fast_init`."""

    def wrap(c: T) -> T:
        made = dataclasses.dataclass(c, frozen=True, slots=True, init=init, repr=False, eq=False)
        return _compare_and_show(made, hashable=True)

    return wrap if cls is None else wrap(cls)


@dataclass_transform()
def slotted_dataclass(cls: T) -> T:
    """Class decorator: `@dataclass(slots=True)`, a mutable class (unhashable, as the dataclass's)."""
    return _compare_and_show(dataclasses.dataclass(cls, slots=True, repr=False, eq=False), hashable=False)


def _compare_and_show(cls: T, hashable: bool) -> T:
    fields = dataclasses.fields(cls)
    for f in fields:
        if not (f.compare and f.repr and f.hash is None):
            raise TypeError(f"{cls.__name__}.{f.name} opts out of compare, hash or repr: use @dataclass")
    for name in _MADE:
        if name in cls.__dict__:
            raise TypeError(f"{cls.__name__} defines {name}: use @dataclass")
    names = tuple(f.name for f in fields)
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

    for method in (__eq__, __hash__, __repr__):
        method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
        method.__module__ = cls.__module__
        setattr(cls, method.__name__, method)
    if not hashable:
        cls.__hash__ = None  # type: ignore[assignment]
    return cls
