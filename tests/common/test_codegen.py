"""fast_init keeps a frozen slotted dataclass's signature, defaults and frozenness."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field

import pytest

from ksniff.audit.model import Finding
from ksniff.common.codegen import fast_init


@fast_init
@dataclass(frozen=True, slots=True, init=False)
class _Point:
    x: int
    y: int = 2
    tags: dict = field(default_factory=dict)


def test_same_values_as_the_dataclass_init():
    assert _Point(1) == _Point(1, 2, {})
    assert _Point(1, y=3, tags={"a": 1}).tags == {"a": 1}


def test_default_factory_gives_each_instance_its_own_value():
    a, b = _Point(1), _Point(1)
    assert a.tags == {} and a.tags is not b.tags


@dataclass(frozen=True, slots=True)
class _PlainPoint:
    x: int
    y: int = 2
    tags: dict = field(default_factory=dict)


def test_same_parameters_as_the_dataclass_init():
    ours, plain = inspect.signature(_Point).parameters, inspect.signature(_PlainPoint).parameters
    assert list(ours) == list(plain) == ["x", "y", "tags"]
    assert ours["y"].default == plain["y"].default == 2
    assert ours["x"].default is inspect.Parameter.empty


def test_pickles_through_its_init():
    assert pickle.loads(pickle.dumps(_Point(1, 5, {"a": 1}))) == _Point(1, 5, {"a": 1})


def test_a_class_that_asks_for_the_dataclass_init_is_refused():
    with pytest.raises(TypeError, match="init=False"):

        @fast_init
        @dataclass(frozen=True, slots=True)
        class _Twice:
            x: int


def test_still_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Point(1).x = 2  # type: ignore[misc]


def test_finding_evidence_defaults_to_a_new_dict():
    a = Finding("sequence_gap", "warning", 1.0, "m")
    b = Finding("sequence_gap", "warning", 1.0, "m")
    assert a.evidence == {} and a.evidence is not b.evidence
