"""Starting and stopping the SparkSession the Spark engine runs on: quiet, fast, with ksniff's code shipped.

Three kinds of master are understood: `local[...]` (a JVM started here; its workers import ksniff from this
checkout or installation), a cluster URL (`spark://`, `yarn`, `k8s://`, ...: ksniff's code goes to the
executors as a zip through `addPyFile`, and the executors must have the same Python at the same path), and
Spark Connect (`sc://`: the code goes as an artifact; the server's Python workers need ksniff's own
dependencies, e.g. a server started with PYSPARK_PYTHON set to the Python ksniff is installed in).
The user's terminal sees none of Spark's banner or log lines: the JVM we start writes its stderr to a log
file, and log4j is set to ERROR.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # ksniff/, shipped to the workers


class SparkUnavailable(RuntimeError):
    """The Spark engine cannot run here (pyspark or Java missing, master unreachable): one line why."""


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def is_connect(master: str) -> bool:
    return master.startswith("sc://")


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def check_available(master: str) -> None:
    """Raise SparkUnavailable when this machine cannot run the engine against `master`."""
    if importlib.util.find_spec("pyspark") is None:
        raise SparkUnavailable("the Spark engine needs pyspark: pip install 'ksniff[spark]'")
    if is_connect(master):
        if importlib.util.find_spec("grpc") is None:
            raise SparkUnavailable("Spark Connect (sc://) needs pyspark's connect extras: "
                                   "pip install 'ksniff[spark-connect]'")
        return
    if java_binary() is None:
        raise SparkUnavailable("the Spark engine needs Java 17 or newer (set JAVA_HOME or put java on PATH)")


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def shuffle_partitions(total_bytes: int, parallelism: int) -> int:
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


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point file descriptor 2 at `path` while a child process is started, so the child keeps it."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


class Session:
    """A SparkSession for one run: started with `start()`, stopped (if we started it) with `stop()`."""

    def __init__(self, master: str, shuffle: int, spark: Any = None) -> None:
        self.master = master
        self.shuffle = shuffle
        self.spark = spark
        self._owned = spark is None
        self._workdir = tempfile.mkdtemp(prefix="ksniff-spark-")
        self.log_path = os.path.join(self._workdir, "spark.log")
        self._keep_log = False

    def start(self) -> Any:
        # The workers run the driver's Python: the same version, and the same packages (pandas, pyarrow).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if self.spark is None:
            self.spark = self._connect() if is_connect(self.master) else self._launch()
        elif not is_local(self.master) and not is_connect(self.master):
            self.spark.sparkContext.addPyFile(package_zip(self._workdir))
        return self.spark

    def _launch(self) -> Any:
        from pyspark.sql import SparkSession

        log4j = os.path.join(self._workdir, "log4j2.properties")
        Path(log4j).write_text(_LOG4J2)
        builder = (SparkSession.builder.master(self.master).appName("ksniff")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", str(self.shuffle))
                   .config("spark.sql.adaptive.enabled", "false")  # keeps our partition counts as planned
                   .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
                   .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}"))
        if is_local(self.master):
            # Local workers import ksniff from where the driver did, without a zip round trip.
            here = str(PACKAGE_DIR.parent)
            path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
            builder = builder.config("spark.executorEnv.PYTHONPATH", path)
        try:
            with _stderr_to(self.log_path):
                spark = builder.getOrCreate()
        except Exception as exc:  # the JVM did not come up: say so in one line, the log has the rest
            self._keep_log = True
            raise SparkUnavailable(f"could not start Spark ({type(exc).__name__}); "
                                   f"see {self.log_path}") from None
        spark.sparkContext.setLogLevel("ERROR")
        if not is_local(self.master):
            spark.sparkContext.addPyFile(package_zip(self._workdir))
        return spark

    def _connect(self) -> Any:
        from pyspark.sql import SparkSession

        try:
            spark = SparkSession.builder.remote(self.master).getOrCreate()
            spark.conf.set("spark.sql.shuffle.partitions", str(self.shuffle))
            spark.addArtifacts(package_zip(self._workdir), pyfile=True)
        except Exception as exc:
            raise SparkUnavailable(f"could not reach Spark Connect at {self.master}: {exc}") from None
        return spark

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
        if not self._keep_log:
            shutil.rmtree(self._workdir, ignore_errors=True)
