"""The Spark engine: the in-process pipeline as a PySpark job, for captures that outgrow one process.

    files --(one task per file)--> segment rows
          --(repartition by flow, sort into the merge's order)--> Reassembler + Decoder per flow
          --> decode events (pickled), keyed by producer
          --(repartition by producer key, sort into the audit's order)--> one Auditor per key
          --> the driver: merge_outputs, counters summed, inputs listed, tables sorted.

It gives exactly the in-process engine's result (ksniff.engine.local). What that takes is explained in
ksniff.engine.spark_tasks; what crosses producer keys is the audit's *context* (ksniff.audit.keys):
connection ends, capture gaps, ApiVersions and WriteTxnMarkers. The driver collects those (a few per
connection) and every key's fold merges them, in audit order, with its own events; one more fold over
the context alone (CONTEXT_KEY) reports the capture gaps. Connection ids are renumbered on the driver in
the order the in-process reassembler would have opened them.

Capture files must be readable at the same path from every executor (local disk for `local[*]`, a shared
file system on a cluster).
"""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Sequence
from typing import Any

from ksniff.audit import fold_groups, merge_outputs
from ksniff.capture import CaptureError, Reassembler
from ksniff.capture.events import CaptureStats, InputInfo
from ksniff.capture.files import CaptureFile, expand_inputs
from ksniff.capture.run import add_file_counts, truncation_warnings
from ksniff.common.counters import add_counters
from ksniff.config import EngineConfig
from ksniff.decode.decoder import limit_warnings
from ksniff.decode.events import DecodeStats
from ksniff.decode.identity import Identity
from ksniff.decode.records import Inflation, inflation_warnings
from ksniff.engine import sets as capture_sets
from ksniff.engine.spark_session import Session, SparkUnavailable, check_available, shuffle_partitions
from ksniff.result import AuditResult, join_results, stamp_set

__all__ = ["SparkUnavailable", "audit_paths_spark"]


def audit_paths_spark(paths: Sequence[str], config: EngineConfig | None = None, master: str = "local[*]",
                      *, spark: Any = None) -> AuditResult:
    """Audit capture files or folders on Spark. `spark`: an existing SparkSession to use (left running).

    Raises CaptureError for inputs that cannot be read, SparkUnavailable when Spark cannot run here.
    """
    config = config or EngineConfig()
    files, skipped = _open_all(paths)
    if spark is None:
        check_available(master)
    planned = capture_sets.plan(files, config.capture_sets, ports=config.ports,
                                auto_detect=config.auto_detect, limits=config.limits)
    total = sum(os.path.getsize(f) for f in files)
    session = Session(master, shuffle_partitions(total, os.cpu_count() or 2), spark)
    try:
        session.start()
        results = []
        for i, cset in enumerate(planned):  # one after the other, each its own producer-id space
            part = list(cset.paths)
            used = sum(r.decode.records_inflated_bytes for r in results)  # one --records budget per run
            results.append(_run(session, part, config, sum(os.path.getsize(f) for f in part), cset,
                                skipped if i == 0 else ([], 0), used))
        return join_results(results, planned, files, engine="spark")
    finally:
        session.stop()


def _open_all(paths: Sequence[str]) -> tuple[list[str], tuple[list[str], int]]:
    """The capture files, each checked here so that an unreadable input is the user's one-line error,
    and (warnings, count) of the files in folders that were skipped."""
    if not paths:
        raise CaptureError("no capture files given")
    files, warnings, skipped = expand_inputs(list(paths))
    for path in files:
        CaptureFile(path).close()
    return files, (warnings, skipped)


def _run(session: Session, files: list[str], config: EngineConfig, total: int,
         cset: capture_sets.CaptureSet, skipped: tuple[list[str], int] = ([], 0), records_used: int = 0
         ) -> AuditResult:
    """One capture set's run; `records_used`: bytes earlier sets' records already drew from the run's
    decompression budget."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from ksniff.engine import spark_tasks as tasks

    spark = session.spark
    partitions = shuffle_partitions(total, session.parallelism)

    # Stage 1: files spread over a few tasks per core. Kept (memory, then disk) because the capture's end
    # time, which stage 2 needs, is known only once every file has been read.
    bins = _spread([(i, path, tasks.read_path(path)) for i, path in enumerate(files)],
                   min(len(files), 4 * session.parallelism + total // (64 << 20)))
    segments = (spark.range(0, len(bins), 1, numPartitions=len(bins))
                .mapInArrow(_extract(bins), tasks.SEGMENTS_DDL)
                .persist(StorageLevel.MEMORY_AND_DISK))
    metas = sorted((pickle.loads(r["meta"]) for r in
                    segments.filter(F.col("flow").isNull()).select("meta").collect()), key=lambda m: m.file)
    end_ts = max((m.max_ts for m in metas if m.max_ts is not None), default=None)
    pms = sorted(segments.filter(F.col("flow").isNotNull()).select("pm").distinct()
                 .toArrow().column(0).to_pylist())
    every = Reassembler(config.limits).sweep_every
    end = tasks.RunEnd(end_ts, tasks.sweep_ticks(pms, every))

    # Stage 2: per flow, in the merge's order.
    events = (segments.repartition(partitions, "flow")
              .sortWithinPartitions("flow", "pm", "file", "idx")
              .mapInArrow(tasks.decode(config, end), tasks.EVENTS_DDL)
              .persist(StorageLevel.MEMORY_AND_DISK))
    small = events.filter(F.col("kind") != tasks.KEYED).toArrow().to_pylist()
    segments.unpersist()
    by_kind: dict[int, list[dict]] = {}
    for row in small:
        by_kind.setdefault(row["kind"], []).append(row)
    stats = [pickle.loads(r["blob"]) for r in by_kind.get(tasks.FLOW_STATS, [])]
    last_event = max((s.last_event_ts for s in stats), default=-math.inf)
    openings = sorted(by_kind.get(tasks.CONN, []), key=lambda r: (r["ppm"], r["pfile"], r["pidx"]))
    conns = {pickle.loads(r["blob"]): n for n, r in enumerate(openings, start=1)}
    context = sorted((_order(r, last_event), r["blob"]) for r in by_kind.get(tasks.CONTEXT, []))
    log_rows = [(_order(r, last_event), r["blob"]) for r in by_kind.get(tasks.LOG, [])]
    group_of = fold_groups(r["blob"].decode().split("\n") for r in by_kind.get(tasks.LINK, []))
    groups: dict[str, set[str]] = {}
    for key, group in group_of.items():
        groups.setdefault(group, set()).add(key)

    # Stage 3: per group of producer keys, in audit order, with the context events. The audit closes its
    # books where the in-process engine does: at the last capture event the pipeline was fed.
    end = tasks.RunEnd(last_event if last_event > -math.inf else end.end_ts, end.ticks)
    group_table = spark.createDataFrame(sorted(group_of.items()) or [("", "")], "key string, group string")
    keyed = (events.filter(F.col("kind") == tasks.KEYED)
             .withColumn("rel", F.when(F.col("rel") > F.lit(last_event), F.lit(math.inf))
                         .otherwise(F.col("rel")))
             .join(F.broadcast(group_table), "key")
             .repartition(partitions, "group")
             .sortWithinPartitions("group", *tasks.ORDER_COLUMNS)
             .mapInArrow(tasks.fold(config, end, context, conns,
                                    {g: frozenset(k) for g, k in groups.items()}), tasks.OUTPUTS_DDL))
    outputs = [pickle.loads(r["blob"]) for r in keyed.toArrow().to_pylist()]
    events.unpersist()
    # The context group also keeps the partition logs: the context events with the LOG rows, each once.
    with_logs = sorted(dict([*context, *log_rows]).items())
    outputs.append(tasks.context_output(config, end, with_logs, conns))
    output = merge_outputs(outputs)

    capture, decode, warnings = _totals(metas, stats, config)
    warnings[:0] = skipped[0]  # inputs skipped while expanding folders come first, as in the local engine
    capture.skipped_files = skipped[1]
    exchanges, batches, records = _tables(by_kind.get(tasks.TABLE, []), last_event, conns, config, decode,
                                          records_used)
    # Records are decompressed here, on the driver, under the run's budget: what it cut, said last.
    caps = (config.max_records_batch, config.max_records_request, config.max_records_run)
    warnings.extend(inflation_warnings(decode, *caps))
    result = AuditResult.of_run(
        "spark",
        inputs=[InputInfo(m.path, m.format, ",".join(m.linktypes), m.packets, m.size) for m in metas],
        capture=capture, decode=decode, output=output, warnings=warnings, exchanges=exchanges,
        batches=batches, records=records)
    stamp_set(result, cset, _identity(by_kind.get(tasks.IDENTITY, []), last_event))
    return result


def _identity(rows: list[dict], last_event: float) -> Identity:
    """The set's cluster identity: the flows' broker addresses, then the naming answers in audit order."""
    identity = Identity()
    named = []
    for r in rows:
        item = pickle.loads(r["blob"])
        if isinstance(item, tuple):
            for address in item:
                identity.saw_broker(address)
        else:
            named.append((_order(r, last_event), item))
    for _key, ex in sorted(named, key=lambda pair: pair[0]):
        identity.feed(ex)
    return identity


def _spread(listing: list[tuple[int, str, str]], n: int) -> list[list[tuple[int, str, str]]]:
    """The files in `n` bins of about equal size, largest first into the lightest bin: one task per file
    cost more in Spark's per-task overhead than reading a small file does."""
    import heapq

    heap = [(0, b) for b in range(max(1, n))]
    bins: list[list[tuple[int, str, str]]] = [[] for _ in heap]
    for entry in sorted(listing, key=lambda e: -os.path.getsize(e[2])):
        load, b = heapq.heappop(heap)
        bins[b].append(entry)
        heapq.heappush(heap, (load + os.path.getsize(entry[2]), b))
    return [b for b in bins if b]


def _extract(bins: list[list[tuple[int, str, str]]]):
    """Stage 1's task: the files of bin `id` of a spark.range, through spark_tasks.extract."""
    from ksniff.engine import spark_tasks as tasks

    def run(batches):
        import pyarrow as pa

        for batch in batches:
            for b in batch.column(0).to_pylist():
                rows = bins[b]
                table = pa.RecordBatch.from_pydict({"file": [r[0] for r in rows],
                                                    "path": [r[1] for r in rows],
                                                    "read_path": [r[2] for r in rows]})
                yield from tasks.extract(iter([table]))

    return run


def _order(row: dict, last_event: float) -> tuple:
    rel = math.inf if row["rel"] > last_event else row["rel"]
    return (rel, row["ets"], row["phase"], row["ppm"], row["pfile"], row["pidx"], row["n"])


def _totals(metas: list, stats: list, config: EngineConfig) -> tuple[CaptureStats, DecodeStats, list[str]]:
    """The run's counters: the files' walks (stage 1) plus every flow's reassembler and decoder (stage 2)."""
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
    warnings.extend(reassembler.warnings())
    warnings.extend(truncation_warnings(capture))
    warnings.extend(limit_warnings(
        decode, config.max_frame, config.max_in_flight, max_in_flight_total=config.max_in_flight_total,
        max_partial_total=config.max_partial_total,
        records_caps=(config.max_records_batch, config.max_records_request, config.max_records_run)))
    return capture, decode, warnings


def _tables(rows: list[dict], last_event: float, conns: dict[int, int], config: EngineConfig,
            decode: DecodeStats, records_used: int = 0) -> tuple[list[dict], list[dict], list[dict] | None]:
    """Exchange, batch and record rows in the in-process engine's order: audit order (records stay in
    it; AuditResult.of_run sorts exchanges and batches stably by time)."""
    from ksniff.decode.rows import batch_row, exchange_row, record_rows
    from ksniff.engine.spark_tasks import renumber

    exchanges: list[dict] = []
    batches: list[dict] = []
    records: list[dict] | None = [] if config.keep_records else None
    inflation = Inflation(decode, config.max_records_batch, config.max_records_request,
                          config.max_records_run)
    inflation.run_used = records_used
    for _order_key, blob in sorted((_order(r, last_event), r["blob"]) for r in rows):
        ex = renumber(pickle.loads(blob), conns)
        if config.keep_tables:
            exchanges.append(exchange_row(ex))
            batches.extend(batch_row(b) for b in ex.batches)
        if records is not None:
            inflation.new_request()
            for b in ex.batches:
                records.extend(record_rows(b, inflation))
    return exchanges, batches, records
