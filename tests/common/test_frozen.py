"""frozen_dataclass behaves as `@dataclass(frozen=True, slots=True)` and slotted_dataclass as
`@dataclass(slots=True)`: equality, hash, repr, frozenness or mutability, replace and pickling the same as
the dataclass's own, for no, one and several fields."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.decode.events import RecordBatchHeader


@frozen_dataclass
class Ours:
    a: int
    b: object = None
    c: tuple = ()


@dataclass(frozen=True, slots=True)
class Theirs:
    a: int
    b: object = None
    c: tuple = ()


@frozen_dataclass
class OursOne:
    a: object


@dataclass(frozen=True, slots=True)
class TheirsOne:
    a: object


@frozen_dataclass
class OursNone:
    pass


@dataclass(frozen=True, slots=True)
class TheirsNone:
    pass


@fast_init
@frozen_dataclass(init=False)
class OursFast:
    a: int
    b: dict = field(default_factory=dict)


NAN = float("nan")
VALUES = [(1,), (1, "x"), (1, None, (2, 3)), (1, NAN), (2, [1, 2]), (1, {"k": "v"})]


def pairs():
    for values in VALUES:
        yield Ours(*values), Theirs(*values)
    for value in (0, NAN, "s", None, (1,)):
        yield OursOne(value), TheirsOne(value)
    yield OursNone(), TheirsNone()


def shown(ours, theirs) -> str:
    return repr(theirs).replace(type(theirs).__qualname__, type(ours).__qualname__, 1)


@pytest.mark.parametrize(("ours", "theirs"), list(pairs()))
def test_repr_equality_and_hash_as_the_dataclass_makes_them(ours, theirs):
    assert repr(ours) == shown(ours, theirs)
    twin_ours = dataclasses.replace(ours)
    twin_theirs = dataclasses.replace(theirs)
    assert (ours == twin_ours) is (theirs == twin_theirs)  # a NaN field: equal only to itself, in both
    assert ours == ours and theirs == theirs
    assert (ours != twin_ours) is (theirs != twin_theirs)
    try:
        expected = hash(theirs)
    except TypeError:  # an unhashable field value: unhashable in both
        with pytest.raises(TypeError):
            hash(ours)
    else:
        assert hash(ours) == expected


def test_not_equal_to_another_class_with_the_same_fields():
    assert Ours(1) != Theirs(1) and Ours(1) != (1, None, ()) and OursOne(1) != OursNone()
    assert Ours(1) == Ours(1) and Ours(1) != Ours(2) and Ours(1, c=(1,)) != Ours(1)


def test_frozen_replace_pickle_and_fields():
    point = Ours(1, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.a = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.a  # type: ignore[misc]
    assert dataclasses.replace(point, a=3) == Ours(3, "x")
    assert pickle.loads(pickle.dumps(point)) == point
    assert [f.name for f in dataclasses.fields(point)] == ["a", "b", "c"]
    assert dataclasses.astuple(point) == (1, "x", ()) and Ours.__match_args__ == ("a", "b", "c")
    assert not hasattr(point, "__dict__")  # slotted


def test_a_value_that_holds_itself_is_shown_once():
    box: list = []
    holder = OursOne(box)
    box.append(holder)
    assert repr(holder) == "OursOne(a=[...])"


def test_with_fast_init():
    one = OursFast(1)
    assert one == OursFast(1, {}) and repr(one) == "OursFast(a=1, b={})" and one.b is not OursFast(1).b
    assert pickle.loads(pickle.dumps(OursFast(2, {"k": 1}))) == OursFast(2, {"k": 1})


def test_a_field_that_opts_out_of_comparison_is_refused():
    with pytest.raises(TypeError, match="opts out"):

        @frozen_dataclass
        class _Partial:
            a: int
            b: int = field(default=0, compare=False)


def test_ksniffs_events_use_it():
    header = RecordBatchHeader.__eq__
    assert header.__module__ == "ksniff.decode.events" and "_compare_and_show" in header.__code__.co_qualname


@slotted_dataclass
class Counts:
    seen: int = 0
    names: list = field(default_factory=list)


@dataclass(slots=True)
class TheirCounts:
    seen: int = 0
    names: list = field(default_factory=list)


def test_a_slotted_class_is_mutable_compared_and_shown_as_the_dataclass():
    ours, theirs = Counts(), TheirCounts()
    ours.seen += 2
    theirs.seen += 2
    ours.names.append("x")
    theirs.names.append("x")
    assert repr(ours) == shown(ours, theirs) == "Counts(seen=2, names=['x'])"
    assert ours == Counts(2, ["x"]) and ours != Counts(3, ["x"]) and ours != theirs
    assert Counts.__hash__ is None and TheirCounts.__hash__ is None
    with pytest.raises(TypeError):
        hash(ours)
    assert Counts().names is not Counts().names and not hasattr(ours, "__dict__")
    assert dataclasses.replace(ours, seen=5) == Counts(5, ["x"])
    assert pickle.loads(pickle.dumps(ours)) == ours


def test_a_class_with_its_own_comparison_is_refused():
    with pytest.raises(TypeError, match="defines __eq__"):

        @slotted_dataclass
        class _Own:
            a: int

            def __eq__(self, other):
                return True


def test_init_has_the_dataclass_signature_and_is_made_on_first_use():
    @frozen_dataclass
    class Late:
        a: int
        b: object = None
        c: dict = field(default_factory=dict)

    @dataclass(frozen=True, slots=True)
    class TheirLate:
        a: int
        b: object = None
        c: dict = field(default_factory=dict)

    assert not inspect.isfunction(Late.__dict__["__init__"])  # nothing compiled yet
    first = Late(1)
    assert inspect.isfunction(Late.__dict__["__init__"])  # the first instance made it, in its place
    assert first == Late(1, None, {}) and first.c is not Late(1).c
    assert str(inspect.signature(Late)) == str(inspect.signature(TheirLate)).replace("TheirLate", "Late")
    with pytest.raises(TypeError):
        Late()
    with pytest.raises(TypeError):
        Late(1, 2, {}, 4)


@slotted_dataclass
class Base:
    name: str
    seen: int = 0


@slotted_dataclass
class More(Base):
    extra: list = field(default_factory=list)


def test_a_slotted_subclass_adds_its_fields_after_its_base():
    more = More("x", 2, [1])
    assert [f.name for f in dataclasses.fields(More)] == ["name", "seen", "extra"]
    assert repr(more) == "More(name='x', seen=2, extra=[1])" and more != Base("x", 2)
    assert dataclasses.asdict(more) == {"name": "x", "seen": 2, "extra": [1]}
    assert pickle.loads(pickle.dumps(more)) == more and not hasattr(more, "__dict__")
    assert More("y").extra is not More("y").extra


def test_what_the_dataclass_refuses_or_a_plain_dataclass_must_do_is_refused():
    with pytest.raises(ValueError, match="mutable default"):

        @slotted_dataclass
        class _Shared:
            names: list = []  # noqa: RUF012

    with pytest.raises(TypeError, match="ClassVar"):

        @frozen_dataclass
        class _Constant:
            a: int
            LIMIT: ClassVar[int] = 3

    with pytest.raises(TypeError, match="follows default"):

        @frozen_dataclass
        class _Order:
            a: int = 0
            b: int
