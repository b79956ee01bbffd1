"""fast_init keeps a frozen slotted dataclass's signature, defaults and frozenness."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from ksniff.audit.model import Finding
from ksniff.common.codegen import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
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


def test_still_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Point(1).x = 2  # type: ignore[misc]


def test_finding_evidence_defaults_to_a_new_dict():
    a = Finding("sequence_gap", "warning", 1.0, "m")
    b = Finding("sequence_gap", "warning", 1.0, "m")
    assert a.evidence == {} and a.evidence is not b.evidence
