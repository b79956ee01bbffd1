"""The SparkSession the Spark engine runs on, obtained as any Spark application obtains it.

- The master: `--master` when given; otherwise whatever launched us says (`spark-submit --master`,
  `spark.master` in spark-defaults.conf, `PYSPARK_SUBMIT_ARGS`, `MASTER`), and Spark's own default,
  `local[*]`, when nothing does. An existing session (the Python API's `spark=`) is used as it is.
- Configuration: `--conf key=value` pairs go to the session builder unchanged, so they reach the JVM when
  ksniff starts it (driver memory, extra Java options) and the SparkContext otherwise. ksniff sets no
  Spark option of its own: the UI, the log level and log4j stay as Spark's configuration has them.
- The executors' Python: `spark.pyspark.python` (or PYSPARK_PYTHON) names it; for `local` masters the
  default is the Python running ksniff (the workers are this machine). On a cluster the executors need
  Python 3.10+ with pyarrow (see the README's Spark section for a packed environment); ksniff's own code
  is shipped to them as a zip. A short probe job checks this before any capture is read, so a missing
  module is one line, not a task failure retried on every executor.
- Spark Connect (`sc://`): ksniff's code goes as an artifact; the server's Python workers need ksniff's
  dependencies (e.g. a server started with PYSPARK_PYTHON set to the Python ksniff is installed in).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # ksniff/, shipped to the workers


class SparkUnavailable(RuntimeError):
    """The Spark engine cannot run here (pyspark or Java missing, master unreachable): one line why."""


def is_connect(master: str | None) -> bool:
    return bool(master) and master.startswith("sc://")


def is_local(master: str | None) -> bool:
    return bool(master) and (
        master == "local" or master.startswith("local[") or master.startswith("local-cluster[")
    )


def check_available(master: str | None) -> None:
    """Raise SparkUnavailable when this machine cannot run the engine against `master`."""
    if importlib.util.find_spec("pyspark") is None:
        raise SparkUnavailable("the Spark engine needs pyspark: pip install 'ksniff[spark]'")
    if is_connect(master):
        if importlib.util.find_spec("grpc") is None:
            raise SparkUnavailable(
                "Spark Connect (sc://) needs pyspark's connect extras: pip install 'ksniff[spark-connect]'"
            )
        return
    if not os.environ.get("PYSPARK_GATEWAY_PORT") and java_binary() is None:  # spark-submit has a JVM
        raise SparkUnavailable("the Spark engine needs Java 17 or newer (set JAVA_HOME or put java on PATH)")


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def partitions_for(total_bytes: int, parallelism: int) -> int:
    """Enough partitions to keep every core busy and each near 32 MB of capture; never 200 tiny ones."""
    by_size = total_bytes // (32 << 20) + 1
    return max(1, min(400, max(parallelism, by_size)))


def package_zip(workdir: str) -> str:
    """ksniff's own package as a zip, for executors that do not have it installed."""
    root = PACKAGE_DIR
    target = os.path.join(workdir, "ksniff.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*.py")):
            zf.write(path, str(path.relative_to(root.parent)))
    return target


def _probe(_rows):
    """Runs on an executor: what it lacks to run ksniff's tasks, as one line (empty when nothing)."""
    import sys as _sys

    try:
        import pyarrow  # noqa: F401

        import ksniff.engine.spark_tasks  # noqa: F401
    except ImportError as exc:
        return [f"the executors' Python ({_sys.executable}) cannot import {exc.name or exc}"]
    return [""]


_CHECKED: set[str] = set()  # applications whose executors passed the probe


class Session:
    """A SparkSession for one run: started with `start()`, stopped (if we started it) with `stop()`."""

    def __init__(
        self, master: str | None = None, conf: Sequence[tuple[str, str]] = (), spark: Any = None
    ) -> None:
        self.master = master
        self.conf = list(conf)
        self.spark = spark
        self._owned = spark is None
        self._workdir = tempfile.mkdtemp(prefix="ksniff-spark-")

    def start(self) -> Any:
        if self.spark is None:
            self.spark = self._connect() if is_connect(self.master) else self._launch()
        elif not self.connect and not is_local(self.master_url):
            with contextlib.suppress(Exception):  # already shipped by an earlier run in this session
                self.spark.sparkContext.addPyFile(package_zip(self._workdir))
        self._check_executors()
        return self.spark

    @property
    def connect(self) -> bool:
        return not hasattr(self.spark, "sparkContext") or is_connect(self.master)

    @property
    def master_url(self) -> str | None:
        with contextlib.suppress(Exception):
            return self.spark.sparkContext.master
        return self.master

    def _launch(self) -> Any:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName("ksniff")
        for key, value in self.conf:
            builder = builder.config(key, value)
        python = dict(self.conf).get("spark.pyspark.python")
        if python:  # what spark-submit does with it: the driver's pyspark reads only the environment
            os.environ["PYSPARK_PYTHON"] = python
        master = self.master or _configured_master() or "local[*]"  # Spark's own default
        builder = builder.master(master)  # never an earlier session's master left in this process's JVM
        if is_local(master):
            # Local workers are this machine: this Python, and ksniff from where the driver imported it.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            here = str(PACKAGE_DIR.parent)
            path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
            builder = builder.config("spark.executorEnv.PYTHONPATH", path)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:  # the JVM did not come up or the master refused us: one line
            raise SparkUnavailable(f"could not start Spark: {_one_line(exc)}") from None
        if not is_local(spark.sparkContext.master):
            spark.sparkContext.addPyFile(package_zip(self._workdir))
        return spark

    def _connect(self) -> Any:
        from pyspark.sql import SparkSession

        try:
            builder = SparkSession.builder.remote(self.master)
            for key, value in self.conf:
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.addArtifacts(package_zip(self._workdir), pyfile=True)
        except Exception as exc:
            raise SparkUnavailable(
                f"could not reach Spark Connect at {self.master}: {_one_line(exc)}"
            ) from None
        return spark

    def _check_executors(self) -> None:
        if self.connect:
            return
        sc = self.spark.sparkContext
        if sc.applicationId in _CHECKED:
            return
        try:
            problems = [p for p in sc.parallelize([0], 1).mapPartitions(_probe).collect() if p]
        except Exception as exc:
            raise SparkUnavailable(
                f"the executors cannot run Python tasks: {_one_line(exc)} "
                "(set spark.pyspark.python to a Python 3.10+ with pyarrow)"
            ) from None
        if problems:
            raise SparkUnavailable(
                f"{problems[0]} (set spark.pyspark.python to a Python with ksniff's "
                "dependencies, see the README's Spark section)"
            )
        _CHECKED.add(sc.applicationId)

    @property
    def parallelism(self) -> int:
        with contextlib.suppress(Exception):  # Spark Connect has no SparkContext
            return int(self.spark.sparkContext.defaultParallelism)
        return 2

    def stop(self) -> None:
        if self._owned and self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.stop()
            self.spark = None
        shutil.rmtree(self._workdir, ignore_errors=True)


def _configured_master() -> str | None:
    """The master something other than `--master` set, as far as it is known before the JVM starts."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:  # a session running in this process: getOrCreate gives it
        return active.master
    if SparkContext._jvm is not None and "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit
        with contextlib.suppress(Exception):
            from pyspark import SparkConf

            return SparkConf().get("spark.master", None)
    # A JVM this process started for an earlier session keeps that session's settings as its defaults:
    # they are not what Spark's configuration says now, so only the environment is asked.
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "").split()
    if "--master" in args[:-1]:
        return args[args.index("--master") + 1]
    return os.environ.get("MASTER") or None


def _one_line(exc: BaseException) -> str:
    """An exception from Spark or py4j as one short line: its last meaningful line, no Java stack."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    for ln in reversed(lines):
        if "Error:" in ln or "Exception:" in ln:
            return ln[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]
