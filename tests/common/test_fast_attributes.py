"""The compiled table of slot offsets (`ksniff.common._slots.fast_attributes`) against the type's own
attribute lookup, the reference: the same values, the same errors, and the class's later changes
honoured. The fold's classes go through it by default; whole audits of the corpus through it and through
the source alone are held to the same documents by tests/audit/test_compiled_fold.py.

Where the project is built without a C compiler the module is missing and these tests skip; in CI (`CI`
set) it must have been built, so there they fail instead."""

from __future__ import annotations

import ast
import dataclasses
import gc
import sys
from pathlib import Path

import pytest
from compiled_support import require_compiled

import ksniff.audit.fold  # noqa: F401 - imported for its classes
from ksniff.common import codegen, frozen
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def slots():
    module = require_compiled("ksniff.common._slots", "the compiled slot table")
    if codegen._slots is None:
        pytest.skip("KSNIFF_PURE_PYTHON is set: the compiled module is not loaded")
    return module


def _pair(name: str = "Point", frozen_class: bool = False):
    """Two classes alike, made by the same decorator: the second is entered in the table by the test."""

    def make():
        ns = {"__annotations__": {"x": "int", "y": "object", "z": "str | None"}, "z": None}
        cls = type(name, (), ns)
        cls.__module__ = __name__
        return (frozen_dataclass if frozen_class else slotted_dataclass)(cls)

    return make(), make()


def _outcome(fn):
    try:
        return ("value", fn())
    except Exception as exc:  # the same class and message is what is compared
        return ("error", type(exc), str(exc))


def test_the_folds_classes_are_in_the_table(slots):
    entered = {cls for cls, _names in slots._entered}
    from ksniff.audit.state import AuditState, ProducerState, TxnRecord
    from ksniff.decode.events import Exchange, ProducedBatch, RecordBatchHeader

    for cls in (AuditState, ProducerState, TxnRecord, Exchange, ProducedBatch, RecordBatchHeader):
        assert cls in entered, cls.__name__
    # Not the classes the interpreter reads: the report's, the capture's.
    from ksniff.audit.model import Transaction
    from ksniff.capture.events import StreamChunk

    assert Transaction not in entered and StreamChunk not in entered
    assert {cls.__module__ for cls in entered} <= frozen.READ_COMPILED


def test_the_modules_named_are_the_compiled_fold_and_the_events():
    tree = ast.parse((ROOT / "setup.py").read_text())
    compiled = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and node.targets[0].id == "COMPILED_SOURCES"
    )
    assert frozen.READ_COMPILED == {f"ksniff.audit.{m}" for m in compiled} | {"ksniff.decode.events"}


def test_reads_and_errors_as_the_generic_lookup(slots):
    plain, fast = _pair()
    assert slots.fast_attributes(fast) and not slots.fast_attributes(type("Bare", (), {}))
    a, b = plain(1, [2], "three"), fast(1, [2], "three")
    dynamic = "Y".lower()  # not the interned name: the generic path
    assert dynamic == "y" and dynamic is not "y"  # noqa: F632 - the point
    assert type(b).__name__ == type(a).__name__
    for name in ("x", "y", "z", dynamic, "nothing", "__match_args__", "__slots__", "__eq__"):
        got, want = _outcome(lambda n=name: getattr(b, n)), _outcome(lambda n=name: getattr(a, n))
        if name == "__eq__":  # a method, bound to the object
            assert got[0] == want[0] == "value" and got[1].__self__ is b
            assert got[1].__func__ is type(b).__dict__["__eq__"]
        else:
            assert got == want, name
    assert a == plain(1, [2], "three") and b == fast(1, [2], "three") and repr(b) == repr(a)
    del b.y, a.y  # an empty slot: the generic lookup's AttributeError
    assert _outcome(lambda: b.y) == _outcome(lambda: a.y)
    assert dataclasses.replace(b, y=5).y == 5


def test_writes_as_the_generic_store(slots):
    plain, fast = _pair()
    assert slots.fast_attributes(fast)
    a, b = plain(1, 2), fast(1, 2)
    for obj in (a, b):
        obj.x = 10
        obj.z = "z"
    assert (b.x, b.y, b.z) == (a.x, a.y, a.z) == (10, 2, "z")
    assert _outcome(lambda: setattr(b, "other", 1)) == _outcome(lambda: setattr(a, "other", 1))
    value = object()
    before = sys.getrefcount(value)
    b.y = value
    assert sys.getrefcount(value) == before + 1 and b.y is value
    b.y = None  # the old value released
    assert sys.getrefcount(value) == before


def test_a_frozen_class_still_refuses_writes(slots):
    plain, fast = _pair("Frozen", frozen_class=True)
    assert slots.fast_attributes(fast)
    a, b = plain(1, 2), fast(1, 2)
    assert _outcome(lambda: setattr(b, "x", 3)) == _outcome(lambda: setattr(a, "x", 3))
    assert b.x == 1 and hash(b) == hash(a)


def test_a_class_changed_after_it_was_entered(slots):
    _plain, fast = _pair("Changing")
    assert slots.fast_attributes(fast)
    b = fast(1, 2)
    assert b.x == 1
    slot = fast.__dict__["x"]
    fast.x = property(lambda self: "from the property")  # the class's lookup now finds a property
    assert b.x == "from the property"
    with pytest.raises(AttributeError):
        b.x = 5  # a property without a setter
    fast.x = slot  # the slot again: read through the table again
    assert b.x == 1
    b.x = 7
    assert b.x == 7 and slot.__get__(b) == 7


def test_subclasses_and_classes_with_their_own_lookup(slots):
    _plain, fast = _pair("Base")
    assert slots.fast_attributes(fast)

    class Sub(fast):
        __slots__ = ("w",)

        @property
        def y(self):  # hides the base class's slot
            return "hidden"

    s = Sub(1, 2)
    s.w = 3
    assert (s.x, s.y, s.w) == (1, "hidden", 3)
    assert slots.fast_attributes(Sub) and (s.x, s.y, s.w) == (1, "hidden", 3)

    class Looked:
        __slots__ = ("a",)

        def __getattr__(self, name):
            return name

    assert not slots.fast_attributes(Looked) and Looked().b == "b"


def test_values_read_outlive_their_object(slots):
    _plain, fast = _pair("Holder")
    assert slots.fast_attributes(fast)
    held = fast(1, [1, 2, 3])
    value = held.y
    del held
    gc.collect()
    assert value == [1, 2, 3]
