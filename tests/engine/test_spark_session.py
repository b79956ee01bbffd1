"""The driver JVM's class-data archive (ksniff.engine.spark_session.ClassArchive): written by the first run
that starts a JVM, mapped by the next ones, never forced on a JVM whose class-data options someone else
set."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SPARK_READY = importlib.util.find_spec("pyspark") is not None and shutil.which("java") is not None
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not SPARK_READY, reason="pyspark or Java is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]

# A run of its own (this test process may already have a JVM): the JVM's command line, and a job's answer.
SESSION = textwrap.dedent(
    """
    import json
    from pyspark import SparkContext
    from ksniff.engine.spark_session import Session

    session = Session("local[1]", conf=[("spark.ui.enabled", "false")])
    spark = session.start()
    pid = SparkContext._gateway.proc.pid
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        cmdline = [arg.decode() for arg in fh.read().split(b"\\0") if arg]
    total = spark.range(1000).selectExpr("sum(id) AS s").collect()[0]["s"]
    session.stop()
    print(json.dumps({"cmdline": cmdline, "total": total}))
    """
)


def _session(cache: Path) -> tuple[dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("KSNIFF_SPARK_CLASS_ARCHIVE", None)
    done = subprocess.run(
        [sys.executable, "-c", SESSION], env=env, capture_output=True, text=True, timeout=600, cwd=cache
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


@pytest.mark.timeout(900)  # two JVMs, the first writing its archive as it exits
def test_the_first_run_writes_the_archive_and_the_next_maps_it(tmp_path: Path) -> None:
    first, first_out = _session(tmp_path)
    folder = tmp_path / "ksniff"
    archives = sorted(folder.glob("spark-driver-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 0
    assert not list(folder.glob("*.tmp"))  # written under a name of its own, renamed once complete
    assert any(arg.startswith("-XX:ArchiveClassesAtExit=") for arg in first["cmdline"])

    second, second_out = _session(tmp_path)
    assert f"-XX:SharedArchiveFile={archives[0]}" in second["cmdline"]
    assert not any(arg.startswith("-XX:ArchiveClassesAtExit") for arg in second["cmdline"])
    assert first["total"] == second["total"] == sum(range(1000))
    for out in (first_out, second_out):  # Java's class-data messages stay off the user's terminal
        assert "[cds" not in out and "[warning][cds" not in out
    assert sorted(folder.glob("spark-driver-*.jsa")) == archives


def test_archive_options_are_never_forced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    from ksniff.engine.spark_session import ClassArchive

    monkeypatch.setattr(SparkContext, "_gateway", None)  # as in a process that has not started a JVM
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    archive = ClassArchive.for_launch([])
    assert archive is not None and "-XX:ArchiveClassesAtExit=" in archive.java_options()
    Path(archive.path).write_bytes(b"archive")
    assert ClassArchive.for_launch([]).java_options().startswith(f"-XX:SharedArchiveFile={archive.path} ")

    # The user's own class-data options, an administrator's driver options, the switch: nothing added.
    assert ClassArchive.for_launch([("spark.driver.extraJavaOptions", "-Xshare:off")]) is None
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Xmx2g\n")
    assert ClassArchive.for_launch([]) is None
    (tmp_path / "conf" / "spark-defaults.conf").write_text("# spark.driver.extraJavaOptions -Xmx2g\n")
    assert ClassArchive.for_launch([]) is not None
    monkeypatch.setenv("KSNIFF_SPARK_CLASS_ARCHIVE", "0")
    assert ClassArchive.for_launch([]) is None
