"""The compiled store of the fast_init classes (`ksniff.common._slots`) against the descriptor `__init__`,
the reference: the same objects field for field (by identity), for every fast_init class of ksniff and
for every way of calling them (all by position, defaults, keywords, default factories, wrong calls), and
the same audit document for every capture of the corpus.

Where the project is built without a C compiler the module is missing and these tests skip; in CI (`CI`
set) it must have been built, so there they fail instead."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import pickle
import sys
from dataclasses import field
from pathlib import Path

import pytest
from compiled_support import require_compiled

import ksniff.audit.fold  # noqa: F401 - imported for its fast_init classes
import ksniff.capture.events  # noqa: F401
import ksniff.decode.events  # noqa: F401
from ksniff.common import codegen
from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass
from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))


def _slots():
    return require_compiled("ksniff.common._slots", "the compiled slot store")


@pytest.fixture
def both():
    """Runs a function once with the compiled store and once with the descriptors."""
    _slots()
    if codegen._slots is None:
        pytest.skip("KSNIFF_PURE_PYTHON is set: the compiled store is not loaded")

    def run(fn):
        try:
            assert codegen.compiled_inits(True)
            a = fn()
            assert not codegen.compiled_inits(False)
            b = fn()
        finally:
            codegen.compiled_inits(True)
        return a, b

    return run


@fast_init
@frozen_dataclass(init=False)
class _Point:
    x: object
    y: object = 2
    tags: dict = field(default_factory=dict)
    more: list = field(default_factory=list)


CLASSES = sorted(codegen._FAST_INITS, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_event_class_is_made_by_the_compiled_store_by_default():
    _slots()
    if codegen._slots is None:
        pytest.skip("KSNIFF_PURE_PYTHON is set")
    names = {c.__name__ for c in CLASSES}
    assert {"Exchange", "ProducedBatch", "RecordBatchHeader", "StreamChunk", "Claim", "Finding"} <= names
    assert codegen.compiled_init_in_use()
    for cls in CLASSES:
        assert cls.__init__ is codegen.fast_inits(cls)[1], cls


def _fields(obj) -> list:
    return [getattr(obj, f.name) for f in dataclasses.fields(obj)]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_same_objects_for_every_fast_init_class(both, cls):
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    # A distinct object per field, so that every value is found in its own slot (by identity).
    values = [object() for _ in fields]

    def made():
        whole = cls(*values)
        least = cls(*values[: len(required)])
        by_name = cls(**{f.name: v for f, v in zip(fields, values, strict=True)})
        return whole, least, by_name

    (whole, least, by_name), (whole_ref, least_ref, by_name_ref) = both(made)
    for ours, ref in ((whole, whole_ref), (least, least_ref), (by_name, by_name_ref)):
        assert type(ours) is type(ref) is cls
        got, want = _fields(ours), _fields(ref)
        for f, a, b in zip(fields, got, want, strict=True):
            if f.default_factory is not dataclasses.MISSING and a is not values[fields.index(f)]:
                assert a == b and type(a) is type(b)  # a fresh value from the factory, in both
            else:
                assert a is b, f.name
    assert _fields(whole) == values
    assert pickle.loads(pickle.dumps(_Point(1))) == _Point(1)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_same_signature_and_frozenness(both, cls):
    def made():
        values = [object() for _ in dataclasses.fields(cls)]
        obj = cls(*values)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, dataclasses.fields(cls)[0].name, 1)
        return str(inspect.signature(cls)), cls.__init__.__name__, cls.__init__.__qualname__

    ours, ref = both(made)
    assert ours == ref


def test_defaults_and_factories(both):
    def made():
        a, b = _Point(1), _Point(1, 3)
        assert a.tags == {} and a.tags is not b.tags and a.more is not b.more
        c = _Point(1, tags={"k": 1})
        return (a.x, a.y, a.tags, a.more), (b.x, b.y), (c.tags, c.more)

    ours, ref = both(made)
    assert ours == ref == ((1, 2, {}, []), (1, 3), ({"k": 1}, []))


@pytest.mark.parametrize(
    "call",
    [
        lambda: _Point(),
        lambda: _Point(1, 2, {}, [], 5),
        lambda: _Point(1, z=3),
        lambda: _Point(1, x=3),
    ],
    ids=["too-few", "too-many", "unknown-keyword", "twice"],
)
def test_wrong_calls_refused_alike(both, call):
    def refused():
        with pytest.raises(TypeError) as caught:
            call()
        return str(caught.value)

    ours, ref = both(refused)
    assert ours == ref


def test_values_are_held_and_released(both):
    """The store counts its references: an object lives exactly as long as the instance holding it."""

    def counts():
        value = object()
        before = sys.getrefcount(value)
        p = _Point(value, value)
        held = sys.getrefcount(value) - before
        p.__init__(1)  # a second __init__ on the same object releases what its slots held
        again = sys.getrefcount(value) - before
        del p
        gc.collect()
        return held, again, sys.getrefcount(value) - before

    ours, ref = both(counts)
    assert ours == ref == (2, 0, 0)


def test_the_store_refuses_other_objects_and_layouts():
    slots = _slots()
    layout = slots.Layout(_Point, ("x", "y", "tags", "more"))
    with pytest.raises(TypeError):
        slots.fill(object(), layout, 1, 2, 3, 4)  # not a _Point: its slots are not there
    with pytest.raises(TypeError):
        slots.fill(_Point(1), layout, 1, 2)  # a value per field, no fewer

    class Plain:
        x = 1

    with pytest.raises(TypeError):
        slots.Layout(Plain, ("x",))  # a class attribute, not a slot
    with pytest.raises(TypeError):
        slots.Layout(_Point, ("nope",))


def test_corpus_audit_documents_identical(both):
    """The whole audit of every capture of the corpus: the same JSON document, byte for byte."""
    config = EngineConfig(keep_tables=False)

    def documents():
        return [json.dumps(audit_paths([str(p)], config).as_contract(), sort_keys=True) for p in CORPUS]

    ours, ref = both(documents)
    assert len(ours) == len(CORPUS) > 10
    assert ours == ref
