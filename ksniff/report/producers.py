"""The producers: one row per producer id with its transactional id, epochs, instances, what it wrote and
how its transactions ended."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksniff.audit.model import ProducerSummary
from ksniff.report.text import more, ranges, shown

PRODUCERS_SHOWN = 30
CLIENTS_SHOWN = 3


def producers_table(producers: Sequence[ProducerSummary], *, verbose: bool = False) -> RenderableType:
    """One row per producer: identity, epochs, the instances that used it, what it wrote and ended."""
    if not producers:
        return Text("No idempotent or transactional producer seen.", style="dim")
    # Ratios on the two free-text columns make them give way first when a row is too wide; every column
    # folds rather than being cut at the screen's edge.
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("Producer", overflow="fold", ratio=1)
    table.add_column("Epochs", overflow="fold")
    table.add_column("Clients", overflow="fold", ratio=1)
    table.add_column("Batches", justify="right", overflow="fold")
    table.add_column("Records", justify="right", overflow="fold")
    table.add_column("Transactions", overflow="fold")
    listed = producers if verbose else producers[:PRODUCERS_SHOWN]
    for p in listed:
        table.add_row(_producer_cell(p), Text(ranges(p.epochs)), _clients_cell(p, verbose),
                      f"{p.batches:,}", f"{p.records:,}", _outcomes_cell(p))
    if len(producers) > len(listed):
        return Group(table, more(len(producers) - len(listed), "producer"))
    return table


def _producer_cell(p: ProducerSummary) -> Text:
    if p.transactional_id:
        text = Text(shown(p.transactional_id))
    else:
        text = Text("(idempotent)", style="dim")
    if p.producer_id is not None:
        text.append(f"\npid {p.producer_id}", style="dim")
    return text


def _clients_cell(p: ProducerSummary, verbose: bool) -> Text:
    limit = None if verbose else CLIENTS_SHOWN
    clients = [shown(c) for c in p.clients[:limit]]
    if len(p.clients) > len(clients):
        clients.append(f"+{len(p.clients) - len(clients)} more")
    text = Text("\n".join(clients))
    ids = [shown(c) for c in p.client_ids[:limit]]
    if len(p.client_ids) > len(ids):
        ids.append(f"+{len(p.client_ids) - len(ids)} more")
    if ids:
        text.append("\n" + ", ".join(ids), style="dim")
    return text


def _outcomes_cell(p: ProducerSummary) -> Text:
    counts = [(p.commit, "committed", ""), (p.abort, "aborted", "yellow"), (p.open, "open", "yellow"),
              (p.unknown, "unknown", "dim")]
    text = Text()
    for n, word, style in counts:
        if n:
            text.append(("\n" if text else "") + f"{n:,} {word}", style=style)
    return text if text else Text("-", style="dim")
