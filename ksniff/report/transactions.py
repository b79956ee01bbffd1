"""The transactions: counts by outcome, durations, the slowest, and those still open at the end."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksniff.audit.digest import FindingsDigest, TransactionsDigest
from ksniff.audit.model import Finding, Transaction
from ksniff.report.text import clock, duration, more, plural, shown

SLOWEST_SHOWN = 5
OPEN_SHOWN = 10


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: an actual observed duration, never an interpolated one."""
    return sorted_values[percentile_rank(len(sorted_values), p) - 1]


def percentile_rank(n: int, p: float) -> int:
    """The rank (from 1) of the nearest-rank `p` percentile among `n` sorted values."""
    return max(1, math.ceil(p / 100 * n))


def spread(sorted_values: Sequence[float]) -> tuple[int, float, float, float]:
    """What the report says of durations: how many, p50, p95, max (zeros when none)."""
    if not sorted_values:
        return (0, 0.0, 0.0, 0.0)
    return (
        len(sorted_values),
        percentile(sorted_values, 50),
        percentile(sorted_values, 95),
        sorted_values[-1],
    )


def transactions_summary(
    transactions: TransactionsDigest | Sequence[Transaction],
    findings: FindingsDigest | Sequence[Finding] = (),
    capture_end: float | None = None,
    *,
    verbose: bool = False,
) -> RenderableType:
    """Counts by outcome, durations of the ended ones, the slowest, and those still open at the end.
    `transactions`, `findings`: lists, or their digests (ksniff.audit.digest)."""
    txns = (
        transactions if isinstance(transactions, TransactionsDigest) else TransactionsDigest.of(transactions)
    )
    if not txns.count:
        return Text("No transaction seen.", style="dim")
    parts: list[RenderableType] = [_outcome_counts(txns)]
    ended, p50, p95, longest = txns.spread if txns.spread is not None else spread(txns.durations)
    if ended:
        parts.append(
            Text(
                f"Durations of the {plural(ended, 'ended one')}: p50 {duration(p50)}, p95 {duration(p95)}, "
                f"max {duration(longest)}"
            )
        )
        slowest = txns.slowest_first()[: None if verbose else SLOWEST_SHOWN]
        parts += [
            Text(""),
            Text("Slowest", style="bold"),
            _txn_table(slowest, "Duration", lambda t: t.end_ts),
        ]
    if txns.still_open:
        found = findings if isinstance(findings, FindingsDigest) else FindingsDigest.of(findings)
        parts += [Text(""), *_open_part(list(txns.still_open), found, capture_end, verbose)]
    return Group(*parts)


def _outcome_counts(txns: TransactionsDigest) -> Text:
    counts = txns.outcomes
    words = [("commit", "committed"), ("abort", "aborted"), ("open", "open"), ("unknown", "unknown")]
    text = Text(f"{plural(txns.count, 'transaction')}: ")
    text.append(", ".join(f"{counts.get(key, 0):,} {word}" for key, word in words))
    others = sorted(set(counts) - {key for key, _ in words})
    if others:
        text.append(", " + ", ".join(f"{counts[o]:,} {o}" for o in others))
    return text


def _open_part(
    still_open: list[Transaction], findings: FindingsDigest, capture_end: float | None, verbose: bool
) -> list[RenderableType]:
    hanging = {
        (t.first.transactional_id, t.first.producer_epoch)
        for t in findings.tallies
        if t.first.kind == "hanging_transaction"
    }
    end = capture_end if capture_end is not None else max(t.start_ts for t in still_open)
    still_open.sort(key=lambda t: t.start_ts)
    listed = still_open if verbose else still_open[:OPEN_SHOWN]
    title = Text("Open at the end of the capture", style="bold")
    n_hanging = sum((t.transactional_id, t.producer_epoch) in hanging for t in still_open)
    if n_hanging:
        title.append(f" ({n_hanging:,} hanging: past their timeout)", style="yellow")
    table = _txn_table(
        listed,
        "Open for",
        lambda t: end,
        lambda t: "HANGING" if (t.transactional_id, t.producer_epoch) in hanging else "open",
    )
    parts: list[RenderableType] = [title, table]
    if len(still_open) > len(listed):
        parts.append(more(len(still_open) - len(listed), "open transaction"))
    return parts


def _pid_epoch(t: Transaction) -> str:
    if t.producer_id is None:
        return "-"
    return f"{t.producer_id}/{'-' if t.producer_epoch is None else t.producer_epoch}"


def _txn_table(txns: Sequence[Transaction], time_title: str, end_of, outcome_of=None) -> Table:
    # Every column may fold, so a huge producer id cannot push Records off the screen; the ratios make
    # the two free-text columns give way first (rich ignores ratios, min widths aside, when all fits).
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 0), show_edge=False)
    table.add_column("Start", no_wrap=True)
    table.add_column("Transactional id", overflow="fold", ratio=1)
    table.add_column("Pid/epoch", overflow="fold")
    table.add_column(time_title, justify="right", overflow="fold")
    table.add_column("Outcome", overflow="fold")
    table.add_column("Partitions", overflow="fold", ratio=1)
    table.add_column("Records", justify="right", overflow="fold")
    for t in txns:
        outcome = outcome_of(t) if outcome_of else t.outcome
        style = "yellow" if outcome in ("HANGING", "abort") else ""
        table.add_row(
            clock(t.start_ts),
            Text(shown(t.transactional_id)),
            _pid_epoch(t),
            duration(end_of(t) - t.start_ts),
            Text(outcome, style=style),
            _partitions_text(t.partitions),
            f"{t.records:,}",
        )
    return table


def _partitions_text(partitions: Sequence[str], count: int = 3) -> Text:
    text = ", ".join(shown(p) for p in partitions[:count])
    if len(partitions) > count:
        text += f" +{len(partitions) - count}"
    return Text(text)
