"""The Spark engine's task functions, without Spark: segment order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow missing")

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


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
