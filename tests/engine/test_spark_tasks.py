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
    listing = pa.RecordBatch.from_pydict(
        {"file": [0], "path": [path], "uri": [path], "folder": [False], "content": pa.nulls(1, pa.binary())}
    )
    batches = list(extract(iter([listing])))
    table = pa.Table.from_batches(batches, schema=SEGMENTS)
    segments = table.filter(pa.compute.is_valid(table.column("flow")))
    pm = segments.column("pm").to_pylist()
    assert pm == sorted(pm)  # the running maximum never steps back
    assert segments.column("idx").to_pylist() == list(range(len(pm)))
    assert table.num_rows == len(pm) + 1  # and the file's summary


def test_caps_of_one_process_say_they_apply_per_flow() -> None:
    # The run-wide caps bind one process's memory; Spark's flows are decoded in tasks of their own, so a
    # user who set them is told they apply to each flow's task instead of silently getting other counts.
    from dataclasses import replace

    from ksniff.config import EngineConfig
    from ksniff.engine.spark import _totals

    assert _totals([], [], EngineConfig())[2] == []
    warnings = _totals([], [], replace(EngineConfig(), max_in_flight_total=10, max_partial_total=4096))[2]
    assert warnings == [
        "--max-in-flight-total and --max-partial-total cap one process's memory: the Spark "
        "engine applies them to each flow's task, where they do not bind as in one process"
    ]
