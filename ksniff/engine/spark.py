"""The Spark engine: the capture, decode and audit rooms' own code as a PySpark job.

    inputs (paths or Hadoop URIs) --(Spark lists them; executors read them)-->
      a capture set small enough for one task: audited by the task that reads its files (the local
          engine's code) --> its result, its exchanges and batches rows
      the others: segment blocks (a flow's segments of one file, packed)
          --(a flow seen in one file: sorted where the file was read; one seen in several files, or of
             a file larger than a core's share: repartitioned by flow; into the merge's order)-->
          Reassembler + Decoder per flow --> decode events (packed: ksniff.engine.pack), keyed by producer
          --(repartition by group of producer keys, sort into the audit's order)--> one Auditor per group
          --(the context events and the exchanges the partition logs read, by fold of partitions)-->
          the capture gaps and the partition logs, a fold per 256 MB of a set's captures
          --> DataFrames: exchanges, batches, records (built where the events are), transactions,
              findings, producers (built where each group's fold ran).

The driver never opens a capture and never holds a table row. What it collects is what stitches the stages
together and what the terminal report prints: with several inputs, what the capture-set planner needs of
each file (ksniff.engine.sets.scan, and the cluster named by the few files that need it) and each host's
clock anchors (ksniff.engine.clock), found by tasks that read the files; one summary per file; each set
audited where it was read, its result (without table rows); of the other sets, a few rows per flow and
connection (its opening, the keys it links, its brokers, the naming answers; of the ApiVersions answers
those that change the transaction.version: the other context events are routed to their key groups by
Spark, `_routed_context`), each key group's audit output (producers), the context group's (capture gaps
and the partition logs, folded over the exchanges the logs read by a task per fold of the set's
partitions) and the run's counters. Of findings and transactions it receives the digests the tasks made
(ksniff.audit.digest: tallies per cause, counts, the slowest and the open transactions; the spread of the
transactions' durations is ranked on the executors), all the terminal report reads; every one of them only
for a whole summary (the JSON document, the HTML page, --verbose, the timeline and partition views, the
pandas API). Exports are written by the executors.

It gives exactly the in-process engine's result (ksniff.engine.local); what that takes is explained in
ksniff.engine.spark_tasks. A capture an executor cannot read is a row carrying the local engine's
one-line error, so a bad input stops the run at once instead of failing tasks Spark would retry.

Python API (an existing SparkSession, nothing through the driver):

    from ksniff.engine.spark import audit_spark
    run = audit_spark(spark, ["s3a://bucket/captures/"])
    run.findings.where("severity = 'critical'").write.parquet(...)
    run.summary  # the AuditResult the terminal report shows (counters, producers, the digest of the rest)
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlsplit

from ksniff.audit import fold_groups, merge_outputs
from ksniff.audit.digest import Digest
from ksniff.capture import CaptureError, Reassembler
from ksniff.capture.events import CaptureStats, InputInfo
from ksniff.capture.run import add_file_counts, truncation_warnings
from ksniff.common.counters import add_counters
from ksniff.common.paths import is_uri
from ksniff.config import EngineConfig
from ksniff.decode.decoder import limit_warnings
from ksniff.decode.events import DecodeStats
from ksniff.decode.identity import Identity
from ksniff.decode.records import Inflation
from ksniff.engine import objectstore
from ksniff.engine import sets as capture_sets
from ksniff.engine.clock import within_uncertainty
from ksniff.engine.spark_session import Session, SparkUnavailable, check_available, partitions_for
from ksniff.result import AuditResult, join_results, stamp_set

__all__ = ["SparkAudit", "SparkUnavailable", "audit_paths_spark", "audit_spark", "is_uri", "run_spark"]

_DEFAULTS = EngineConfig()
TABLES = ("exchanges", "batches", "records", "transactions", "findings", "partitions", "partition_log")
_DRIVER_TABLES = ("partitions", "partition_log")  # made from the summary: the partition logs' fold
# Columns the exchange-level tables carry for --partition-by that the local exports do not have: the
# cluster of each row's capture set (`cluster` in the tables made from the audit's output).
_HIDDEN = ("_cluster",)


@dataclass
class _Input:
    file: int
    path: str  # as the report names it: the argument, or the argument joined with the file's place in it
    uri: str  # as Spark lists it
    length: int
    folder: bool  # found in a folder (a file that is not a capture is left out) rather than named
    arg: int
    own: bool = False  # read by the task itself (a `file:` path, an S3 object), not by Spark's binaryFile
    offset: float = 0.0  # seconds added to its timestamps: its capture set's clock alignment
    cset: int = 0  # its capture set: the index in the run's plan
    renames: bytes | None = None  # its capture set's 4-tuples read as others (CaptureSet.renamed), pickled


class _Table:
    """A SparkAudit attribute that is one of its tables, as `SparkAudit._public` gives it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, run: SparkAudit | None, owner: type | None = None) -> Any:
        return self if run is None else run._public(self.name)


@dataclass
class SparkAudit:
    """One run's tables as Spark DataFrames, with the columns of the local exports (ksniff.report.tables),
    and `summary`, the AuditResult of the run without table rows. `records` is None unless the engine
    config keeps records. Cached data stays until `close()`."""

    spark: Any
    summary: AuditResult
    _tables: dict[str, Any]
    _cached: list[Any] = field(default_factory=list)
    # The shuffle partitions the exports' global sorts are made in (`_shuffle_partitions`; 0: the
    # session's), sized for the run as its own queries were.
    partitions: int = 0

    def _frame(self, table: str):
        """The table's DataFrame with its hidden columns (None: not kept by this run), made now if it was
        left for when it is asked for."""
        df = self._tables.get(table)
        if isinstance(df, _Later):
            df = self._tables[table] = df.make(*df.args)
        return df

    def _public(self, table: str):
        """The table as a DataFrame with the local export's columns (None: not kept by this run)."""
        from ksniff.engine.spark_tasks import ROW_ORDER

        df = self._frame(table)
        if df is None or table not in ("exchanges", "batches", "records"):
            return df
        return df.drop(*ROW_ORDER, *_HIDDEN)

    exchanges = _Table()
    batches = _Table()
    records = _Table()
    transactions = _Table()
    findings = _Table()
    producers = _Table()
    partitions = _Table()
    partition_log = _Table()

    def sorted(self, table: str, hidden: bool = False):
        """The table in the local export's row order (a global sort; for writing and comparing); with
        `hidden`, the columns only --partition-by reads too."""
        from pyspark.sql import functions as F

        from ksniff.engine.spark_tasks import ROW_ORDER
        from ksniff.report.tables import SORT_COLUMN

        df = self._frame(table)
        if table in ("exchanges", "batches", "records"):
            ordered = df.orderBy(F.col(SORT_COLUMN[table]).asc_nulls_last(), *ROW_ORDER).drop(*ROW_ORDER)
            return ordered if hidden else ordered.drop(*_HIDDEN)
        if table == "transactions":
            return df.orderBy(F.col("start_ts").asc_nulls_last(), "transactional_id", "producer_id")
        if table in _DRIVER_TABLES:
            return df.orderBy("order")
        rank = (
            F.when(F.col("severity") == "critical", 0)
            .when(F.col("severity") == "warning", 1)
            .when(F.col("severity") == "info", 2)
            .otherwise(3)
        )
        return df.orderBy(
            F.col("ts").asc_nulls_last(),
            rank,
            "kind",
            "transactional_id",
            "producer_id",
            "topic",
            "partition",
            "group",
            "message",
        )

    def rows(self, table: str, where=None) -> list[dict]:
        """Rows of a table collected to the driver, in export order (`where`: a Column filter)."""
        from ksniff.engine.spark_tasks import ROW_ORDER
        from ksniff.report.tables import SORT_COLUMN

        df = self._frame(table)
        if df is None:
            return []
        if where is not None:
            df = df.where(where)
        rows = [r.asDict() for r in df.collect()]
        column = SORT_COLUMN[table]
        if table in ("exchanges", "batches", "records"):
            rows.sort(key=lambda r: (r[column] is None, r[column] or 0.0, *(r[c] for c in ROW_ORDER)))
            for r in rows:
                for c in (*ROW_ORDER, *_HIDDEN):
                    r.pop(c, None)
        else:
            rows.sort(key=lambda r: (r[column] is None, r[column] or 0.0))
        return rows

    def collect(self) -> AuditResult:
        """The summary with every row of the kept tables collected to the driver (the pandas API's, the
        tests'): only for results that fit in memory, and only of a run that kept its whole summary
        (`audit_spark(..., whole=True)`)."""
        result = self.summary
        if result.digest is not None:
            raise ValueError(
                "this run's summary holds the digest of its findings and transactions, not the lists: "
                "audit_spark(..., whole=True) keeps them (the findings and transactions tables hold "
                "every row)"
            )
        if self._tables.get("exchanges") is not None:
            result.exchanges = self.rows("exchanges")
            result.batches = self.rows("batches")
            if self._tables.get("records") is not None:
                result.records = self.rows("records")
        return result

    def write(
        self,
        *,
        csv_dir: str | None = None,
        parquet_dir: str | None = None,
        keep=None,
        partition_by: Sequence[str] = (),
    ) -> None:
        """The exports, written by the executors: `<dir>/<table>.parquet` and `<dir>/<table>.csv` are
        Spark output folders (part files), with the columns and cell texts of the local exports.
        `keep`: the report's filters (ksniff.report.filters.ResultFilter), applied as locally.
        `partition_by`: "date" and/or "cluster" (--partition-by), see `_write_parquet`."""
        if keep is not None and keep.active:
            from ksniff.engine import spark_tasks as tasks

            frames = {}  # a table left for later stays so: its copy is made if asked for
            for table in ("exchanges", "batches", "records", "transactions", "findings"):
                df = self._frame(table)
                if df is not None:
                    frames[table] = df.mapInArrow(tasks.keep_rows(keep, table), df.schema)
            replace(self, _tables={**self._tables, **frames}).write(
                csv_dir=csv_dir, parquet_dir=parquet_dir, partition_by=partition_by
            )
            return
        tables = [t for t in TABLES if self._tables.get(t) is not None]
        with _shuffle_partitions(self.spark, self.partitions):
            if parquet_dir:
                _write_parquet(self, parquet_dir, tables, tuple(partition_by))
            if csv_dir:
                _write_csv(self, csv_dir, tables)

    def close(self) -> None:
        for df in self._cached:
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001 - the session may be gone already
                pass
        self._cached.clear()


def audit_spark(
    spark: Any, paths: str | Sequence[str], config: EngineConfig | None = None, *, whole: bool = False
) -> SparkAudit:
    """Audit captures on an existing SparkSession: paths or Hadoop URIs of files and folders.

    Returns the tables as DataFrames (computed and cached on the executors) and the run's summary, whose
    findings and transactions are a digest (`summary.digest`: counts, tallies per cause, the slowest and
    the open transactions; the DataFrames hold every row) unless `whole`.
    Raises CaptureError for inputs that cannot be read, SparkUnavailable when the executors cannot run
    ksniff's tasks. Executors that run ksniff's pure-Python code instead of the compiled modules the
    driver runs are a RuntimeWarning."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    session = Session(spark=spark, notice=_warned)
    session.start()
    return _run(session, paths, config or EngineConfig(), whole=whole)


def _warned(text: str) -> None:
    warnings.warn(f"ksniff: {text}", RuntimeWarning, stacklevel=5)


def audit_paths_spark(
    paths: Sequence[str],
    config: EngineConfig | None = None,
    master: str | None = None,
    *,
    spark: Any = None,
    conf: Sequence[tuple[str, str]] = (),
) -> AuditResult:
    """The whole result with its table rows collected to the driver (the pandas API's, the tests'):
    only for results that fit in memory. `spark`: an existing SparkSession (left running)."""
    config = config or EngineConfig()
    with _SessionScope(master, conf, spark) as session:
        run = _run(session, list(paths), config, whole=True)
        try:
            return run.collect()
        finally:
            run.close()


def run_spark(
    paths: Sequence[str],
    config: EngineConfig,
    *,
    master: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
    csv_dir: str | None = None,
    parquet_dir: str | None = None,
    partition_by: Sequence[str] = (),
    producer: str | None = None,
    keep=None,
    notice: Callable[[str], None] | None = None,
    whole: bool = True,
) -> AuditResult:
    """The CLI's run: the audit, the exports written by the executors, and the summary with the rows of
    `producer` only (its timeline) collected. Without `whole`, the summary's findings and transactions
    are the digest the terminal report reads, filtered by `keep` where they were made (the report
    applies `keep` to the rest). Any failure is one line: CaptureError (an input),
    ReportError (an export), SparkUnavailable (Spark itself). `notice` is told, in a line, of a wait that
    is not the audit's (the first run writing the driver JVM's class-data archive) and of executors that
    run the pure-Python code of modules the driver runs compiled."""
    from ksniff.engine.spark_session import _one_line
    from ksniff.report.formats import ReportError

    with _SessionScope(master, conf, None, notice) as session:
        for directory in (csv_dir, parquet_dir):  # before the audit, not after it
            if directory:
                problem = _unwritable(session.spark, directory)
                if problem:
                    raise ReportError(f"cannot write {directory}: {problem}")
        try:
            run = _run(session, list(paths), config, whole=whole, keep=keep)
        except (CaptureError, SparkUnavailable):
            raise
        except Exception as exc:  # noqa: BLE001 - a job that failed on the cluster: one line, not its stack
            raise SparkUnavailable(f"the Spark job failed: {_one_line(exc)}") from None
        try:
            for kind, directory in (("csv_dir", csv_dir), ("parquet_dir", parquet_dir)):
                if not directory:
                    continue
                try:
                    run.write(**{kind: directory}, keep=keep, partition_by=partition_by)
                except Exception as exc:  # noqa: BLE001 - Spark's write errors: one line
                    raise ReportError(f"cannot write {directory}: {_one_line(exc)}") from None
            result = run.summary
            if producer:
                where = _producer_filter(result, producer)
                result.exchanges = run.rows("exchanges", where)
                result.batches = run.rows("batches", where)
            return result
        finally:
            run.close()


class _SessionScope:
    def __init__(self, master, conf, spark, notice=None) -> None:
        if spark is None:
            check_available(master)
        self.session = Session(master, conf, spark, notice=notice)

    def __enter__(self) -> Session:
        self.session.start()
        return self.session

    def __exit__(self, *exc) -> bool:
        self.session.stop()
        return False


def _producer_filter(result: AuditResult, producer: str):
    """The rows `--producer` may show: its transactional ids and producer ids, as far as the audit's
    producers tell them (the timeline resolves the rest from these rows)."""
    from pyspark.sql import functions as F

    from ksniff.report.timeline import resolve_producer

    txn_ids, pids = resolve_producer(result, producer)
    txn_ids.add(producer)
    if producer.lstrip("-").isdigit():
        pids.add(int(producer))
    for p in result.producers:
        if p.producer_id in pids and p.transactional_id:
            txn_ids.add(p.transactional_id)
    return F.col("transactional_id").isin(sorted(txn_ids)) | F.col("producer_id").isin(sorted(pids))


# -- listing ----------------------------------------------------------------------------------------------


def _norm(uri: str) -> str:
    """A path or URI as the listing's rows are matched to the arguments: its path, without the host (an
    argument `hdfs:///x` names the files Spark lists as `hdfs://namenode:8020/x`), but for S3, whose
    host is the bucket (two buckets may hold the same keys)."""
    parts = urlsplit(uri)
    path = unquote(parts.path) if parts.scheme else uri
    if objectstore.is_s3(uri):
        path = "/" + parts.netloc + path
    return path.rstrip("/") or "/"


def _walk_key(rel: str) -> tuple:
    """A folder's files in the order of the local engine's walk: a folder's own files (sorted) before
    its subfolders (sorted)."""
    parts = rel.split("/")
    return (*((1, p) for p in parts[:-1]), (0, parts[-1]))


def _list_inputs(spark: Any, paths: list[str]) -> list[_Input]:
    """The files the arguments name, in the local engine's order: listed by Spark, or for S3 by the driver
    through pyarrow (ksniff.engine.objectstore); the driver opens none."""
    if not paths:
        raise CaptureError("no capture files given")
    uris = [p if is_uri(p) else os.path.abspath(p) for p in paths]
    # Why Spark's S3A lists and reads S3 (None: the tasks do); asked only when an input is in S3.
    by_s3a = objectstore.read_by_spark(spark) if any(objectstore.is_s3(u) for u in uris) else None
    own_s3 = by_s3a is None
    mine = [own_s3 and objectstore.is_s3(u) for u in uris]  # listed here, without the JVM
    by_spark = [u for u, m in zip(uris, mine, strict=True) if not m]
    listed: list = []
    if any(mine):
        store = objectstore.settings_of(spark)
        for arg, uri, m in zip(paths, uris, mine, strict=True):
            if m:
                try:
                    found = store.listed(uri)
                except objectstore.StoreError as exc:
                    raise CaptureError(str(exc).replace(uri, arg, 1)) from None
                if not found:
                    raise CaptureError(f"{arg}: no such file or folder")
                listed += [{"path": u, "length": n} for u, n in found]
    if by_spark:
        try:
            listed += (
                spark.read.format("binaryFile")
                .option("recursiveFileLookup", "true")
                .load(by_spark)
                .select("path", "length")
                .collect()
            )
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException and friends
            text = _listing_error(exc, paths, uris)
            if by_s3a and any(objectstore.is_s3(u) for u in by_spark):
                text += f" (Spark's own S3A file system reads s3 inputs because {by_s3a})"
            raise CaptureError(text) from None
    by_arg, stray = _by_argument(uris, listed)
    inputs: list[_Input] = []
    for i, (arg, found) in enumerate(zip(paths, by_arg, strict=True)):
        if not found and not stray:  # Spark lists no empty file: tell an empty file from an empty folder
            if _is_empty_file(spark, uris[i]):
                raise CaptureError(f"{arg}: empty file")
            raise CaptureError(f"{arg}: no pcap or pcapng files in this folder")
        for rel, uri, length, folder in sorted(found, key=lambda f: _walk_key(f[0])):
            shown = (
                arg
                if not folder
                else (os.path.join(arg, rel) if not is_uri(arg) else arg.rstrip("/") + "/" + rel)
            )
            inputs.append(_Input(len(inputs), shown, uri, length, folder, i, _own(uri, own_s3)))
    for shown, uri, length, folder in sorted(stray):
        inputs.append(_Input(len(inputs), shown, uri, length, folder, len(paths), _own(uri, own_s3)))
    return inputs


def _own(uri: str, own_s3: bool) -> bool:
    """Whether a task reads the input itself: a `file:` path, or an S3 object when the run's tasks read
    S3 (ksniff.engine.objectstore); else Spark's binaryFile source reads it for the task."""
    from ksniff.engine import spark_tasks as tasks

    return tasks.local_path(uri) is not None or (own_s3 and objectstore.is_s3(uri))


def _by_argument(
    uris: list[str], listed: Sequence
) -> tuple[list[list[tuple[str, str, int, bool]]], list[tuple[str, str, int, bool]]]:
    """Each listed file (rows with `path` and `length`) under the first argument that is that file or a
    folder above it, as (path within the folder or "", Spark's path, length, found in a folder); the files
    no argument names (a glob's) apart. Looked up by the file's own path and its folders': a shell glob of
    thousands of files is thousands of arguments."""
    wanted = [_norm(u) for u in uris]
    first: dict[str, int] = {}  # each argument's path -> the first argument naming it
    for i, base in enumerate(wanted):
        first.setdefault(base, i)
    by_arg: list[list[tuple[str, str, int, bool]]] = [[] for _ in uris]
    stray: list[tuple[str, str, int, bool]] = []
    for row in listed:
        here = _norm(row["path"])
        i = min((first[p] for p in _self_and_folders(here) if p in first), default=None)
        if i is None:
            stray.append((row["path"], row["path"], row["length"], False))
        elif wanted[i] == here:
            by_arg[i].append(("", row["path"], row["length"], False))
        else:
            base = wanted[i].rstrip("/")
            by_arg[i].append((here[len(base) + 1 :], row["path"], row["length"], True))
    return by_arg, stray


def _self_and_folders(path: str) -> Iterator[str]:
    """`path`, then each folder above it up to the root ("/a/b.pcap", "/a", "/")."""
    yield path
    while "/" in path and path != "/":
        path = path.rsplit("/", 1)[0]
        yield path or "/"
        if not path:
            return


def _is_empty_file(spark: Any, uri: str) -> bool:
    """Whether the Hadoop file system says `uri` is a file of no bytes (False where it cannot be asked)."""
    try:
        jvm = spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(uri)
        status = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).getFileStatus(path)
        return bool(status.isFile()) and status.getLen() == 0
    except Exception:  # noqa: BLE001 - Spark Connect, or the path went away
        return False


def _listing_error(exc: Exception, paths: list[str], uris: list[str]) -> str:
    text = str(exc)
    missing = re.search(r"Path does not exist: (\S+?)\.?(\s|$)", text)
    if missing:
        gone = _norm(missing.group(1))
        for arg, uri in zip(paths, uris, strict=True):
            if _norm(uri) == gone:
                return f"{arg}: no such file or folder"
        return f"{missing.group(1)}: no such file or folder"
    missing = _no_file_system(text, uris)
    if missing:
        return f"cannot list the inputs: {missing}"
    from ksniff.engine.spark_session import _one_line

    return f"cannot list the inputs: {_one_line(exc)}"


def _no_file_system(text: str, uris: Sequence[str]) -> str | None:
    """What an error's `text` says when the Hadoop file system of `uris` is not on Spark's class path."""
    missing_class = re.search(r"Class (\S+FileSystem) not found", text)
    if missing_class is None:
        return None
    schemes = sorted({urlsplit(u).scheme + "://" for u in uris if urlsplit(u).scheme not in ("", "file")})
    return (
        f"Spark has no {missing_class.group(1)} on its class path, the file system of "
        f"{', '.join(schemes) or 'an input'} (add its jars: --conf spark.jars.packages=...)"
    )


def _unwritable(spark: Any, directory: str) -> str | None:
    """Why the driver's Hadoop configuration cannot reach the file system of an export `directory` (its
    class missing, a host that does not resolve), asked before the audit; None when it can, or when only
    the write can tell (Spark Connect)."""
    from ksniff.engine.spark_session import _one_line

    try:
        jvm = spark.sparkContext._jvm
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    except Exception:  # noqa: BLE001 - Spark Connect: no JVM of ours
        return None
    try:
        jvm.org.apache.hadoop.fs.Path(directory).getFileSystem(hadoop)
    except Exception as exc:  # noqa: BLE001 - Py4JJavaError and friends
        text = str(exc)
        return _no_file_system(text, [directory]) or _one_line(exc)
    return None


# -- the run -----------------------------------------------------------------------------------------------


def _run(
    session: Session, paths: list[str], config: EngineConfig, whole: bool = False, keep: Any = None
) -> SparkAudit:
    """The inputs grouped into capture sets (ksniff.engine.sets) and all of them audited by one pipeline,
    the set a part of every key (flows, connection numbers, producer groups, context, the --records
    budget), as the local engine audits each set on its own; the tables labelled with set and cluster.

    The summary holds every finding and transaction only when `whole`; else their digest
    (ksniff.audit.digest), made by the tasks with the report's filters (`keep`) applied, which is all the
    terminal report reads: the driver's share then grows with the fleet's producers and partitions, not
    with the length of its traffic."""
    spark = session.spark
    with (
        _unless_chosen(spark, LISTING_TASKS, str(4 * session.parallelism)),
        _unless_chosen(spark, ARROW_BATCH_BYTES, str(BATCH_BYTES)),
        _unless_chosen(spark, SIMPLIFIED_TRACEBACK, "false", "true"),
    ):
        inputs = _list_inputs(spark, paths)
        with _shuffle_partitions(spark, partitions_for(sum(i.length for i in inputs), session.parallelism)):
            return _audited_run(session, inputs, paths, config, whole, keep)


def _audited_run(
    session: Session, inputs: list[_Input], paths: list[str], config: EngineConfig, whole: bool, keep: Any
) -> SparkAudit:
    """`_run`'s work once the inputs are listed, with the run's settings made."""
    planned, warnings, skipped = _plan(session, inputs, paths, config)
    for index, (_cset, members) in enumerate(planned):
        for m in members:
            m.cset = index
    # With --records, first each set on a decompression budget of its own where it is read (exact
    # when the run's one budget would not have bound: checked), else the exact way.
    for apart in (True, False) if config.keep_records else (False,):
        cached: list[Any] = []
        left = (list(warnings), skipped)
        try:
            return _pipeline(session, inputs, paths, planned, left, config, cached, whole, keep, apart)
        except BaseException as exc:
            for df in cached:
                df.unpersist()
            if not isinstance(exc, _BudgetBinds):
                raise
    raise AssertionError("unreachable: only the first way raises _BudgetBinds")


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SPARK_DEFAULT_SHUFFLE_PARTITIONS = "200"


@contextlib.contextmanager
def _shuffle_partitions(spark: Any, partitions: int) -> Iterator[None]:
    """The run's own queries with `partitions` shuffle partitions (sized for the run: `partitions_for`),
    unless whoever runs it chose a number (`_unless_chosen`). `partitions` 0: the session's.

    Left at Spark's default of 200, every exchange a join, window or aggregate makes in these queries is
    200 partitions: adaptive execution merges the small ones it reads, but every task writing into it
    still writes 200 (on the benchmark's 164 files, a fifth of the shuffled way's CPU); and the exports'
    global sorts (`SparkAudit.write`) write as many files. The one setting sizes every exchange the
    queries make (a join left to adaptive execution still becomes a broadcast join when one side turns
    out small, which an explicit repartition of both sides would prevent)."""
    if not partitions:
        yield
        return
    with _unless_chosen(spark, SHUFFLE_PARTITIONS, str(partitions), SPARK_DEFAULT_SHUFFLE_PARTITIONS):
        yield


# What one Arrow batch handed to a Python task may hold: a capture read by Spark's binaryFile source
# larger than this comes alone in its batch, so a task holds one such file at a time. Spark cuts a batch
# at maxRecordsPerBatch rows (10,000) and sets no bound on bytes by default, so the binaryFile rows of a
# capture set's files, gathered into one partition, reached its task as one batch: all of the set's
# bytes in the task's memory at once.
ARROW_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
BATCH_BYTES = 64 << 20
# How many tasks list the inputs when there are more than Spark's threshold of them (32): by default one
# per path, up to 10,000. Each task costs the driver more than listing a path does: 164 local files
# listed in 0.50-0.59 s of wall time and 0.72-0.87 s of the driver JVM's CPU by 164 tasks, in 0.12-0.14 s
# and 0.16-0.17 s by 8 (a warm `local[2]` session). A few per core keep a listing of many remote paths
# (an object store's, each a request) spread over the cluster.
LISTING_TASKS = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
# Spark starts one pyspark daemon, and one set of Python workers, per distinct worker environment, and its
# SQL Python runners add SPARK_SIMPLIFIED_TRACEBACK=1 to theirs while others of a run do not: two daemons
# and five workers where one daemon and three do (the rotated `bulk1g` on `local[2]`), each worker paying
# its imports (0.17-0.19 s). With the setting off, every runner has the one environment: 7.3-7.6 s of CPU
# for the whole first run against 8.2-8.6 s (bench/README, "One daemon for the Python workers"). ksniff's
# tasks turn their own errors into one-line errors, so the pyspark frames it leaves in a traceback only
# matter for a bug, where they help.
SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


@contextlib.contextmanager
def _unless_chosen(spark: Any, key: str, value: str, default: str | None = None) -> Iterator[None]:
    """The run's queries with the Spark SQL setting `key` at `value`, unless whoever runs it chose one
    (spark-submit's or the session's --conf, or set on the session before the run; `default`: what the
    session says when nobody did, None when it says nothing). It is put back when the run's queries are
    done, so the tables the run returns, computed later, are computed with the session's own."""
    # The context's own SparkConf, read in place: getConf() copies every setting into a new one (on the
    # rotated `bulk1g`, 310 of a run's ~1,800 calls into the JVM were those copies).
    conf = getattr(spark.sparkContext, "_conf", None) or spark.sparkContext.getConf()
    said = conf.get(key, None)
    now = spark.conf.get(key) if default is not None else spark.conf.get(key, None)
    if said is not None or now != default:
        yield
        return
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if default is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, now)


class _BudgetBinds(Exception):
    """The run's --records budget, drawn set after set, would have treated a batch of a set audited on a
    budget of its own otherwise: the run is audited again the exact way (its records decoded where they
    are read or shuffled, the budget replayed over their sizes by the driver)."""


@dataclass
class _SetRun:
    """What the driver learnt of one capture set between the stages."""

    metas: list  # its captures' FileMetas
    stats: list = field(default_factory=list)  # its flows' FlowStats
    last_event: float = -math.inf
    # (audit order, packed event) of the context events every key group is given (`_every_group`)
    context: list = field(default_factory=list)
    identity: Identity = field(default_factory=Identity)
    # Its key groups' AuditOutputs, then its context group's; without findings and transactions unless
    # the run collects whole lists, `digests` then holding what the report reads of them.
    outputs: list = field(default_factory=list)
    digests: list = field(default_factory=list)  # ksniff.audit.digest.Digest, one per output
    context_output: Any = None  # its context group's whole output (gaps and partition logs)
    # Its result, when it was audited where it was read (findings and transactions as for `outputs`).
    audited: AuditResult | None = None
    peak: int | None = None  # then, with --records: the peak of its own decompression budget


def _pipeline(
    session: Session,
    inputs: list[_Input],
    paths: list[str],
    planned: list[tuple[capture_sets.CaptureSet, list[_Input]]],
    left: tuple[list[str], int],
    config: EngineConfig,
    cached: list,
    whole: bool = False,
    keep: Any = None,
    records_apart: bool = False,
) -> SparkAudit:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks
    from ksniff.report.transactions import SLOWEST_SHOWN

    spark = session.spark
    warnings, skipped = left
    members = [m for _cset, ms in planned for m in ms]
    partitions = partitions_for(sum(i.length for i in members), session.parallelism)
    clocks_of = {index: c.clocks for index, (c, _ms) in enumerate(planned) if c.clocks}
    # A part's durations come to the driver only when they are few; else it asks for their spread.
    digests = tasks.Digests(clocks_of, keep, SLOWEST_SHOWN, tasks.DURATIONS_KEPT)
    # The partition logs' folds of each capture set (stages 2 and 3).
    folds = {
        index: log_folds(session.parallelism, sum(m.length for m in ms))
        for index, (_c, ms) in enumerate(planned)
    }
    events, small, metas_of = _decoded(
        session, planned, config, partitions, cached, digests, records_apart, folds
    )
    # The local engine's errors in its order: the sets' in plan order, each set's files in order.
    runs: dict[int, _SetRun] = {}
    left_out: dict[int, list] = {}
    for index in range(len(planned)):
        metas, left_out[index] = _check_inputs(sorted(metas_of.get(index, ()), key=lambda m: m.file))
        if metas:
            runs[index] = _SetRun(metas)
    conns, group_rows, groups = _between_stages(*small, runs)
    del small  # what the driver keeps of it is in `runs` now (the sets' results are the bulk of it)
    used = 0  # of the --records budget, by the sets before, in plan order
    for run in runs.values():
        if run.peak is not None:
            if used + run.peak > config.max_records_run:
                raise _BudgetBinds
            used += run.audited.decode.records_inflated_bytes
    if whole:  # the findings and transactions of the sets audited where they were read
        listed = events.filter(F.col("kind") == tasks.AUDITED_LISTS).select("cset", "blob").toArrow()
        for cset, blob in zip(*(listed.column(n).to_pylist() for n in ("cset", "blob")), strict=True):
            findings, transactions = tasks.loads(blob)
            runs[cset].audited = replace(runs[cset].audited, findings=findings, transactions=transactions)
            runs[cset].digests = []
    ends = {
        index: tasks.RunEnd(
            last_event=None if run.last_event == -math.inf else run.last_event, folds=folds[index]
        )
        for index, run in runs.items()
    }

    # Stage 3: per group of producer keys of each set, in audit order, with the set's context events.
    # Sets audited where they were read have nothing to fold: when all were, neither fold runs.
    folding = [index for index, run in runs.items() if run.audited is None]
    if folding:
        # Each key group to a fold task of its own while there are as many tasks as groups (`_placed`).
        tasks_n = max(1, min(partitions, len(groups)))
        placed = sorted(groups)
        slot_of = dict(zip(placed, _placed(spark, [1] * len(placed), tasks_n), strict=True))
        group_table = spark.createDataFrame(
            [(c, k, g, slot_of[c, g]) for c, k, g in group_rows] or [(-1, "", "", 0)],
            "cset int, key string, group string, slot long",
        )
        context = {index: run.context for index, run in runs.items()}
        keyed = events.filter(F.col("kind").isin(tasks.KEYED, tasks.KEYED_LOG)).join(
            F.broadcast(group_table), ["cset", "key"]
        )
        outputs = (
            keyed.unionByName(_routed_context(events, group_table))
            .repartition(tasks_n, "slot")
            .drop("slot")
            .sortWithinPartitions("cset", "group", *tasks.ORDER_COLUMNS)
            .mapInArrow(tasks.fold(config, ends, context, conns, groups, digests), tasks.OUTPUTS_DDL)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        cached.append(outputs)
        column = "blob" if whole else "digest"
        audited = outputs.select("cset", "key", column).toArrow()
        got = zip(*(audited.column(n).to_pylist() for n in ("cset", "key", column)), strict=True)
        for cset, _key, blob in sorted(got):
            if whole:
                runs[cset].outputs.append(tasks.loads(blob))
            else:
                bare, digest = tasks.loads(blob)
                runs[cset].outputs.append(bare)
                runs[cset].digests.append(digest)
        # Each set's CONTEXT_KEY group: the capture gaps, which are no producer's, and the partition logs,
        # which read the context events with the LOG rows (each once), folded where they are, the logs
        # of a large set split by partition over several tasks (`log_folds`).
        tasks_n = max(1, min(sum(folds[index] for index in folding), partitions))
        folded = (
            _log_folds(events.filter(F.col("kind").isin(tasks.CONTEXT, tasks.LOG, tasks.KEYED_LOG)), folds)
            .repartition(tasks_n, "cset", "lfold")
            .sortWithinPartitions("cset", "lfold", *tasks.ORDER_COLUMNS)
            .mapInArrow(tasks.context_fold(config, ends, conns, digests), tasks.OUTPUTS_DDL)
            .select("cset", "blob")
            .toArrow()
        )
        parts_of: dict[int, list] = {}
        for c, b in zip(*(folded.column(n).to_pylist() for n in ("cset", "blob")), strict=True):
            parts_of.setdefault(c, []).append(tasks.loads(b))
        for index in folding:
            run = runs[index]
            parts = parts_of.get(index)
            run.context_output = (
                merge_outputs(parts) if parts else tasks.context_output(config, ends[index], ())
            )
            if whole:
                run.outputs.append(run.context_output)
            else:  # its gaps are few: digested here, as the tasks digest the groups' outputs
                bare, digest = digests.of(index, run.context_output)
                run.outputs.append(bare)
                run.digests.append(digest)
    else:
        outputs = spark.createDataFrame([], tasks.OUTPUTS_DDL)

    # The sets' summaries, numbered in plan order among those with captures; the --records budget is
    # drawn set after set, as the local engine runs them.
    table_events = events.filter(F.col("kind") == tasks.TABLE)
    replayed = config.keep_records and any(run.audited is None for run in runs.values())
    probe = _probe_records(table_events, config) if replayed else None
    results: list[AuditResult] = []
    sets: list[capture_sets.CaptureSet] = []
    labels: dict[int, tuple[int, str | None]] = {}
    clocks: dict[int, tuple] = {}
    cut: set[tuple] = set()
    found: set[int] = set()
    try:
        for index, (cset, _members) in enumerate(planned):
            skipped += len(left_out[index])
            warnings.extend(_left_out_warnings(left_out[index]))
            run = runs.get(index)
            if run is None:
                continue
            found.update(inputs[m.file].arg for m in run.metas)
            if run.audited is not None:
                summary = replace(run.audited, engine="spark")
            else:
                records = DecodeStats(by_api={})
                if probe is not None:
                    used = sum(r.decode.records_inflated_bytes for r in results)  # one --records budget
                    cut |= _records_budget(probe, index, config, records, used)
                capture, decode, warns = _totals(run.metas, run.stats, config, records)
                info = [
                    InputInfo(m.path, m.format, ",".join(m.linktypes), m.packets, m.size) for m in run.metas
                ]
                summary = AuditResult.of_run(
                    "spark",
                    inputs=info,
                    capture=capture,
                    decode=decode,
                    output=merge_outputs(run.outputs),
                    warnings=warns,
                )
            if cset.clocks:
                summary.findings = within_uncertainty(summary.findings, cset.clocks)
            if not whole:
                summary.digest = Digest.merge(run.digests)
            cset = replace(cset, number=len(sets) + 1)
            stamp_set(summary, cset, run.identity)
            sets.append(summary.capture_sets[0])
            ids = run.identity.cluster_ids
            labels[index] = (cset.number, ids[0] if len(ids) == 1 else None)
            clocks[index] = cset.clocks
            results.append(summary)
    finally:
        if probe is not None:
            probe[0].unpersist()
    for i, arg in enumerate(paths):
        if i not in found and any(x.arg == i for x in inputs):
            raise CaptureError(f"{arg}: no pcap or pcapng files in this folder")
    summary = join_results(results, sets, [i.path for i in inputs], engine="spark")
    summary.warnings[:0] = warnings  # inputs skipped while listing folders come first, as locally
    summary.capture.skipped_files += skipped

    stored = events.filter(F.col("kind") == tasks.TABLE_ROWS)
    listed = events.filter(F.col("kind") == tasks.AUDITED_LISTS) if not whole else None
    sources = (table_events, stored, listed)
    made = _RunTables(spark, config, sources, outputs, runs, labels, clocks, conns, frozenset(cut))
    frames = _frames(made, summary)
    run = SparkAudit(spark, summary, frames, list(cached), partitions)
    txns = None if summary.digest is None else summary.digest.transactions
    if txns is not None and txns.count and txns.durations is None:
        summary.digest.transactions.spread = _duration_spread(run._frame("transactions"), keep, txns.count)
    return run


# Capture bytes of a set per fold of its partition logs (`log_folds`).
LOG_FOLD_BYTES = 256 << 20


def log_folds(cores: int, set_bytes: int) -> int:
    """Into how many folds a capture set's partition logs are split: one per LOG_FOLD_BYTES of its
    captures, at most one per core of the session and ksniff.audit.partlog.SPLIT_MAX. Each fold is given
    what every fold reads (a transaction's end, a producer's timeout, topic names, the capture's losses)
    and its pieces of the Produce and Fetch exchanges, which repeat what the whole exchange's blob
    shared: on the benchmark's files, two folds are given 1.4x the one fold's bytes and take 1.4x its CPU
    in all, for the logs of a set too large for one task folded in parallel instead of by one task."""
    from ksniff.audit.partlog import SPLIT_MAX

    return max(1, min(cores, SPLIT_MAX, set_bytes // LOG_FOLD_BYTES))


def _log_folds(rows: Any, folds: dict[int, int]) -> Any:
    """The rows the partition logs read, each once per fold of its capture set that reads it (`lfold`:
    the fold stage 2 gave it, or every fold of the set: spark_tasks.log_pieces); `folds`: each set's."""
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    lfold = F.col("lfold")
    if all(n == 1 for n in folds.values()):
        return rows.withColumn("lfold", F.lit(0))
    of_set = F.create_map(*(F.lit(x) for index, n in sorted(folds.items()) for x in (index, n)))
    every = F.sequence(F.lit(0), F.element_at(of_set, F.col("cset")) - 1)
    needed = F.when(lfold == tasks.EVERY_FOLD, every).otherwise(F.array(lfold))
    return rows.withColumn("lfold", F.explode(needed))


def _duration_spread(transactions: Any, keep: Any, count: int) -> tuple[int, float, float, float]:
    """(ended, p50, p95, max) of the durations of the ended transactions in the `transactions` table
    (those `keep` keeps), nearest-rank as the report takes them from a list (ksniff.report.transactions).
    `count`: the transactions the run's digest counted. Up to DURATIONS_MERGED of them (8 MiB of
    durations, what the driver holds when it merges digests) the durations come to the driver in one job
    and are ranked there; past it they are counted and sorted on the executors, only the two ranked
    values and the maximum brought back."""
    from pyspark.sql import functions as F

    from ksniff.audit.digest import DURATIONS_MERGED
    from ksniff.engine import spark_tasks as tasks
    from ksniff.report.transactions import percentile_rank, spread

    if keep is not None and keep.active:
        transactions = transactions.mapInArrow(tasks.keep_rows(keep, "transactions"), transactions.schema)
    ended = transactions.where(F.col("end_ts").isNotNull()).select(
        (F.col("end_ts") - F.col("start_ts")).alias("d")
    )
    if count <= DURATIONS_MERGED:
        return spread(sorted(ended.toArrow().column("d").to_pylist()))
    n, longest = ended.agg(F.count("d"), F.max("d")).first()
    if not n:
        return (0, 0.0, 0.0, 0.0)
    p50, p95 = (percentile_rank(n, p) - 1 for p in (50, 95))  # from 0, as zipWithIndex counts
    ranks = {p50, p95}
    picked = dict(
        ended.rdd.map(lambda row: row[0])
        .sortBy(lambda d: d)
        .zipWithIndex()
        .filter(lambda pair: pair[1] in ranks)
        .map(lambda pair: (pair[1], pair[0]))
        .collect()
    )
    return (n, picked[p50], picked[p95], longest)


def _frames(tables: _RunTables, summary: AuditResult) -> dict[str, Any]:
    """The run's tables, each made as a DataFrame when it is first asked for (`_RunTables.frame`), None
    for those the run does not keep. Made at once, the ten tables' queries cost the driver ~740 calls into
    its JVM (a Python function shipped and a plan analysed per part of each table: on the rotated
    `bulk1g`, two fifths of all the calls of a run), which a run that only prints its report never
    uses."""
    from ksniff.engine import spark_tasks as tasks

    config = tables.config
    frames: dict[str, Any] = {}
    for table in ("exchanges", "batches", "records"):
        kept = config.keep_records if table == "records" else config.keep_tables
        frames[table] = _Later(tables.frame, table) if kept else None
    for table in tasks.OUTPUT_TABLES:
        frames[table] = _Later(tables.frame, table)
    # The partition logs' tables are the joined summary's as it is now (its partitions came from each
    # set's context group, folded by one task), numbered as the local export numbers them.
    for table in _DRIVER_TABLES:
        batch = tasks.summary_batch(table, summary)
        frames[table] = _Later(_from_batch, tables.spark, batch, tasks.table_ddl(table))
    return frames


def _from_batch(spark: Any, batch: Any, ddl: str) -> Any:
    """A DataFrame of one Arrow batch the driver made."""
    import pyarrow as pa

    return spark.createDataFrame(pa.Table.from_batches([batch]), ddl)


@dataclass(frozen=True)
class _RunTables:
    """What a run's tables are made of: the TABLE rows (`sources`: the events, the rows of sets audited
    where they were read, their lists), the folds' `outputs`, and each set's run, label and clocks."""

    spark: Any
    config: EngineConfig
    sources: tuple[Any, Any, Any]
    outputs: Any
    runs: dict[int, _SetRun]
    labels: dict[int, tuple[int, str | None]]
    clocks: dict[int, tuple]
    conns: dict[int, int]
    cut: frozenset[tuple]

    def frame(self, table: str) -> Any:
        """One of the run's tables as a DataFrame, made by the executors from the TABLE rows
        (`exchanges`, `batches`, `records`), the rows of sets audited where they were read (`stored`:
        TABLE_ROWS) and the folds' outputs, each row labelled with its capture set and cluster; the
        findings and transactions of sets audited where they were read from their lists (`listed`:
        AUDITED_LISTS, None when the driver holds them)."""
        from pyspark.sql import functions as F

        from ksniff.engine import spark_tasks as tasks

        config, runs, labels, clocks = self.config, self.runs, self.labels, self.clocks
        table_events, stored, listed = self.sources
        clusters = {index: label[1] for index, label in labels.items()}
        if table in ("exchanges", "batches", "records"):
            made = tasks.table_rows(table, self.conns, clusters, config.max_records_batch, self.cut)
            ddl = tasks.table_ddl(table, order=True)
            frame = table_events.mapInArrow(made, ddl)
            mine = stored.filter(F.col("key") == table).mapInArrow(tasks.stored_rows(table, clusters), ddl)
            return frame.unionByName(mine)
        # The output tables of the sets audited where they were read: made by those tasks when the run
        # keeps tables; else from their lists where those are (findings and transactions) or by the
        # driver. The shuffled sets' context groups' outputs are made by the driver (their key groups' by
        # the folds' tasks).
        made_there = {i for i in labels if runs[i].audited is not None and config.keep_tables}
        by_driver = [i for i in labels if i not in made_there]
        ddl = tasks.PRODUCERS_DDL if table == "producers" else tasks.table_ddl(table)
        frame = self.outputs.mapInArrow(tasks.output_rows(table, labels, clocks), ddl)
        if made_there:
            there = stored.filter(F.col("key") == table).mapInArrow(tasks.labelled_rows(table, labels), ddl)
            frame = frame.unionByName(there)
        mine = [i for i in by_driver if table != "producers" or runs[i].audited is not None]
        if listed is not None and table != "producers":
            from_lists = [i for i in mine if runs[i].audited is not None]
            if from_lists:
                rows = listed.filter(F.col("cset").isin(from_lists))
                frame = frame.unionByName(rows.mapInArrow(tasks.listed_rows(table, labels, clocks), ddl))
                mine = [i for i in mine if i not in from_lists]
        if not mine:
            return frame
        return _with_driver_rows(self.spark, frame, table, ddl, mine, runs, labels, clocks)


class _Later:
    """A table made when it is first asked for (SparkAudit._frame): queries, and rows the driver would
    otherwise make, for a run that never reads them."""

    def __init__(self, make: Callable[..., Any], *args: Any) -> None:
        self.make, self.args = make, args


def _with_driver_rows(
    spark: Any,
    frame: Any,
    table: str,
    ddl: str,
    sets: list[int],
    runs: dict[int, _SetRun],
    labels: dict[int, tuple[int, str | None]],
    clocks: dict[int, tuple],
) -> Any:
    """`frame` with the rows of `table` the driver makes: of each set in `sets`, its result if it was
    audited where it was read, else its context group's output, findings judged against the set's
    clocks."""
    import pyarrow as pa

    from ksniff.engine import spark_tasks as tasks

    outputs = []
    for i in sets:
        output = runs[i].audited or runs[i].context_output
        outputs.append(tasks.judged(output, clocks[i]) if clocks[i] and table == "findings" else output)
    own = tasks.output_batch(table, outputs, [labels[i] for i in sets])
    if not own.num_rows:
        return frame
    return frame.unionByName(spark.createDataFrame(pa.Table.from_batches([own]), ddl))


# Stage 1's tasks over files read where they lie: this many per core, and one more per this many bytes
# of the run's captures (the files dealt by size, the largest first). Each task costs ~50 ms of pyspark
# whatever it does, and every later scan of the cached rows has as many: 4 per core and one per 64 MB
# took 24 tasks for the rotated 1 GB capture, whose warm shuffled run then cost 6.3-6.7 s of CPU, against
# 5.3-6.3 s with 8 tasks (bench/README.md, "Fewer tasks, the cluster asked of few files, and the loops per
# segment in C").
READ_TASKS_PER_CORE = 2
READ_TASK_BYTES = 256 << 20
SHUFFLED_COST = 2.5  # CPU of the shuffled way against auditing where read (1.9-2.0x measured, README)
# Every capture set the shuffled way, none audited or decoded where it is read: what scaling out costs,
# for the tests and the benchmark (`bench_engines.py --shuffled`).
EVERY_SET_SHUFFLED = False


def _decoded(
    session: Session,
    planned: list[tuple[capture_sets.CaptureSet, list[_Input]]],
    config: EngineConfig,
    partitions: int,
    cached: list,
    digests: Any = None,
    records_apart: bool = False,
    folds: dict[int, int] | None = None,
) -> tuple[Any, tuple[list[dict], Any], dict[int, list]]:
    """Stages 1 and 2: every capture set's decode events (cached), the few rows per file and connection
    the driver reads between the stages (as dicts, and the connections' openings as an Arrow table: see
    `_between_stages`), and each set's FileMetas. `folds`: each set's partition logs' folds
    (`log_folds`), set to one here for a set decoded where its file is read."""
    import pyarrow.compute as pc
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    spark = session.spark
    members = [m for _cset, ms in planned for m in ms]
    total = sum(i.length for i in members)
    # A capture set is audited by the task that reads it, with the local engine's code, and nothing of
    # it is shuffled: the task walks files it opens itself (paths, `file:` inputs) a mapped window at a
    # time, in the local engine's bounded memory, and writes each file Spark's binaryFile source read to
    # its local disk before it takes the next (one such file in its memory at a time: each larger than
    # BATCH_BYTES comes in an Arrow batch of its own), whatever the set's size. That costs about
    # half of what shuffling its segments to their flows' tasks and its events to their producer groups'
    # does (SHUFFLED_COST, with a margin for flows spread over files, whose segments the benchmark does
    # not shuffle), so a set goes the shuffled way only when its share of the run is more than that much
    # above a core's (one large capture on many cores: its connections decoded in parallel). With
    # --records, whose decompression budget is drawn set after set: when every set goes where it is read
    # (`records_apart`), each is audited there on a budget of its own, which the driver checks against the
    # run's (`_BudgetBinds`); else (or when that check fails) sets of one file up to DIRECT_MAX_BYTES are
    # only decoded where they are read, and only when there are enough of them to keep every core busy,
    # the budget replayed by the driver. The others' segments go to their flows' tasks (stage 2).
    small = [] if EVERY_SET_SHUFFLED else [ms for _cset, ms in planned]
    fair = SHUFFLED_COST * total / session.parallelism
    direct = [ms for ms in small if sum(m.length for m in ms) <= fair]
    if config.keep_records and not (records_apart and len(direct) == len(planned)):
        if records_apart:
            raise _BudgetBinds  # not every set goes where it is read: the exact way at once
        # Decoded where read, a file's segments are held by its task (`extract_decoded`), whatever reads it.
        direct = [ms for ms in small if len(ms) == 1 and ms[0].length <= tasks.DIRECT_MAX_BYTES]
        if len(direct) < session.parallelism:
            direct = []
    direct_sets = {ms[0].cset for ms in direct}
    for index in direct_sets:  # decoded where read (extract_decoded): their logs in one fold
        if folds is not None:
            folds[index] = 1
    shuffled = [m for m in members if m.cset not in direct_sets]

    metas_of: dict[int, list] = {}
    parts = []
    segments = None
    try:
        if shuffled:
            # Stage 1: the files read on the executors. Kept (memory, then disk) because each set's end
            # time, which stage 2 needs, is known only once every file has been read.
            segments = _read(
                spark, [[m] for m in shuffled], session.parallelism, total, tasks.extract_referring
            ).persist(StorageLevel.MEMORY_AND_DISK)
            # The files' summaries, one row each: what went wrong, and each set's end.
            summaries = segments.where(F.col("meta").isNotNull()).select("cset", "meta").toArrow()
            for cset, meta in zip(*(summaries.column(n).to_pylist() for n in ("cset", "meta")), strict=True):
                metas_of.setdefault(cset, []).append(tasks.loads(meta))
            ends = {}
            # The files whose segments refer to their payloads, for stage 2 to read them there.
            where = {m.file: tasks.local_path(m.uri) for m in shuffled}
            files = {
                m.file: (where[m.file], m.path, m.stamp)
                for metas in metas_of.values()
                for m in metas
                if m.stamp is not None
            }
            for index in sorted({m.cset for m in shuffled}):
                metas = metas_of.get(index, ())
                if any(m.error for m in metas):
                    if not direct:  # the first error in plan order is this one: at once
                        _check_inputs(sorted(metas, key=lambda m: m.file))
                    continue  # reported below, in plan order, once the direct sets' files are read
                end_ts = max((m.max_ts for m in metas if m.max_ts is not None), default=None)
                ends[index] = tasks.RunEnd(end_ts, folds=(folds or {}).get(index, 1))
            # Stage 2: per flow of each set, in the merge's order.
            large = [m.file for m in shuffled if m.length > total / session.parallelism]
            parts.extend(_flows_decoded(spark, segments, ends, config, partitions, large, files))
        if direct:
            # Each such set is audited where it is read, by the local engine's code; with --records the
            # exact way, decoded there (its events audited below).
            if config.keep_records and not records_apart:
                how = tasks.extract_decoded(config)
            else:
                how = tasks.extract_audited(config, digests.clocks, digests)
            parts.append(_read(spark, direct, session.parallelism, total, how, together=True))
        events = parts[0]
        for part in parts[1:]:
            events = events.unionByName(part)
        events = events.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(events)
        # The few rows per flow or connection the driver reads; the context events of connections and
        # of producer ids stay in Spark, routed to their key groups (`_routed_context`), and of the
        # ApiVersions answers only those that change the cluster's transaction.version come.
        kind, key = F.col("kind"), F.col("key")
        bulk = (tasks.KEYED, tasks.KEYED_LOG, tasks.TABLE, tasks.LOG, tasks.TABLE_ROWS, tasks.AUDITED_LISTS)
        few = ~kind.isin(*bulk, tasks.CONN_KEYS) & ((kind != tasks.CONTEXT) | key.isNull())
        got = events.filter(few).toArrow()
        # A connection's opening, one row per connection, stays in columns (not a dict per row).
        opening = pc.equal(got.column("kind"), tasks.CONN)
        openings = got.filter(opening).select(["cset", "ppm", "pfile", "pidx", "oconn"])
        small = got.filter(pc.invert(opening)).to_pylist()
        del got
        # Sets audited where they were read have no context rows: when all were, no job for them.
        if shuffled or (direct and config.keep_records and not records_apart):
            small += _txn_version_changes(events).toArrow().to_pylist()
    finally:
        if segments is not None:
            segments.unpersist()
    for row in small:  # the files decoded where they were read say how their walks went
        if row["kind"] == tasks.FILE_META:
            metas_of.setdefault(row["cset"], []).append(tasks.loads(row["blob"]))
    return events, (small, openings), metas_of


SPREAD_FLOWS_MAX = 250_000  # flows seen in several files the driver broadcasts (a few MB); above, all meet


def _flows_decoded(
    spark: Any,
    segments: Any,
    ends: dict,
    config: EngineConfig,
    partitions: int,
    large: list[int],
    files: dict[int, tuple] | None = None,
) -> list:
    """Stage 2 over the segment rows of the sets in `ends`: each flow (every connection on one 4-tuple)
    through one Reassembler and Decoder, in the merge's order (spark_tasks.decode; `files`: the files
    whose segments refer to their payloads, read where they lie).

    A file's segments are all in the partition of the task that read it (files are never split). A flow
    seen in that file only, as most are (a client's connection to the broker whose host was captured), is
    decoded there: its rows sorted within the partition, nothing shuffled. A flow seen in several files
    of its set (a long connection over rotated files, one between two captured hosts) has its segments
    brought together by a shuffle, and so have the flows of the `large` files, each more than a core's
    share of the run: decoded where it was read, one such file would keep one core busy while the others
    wait (one large capture on many cores goes the shuffled way for its connections to be decoded in
    parallel). Either way the decode task sees a flow's rows alone and in the same order, so the events
    are the same. Which flows are spread is found by Spark (a distinct over the set, flow and file
    columns) and only those come to the driver, to be broadcast; when they are too many to broadcast
    (SPREAD_FLOWS_MAX), every flow is shuffled."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    live = segments.filter(F.col("flow").isNotNull() & F.col("cset").isin(list(ends)))
    per_flow = live.groupBy("cset", "flow").agg(
        F.countDistinct("file").alias("files"), F.count(F.lit(1)).alias("blocks")
    )
    # The spread flows, with their blocks (about their work), and how many flows lie in one file each.
    spread = (
        per_flow.where(F.col("files") > 1)
        .select("cset", "flow", "blocks")
        .limit(SPREAD_FLOWS_MAX + 1)
        .unionByName(
            per_flow.where(F.col("files") == 1)
            .agg(F.count(F.lit(1)).alias("blocks"))
            .select(F.lit(-1).alias("cset"), F.lit(None).cast("binary").alias("flow"), "blocks")
        )
        .toArrow()
    )
    marker = pc.equal(spread.column("cset"), -1)
    alone = sum(spread.filter(marker).column("blocks").to_pylist())
    spread = spread.filter(pc.invert(marker))
    order = ("cset", "flow", "pm", "file", "idx")
    decode = tasks.decode(config, ends, files)
    if spread.num_rows > SPREAD_FLOWS_MAX:  # too many to list: every flow to its flow's task, hashed
        every = live.repartition(partitions, "cset", "flow").sortWithinPartitions(*order)
        return [every.mapInArrow(decode, tasks.EVENTS_DDL)]
    parts = []
    home = ~F.col("file").isin(large) if large else F.lit(True)
    here = live.filter(home)
    apart = None
    if spread.num_rows:
        # Each spread flow to a task of its own while there are as many tasks as flows, the flows with the
        # most blocks first into the least loaded (`_placed`): no task waits on a partition no flow
        # hashed to, and two large flows share a task only when there are more flows than tasks.
        n = min(partitions, spread.num_rows)
        slots = _placed(spark, spread.column("blocks").to_pylist(), n)
        rows = zip(spread.column("cset").to_pylist(), spread.column("flow").to_pylist(), slots, strict=True)
        flows = F.broadcast(spark.createDataFrame(list(rows), "cset int, flow binary, slot long"))
        here = here.join(flows, ["cset", "flow"], "left_anti")
        apart = live.join(flows, ["cset", "flow"]).repartition(n, "slot").drop("slot")
    if large:  # every flow of these files to its flow's task, hashed (they are not listed)
        big = live.filter(~home)
        if spread.num_rows:
            big = big.join(flows, ["cset", "flow"], "left_anti")
        big = big.repartition(partitions, "cset", "flow")
        apart = big if apart is None else apart.unionByName(big)
    if alone:  # the flows decoded where their files were read, in no more tasks than there are flows
        here = here.coalesce(alone)
        parts.append(here.sortWithinPartitions(*order).mapInArrow(decode, tasks.EVENTS_DDL))
    if apart is not None:
        parts.append(apart.sortWithinPartitions(*order).mapInArrow(decode, tasks.EVENTS_DDL))
    return parts


def _placed(spark: Any, weights: list[int], n: int) -> list[int]:
    """For items of these weights, a value of a long column to give each so that `repartition(n, column)`
    puts it in one of n partitions, the heaviest first into the least loaded. Spark places a row by
    pmod(hash(column), n); the value that lands in each partition is found by Spark itself, among the
    first 64n numbers (every partition is among them: a partition none of them reached, for all that,
    is left without items)."""
    import heapq

    from pyspark.sql import functions as F

    got = spark.range(0, 64 * n).select("id", F.pmod(F.hash("id"), F.lit(n)).alias("p")).toArrow()
    lands: dict[int, int] = {}
    for value, p in zip(got.column("id").to_pylist(), got.column("p").to_pylist(), strict=True):
        lands.setdefault(p, value)
    bins = [(0, p) for p in sorted(lands)]
    out = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        load, p = heapq.heappop(bins)
        out[i] = lands[p]
        heapq.heappush(bins, (load + weights[i], p))
    return out


def _between_stages(
    small: list[dict], openings: Any, runs: dict[int, _SetRun]
) -> tuple[dict[int, int], list[tuple[int, str, str]], dict[tuple[int, str], frozenset[str]]]:
    """From stage 2's few rows per flow and connection, per set: its counters and last event time, the
    local engine's connection numbers (in the merge's order of `openings`, an Arrow table of the CONN
    rows' set, place and connection), the context events every group is given, its cluster identity
    and its producer keys' groups. Returns the connection numbers (ids are unique across sets), the
    (set, key, group) rows and each (set, group)'s keys."""
    import pyarrow.compute as pc

    from ksniff.engine import spark_tasks as tasks

    by_set: dict[int, dict[int, list[dict]]] = {}
    for row in small:
        by_set.setdefault(row["cset"], {}).setdefault(row["kind"], []).append(row)
    conns: dict[int, int] = {}
    order = pc.sort_indices(openings, [(c, "ascending") for c in ("cset", "ppm", "pfile", "pidx")])
    ordered = openings.take(order)
    numbered = None
    for cset, conn in zip(*(ordered.column(c).to_pylist() for c in ("cset", "oconn")), strict=True):
        if cset != numbered:
            numbered, n = cset, 0
        if cset in runs:
            n += 1
            conns[conn] = n
    group_rows: list[tuple[int, str, str]] = []
    groups: dict[tuple[int, str], set[str]] = {}
    for index, run in runs.items():
        by_kind = by_set.get(index, {})
        audited = by_kind.get(tasks.AUDITED)
        if audited:  # audited where its files were read: its result, what it named, and the digest
            run.audited, run.identity, digest, run.peak = tasks.loads(audited[0]["blob"])
            run.digests = [digest]
        run.stats = [tasks.loads(r["blob"]) for r in by_kind.get(tasks.FLOW_STATS, [])]
        run.last_event = max((s.last_event_ts for s in run.stats), default=-math.inf)
        if run.audited is None:
            run.identity = _identity(by_kind.get(tasks.BROKERS, []), by_kind.get(tasks.IDENTITY, []))
        group_of = fold_groups(r["blob"].decode().split("\n") for r in by_kind.get(tasks.LINK, []))
        for key, group in sorted(group_of.items()):
            group_rows.append((index, key, group))
            groups.setdefault((index, group), set()).add(key)
        run.context = _every_group(by_kind.get(tasks.CONTEXT, []))
    return conns, group_rows, {g: frozenset(keys) for g, keys in groups.items()}


def _every_group(rows: list[dict]) -> list[tuple[tuple, bytes]]:
    """A set's context events every key group's fold is given, each (audit order, packed event): of the
    ApiVersions answers, which every connection sends first, those that change the cluster's
    transaction.version in audit order (the fold keeps the last one told; `_txn_version_changes` sent
    only those), and any context event of no connection and no producer id."""
    from ksniff.engine import spark_tasks as tasks

    every: list[tuple[tuple, bytes]] = []
    level = None
    for order, r in sorted(((_order(r), r) for r in rows), key=lambda pair: pair[0]):
        told = r["key"]
        if told is not None and told.startswith(tasks.CONTEXT_TXN_VERSION):
            told = told[len(tasks.CONTEXT_TXN_VERSION) :]
            if told and told != level:
                level = told
                every.append((order, r["blob"]))
        else:
            every.append((order, r["blob"]))
    return every


def _txn_version_changes(events: Any) -> Any:
    """The CONTEXT rows of ApiVersions answers that tell a transaction.version other than the one told
    before them in the set's audit order: the few the driver collects of one such row per connection."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    key = F.col("key")
    told = events.filter(
        (F.col("kind") == tasks.CONTEXT)
        & key.startswith(tasks.CONTEXT_TXN_VERSION)
        & (key != tasks.CONTEXT_TXN_VERSION)  # an answer that tells none
    )
    before = F.lag("key").over(Window.partitionBy("cset").orderBy(*tasks.ORDER_COLUMNS))
    return (
        told.withColumn("_before", before)
        .filter(F.col("_before").isNull() | (key != F.col("_before")))
        .drop("_before")
    )


def _routed_context(events: Any, group_table: Any) -> Any:
    """The context events a key group's fold needs besides those every group is given, as rows of the
    events' columns and the group's (`group`, and its fold's `slot`), found by Spark (none of them
    reaches the driver):

    - a connection's loss or end changes only the folds with exchanges on it (their unanswered requests,
      the losses they judge their writes by), so it goes to the groups of its keyed events' keys (its
      CONN_KEYS rows): G groups and C connections cost the folds O(C), not O(G x C);
    - transaction markers, which a fold applies only to producer ids it knows
      (ksniff.audit.transactions.on_write_txn_markers), go to the groups of the "pid:N" keys they name: a
      fold knows a producer id only from exchanges that name it, which link that key into its group
      (ksniff.audit.keys.touched_keys).

    An event comes to a group once per key of the group that brings it (a connection with two keys of
    one group, markers naming two producer ids of one group), always with one order: the fold reads each
    order once (spark_tasks._once), so no distinct (a shuffle) is made here."""
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    kind, key = F.col("kind"), F.col("key")
    context = events.filter(kind == tasks.CONTEXT)
    on_conn = (
        events.filter(kind == tasks.CONN_KEYS)
        .select("cset", "oconn", "key")
        .join(F.broadcast(group_table), ["cset", "key"])
        .select("cset", "oconn", "group", "slot")
    )
    ends = context.filter(key == tasks.CONTEXT_CONN).join(on_conn, ["cset", "oconn"])
    start = len(tasks.CONTEXT_MARKERS) + 1
    pids = F.explode(F.split(F.expr(f"substring(key, {start})"), ","))
    named = (
        context.filter(key.startswith(tasks.CONTEXT_MARKERS))
        .withColumn("_pid", pids)
        .filter(F.col("_pid") != "")
        .withColumn("_named", F.concat(F.lit("pid:"), F.col("_pid")))
        .join(
            F.broadcast(group_table.withColumnRenamed("key", "_named")),
            ["cset", "_named"],
        )
    )
    columns = [*events.columns, "group", "slot"]
    return ends.select(*columns).unionByName(named.select(*columns))


def _plan(
    session: Session, inputs: list[_Input], paths: list[str], config: EngineConfig
) -> tuple[list[tuple[capture_sets.CaptureSet, list[_Input]]], list[str], int]:
    """The capture sets, each with its inputs; the warnings and count of files left out of folders.

    The driver opens no capture: with several inputs, what the planner needs of each file (its TCP
    directions and time span; ksniff.engine.sets.scan), the cluster named by the few that need it (files
    that ran at the same time as others they do not continue) and, for sets of several hosts, the clock
    anchors of each host's files, are found by Spark tasks where the files are read, on any file system,
    and only those summaries come back. One input, --merge and --separate need none of it: files of a
    folder that are not captures are then left out where they are read (`_check_inputs`)."""
    mode = config.capture_sets
    if mode == capture_sets.AUTO and len(inputs) > 1:
        return _plan_studied(session, inputs, paths, config)
    if mode == capture_sets.SEPARATE and len(inputs) > 1:
        return (
            [
                (capture_sets.CaptureSet(n, (i.path,), ("--separate: one set per input",)), [i])
                for n, i in enumerate(inputs, start=1)
            ],
            [],
            0,
        )
    why = "one input" if len(inputs) == 1 else "--merge: every input in one set"
    return [(capture_sets.CaptureSet(1, tuple(i.path for i in inputs), (why,)), inputs)], [], 0


def _plan_studied(
    session: Session, inputs: list[_Input], paths: list[str], config: EngineConfig
) -> tuple[list[tuple[capture_sets.CaptureSet, list[_Input]]], list[str], int]:
    from ksniff.engine import spark_tasks as tasks

    spark = session.spark
    frame = _plan_inputs(spark, inputs, {i.file: i.file for i in inputs}, session.parallelism, tasks.study())
    found = {row["file"]: tasks.loads(row["blob"]) for row in frame.collect()}
    # The local engine's order of errors: a folder without captures while listing, then the first
    # input that cannot be read.
    for n, arg in enumerate(paths):
        mine = [i for i in inputs if i.arg == n]
        if mine and all(found[i.file][0] == tasks.SKIPPED for i in mine):
            others = f"{len(mine)} other {'file' if len(mine) == 1 else 'files'}"
            raise CaptureError(f"{arg}: no pcap or pcapng files in this folder ({others})")
    for i in inputs:
        if found[i.file][0] == tasks.FAILED:
            raise CaptureError(found[i.file][1])
    kept = [i for i in inputs if found[i.file][0] == tasks.SCANNED]
    left_out = [i for i in inputs if found[i.file][0] == tasks.SKIPPED]
    by_path = {i.path: i for i in kept}

    def identities(asked: list[str]) -> list[tuple[dict, dict]]:
        chosen = [by_path[p] for p in asked]
        task = tasks.identities(tuple(config.ports), config.auto_detect, config.limits)
        rows = _plan_inputs(
            spark, chosen, {i.file: i.file for i in chosen}, session.parallelism, task
        ).collect()
        named = {row["file"]: tasks.loads(row["blob"]) for row in rows}
        for i in chosen:
            if named[i.file][0] == tasks.FAILED:
                raise CaptureError(named[i.file][1])
        return [named[i.file][1] for i in chosen]

    def anchors(groups: list[tuple[str, ...]]) -> list:
        members = {by_path[p].file: g for g, group in enumerate(groups) for p in group}
        chosen = [i for i in kept if i.file in members]
        task = tasks.anchors(tuple(config.ports), config.auto_detect, config.limits)
        rows = _plan_inputs(spark, chosen, members, session.parallelism, task).collect()
        by_group = {row["grp"]: tasks.loads(row["blob"]) for row in rows}
        return [by_group[g] for g in range(len(groups))]

    planned = capture_sets.plan(
        [i.path for i in kept],
        capture_sets.AUTO,
        ports=config.ports,
        auto_detect=config.auto_detect,
        limits=config.limits,
        scans=[found[i.file][1] for i in kept],
        identities=identities,
        anchors=anchors,
    )
    out = []
    for c in planned:
        members = [by_path[p] for p in c.paths]
        for m in members:  # captures of several hosts: each read on the set's time line
            m.offset = c.offset_of(m.path)
            m.renames = pickle.dumps(c.renamed) if c.renamed else None
        out.append((c, members))
    return out, _left_out_warnings(left_out), len(left_out)


def _plan_inputs(spark: Any, inputs: list[_Input], groups: dict[int, int], parallelism: int, task):
    """`task` (a mapInArrow function over rows of spark_tasks.PLAN_INPUTS_DDL) over `inputs`, `grp` from
    `groups` (file -> group), spread over a few tasks per core with each group's files in one task (in
    no particular order), its rows of spark_tasks.PLANNED_DDL: the bytes of those on a file system other
    than `file:` read by Spark's binaryFile source (`_with_content`; the others are opened by the task)."""
    from ksniff.engine import spark_tasks as tasks

    local = [i for i in inputs if i.own]
    remote = [i for i in inputs if not i.own]
    # Files read alone (the study) are dealt round the tasks; a group's files meet in one (the anchors).
    key = "grp" if len(set(groups.values())) < len(inputs) else None
    out = None
    if local:
        rows = [(i.file, i.path, i.uri, i.folder, groups[i.file], None) for i in local]
        n = min(len({groups[i.file] for i in local}), READ_TASKS_PER_CORE * parallelism)
        frame = spark.createDataFrame(rows, tasks.PLAN_INPUTS_DDL)
        frame = frame.repartition(n, key) if key else frame.repartition(n)
        out = frame.mapInArrow(_reading_s3(spark, local, task), tasks.PLANNED_DDL)
    if remote:
        n = min(len({groups[i.file] for i in remote}), READ_TASKS_PER_CORE * parallelism)
        grp = [("grp", "int", [groups[i.file] for i in remote])]
        part = _with_content(spark, remote, n, grp, task, tasks.PLANNED_DDL, key)
        out = part if out is None else out.unionByName(part)
    return out


def _with_content(
    spark: Any,
    remote: list[_Input],
    tasks_n: int,
    columns: Sequence[tuple[str, str, list]],
    task: Callable,
    ddl: str,
    key: str | None = None,
):
    """`task` (a mapInArrow function) over rows (file, path, uri, folder, *columns, content) of inputs on
    a file system other than `file:`, their bytes read by Spark's binaryFile source (one file per row),
    spread over `tasks_n` tasks; its rows of `ddl`. `columns`: (name, SQL type, one value per input);
    `key`: a column naming each group of inputs, whose files must meet in one task.

    The rows are joined with the inputs' listing and repartitioned (by `key`, if given): the bytes go
    through a shuffle, which is how Spark brings files read on different nodes together, within its
    managed memory. A task's rows come in no particular order, which the tasks restore: they used to be
    sorted within each partition too, all of a task's captures held and sorted by the JVM."""
    names = [name for name, _type, _values in columns]
    listing = spark.createDataFrame(
        [
            (i.file, i.path, i.uri, i.folder, *values)
            for i, *values in zip(remote, *(v for _n, _t, v in columns), strict=True)
        ],
        ", ".join(
            ["file int, shown string, uri string, folder boolean", *(f"{n} {t}" for n, t, _ in columns)]
        ),
    )
    scan = spark.read.format("binaryFile").load([i.uri for i in remote]).select("path", "content")
    rows = scan.join(listing, scan["path"] == listing["uri"]).select(
        "file", listing["shown"].alias("path"), "uri", "folder", *names, "content"
    )
    rows = rows.repartition(tasks_n, key) if key is not None else rows.repartition(tasks_n)
    return rows.mapInArrow(task, ddl)


def _left_out_warnings(left_out: list) -> list[str]:
    """The local walk's warning for files of a folder that are not captures, one per folder."""
    from ksniff.capture.folders import _not_captures

    folders: dict[str, list[str]] = {}
    for m in left_out:
        folder, _sep, name = m.path.rpartition("/")
        folders.setdefault(folder, []).append(name)
    return [_not_captures(folder, names) for folder, names in folders.items()]


def _identity(brokers: list[dict], facts: list[dict]) -> Identity:
    """The set's cluster identity: the flows' broker addresses, then what the naming answers taught, in
    audit order (spark_tasks._Seen)."""
    from ksniff.engine import spark_tasks as tasks

    identity = Identity()
    for r in brokers:
        for address in tasks.loads(r["blob"]):
            identity.saw_broker(address)
    for _key, fact in sorted(((_order(r), tasks.loads(r["blob"])) for r in facts), key=lambda pair: pair[0]):
        identity.learn(fact)
    return identity


def _read(
    spark: Any, groups: list[list[_Input]], parallelism: int, total: int, read=None, together: bool = False
):
    """The rows `read` makes of the inputs, a list of files per group: stage 1's segment rows
    (spark_tasks.extract, the default; a group per file), or with `together` stage 2's rows of capture
    sets each decoded or audited where its files are read (spark_tasks.extract_decoded or
    extract_audited, made for the run; a group per set, whose files one task reads, in the set's order).
    `file:` inputs are opened by the tasks, the groups spread over a few tasks per core by size; any
    other file system's are read by Spark's binaryFile source (one file per row: a capture is read in one
    piece, see the README), each set's files in one task when `together` (`_with_content`: in no
    particular order, which the tasks restore)."""
    from ksniff.engine import spark_tasks as tasks

    read = read or tasks.extract
    ddl = tasks.EVENTS_DDL if together else tasks.SEGMENTS_DDL
    local = [g for g in groups if all(m.own for m in g)]
    remote = [g for g in groups if not all(m.own for m in g)]
    parts = []
    if local:
        bins = _spread(
            local,
            min(len(local), READ_TASKS_PER_CORE * parallelism + total // READ_TASK_BYTES),
            _group_length,
        )
        files = [[m for g in b for m in g] for b in bins]
        task = _reading_s3(spark, [m for g in local for m in g], _extract(files, read))
        parts.append(spark.range(0, len(files), 1, numPartitions=len(files)).mapInArrow(task, ddl))
    if remote:
        files = [m for g in remote for m in g]
        extra = [
            ("offset", "double", [i.offset for i in files]),
            ("cset", "int", [i.cset for i in files]),
            ("renames", "binary", [i.renames for i in files]),
            ("place", "int", [n for g in remote for n, _i in enumerate(g)]),  # a file's place in its group
        ]
        tasks_n = min(len(remote), 4 * parallelism)
        parts.append(_with_content(spark, files, tasks_n, extra, read, ddl, "cset" if together else None))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def _reading_s3(spark: Any, inputs: list[_Input], task: Callable) -> Callable:
    """`task`, reading the S3 objects among `inputs` with the run's S3 settings (objectstore.use)."""
    if not any(i.own and objectstore.is_s3(i.uri) for i in inputs):
        return task
    settings = objectstore.settings_of(spark)

    def run(batches):
        objectstore.use(settings)
        yield from task(batches)

    return run


def _group_length(group: list[_Input]) -> int:
    return sum(m.length for m in group)


def _check_inputs(metas: list) -> tuple[list, list]:
    """The local engine's errors, in its order: the first input that cannot be read stops the run; files
    of a folder that are not captures are left out: (the captures' metas, the left-out files' metas)."""
    for m in metas:
        if m.error:
            raise CaptureError(m.error)
    return [m for m in metas if not m.skipped], [m for m in metas if m.skipped]


def _spread(groups: list[list[_Input]], n: int, size) -> list[list]:
    """The groups of files in `n` bins of about equal size, largest first into the lightest bin: one
    task per file cost more in Spark's per-task overhead than reading a small file does."""
    import heapq

    heap = [(0, b) for b in range(max(1, n))]
    bins: list[list] = [[] for _ in heap]
    for entry in sorted(groups, key=lambda e: -size(e)):
        load, b = heapq.heappop(heap)
        bins[b].append(entry)
        heapq.heappush(heap, (load + size(entry), b))
    return [b for b in bins if b]


def _extract(bins: list[list[_Input]], read):
    """The task for local files: the files of bin `id` of a spark.range, through `read`
    (spark_tasks.extract, or what extract_decoded or extract_audited made)."""
    rows = [[(i.file, i.path, i.uri, i.folder, i.offset, i.cset, i.renames) for i in b] for b in bins]

    def run(batches):
        import pyarrow as pa

        for batch in batches:
            for b in batch.column(0).to_pylist():
                listing = pa.RecordBatch.from_pydict(
                    {
                        "file": [r[0] for r in rows[b]],
                        "path": [r[1] for r in rows[b]],
                        "uri": [r[2] for r in rows[b]],
                        "folder": [r[3] for r in rows[b]],
                        "offset": [r[4] for r in rows[b]],
                        "cset": pa.array([r[5] for r in rows[b]], pa.int32()),
                        "renames": pa.array([r[6] for r in rows[b]], pa.binary()),
                        "content": pa.nulls(len(rows[b]), pa.binary()),
                    }
                )
                yield from read(iter([listing]))

    return run


def _order(row: dict) -> tuple:
    """A decode event's place in audit order (spark_tasks.ORDER_COLUMNS)."""
    from ksniff.engine.spark_tasks import ORDER_COLUMNS

    return tuple(row[c] for c in ORDER_COLUMNS)


def _probe_records(table_rows: Any, config: EngineConfig) -> tuple[Any, dict[int, dict]]:
    """The --records batches' sizes (spark_tasks.record_probe), computed on the executors, and their
    aggregate per capture set, which alone reaches the driver."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    probe = table_rows.mapInArrow(tasks.record_probe(config.max_records_batch), tasks.PROBE_DDL).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    aggregates = probe.groupBy("cset").agg(
        F.max("need").alias("need"),
        F.max("request_need").alias("request_need"),
        F.sum("used").alias("used"),
        F.count("*").alias("batches"),
    )
    return probe, {row["cset"]: row.asDict() for row in aggregates.collect()}


def _records_budget(
    probed: tuple[Any, dict[int, dict]],
    cset: int,
    config: EngineConfig,
    stats: DecodeStats,
    records_used: int,
) -> frozenset[tuple]:
    """The --records decompression caps over capture set `cset` as the local engine applies them
    (ksniff.decode.records.Inflation): the executors decompress every batch under the per-batch cap
    (spark_tasks.record_probe); the request and run caps depend on what came before in audit order, so
    the driver replays the budget over the set's batches' sizes in that order, after `records_used` bytes
    of the sets before it. Counts what was inflated and cut into `stats`; returns the batches cut (audit
    order columns and index in the exchange), whose records the executors leave out. When no cap can
    bind (checked on the set's aggregate), nothing but that aggregate reaches the driver."""
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    probe, aggregates = probed
    agg = aggregates.get(cset)
    if agg is None or not agg["batches"]:
        return frozenset()
    if (
        agg["need"] <= config.max_records_batch
        and agg["request_need"] <= config.max_records_request
        and records_used + agg["used"] + agg["need"] <= config.max_records_run
    ):
        stats.records_inflated_bytes += agg["used"]
        return frozenset()
    rows = probe.filter(F.col("cset") == cset).toArrow().to_pylist()
    names = tasks.ORDER_COLUMNS
    rows.sort(key=lambda r: (*(r[c] for c in names), r["batch"]))
    inflation = Inflation(stats, config.max_records_batch, config.max_records_request, config.max_records_run)
    inflation.run_used = records_used
    cut = set()
    previous = None
    for r in rows:
        exchange = tuple(r[c] for c in names)
        if exchange != previous:
            inflation.new_request()
            previous = exchange
        cap, which = inflation.cap()
        if r["need"] > max(cap, 0):
            inflation.cut(which)
            cut.add((*exchange, r["batch"]))
        elif r["used"]:
            inflation.used(r["used"])
    return frozenset(cut)


def _totals(
    metas: list, stats: list, config: EngineConfig, records: DecodeStats | None = None
) -> tuple[CaptureStats, DecodeStats, list[str]]:
    """The run's counters: the files' walks (stage 1) plus every flow's reassembler and decoder (stage 2)
    and `records`, what the --records budget inflated and cut."""
    capture = CaptureStats()
    decode = DecodeStats(by_api={})
    warnings: list[str] = []
    for m in metas:
        add_file_counts(capture, warnings, m.path, m, m.warnings)
    reassembler = Reassembler(config.limits)
    for s in stats:
        add_counters(capture, s.capture)
        add_counters(decode, s.decode)
        capture.kafka_connections += s.kafka_connections
        reassembler.evicted += s.evicted
        reassembler.forced_gaps += s.forced_gaps
    if records is not None:
        add_counters(decode, records)
    warnings.extend(reassembler.warnings())
    warnings.extend(truncation_warnings(capture))
    warnings.extend(
        limit_warnings(
            decode,
            config.max_frame,
            config.max_in_flight,
            max_in_flight_total=config.max_in_flight_total,
            max_partial_total=config.max_partial_total,
            records_caps=(config.max_records_batch, config.max_records_request, config.max_records_run),
        )
    )
    per_flow = [
        flag
        for flag, name in (
            ("--max-connections", "max_connections"),
            ("--max-buffer-total", "max_buffer_total"),
            ("--max-in-flight-total", "max_in_flight_total"),
            ("--max-partial-total", "max_partial_total"),
        )
        if getattr(config, name) != getattr(_DEFAULTS, name)
    ]
    if per_flow:
        warnings.append(
            f"{' and '.join(per_flow)} cap one process's memory: the Spark engine applies "
            f"{'them' if len(per_flow) > 1 else 'it'} to each flow's task, where "
            f"{'they do' if len(per_flow) > 1 else 'it does'} not bind as in one process"
        )
    return capture, decode, warnings


# -- exports -----------------------------------------------------------------------------------------------


def _target(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def _write_parquet(run: SparkAudit, directory: str, tables: list[str], partition_by: tuple = ()) -> None:
    """Time columns as UTC timestamps in microseconds, rounded half to even, as the local export has them.

    With `partition_by` ("date", "cluster", in the order given), each table that has the column is
    written as a Hive-style partitioned folder (`exchanges.parquet/date=2026-11-23/cluster=abc/`):
    `date` is the UTC day of the table's first time column (`ts`, or `start_ts` for transactions),
    `cluster` the cluster id of the row's capture set (empty partition where none was seen). Only the
    partitions this run writes are replaced, so a lake folder collects the runs of many days and
    clusters. Readers get the partition columns back from the folder names (pyarrow and Spark alike);
    the order of rows within a partition is not the export's."""
    from pyspark.sql import functions as F

    from ksniff.report.tables import TIME_COLUMNS

    conf = run.spark.conf
    settings = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    if partition_by:
        settings["spark.sql.session.timeZone"] = "UTC"  # the partitions' days are UTC days
        settings["spark.sql.sources.partitionOverwriteMode"] = "dynamic"
    before = {key: conf.get(key, None) for key in settings}
    for key, value in settings.items():
        conf.set(key, value)
    try:
        for table in tables:
            df = run.sorted(table, hidden=True)
            columns = []
            for name in partition_by:
                if name == "date" and TIME_COLUMNS[table]:
                    first = TIME_COLUMNS[table][0]
                    df = df.withColumn("date", F.date_format(F.timestamp_seconds(F.col(first)), "yyyy-MM-dd"))
                    columns.append("date")
                elif name == "cluster" and ("_cluster" in df.columns or "cluster" in df.columns):
                    if "_cluster" in df.columns:
                        df = df.withColumnRenamed("_cluster", "cluster")
                    columns.append("cluster")
            df = df.drop(*(c for c in _HIDDEN if c in df.columns))
            for column in TIME_COLUMNS[table]:
                df = df.withColumn(column, F.timestamp_micros(F.bround(F.col(column) * 1e6).cast("long")))
            writer = df.write.mode("overwrite")
            if columns:
                writer = writer.partitionBy(*columns)
            writer.parquet(_target(directory, f"{table}.parquet"))
    finally:
        for key, value in before.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)


def _write_csv(run: SparkAudit, directory: str, tables: list[str]) -> None:
    """Every cell's text made by the local export's own cell functions (so floats, booleans and the
    `_utc` twins read the same), written by Spark's CSV writer with RFC 4180 quoting."""
    from ksniff.engine.spark_tasks import csv_cells

    for table in tables:
        function, ddl = csv_cells(table)
        (
            run.sorted(table)
            .mapInArrow(function, ddl)
            .write.mode("overwrite")
            .option("header", True)
            .option("escape", '"')
            .option("ignoreLeadingWhiteSpace", False)
            .option("ignoreTrailingWhiteSpace", False)
            .option("lineSep", "\n")
            .csv(_target(directory, f"{table}.csv"))
        )
