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
  is shipped to them as a zip, its compiled modules as files beside it that executors whose Python they
  fit take instead of the zip's source (ksniff.common.sources). A short probe job checks this before any
  capture is read, so a missing module is one line, not a task failure retried on every executor.
- Spark Connect (`sc://`): ksniff's code goes as an artifact; the server's Python workers need ksniff's
  dependencies (e.g. a server started with PYSPARK_PYTHON set to the Python ksniff is installed in).
- The driver's JVM: when ksniff starts it itself, it compiles with the JIT's first tier only, and the
  classes Spark loads are kept in a class-data archive (the JVM's own AppCDS, `ClassArchive`) in
  ksniff's cache folder, made by the first run and mapped by every later one (`driver_jvm_options`).
  Together they halve a session's start-up and take most of the JVM's CPU off a run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ksniff.common import sources

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


def ship_package(sc: Any, workdir: str) -> None:
    """ksniff for executors that do not have it installed: its Python source as a zip on their path, and
    its compiled modules as files beside it (ksniff.common.sources.shipped_files), which the executors
    take instead of that source when they fit their Python."""
    sc.addPyFile(package_zip(workdir))
    for path, name in sources.shipped_files(str(PACKAGE_DIR)):
        target = os.path.join(workdir, name)
        if not os.path.exists(target):
            shutil.copyfile(path, target)
        sc.addFile(target)


def package_zip(workdir: str) -> str:
    """ksniff's own package as a zip, for executors that do not have it installed."""
    root = PACKAGE_DIR
    target = os.path.join(workdir, "ksniff.zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*.py")):
            zf.write(path, str(path.relative_to(root.parent)))
    return target


# The compiled modules a task's hot loops run in (the walk, the body reader, stage 1's blocks and the
# codec, the fold): an executor whose Python cannot load them runs their pure-Python code instead.
HOT_MODULES = (
    "ksniff.capture._fastwalk",
    "ksniff.decode._bodies",
    "ksniff.engine._pack",
    "ksniff.audit.fold",
)


def compiled_modules() -> list[str]:
    """Which of HOT_MODULES this process runs compiled (not their Python source: none when
    KSNIFF_PURE_PYTHON is set)."""
    import importlib
    import importlib.machinery

    from ksniff.common import sources as _sources

    if _sources.pure_python():
        return []
    out = []
    for name in HOT_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if str(getattr(module, "__file__", "")).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            out.append(name)
    return out


def _probe(_rows):
    """Runs on an executor: (what it lacks to run ksniff's tasks, as one line, empty when nothing; the
    compiled modules it runs; its Python; whether KSNIFF_PURE_PYTHON is set there)."""
    import platform as _platform
    import sys as _sys

    from ksniff.common import sources as _sources

    python = f"Python {_platform.python_version()} ({_sys.executable})"
    try:
        import pyarrow  # noqa: F401

        import ksniff.engine.spark_tasks  # noqa: F401
    except ImportError as exc:
        missing = f"the executors' Python ({_sys.executable}) cannot import {exc.name or exc}"
        return [(missing, [], python, False)]
    return [("", compiled_modules(), python, _sources.pure_python())]


def slower_executors(here: Sequence[str], there: Sequence[str], python: str, pure: bool) -> str | None:
    """One line for a run whose executors run the pure-Python code of compiled modules the driver runs
    (`pure`: because KSNIFF_PURE_PYTHON is set there), else None."""
    missing = [name for name in here if name not in there]
    if not missing:
        return None
    names = ", ".join(m.rsplit(".", 1)[-1] for m in missing)
    if pure:
        why = f"KSNIFF_PURE_PYTHON is set there; {names}"
    else:
        why = (
            f"their {python} cannot load {names}, built for the driver's Python "
            f"{sys.version_info.major}.{sys.version_info.minor} on {sys.platform}; give them that version: "
            "spark.pyspark.python"
        )
    return (
        f"the executors run ksniff's pure-Python code, about 1.6 times the CPU of its compiled ones ({why})"
    )


_CHECKED: set[str] = set()  # applications whose executors passed the probe

TUNING_ENV = "KSNIFF_SPARK_JVM_TUNING"  # "0": ksniff adds no option to the driver JVM it starts
ARCHIVE_DUMP_SECONDS = 120  # the most a first run waits for its JVM to write the archive as it exits
ARCHIVE_UNUSED_DAYS = 30  # another installation's archive unused this long is removed (its venv is gone)
# JVM options of the user's that ksniff's own would clash with: class data, and the JIT's tiers.
_CDS_OPTIONS = ("Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "SharedClassListFile")
_JIT_OPTIONS = ("TieredStopAtLevel", "TieredCompilation")
# The driver JVM compiles with the JIT's first tier only: in a ksniff run the JVM moves bytes between
# the files, Python and the outputs while Python does the work, and the optimising tier's compilations
# cost more CPU than they ever give back (on 2 cores: 0.04 -> 0.01 CPU s per MB of captures, the JVM's
# part, at 367 MB of captures; a run with Parquet and CSV exports of 52,800 exchanges 59 s -> 37 s).
_FIRST_TIER = "-XX:TieredStopAtLevel=1"


def driver_jvm_options(conf: Sequence[tuple[str, str]]) -> tuple[str, ClassArchive | None]:
    """What ksniff adds to the options of the driver JVM it is about to start, and the class-data archive
    among them. Nothing when a JVM already runs in this process (it was started with its options), when
    an administrator's spark-defaults.conf gives the driver's Java options, or with KSNIFF_SPARK_JVM_TUNING=0;
    each part is left out when the user's own options (--conf, PYSPARK_SUBMIT_ARGS) mention its kind."""
    from pyspark import SparkContext

    if os.environ.get(TUNING_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return "", None
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return "", None
    if _administered():
        return "", None
    said = " ".join([*(v for k, v in conf if "JavaOptions" in k), os.environ.get("PYSPARK_SUBMIT_ARGS", "")])
    options = [] if any(o in said for o in _JIT_OPTIONS) else [_FIRST_TIER]
    archive = None if any(o in said for o in _CDS_OPTIONS) else ClassArchive.here()
    if archive is not None:
        options.append(archive.java_options())
    return " ".join(options), archive


class ClassArchive:
    """The driver JVM's class-data archive (Java's dynamic AppCDS) for this Spark and this Java.

    Starting Spark's JVM loads and verifies some ten thousand classes from Spark's jars; an archive of them,
    mapped at start, skips that work. The first run that starts a JVM has it write the archive as it exits
    (`-XX:ArchiveClassesAtExit`, to a name of its own, renamed into place once the JVM has exited: a
    half-written archive is never mapped); later runs map it (`-XX:SharedArchiveFile`). The archive's name
    carries the Java binary, pyspark's version and its jars, so an upgrade of either makes a new one (the
    old ones are removed). Java's own class-data messages are turned off: an archive it cannot map is
    ignored and the JVM starts as it would without one."""

    def __init__(self, folder: str, place: str, key: str) -> None:
        # One archive per pyspark installation (`place`) at a time: another virtual environment's stays.
        self.path = os.path.join(folder, f"spark-driver-{place}-{key}.jsa")
        self.writing: str | None = None  # the archive this run's JVM writes as it exits

    @classmethod
    def here(cls) -> ClassArchive | None:
        """The archive for this machine's Java and pyspark (None: no Java found, no cache folder)."""
        java = java_binary()
        folder = _cache_folder()
        if java is None or folder is None:
            return None
        return cls(folder, *_archive_key(java))

    def java_options(self) -> str:
        quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
        if os.path.isfile(self.path):
            with contextlib.suppress(OSError):  # in use: kept however long other installations' wait
                os.utime(self.path)
            return f"{_quoted(f'-XX:SharedArchiveFile={self.path}')} {quiet}"
        self.writing = f"{self.path}.{os.getpid()}.tmp"
        return f"{_quoted(f'-XX:ArchiveClassesAtExit={self.writing}')} {quiet}"

    def finish(self) -> None:
        """After the session stopped: when this run's JVM is to write the archive, end the JVM (later
        sessions in this process start a new one), wait for the archive and put it in place."""
        if self.writing is None:
            return
        tmp, self.writing = self.writing, None
        try:
            if _end_jvm(ARCHIVE_DUMP_SECONDS) == 0 and os.path.getsize(tmp) > 0:
                os.replace(tmp, self.path)
                _remove_others(self.path)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _quoted(option: str) -> str:
    """One JVM option as Spark's launcher splits an option string: quoted when it holds a blank (a cache
    folder under a home whose name has one)."""
    if not any(c.isspace() or c in "\"'\\" for c in option):
        return option
    return '"' + option.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _remove_others(keep: str) -> None:
    """This installation's archives of other Sparks or Javas, other installations' archives unused for
    ARCHIVE_UNUSED_DAYS, and what runs that were killed while writing one left."""
    folder, mine = os.path.split(keep)
    place = mine[: mine.rindex("-") + 1]  # "spark-driver-<place>-"
    now = time.time()
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if not name.startswith("spark-driver-") or path == keep:
            continue
        try:
            age = now - os.stat(path).st_mtime
        except OSError:
            continue
        if name.endswith(".tmp"):  # another run may be writing it now: only an old one is left over
            stale = age > 3600
        else:
            stale = name.startswith(place) or age > ARCHIVE_UNUSED_DAYS * 86400
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _end_jvm(timeout: float) -> int | None:
    """Shut down the JVM this process started for Spark (its exit code), so that a later session starts
    a new one. The JVM exits when its stdin closes."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    SparkContext._gateway = None
    SparkContext._jvm = None
    if gateway is None or proc is None:
        return None
    with contextlib.suppress(Exception):
        gateway.shutdown()
    with contextlib.suppress(OSError):
        proc.stdin.close()
    return proc.wait(timeout)


def _cache_folder() -> str | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "ksniff")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _archive_key(java: str) -> tuple[str, str]:
    """Where pyspark is installed, and what an archive depends on: the JVM (its binary) and Spark's
    classes (pyspark's version and jars), each as a short hash."""
    import pyspark

    real = os.path.realpath(java)
    st = os.stat(real)
    jars = os.path.join(os.path.dirname(os.path.realpath(pyspark.__file__)), "jars")
    names = sorted(os.listdir(jars)) if os.path.isdir(jars) else []
    text = "\n".join([real, str(st.st_size), str(int(st.st_mtime)), pyspark.__version__, *names])
    return hashlib.sha256(jars.encode()).hexdigest()[:12], hashlib.sha256(text.encode()).hexdigest()[:16]


def _administered() -> bool:
    """Whether Spark's configuration files give the driver's Java options (an administrator's choice that
    a --conf from ksniff would replace)."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(os.environ.get("SPARK_HOME", ""), "conf")
    with contextlib.suppress(OSError):
        with open(os.path.join(conf_dir, "spark-defaults.conf"), encoding="utf-8", errors="replace") as fh:
            return any("JavaOptions" in ln and not ln.lstrip().startswith("#") for ln in fh)
    return False


class Session:
    """A SparkSession for one run: started with `start()`, stopped (if we started it) with `stop()`."""

    def __init__(
        self,
        master: str | None = None,
        conf: Sequence[tuple[str, str]] = (),
        spark: Any = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        """`notice`: told, in a line, when the executors run the pure-Python code of modules the driver
        runs compiled, and when stopping waits for the JVM to write its class-data archive."""
        self.master = master
        self._notice = notice
        self.conf = list(conf)
        self.spark = spark
        self._owned = spark is None
        self._workdir = tempfile.mkdtemp(prefix="ksniff-spark-")
        self._archive: ClassArchive | None = None

    def start(self) -> Any:
        if self.spark is None:
            self.spark = self._connect() if is_connect(self.master) else self._launch()
        elif not self.connect and not is_local(self.master_url):
            with contextlib.suppress(Exception):  # already shipped by an earlier run in this session
                ship_package(self.spark.sparkContext, self._workdir)
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
        options, self._archive = driver_jvm_options(self.conf)
        if options:
            said = dict(self.conf).get("spark.driver.extraJavaOptions", "")
            builder = builder.config("spark.driver.extraJavaOptions", f"{said} {options}".strip())
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
            ship_package(spark.sparkContext, self._workdir)
        # pyspark's server for accumulator updates prints a traceback when the JVM goes away in the middle
        # of one (killed, or out of memory); the run then ends with its own one-line error (JVM_GONE).
        # And py4j logs one, on the root logger, for a command the dead JVM did not answer.
        if not any(isinstance(f, _UnansweredLogged) for f in logging.getLogger().filters):
            logging.getLogger().addFilter(_UnansweredLogged())
        server = getattr(spark.sparkContext, "_accumulatorServer", None)
        if server is not None and hasattr(server, "handle_error"):
            server.handle_error = _said_elsewhere
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
            (problem, there, python, pure), *_ = sc.parallelize([0], 1).mapPartitions(_probe).collect()
        except Exception as exc:
            raise SparkUnavailable(
                f"the executors cannot run Python tasks: {_one_line(exc)} "
                "(set spark.pyspark.python to a Python 3.10+ with pyarrow)"
            ) from None
        if problem:
            raise SparkUnavailable(
                f"{problem} (set spark.pyspark.python to a Python with ksniff's "
                "dependencies, see the README's Spark section)"
            )
        slower = slower_executors(compiled_modules(), there, python, pure)
        if slower is not None and self._notice is not None:
            self._notice(slower)
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
            if self._archive is not None:
                if self._archive.writing is not None and self._notice is not None:
                    self._notice(
                        "keeping Spark's classes for faster starts: once, some seconds, about 180 MB "
                        f"in {os.path.dirname(self._archive.path)} (KSNIFF_SPARK_JVM_TUNING=0: never)"
                    )
                self._archive.finish()
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


JVM_GONE = "the Spark driver's JVM is gone (killed, or out of memory: Spark's log above says which)"
HEAP_HINT = (
    " (a capture read through Spark's binaryFile source needs about four times its size of heap in its"
    " task: give the executors more, --conf spark.executor.memory=..., or with a local master"
    " --conf spark.driver.memory=...)"
)


def _jvm_gone(exc: BaseException) -> bool:
    """Whether `exc` says that the driver's JVM is gone (killed: by the kernel when out of memory, or by
    a user): py4j could not reach it or got no answer. An error the JVM answered with (Py4JJavaError: a
    master that cannot be reached, for one) is not that."""
    try:
        from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError
    except ImportError:
        return isinstance(exc, ConnectionError)
    if isinstance(exc, Py4JJavaError):
        return False
    if isinstance(exc, (ConnectionError, Py4JNetworkError)):
        return True
    return isinstance(exc, Py4JError) and "Answer from Java side is empty" in str(exc)


class _UnansweredLogged(logging.Filter):
    """Leaves out py4j's traceback for a command the driver's JVM did not answer because it is gone: the
    run says that in one line (JVM_GONE). Whatever else is logged passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        gone = (
            record.exc_info is not None and record.exc_info[1] is not None and _jvm_gone(record.exc_info[1])
        )
        return not (gone and record.getMessage() == "Exception while sending command.")


def _said_elsewhere(_request: Any, _client_address: Any) -> None:
    """A socketserver's error handler that prints nothing: what went wrong is said by whoever waits on
    the server's other end."""


def _one_line(exc: BaseException) -> str:
    """An exception from Spark or py4j as one short line: its last meaningful line, no Java stack; what to
    do when the JVM ran out of heap, and what happened when it is gone."""
    if _jvm_gone(exc):
        return JVM_GONE
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    line = next((ln for ln in reversed(lines) if "Error:" in ln or "Exception:" in ln), None)
    if line is None:
        line = lines[0] if lines else type(exc).__name__
    line = line[:300]
    return line + HEAP_HINT if "OutOfMemoryError" in line else line
