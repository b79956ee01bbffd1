"""The Spark engine's task functions, without Spark: pickling bodies, grouping keys, segment order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow missing")

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


def test_struct_bodies_survive_pickling() -> None:
    from ksniff.decode.values import Struct, struct_class
    from ksniff.engine import spark_codec as codec

    names = ("transactional_id", "producer_id")
    fields = tuple(type("F", (), {"name": n})() for n in names)
    cls = struct_class(fields, "InitProducerIdResponse")
    body = cls(("tx-A", 7, ()))
    back = codec.loads(codec.dumps({"body": body, "raw": memoryview(b"ab")}))
    assert isinstance(back["body"], Struct)
    assert back["body"].transactional_id == "tx-A" and back["body"].producer_id == 7
    assert back["body"] == body
    assert back["raw"] == b"ab"


def test_keys_sharing_a_producer_id_or_group_fold_together() -> None:
    from ksniff.engine.spark_tasks import group_keys

    groups = group_keys([
        ("tx-A", "tx-A"), ("tx-A", "pid:1"),
        ("pid:1", "pid:1"),  # the same producer id written idempotently (another cluster, say)
        ("tx-B", "tx-B"), ("tx-B", "pid:2"), ("tx-B", "group:g"),
        ("group:g", "group:g"),
        ("pid:9", "pid:9"),
    ])
    assert groups["tx-A"] == groups["pid:1"]
    assert groups["tx-B"] == groups["group:g"]
    assert len({groups["tx-A"], groups["tx-B"], groups["pid:9"]}) == 3


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_segment_rows_keep_the_merge_order() -> None:
    import pyarrow as pa

    from ksniff.engine.spark_tasks import SEGMENTS, extract

    path = str(max(PCAPS.glob("*.pcap"), key=lambda p: p.stat().st_size))
    listing = pa.RecordBatch.from_pydict({"file": [0], "path": [path], "read_path": [path]})
    batches = list(extract(iter([listing])))
    table = pa.Table.from_batches(batches, schema=SEGMENTS)
    segments = table.filter(pa.compute.is_valid(table.column("flow")))
    pm = segments.column("pm").to_pylist()
    assert pm == sorted(pm)  # the running maximum never steps back
    assert segments.column("idx").to_pylist() == list(range(len(pm)))
    assert table.num_rows == len(pm) + 1  # and the file's summary
