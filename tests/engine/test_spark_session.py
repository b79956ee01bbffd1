"""The options ksniff gives the driver JVM it starts (ksniff.engine.spark_session.driver_jvm_options): the
JIT's first tier, and a class-data archive written by the first run that starts a JVM and mapped by the
next ones; never forced on a JVM whose options someone else set."""

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


def _python(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """This Python run with `args` (a JVM of its own), its output kept."""
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600, cwd=cwd
    )


def _session(cache: Path) -> tuple[dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("KSNIFF_SPARK_JVM_TUNING", None)
    done = _python(["-c", SESSION], env, cache)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr


@pytest.mark.timeout(900)  # two JVMs, the first writing its archive as it exits
def test_the_first_run_writes_the_archive_and_the_next_maps_it(tmp_path: Path) -> None:
    cache = tmp_path / "a cache"  # a blank in the path: the option stays one argument of the JVM
    cache.mkdir()
    try:
        _first_then_second(cache)
    finally:  # the archive is some 180 MB: not left in pytest's kept temporary folders
        shutil.rmtree(cache, ignore_errors=True)


def _first_then_second(cache: Path) -> None:
    first, first_out = _session(cache)
    folder = cache / "ksniff"
    archives = sorted(folder.glob("spark-driver-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 0
    assert not list(folder.glob("*.tmp"))  # written under a name of its own, renamed once complete
    assert any(arg.startswith("-XX:ArchiveClassesAtExit=") for arg in first["cmdline"])
    assert "-XX:TieredStopAtLevel=1" in first["cmdline"]

    second, second_out = _session(cache)
    assert f"-XX:SharedArchiveFile={archives[0]}" in second["cmdline"]
    assert not any(arg.startswith("-XX:ArchiveClassesAtExit") for arg in second["cmdline"])
    assert first["total"] == second["total"] == sum(range(1000))
    for out in (first_out, second_out):  # Java's class-data messages stay off the user's terminal
        assert "[cds" not in out and "[warning][cds" not in out
    assert sorted(folder.glob("spark-driver-*.jsa")) == archives


def test_driver_options_are_never_forced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    from ksniff.engine.spark_session import driver_jvm_options

    monkeypatch.setattr(SparkContext, "_gateway", None)  # as in a process that has not started a JVM
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("KSNIFF_SPARK_JVM_TUNING", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    options, archive = driver_jvm_options([])
    assert archive is not None
    assert options == f"-XX:TieredStopAtLevel=1 {archive.java_options()}"
    assert "-XX:ArchiveClassesAtExit=" in options
    Path(archive.path).write_bytes(b"archive")
    options, _ = driver_jvm_options([])
    assert f"-XX:SharedArchiveFile={archive.path} " in options

    # The user's own options of either kind leave that kind out; the other stays.
    user = "spark.driver.extraJavaOptions"
    assert driver_jvm_options([(user, "-Xshare:off")]) == ("-XX:TieredStopAtLevel=1", None)
    options, archive = driver_jvm_options([(user, "-XX:+TieredCompilation")])
    assert "Tiered" not in options and archive is not None
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=4 pyspark-shell")
    assert "Tiered" not in driver_jvm_options([])[0]
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    # An administrator's driver options, a JVM already running, the switch: nothing added.
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Xmx2g\n")
    assert driver_jvm_options([]) == ("", None)
    (tmp_path / "conf" / "spark-defaults.conf").write_text("# spark.driver.extraJavaOptions -Xmx2g\n")
    assert driver_jvm_options([])[0]
    monkeypatch.setattr(SparkContext, "_gateway", object())
    assert driver_jvm_options([]) == ("", None)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setenv("KSNIFF_SPARK_JVM_TUNING", "0")
    assert driver_jvm_options([]) == ("", None)


def test_archives_of_other_installations_stay_until_unused(tmp_path: Path) -> None:
    """Two virtual environments on one machine keep one archive each; a run removes its own
    installation's archives of other Sparks or Javas, others' only when unused for a month, and only old
    half-written ones."""
    import time

    from ksniff.engine.spark_session import ARCHIVE_UNUSED_DAYS, _remove_others

    def made(name: str, days: float = 0.0) -> Path:
        path = tmp_path / name
        path.write_bytes(b"x")
        then = time.time() - days * 86400
        os.utime(path, (then, then))
        return path

    keep = made("spark-driver-aaaa-new.jsa")
    older_here = made("spark-driver-aaaa-old.jsa")
    other_venv = made("spark-driver-bbbb-key.jsa", days=ARCHIVE_UNUSED_DAYS - 1)
    gone_venv = made("spark-driver-cccc-key.jsa", days=ARCHIVE_UNUSED_DAYS + 1)
    writing = made("spark-driver-bbbb-key.jsa.123.tmp")
    killed = made("spark-driver-aaaa-new.jsa.456.tmp", days=1)
    unrelated = made("notes.txt", days=365)
    _remove_others(str(keep))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (keep, other_venv, writing, unrelated)
    )
    assert not older_here.exists() and not gone_venv.exists() and not killed.exists()


@pytest.mark.timeout(900)
def test_the_command_line_says_once_that_it_keeps_the_classes(tmp_path: Path) -> None:
    """The first `--engine spark` run on a machine waits for its JVM to write the archive: one line on
    stderr says so; the next run, which maps the archive, says nothing of it."""
    capture = ROOT / "tests" / "pcaps" / "txn_confluent_tansu.pcap"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    env.pop("KSNIFF_SPARK_JVM_TUNING", None)
    said = []
    try:
        for _ in range(2):
            done = _python(
                ["-m", "ksniff.cli", "audit", str(capture), "--engine", "spark"]
                + ["--master", "local[1]", "--conf", "spark.ui.enabled=false", "--exit-zero", "--no-color"],
                env,
                tmp_path,
            )
            assert done.returncode == 0, done.stderr[-2000:]
            said.append([ln for ln in done.stderr.splitlines() if "keeping Spark's classes" in ln])
    finally:
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
    assert len(said[0]) == 1 and said[0][0].startswith("ksniff: keeping Spark's classes for faster starts")
    assert said[1] == []
    assert "pure-Python" not in done.stderr  # the executors run what the driver runs


def test_executors_that_run_the_pure_python_code_are_said_in_one_line(tmp_path: Path) -> None:
    """Executors whose Python cannot load the compiled modules the driver runs (or with
    KSNIFF_PURE_PYTHON set) give the same result at more CPU: one line says so and why, not a silence."""
    from ksniff.engine.spark_session import compiled_modules

    if not compiled_modules():
        pytest.skip("no compiled module is built here")
    capture = ROOT / "tests" / "pcaps" / "txn_confluent_tansu.pcap"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KSNIFF_SPARK_JVM_TUNING": "0"}
    env.pop("KSNIFF_PURE_PYTHON", None)
    args = ["-m", "ksniff.cli", "audit", str(capture), "--engine", "spark", "--master", "local[1]"]
    args += ["--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false"]
    args += ["--conf", "spark.executorEnv.KSNIFF_PURE_PYTHON=1", "--exit-zero", "--no-color"]
    done = _python(args, env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [ln for ln in done.stderr.splitlines() if "pure-Python" in ln]
    assert said == [
        "ksniff: the executors run ksniff's pure-Python code, about 1.6 times the CPU of its compiled ones "
        f"(KSNIFF_PURE_PYTHON is set there; {', '.join(m.rsplit('.', 1)[-1] for m in compiled_modules())})"
    ]
    assert "Verdict" in done.stdout
    quiet = _python([*args, "-q"], env, tmp_path)
    assert quiet.returncode == 0 and "pure-Python" not in quiet.stderr


def test_the_line_names_the_executors_python_when_it_cannot_load_the_modules() -> None:
    from ksniff.engine.spark_session import slower_executors

    here = ["ksniff.capture._fastwalk", "ksniff.engine._pack", "ksniff.audit.fold"]
    assert slower_executors(here, here, "Python 3.11.7 (/usr/bin/python3)", False) is None
    line = slower_executors(here, ["ksniff.audit.fold"], "Python 3.12.1 (/opt/py/bin/python3)", False)
    assert line is not None and line.startswith("the executors run ksniff's pure-Python code")
    assert (
        "their Python 3.12.1 (/opt/py/bin/python3) cannot load _fastwalk, _pack, built for the driver's "
        in line
    )
    assert line.endswith("give them that version: spark.pyspark.python)")


# The driver's JVM killed (by the kernel's out-of-memory killer, or a user) as the run starts.
KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from pyspark import SparkContext
    from ksniff.engine import spark as engine

    run = engine._run

    def killed_first(session, *args, **kwargs):
        proc = SparkContext._gateway.proc
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return run(session, *args, **kwargs)

    engine._run = killed_first
    sys.argv = ["ksniff", "audit", sys.argv[1], "--master", "local[1]", "--conf", "spark.ui.enabled=false"]
    from ksniff.cli import program

    program()
    """
)


def test_a_driver_jvm_killed_mid_run_is_one_line_and_exit_two(tmp_path: Path) -> None:
    """When the driver's JVM dies under a run (killed; out of memory), the user reads one line saying so
    and the exit code is 2: no traceback, neither ksniff's nor pyspark's accumulator server's."""
    from ksniff.engine.spark_session import JVM_GONE

    capture = ROOT / "tests" / "pcaps" / "txn_confluent_tansu.pcap"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = _python(["-c", KILLED, str(capture)], env, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ksniff: error: ") and last.endswith(JVM_GONE), last
    assert "Traceback" not in done.stderr


def test_py4js_traceback_for_a_command_the_dead_jvm_left_unanswered_is_left_out() -> None:
    """py4j logs a traceback on the root logger when the JVM it sends a command to is gone (how it fails,
    on sending or on receiving, depends on timing); the run says so in one line, so that record is left
    out, and any other passes."""
    import logging

    from py4j.protocol import Py4JNetworkError

    from ksniff.engine.spark_session import _UnansweredLogged

    def record(message: str, exc: BaseException | None) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc is not None else None
        return logging.LogRecord("root", logging.ERROR, __file__, 1, message, None, info)

    unanswered = _UnansweredLogged()
    assert not unanswered.filter(record("Exception while sending command.", Py4JNetworkError("gone")))
    assert unanswered.filter(record("Exception while sending command.", ValueError("other")))
    assert unanswered.filter(record("something else", Py4JNetworkError("gone")))
    assert unanswered.filter(record("Exception while sending command.", None))


def test_a_job_out_of_heap_says_what_to_give_the_executors() -> None:
    """Spark's error for a task out of heap (its Java stack cut) reads as its cause and what to do."""
    from ksniff.engine.spark_session import HEAP_HINT, _one_line

    failed = RuntimeError(
        "An error occurred while calling o123.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2898)\n"
        "Caused by: java.lang.OutOfMemoryError: Java heap space\n"
        "\tat java.base/java.io.InputStream.readNBytes(InputStream.java:445)\n"
    )
    assert _one_line(failed) == "Caused by: java.lang.OutOfMemoryError: Java heap space" + HEAP_HINT
    assert _one_line(RuntimeError("Caused by: java.io.FileNotFoundException: x")).endswith("x")
