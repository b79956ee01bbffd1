"""fast_init keeps a frozen slotted dataclass's signature, defaults and frozenness."""

from __future__ import annotations

import dataclasses
import inspect
import marshal
import pickle
import sys
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


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The kept code in a folder of its own, written whatever PYTHONDONTWRITEBYTECODE says."""
    from ksniff.common import codegen

    monkeypatch.setattr(codegen, "_STORE", str(tmp_path / "generated"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "generated"


def test_generated_code_is_kept_and_read_back(store, monkeypatch):
    from ksniff.common import codegen

    source = "def answer(x):\n    return x + _offset\n"
    first = codegen.define(source, "answer", {"_offset": 1}, "<ksniff test answer>")
    assert first(1) == 2 and len(list(store.iterdir())) == 1

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(codegen, "compile", no_compile, raising=False)
    again = codegen.define(source, "answer", {"_offset": 10}, "<ksniff test answer>")
    assert again(1) == 11 and again.__code__.co_filename == "<ksniff test answer>"


def test_kept_code_is_used_only_for_its_own_source(store):
    from ksniff.common import codegen

    source = "def value():\n    return 1\n"
    path = codegen._kept_path(source, "<ksniff test value>")
    other = "def value():\n    return 2\n"
    store.mkdir()
    # A file in the place of this source that holds another (a checksum collision, a stale file).
    stale = marshal.dumps(("<ksniff test value>", other, compile(other, "x", "exec")))
    with open(path, "wb") as f:
        f.write(codegen.MAGIC_NUMBER + stale)
    assert codegen.define(source, "value", {}, "<ksniff test value>")() == 1
    with open(path, "wb") as f:
        f.write(b"not code at all")
    assert codegen.define(source, "value", {}, "<ksniff test value>")() == 1
    assert marshal.loads(open(path, "rb").read()[len(codegen.MAGIC_NUMBER) :])[1] == source  # written anew


def test_nothing_is_kept_when_python_writes_no_bytecode(store, monkeypatch):
    from ksniff.common import codegen

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert codegen.define("def f():\n    return 3\n", "f", {}, "<ksniff test f>")() == 3
    assert not store.exists()
