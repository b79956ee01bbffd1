"""Topic-partitions as the wire showed them: an overview table, and one partition's log (`-T TOPIC-N`).

Pure renderables over the audit's PartitionSummary rows: which offsets hold what, who wrote each batch, in
which transaction and how it ended, and who read the partition at which isolation level. Every topic,
client and transactional id is client-controlled text and goes through `shown`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksniff.audit.digest import FindingsDigest
from ksniff.audit.model import Finding, PartitionSummary
from ksniff.report.text import shown

LOG_ROWS_SHOWN = 200
_OUTCOME_STYLE = {"commit": "green", "abort": "red"}


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def partitions_overview(
    partitions: Sequence[PartitionSummary], findings: FindingsDigest | Sequence[Finding]
) -> Table:
    """One row per topic-partition: its offsets, what was written and read, and its findings (a list, or
    their digest: ksniff.audit.digest)."""
    table = Table(show_edge=False, pad_edge=False)
    for name in (
        "partition",
        "end",
        "HW",
        "LSO",
        "acked",
        "read",
        "markers",
        "producers",
        "readers",
        "findings",
    ):
        table.add_column(name, justify="left" if name in ("partition",) else "right")
    digest = findings if isinstance(findings, FindingsDigest) else FindingsDigest.of(findings)
    counts: dict[tuple[int | None, str, int], int] = {}
    for t in digest.tallies:
        f = t.first
        if f.topic is not None and f.partition is not None and f.severity in ("critical", "warning"):
            key = (f.capture_set, f.topic, f.partition)
            counts[key] = counts.get(key, 0) + t.count
    several = len({p.capture_set for p in partitions}) > 1
    for p in partitions:
        n = counts.get((p.capture_set, p.topic, p.partition), 0)
        table.add_row(
            Text(partition_name(p, several)),
            _n(p.end_offset),
            _n(p.high_watermark),
            _n(p.last_stable_offset),
            f"{p.acked_records:,} in {p.acked_batches:,}",
            f"{p.fetched_records:,} in {p.fetch_answers:,} answers",
            f"{p.commit_markers} commit / {p.abort_markers} abort",
            str(len(p.producers)),
            str(len(p.readers)),
            Text(str(n), style="bold red" if n else ""),
        )
    return table


def find_partitions(partitions: Sequence[PartitionSummary], wanted: str) -> list[PartitionSummary]:
    """`wanted` is TOPIC-N (the topic may itself contain dashes): its log in each capture set that has one
    (captures of unrelated sets never share a log)."""
    topic, _, index = wanted.rpartition("-")
    return [p for p in partitions if p.topic == topic and str(p.partition) == index]


def partition_name(p: PartitionSummary, with_set: bool) -> str:
    """TOPIC-N, with its capture set when the run has several (the same name may then be two logs)."""
    name = f"{shown(p.topic)}-{p.partition}"
    return f"{name} (set {p.capture_set})" if with_set and p.capture_set is not None else name


def partition_view(
    p: PartitionSummary,
    findings: Sequence[Finding],
    *,
    limit: int | None = LOG_ROWS_SHOWN,
    with_set: bool = False,
) -> RenderableType:
    """One partition: its log in offset order, its producers, its readers, its findings."""
    head = Text.assemble(
        (partition_name(p, with_set), "bold"),
        f"  log start {_n(p.log_start_offset)}, high watermark {_n(p.high_watermark)}, last stable offset "
        f"{_n(p.last_stable_offset)}, end {_n(p.end_offset)}; {p.aborted_entries} aborted-transaction "
        f"entries in {p.fetch_answers:,} Fetch answers",
    )
    log = Table(title="The log as seen", title_justify="left", show_edge=False, pad_edge=False)
    for name in (
        "offsets",
        "what",
        "producer id",
        "epoch",
        "sequence",
        "transactional id",
        "outcome",
        "acked by",
        "read by",
    ):
        log.add_column(name)
    rows = p.log if limit is None else p.log[:limit]
    for b in rows:
        what = b["kind"]
        style = "bold" if what in ("COMMIT", "ABORT") else ""
        log.add_row(
            f"{b['first_offset']}"
            + (f"-{b['last_offset']}" if b["last_offset"] != b["first_offset"] else ""),
            Text(what, style=style),
            _n(b["producer_id"]),
            _n(b["producer_epoch"]),
            _n(b["base_sequence"]),
            Text(shown(b["transactional_id"]) if b["transactional_id"] else "-"),
            Text(b["outcome"] or "-", style=_OUTCOME_STYLE.get(b["outcome"], "")),
            Text(
                shown(b["acked_by"]) + (f" acks={b['acks']}" if b["acks"] is not None else "")
                if b["acked"]
                else "-"
            ),
            Text(shown(b["first_read_by"]) if b["fetched"] else "-"),
        )
    hidden = len(p.log) - len(rows) + p.log_truncated
    readers = Table(title="Who read it", title_justify="left", show_edge=False, pad_edge=False)
    for name in ("client", "client id", "isolation", "fetches", "records", "from", "next"):
        readers.add_column(name)
    for r in p.readers:
        readers.add_row(
            Text(shown(r["client"])),
            Text(shown(r["client_id"] or "-")),
            r["isolation_level"],
            _n(r["fetches"]),
            _n(r["records"]),
            _n(r["first_offset"]),
            _n(r["next_offset"]),
        )
    mine = [
        f
        for f in findings
        if f.topic == p.topic
        and f.partition == p.partition
        and (f.capture_set is None or p.capture_set is None or f.capture_set == p.capture_set)
    ]
    notes = Table(title="Findings on it", title_justify="left", show_edge=False, pad_edge=False)
    for name in ("severity", "kind", "message"):
        notes.add_column(name)
    for f in mine:
        notes.add_row(f.severity, f.kind, Text(shown(f.message, 300)))
    parts: list[RenderableType] = [head, Text(), log]
    if hidden:
        parts.append(
            Text(
                f"... {hidden:,} more batches (the exports' partition_log table has {len(p.log):,})",
                style="dim",
            )
        )
    parts += [Text(), readers, Text(), notes if mine else Text("No findings on it.")]
    return Group(*parts)
