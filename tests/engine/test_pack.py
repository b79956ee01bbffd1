"""The codec of the events the Spark engine's stages hand each other (ksniff.engine.pack): every event of
the corpus comes back as it went, the same classes and values, and the compiled codec writes the
reference's bytes."""

from __future__ import annotations

import importlib.util
import math
import pickle
import uuid
from fractions import Fraction
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow missing")

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


def _codecs():
    from ksniff.capture.compiled import load
    from ksniff.engine import pack, spark_tasks

    reference = pack.Codec(spark_tasks._codec().classes)
    compiled = load("ksniff.engine._pack")
    return reference, None if compiled is None else compiled.Codec(reference.classes)


def _corpus_events() -> list:
    """Every decode event stage 2 hands on for each corpus capture (tables kept, the partition logs in
    three folds: Fetch and Produce pieces, TxnIds and TopicNames among them), as the events themselves."""
    import pyarrow as pa

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks

    kinds = {tasks.KEYED, tasks.KEYED_LOG, tasks.LOG, tasks.CONTEXT, tasks.TABLE, tasks.IDENTITY}
    config = EngineConfig(keep_tables=True)
    out = []
    for path in sorted(PCAPS.glob("*.pcap")):
        listing = pa.RecordBatch.from_pydict(
            {"file": [0], "path": [str(path)], "uri": [str(path)], "folder": [False]},
        ).append_column("content", pa.nulls(1, pa.binary()))
        batches = list(tasks.extract(iter([listing])))
        meta = tasks.loads(batches[-1].column("meta")[0].as_py())
        table = pa.Table.from_batches(batches[:-1], schema=tasks.SEGMENTS)
        order = pa.compute.sort_indices(table, sort_keys=[(c, "ascending") for c in ("flow", "pm", "idx")])
        end = {0: tasks.RunEnd(meta.max_ts, folds=3)}
        for batch in tasks.decode(config, end)(iter(table.take(order).to_batches())):
            for kind, blob in zip(
                batch.column("kind").to_pylist(), batch.column("blob").to_pylist(), strict=True
            ):
                if kind in kinds:
                    out.append(tasks.loads(blob))
    return out


def _same(a, b) -> bool:
    """Equal, and of the same classes all the way down (a Struct compares as its tuple of values)."""
    return a == b and repr(a) == repr(b)


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_every_corpus_event_comes_back_as_it_went(monkeypatch: pytest.MonkeyPatch) -> None:
    from ksniff.decode.events import Exchange
    from ksniff.engine import pack
    from ksniff.engine.spark_tasks import TopicNames, TxnIds

    events = _corpus_events()
    classes = {e.__class__ for e in events}
    assert {Exchange, TxnIds, TopicNames} <= classes
    assert any(e.__class__ is Exchange and e.batches for e in events)  # Produce batches and their headers
    assert any(e.__class__ is Exchange and e.fetched for e in events)  # Fetch answers' partitions
    reference, compiled = _codecs()
    pickled = sum(len(pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL)) for e in events)

    def no_pickle(*_args, **_kw):
        raise AssertionError("an event's value went to pickle: its class is not in the codec")

    monkeypatch.setattr(pack.pickle, "dumps", no_pickle)  # the pickle module, while the reference packs
    blobs = [reference.pack(e) for e in events]
    assert all(_same(reference.unpack(b), e) for b, e in zip(blobs, events, strict=True))
    monkeypatch.undo()
    assert sum(map(len, blobs)) < 0.8 * pickled  # smaller than the pickles it replaces
    if compiled is not None:
        assert [compiled.pack(e) for e in events] == blobs
        assert all(_same(compiled.unpack(b), e) for b, e in zip(blobs, events, strict=True))


class _Odd:
    """A class the codec does not know: it goes by pickle."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Odd) and other.x == self.x

    def __repr__(self) -> str:
        return f"_Odd({self.x})"


def test_values_at_the_edges_come_back() -> None:
    from ksniff.decode import values

    made_elsewhere = values.class_by_names("Elsewhere", ("a", "b"))
    value = {
        "ints": (0, 1, -1, 63, -64, 64, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 3**100, -(7**90)),
        "floats": [0.0, -0.0, 1.5, math.inf, -math.inf, 1e-300],
        "text": ("", "ascii", "ünïcödé", "\udcff lone surrogate", "ascii"),  # the last one again
        "bytes": (b"", bytes(range(256))),
        "sets": (frozenset({1, 2}), {"a"}),
        "uuid": uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0),
        "struct": made_elsewhere((1, "x")),
        "others": (Fraction(1, 3), _Odd(5), None, True, False),
    }
    reference, compiled = _codecs()
    blob = reference.pack(value)
    assert _same(reference.unpack(blob), value)
    nan = reference.unpack(reference.pack(math.nan))
    assert math.isnan(nan)
    if compiled is not None:
        assert compiled.pack(value) == blob
        assert _same(compiled.unpack(blob), value)
        assert math.isnan(compiled.unpack(compiled.pack(math.nan)))


def test_a_cut_or_foreign_blob_is_refused() -> None:
    from ksniff.engine.spark_tasks import loads

    reference, compiled = _codecs()
    blob = reference.pack(("a", 1, b"xyz", ("a", 2.5), uuid.UUID(int=7)))
    for codec in (reference, compiled):
        if codec is None:
            continue
        for end in range(len(blob)):
            with pytest.raises(ValueError):
                codec.unpack(blob[:end])
        with pytest.raises(ValueError):
            codec.unpack(blob + b"\x00")
        with pytest.raises(ValueError):
            codec.unpack(pickle.dumps(1))
    assert loads(pickle.dumps({"a": 1})) == {"a": 1}  # the engine's other blobs are still pickles


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_connection_numbers_are_renamed_as_events_are_read() -> None:
    """The Spark engine's folds read each event with the in-process engine's connection numbers
    (spark_tasks.loads with the driver's numbering): the event, its Produce batches and its Fetch
    partitions renamed alike, as if decoded with those numbers; a number not in the map is kept."""
    from dataclasses import replace

    from ksniff.decode.events import Exchange

    def renamed(event, names):
        if not hasattr(event, "conn"):  # TxnIds, TopicNames
            return event
        conn = names.get(event.conn, event.conn)
        if isinstance(event, Exchange):
            batches = tuple(replace(b, conn=conn) for b in event.batches)
            fetched = tuple(replace(f, conn=conn) for f in event.fetched)
            return replace(event, conn=conn, batches=batches, fetched=fetched)
        return replace(event, conn=conn)

    events = _corpus_events()
    conns = sorted({e.conn for e in events if hasattr(e, "conn")})
    names = {conn: n for n, conn in enumerate(conns[::2], start=1)}  # every other one renamed
    assert len(conns) > 50
    reference, compiled = _codecs()
    for codec in (reference, compiled):
        if codec is None:
            continue
        codec = type(codec)(reference.classes, renamed="conn")
        for event in events:
            blob = codec.pack(event)
            assert _same(codec.unpack(blob, names), renamed(event, names))
            assert _same(codec.unpack(blob), event)
