"""The producers: the story per transactional id across its instances, then one row per producer id with
its transactional id, epochs, instances, what it wrote and how its transactions ended."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import field

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksniff.audit.digest import Digest
from ksniff.audit.model import Finding, ProducerSummary
from ksniff.common.frozen import slotted_dataclass
from ksniff.report.text import clock, more, ranges, shown

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
        table.add_row(
            _producer_cell(p),
            Text(ranges(p.epochs)),
            _clients_cell(p, verbose),
            f"{p.batches:,}",
            f"{p.records:,}",
            _outcomes_cell(p),
        )
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
    counts = [
        (p.commit, "committed", ""),
        (p.abort, "aborted", "yellow"),
        (p.open, "open", "yellow"),
        (p.unknown, "unknown", "dim"),
    ]
    text = Text()
    for n, word, style in counts:
        if n:
            text.append(("\n" if text else "") + f"{n:,} {word}", style=style)
    return text if text else Text("-", style="dim")


# ---- the story per transactional id -----------------------------------------------------------------------

STORIES_SHOWN = 30
INSTANCES_SHOWN = 6  # pid/epoch steps in one cell; --verbose shows all


@slotted_dataclass
class TransactionalStory:
    """One transactional id across its instances: producer ids and epochs in the order they appeared,
    who took over from whom and when, how its transactions ended, its findings by severity."""

    transactional_id: str
    instances: list[tuple[int, int]] = field(default_factory=list)  # (producer id, epoch), in order
    takeovers: list[Finding] = field(default_factory=list)  # producer_fenced "a newer instance took over"
    outcomes: Counter = field(default_factory=Counter)
    severities: Counter = field(default_factory=Counter)

    @property
    def weight(self) -> tuple:
        """Most alarming first: critical, then warning findings, then takeovers."""
        s = self.severities
        return (-s["critical"], -s["warning"], -len(self.takeovers), self.transactional_id)


def transactional_stories(producers: Sequence[ProducerSummary], digest: Digest) -> list[TransactionalStory]:
    """One story per transactional id, the most alarming first, from the producers and the digest of the
    findings and transactions (ksniff.audit.digest)."""
    stories: dict[str, TransactionalStory] = {}

    def story(txn_id: str) -> TransactionalStory:
        found = stories.get(txn_id)
        if found is None:
            found = stories[txn_id] = TransactionalStory(txn_id)
        return found

    first_seen: dict[tuple[str, int, int], float] = {}

    def seen(txn_id: str, pid: int | None, epoch: int | None, ts: float | None) -> None:
        if pid is None or epoch is None:
            return
        key = (txn_id, pid, epoch)
        at = math.inf if ts is None else ts
        if key not in first_seen or at < first_seen[key]:
            first_seen[key] = at

    for p in producers:
        if p.transactional_id:
            story(p.transactional_id)
            for epoch in p.epochs:
                seen(p.transactional_id, p.producer_id, epoch, None)
    txns = digest.transactions
    for txn_id, outcomes in txns.story_outcomes.items():
        story(txn_id).outcomes.update(outcomes)
    for (txn_id, pid, epoch), ts in txns.began.items():
        seen(txn_id, pid, epoch, ts)
    for t in digest.findings.tallies:
        f = t.first
        if f.transactional_id:
            story(f.transactional_id).severities[f.severity] += t.count
            seen(f.transactional_id, f.producer_id, f.producer_epoch, f.ts)
    for f in digest.findings.takeovers:
        story(f.transactional_id).takeovers.append(f)
        seen(f.transactional_id, f.evidence.get("new_producer_id"), f.evidence.get("new_epoch"), f.ts)
    order = sorted(first_seen.items(), key=lambda kv: (kv[1], kv[0][1], kv[0][2]))
    for (txn_id, pid, epoch), _ in order:
        stories[txn_id].instances.append((pid, epoch))
    for s in stories.values():
        s.takeovers.sort(key=lambda f: f.ts)
    return sorted(stories.values(), key=lambda s: s.weight)


def stories_table(
    producers: Sequence[ProducerSummary], digest: Digest, *, verbose: bool = False
) -> RenderableType:
    """One row per transactional id: its instances in order, the takeovers, outcomes and findings."""
    stories = transactional_stories(producers, digest)
    if not stories:
        return Text("No transactional id seen.", style="dim")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("Transactional id", overflow="fold", ratio=1)
    table.add_column("Instances (pid/epoch)", overflow="fold", ratio=1)
    table.add_column("Takeovers", overflow="fold", ratio=1)
    table.add_column("Transactions", overflow="fold")
    table.add_column("Findings", overflow="fold")
    listed = stories if verbose else stories[:STORIES_SHOWN]
    for s in listed:
        table.add_row(
            Text(shown(s.transactional_id)),
            _instances_cell(s, verbose),
            _takeovers_cell(s, verbose),
            _counts_cell(s.outcomes, _OUTCOME_WORDS),
            _counts_cell(s.severities, _SEVERITY_WORDS),
        )
    if len(stories) > len(listed):
        return Group(table, more(len(stories) - len(listed), "transactional id"))
    return table


def _instances_cell(s: TransactionalStory, verbose: bool) -> Text:
    steps = [f"{pid}/{epoch}" for pid, epoch in s.instances]
    if not verbose and len(steps) > INSTANCES_SHOWN:
        head, tail = steps[: INSTANCES_SHOWN // 2], steps[-(INSTANCES_SHOWN // 2 - 1) :]
        steps = [*head, f"... {len(steps) - len(head) - len(tail)} more", *tail]
    return Text(" -> ".join(steps) or "-")


def _takeovers_cell(s: TransactionalStory, verbose: bool) -> Text:
    if not s.takeovers:
        return Text("-", style="dim")
    text = Text()
    listed = s.takeovers if verbose else s.takeovers[:CLIENTS_SHOWN]
    for f in listed:
        ev = f.evidence
        by = " ".join(shown(x) for x in (ev.get("client"), ev.get("client_id")) if x)
        line = (
            f"{clock(f.ts)} {f.producer_id}/{f.producer_epoch} -> {ev.get('new_producer_id')}/"
            f"{ev.get('new_epoch')}"
        )
        text.append(("\n" if text else "") + line)
        if by:
            text.append(f" by {by}", style="dim")
    if len(s.takeovers) > len(listed):
        text.append(f"\n+{len(s.takeovers) - len(listed)} more", style="dim")
    return text


_OUTCOME_WORDS = [
    ("commit", "committed", ""),
    ("abort", "aborted", "yellow"),
    ("open", "open", "yellow"),
    ("unknown", "unknown", "dim"),
]
_SEVERITY_WORDS = [
    ("critical", "critical", "bold red"),
    ("warning", "warning", "yellow"),
    ("info", "info", "cyan"),
]


def _counts_cell(counts: Counter, words: list[tuple[str, str, str]]) -> Text:
    text = Text()
    for key, word, style in words:
        if counts.get(key):
            text.append(("\n" if text else "") + f"{counts[key]:,} {word}", style=style)
    return text if text else Text("-", style="dim")
