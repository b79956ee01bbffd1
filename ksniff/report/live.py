"""What `ksniff live` shows on the terminal a few times a second: the counters, the open transactions per
transactional id (oldest first, aged by the wall clock) and the latest findings."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksniff.audit.model import Finding, Transaction
from ksniff.common.frozen import frozen_dataclass
from ksniff.report.findings import SEVERITY_STYLE, finding_message
from ksniff.report.text import duration, more, shown

OPEN_SHOWN = 8
LATEST_FINDINGS = 5


@frozen_dataclass
class LiveSnapshot:
    """The counters of a live run at one moment, taken by the engine between two events."""

    iface: str
    now: float  # wall clock
    elapsed: float  # seconds since the capture started
    packets: int
    kernel_drops: int
    exchanges: int  # audited so far
    per_second: float
    producers: int
    open_transactions: Sequence[tuple[Transaction, int]]  # (transaction, its timeout in ms), oldest first
    findings: Sequence[Finding]  # all so far, in the order found


def live_view(s: LiveSnapshot) -> RenderableType:
    counters = Table.grid(padding=(0, 2))
    counters.add_row("interface", shown(s.iface), "elapsed", duration(s.elapsed))
    counters.add_row("packets", f"{s.packets:,}", "kernel drops", f"{s.kernel_drops:,}")
    counters.add_row("exchanges", f"{s.exchanges:,}", "per second", f"{s.per_second:,.0f}")
    counters.add_row("producers", f"{s.producers:,}", "open transactions", f"{len(s.open_transactions):,}")
    counters.add_row("findings", f"{len(s.findings):,}", "", "")
    parts: list[RenderableType] = [Text("ksniff live (Ctrl-C to stop and report)", style="bold"), counters]
    if s.open_transactions:
        parts += [Text(""), open_panel(s.open_transactions, s.now)]
    latest = list(s.findings[-LATEST_FINDINGS:])
    if latest:
        parts.append(Text(""))
        parts += [_finding_line(f) for f in reversed(latest)]
    return Group(*parts)


def open_panel(open_transactions: Sequence[tuple[Transaction, int]], now: float) -> RenderableType:
    """Open transactions, oldest first, with their age on the wall clock and their timeout."""
    table = Table(
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        show_edge=False,
        title_justify="left",
        title=Text("Open transactions (oldest first)", style="bold"),
    )
    table.add_column("Transactional id", overflow="ellipsis", no_wrap=True, ratio=1)
    table.add_column("Pid/epoch", no_wrap=True)
    table.add_column("Open for", justify="right", no_wrap=True)
    table.add_column("Timeout", justify="right", no_wrap=True)
    table.add_column("Records", justify="right", no_wrap=True)
    listed = open_transactions[:OPEN_SHOWN]
    for t, timeout_ms in listed:
        age = max(0.0, now - t.start_ts)
        late = age * 1000 > timeout_ms
        table.add_row(
            Text(shown(t.transactional_id)),
            f"{t.producer_id}/{t.producer_epoch}",
            Text(duration(age), style="yellow" if late else ""),
            Text(
                duration(timeout_ms / 1000) + (" passed" if late else ""), style="yellow" if late else "dim"
            ),
            f"{t.records:,}",
        )
    if len(open_transactions) > len(listed):
        hidden = len(open_transactions) - len(listed)
        return Group(table, more(hidden, "open transaction", "the final report"))
    return table


def _finding_line(f: Finding) -> Text:
    text = Text(f"{f.severity:8} ", style=SEVERITY_STYLE.get(f.severity, ""))
    text.append(f"{f.kind}: {finding_message(f)}")
    text.overflow, text.no_wrap = "ellipsis", True
    return text
