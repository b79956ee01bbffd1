"""The Spark engine gives exactly the in-process engine's result: over the corpus at once, and over a
capture split into rotated files (one connection spanning both)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CORPUS = sorted(p for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="pyspark is not installed"),
    pytest.mark.skipif(shutil.which("java") is None, reason="Java is not installed"),
    pytest.mark.skipif(not CORPUS, reason="no corpus captures"),
]

CONFIG = EngineConfig(keep_tables=True)


@pytest.fixture(scope="module")
def spark():
    from ksniff.engine.spark_session import Session

    session = Session("local[2]", shuffle=2)
    yield session.start()
    session.stop()


def comparable(result, inputs: bool = True) -> dict:
    """The JSON document without what may differ by engine (version) or by file layout (inputs)."""
    doc = result.as_contract()
    del doc["version"]
    doc.pop("engine", None)
    if not inputs:  # the files' names, also in the capture sets and clusters
        del doc["inputs"]
        for s in doc["capture_sets"]:
            del s["inputs"], s["reasons"]
        for c in doc["clusters"]:
            del c["inputs"]
    return doc


def test_corpus_at_once_matches_local(spark) -> None:
    from ksniff.engine.spark import audit_paths_spark

    paths = [str(p) for p in CORPUS]
    local = audit_paths(paths, CONFIG)
    distributed = audit_paths_spark(paths, CONFIG, master="local[2]", spark=spark)
    assert distributed.engine == "spark"
    assert comparable(distributed) == comparable(local)
    assert distributed.exchanges == local.exchanges
    assert distributed.batches == local.batches
    assert distributed.warnings == local.warnings
    assert local.transactions and local.findings  # the comparison compared something


def test_records_and_limits_reach_the_spark_tasks(spark) -> None:
    """The engines take one config: records and the decode caps change Spark's result as the local one."""
    from ksniff.engine.spark import audit_paths_spark

    paths = [str(p) for p in CORPUS]
    config = EngineConfig(keep_tables=True, keep_records=True, max_frame=2048, max_in_flight=1)
    local = audit_paths(paths, config)
    distributed = audit_paths_spark(paths, config, master="local[2]", spark=spark)
    # The caps cut something, and records were decoded: the comparison covers them.
    assert local.decode.oversized_frames and local.decode.in_flight_evicted and local.records
    assert comparable(distributed) == comparable(local)
    assert distributed.records == local.records
    assert distributed.exchanges == local.exchanges


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
def test_rotated_files_match_the_whole_capture(spark, tmp_path: Path) -> None:
    from ksniff.engine.spark import audit_paths_spark

    whole = max(CORPUS, key=lambda p: p.stat().st_size)
    packets = audit_paths([str(whole)], CONFIG).capture.packets
    # Like tcpdump -C: the same capture cut into files mid-connection.
    subprocess.run(["editcap", "-c", str(packets // 2 + 1), str(whole), str(tmp_path / "rotated.pcap")],
                   check=True, capture_output=True)
    parts = sorted(str(p) for p in tmp_path.iterdir())
    assert len(parts) == 2

    reference = comparable(audit_paths([str(whole)], CONFIG), inputs=False)
    assert comparable(audit_paths(parts, CONFIG), inputs=False) == reference
    split = audit_paths_spark(parts, CONFIG, master="local[2]", spark=spark)
    assert comparable(split, inputs=False) == reference
    assert [i.path for i in split.inputs] == parts


@pytest.mark.skipif(not os.environ.get("KSNIFF_SPARK_CONNECT"),
                    reason="set KSNIFF_SPARK_CONNECT=sc://host:port to test against a Spark Connect server")
def test_spark_connect_matches_local() -> None:
    """By hand: pyspark/sbin/start-connect-server.sh, started with PYSPARK_PYTHON set to this Python."""
    from ksniff.engine.spark import audit_paths_spark

    paths = [str(p) for p in CORPUS]
    remote = audit_paths_spark(paths, CONFIG, master=os.environ["KSNIFF_SPARK_CONNECT"])
    local = audit_paths(paths, CONFIG)
    assert comparable(remote) == comparable(local)
    assert remote.exchanges == local.exchanges and remote.batches == local.batches
