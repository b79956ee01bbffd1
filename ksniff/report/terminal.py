"""The terminal report: rich renderables as pure functions of the result, readable at 80 columns.

Each part lives where a reader looks for it: `summary` (the header), `producers`, `transactions`,
`findings` (with the advice per kind), `timeline` (`--producer`), `progress`; `text` says how values read
(times, sizes, and the escaping of everything from the wire or a file name). Every renderable prints
nothing, so the report is snapshot-tested with `Console(record=True)`; only `render_report` prints, and
only to the console it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ksniff.report.findings import findings_view
from ksniff.report.summary import header, verdict_line
from ksniff.report.text import section, shown

if TYPE_CHECKING:
    from ksniff.result import AuditResult


def render_report(
    console: Console,
    result: AuditResult,
    *,
    quiet: bool = False,
    verbose: bool = False,
    producer: str | None = None,
    report: bool = True,
    topic_partition: str | None = None,
) -> None:
    """Prints the report: header, transactional ids, producers, transactions, findings (quiet: findings
    only), the verdict, then the timeline of `producer` when one was asked for (without `report`: the
    timeline alone, with the verdict).

    The parts other than the findings and the verdict are loaded where they are shown: --quiet with
    nothing found loads none of them, nor rich's tables (bench/README.md, "Start-up")."""
    if producer:
        from ksniff.report.timeline import TIMELINE_ROWS, producer_timeline
    if producer and not report:
        console.print(section(f"Producer {shown(producer)}"))
        console.print(producer_timeline(result, producer, limit=None if verbose else TIMELINE_ROWS))
        console.print()
        console.print(verdict_line(result))
        return
    digest = result.account()
    if not quiet:
        from ksniff.report.partitions import partitions_overview
        from ksniff.report.producers import producers_table, stories_table
        from ksniff.report.transactions import transactions_summary

        console.print(header(result, verbose=verbose))
        console.print()
        console.print(section("Transactional ids"))
        console.print(stories_table(result.producers, digest, verbose=verbose))
        console.print()
        console.print(section("Producers"))
        console.print(producers_table(result.producers, verbose=verbose))
        console.print()
        console.print(section("Transactions"))
        console.print(
            transactions_summary(
                digest.transactions, digest.findings, result.capture.last_ts, verbose=verbose
            )
        )
        console.print()
        read = [p for p in result.partitions if p.fetch_answers]
        if read:  # partitions consumers read: what they were given, beside what was written
            console.print(section("Partitions read"))
            console.print(partitions_overview(read, digest.findings))
            console.print()
        console.print(section("Findings"))
    console.print(findings_view(digest.findings, verbose=verbose))
    console.print()
    console.print(verdict_line(result))
    if topic_partition:
        from ksniff.report.partitions import LOG_ROWS_SHOWN, find_partitions, partition_view

        console.print()
        console.print(section(f"Partition {shown(topic_partition)}"))
        found = find_partitions(result.partitions, topic_partition)
        if not found:
            names = dict.fromkeys(f"{q.topic}-{q.partition}" for q in result.partitions)
            known = ", ".join(shown(name) for name in list(names)[:20])
            console.print(
                Text(
                    f"No partition {shown(topic_partition)} in the capture"
                    + (f"; known: {known}" if known else ".")
                )
            )
        for n, p in enumerate(found):  # one log per capture set that has this partition
            if n:
                console.print()
            console.print(
                partition_view(
                    p, result.findings, limit=None if verbose else LOG_ROWS_SHOWN, with_set=len(found) > 1
                )
            )
    if producer:
        console.print()
        console.print(section(f"Producer {shown(producer)}"))
        console.print(producer_timeline(result, producer, limit=None if verbose else TIMELINE_ROWS))
