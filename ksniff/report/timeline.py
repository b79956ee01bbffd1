"""`--producer ID`: one producer's every request and response in time order, its findings set in where
they happened, and the instances (client address and id) that spoke for it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ksniff.audit.model import Finding
from ksniff.report.findings import finding_headline, finding_message
from ksniff.report.text import clock, more, plural, shown

if TYPE_CHECKING:
    from ksniff.result import AuditResult

TIMELINE_ROWS = 1000


def producer_timeline(
    result: AuditResult,
    producer: str,
    exchanges: Sequence[dict] | None = None,
    batches: Sequence[dict] | None = None,
    *,
    limit: int | None = TIMELINE_ROWS,
) -> RenderableType:
    """`--producer ID`: every request/response of one producer, its findings inline where they happened.

    `producer` is a transactional id or a producer id. `exchanges` and `batches` are rows of
    ksniff.report.tables (the result's own by default); Produce exchanges show as one row per batch,
    since the partition and sequence range are per batch.
    """
    exchanges = result.exchanges if exchanges is None else exchanges
    batches = result.batches if batches is None else batches
    txn_ids, pids = resolve_producer(result, producer, exchanges)
    if not txn_ids and not pids:
        return no_such_producer(result, producer, exchanges)
    rows = _timeline_rows(exchanges, batches, txn_ids, pids)
    findings = [f for f in result.findings if f.transactional_id in txn_ids or f.producer_id in pids]
    instances = _instances(rows)
    title = Text(_identity(txn_ids, pids), style="bold")
    title.append(f": {plural(len(rows), 'row')}, {plural(len(findings), 'finding')}", style="dim")
    legend = Table.grid(padding=(0, 1))
    for client_key, tag in instances.items():
        legend.add_row(Text(tag, style="bold"), Text(" ".join(shown(x) for x in client_key if x)))
    parts: list[RenderableType] = [title, legend, Text("")]
    parts += _timeline_body(rows, findings, instances, limit)
    return Group(*parts)


KNOWN_IDS_SHOWN = 10
CLOSE_MATCH_CHARS = 256
CLOSE_MATCH_IDS = 10_000


def known_producers(result: AuditResult, exchanges: Sequence[dict] = ()) -> tuple[list[str], list[int]]:
    """Every transactional id and producer id the capture shows, sorted."""
    txn_ids = {p.transactional_id for p in result.producers}
    txn_ids |= {t.transactional_id for t in result.transactions}
    txn_ids |= {r.get("transactional_id") for r in exchanges}
    pids = {p.producer_id for p in result.producers}
    return sorted(t for t in txn_ids if t is not None), sorted(p for p in pids if p is not None)


def no_such_producer(result: AuditResult, producer: str, exchanges: Sequence[dict] = ()) -> RenderableType:
    """What `--producer` can be instead: the ids closest to the one given, else the known ones."""
    txn_ids, pids = known_producers(result, exchanges)
    text = Text(f"No producer matches '{shown(producer)}'.", style="yellow")
    if not txn_ids and not pids:
        text.append(" The capture shows no idempotent or transactional producer.")
        return text
    # Only ids of a plausible length are compared: difflib's cost grows with the product of the lengths.
    candidates = [t for t in txn_ids if len(t) <= CLOSE_MATCH_CHARS] + [str(p) for p in pids]
    import difflib  # only here, for an id that matched nothing: not loaded by every report

    close = difflib.get_close_matches(
        producer[:CLOSE_MATCH_CHARS], candidates[:CLOSE_MATCH_IDS], n=KNOWN_IDS_SHOWN, cutoff=0.5
    )
    if close:
        text.append("\nClosest: " + ", ".join(shown(c) for c in close))
        return text
    if txn_ids:
        text.append(f"\nTransactional ids: {_first_of(txn_ids, KNOWN_IDS_SHOWN)}")
    if pids:
        text.append(f"\nProducer ids: {_first_of([str(p) for p in pids], KNOWN_IDS_SHOWN)}")
    return text


class ProducerMatch:
    """What one `--producer ID` stands for: the transactional ids and producer ids to show.

    ID is a transactional id or a producer id (digits, which may be a transactional id too). Whatever
    carries a wanted transactional id brings its producer id in, and whatever carries a wanted producer id
    its transactional id: a transactional id may have had several producer ids (restarts, takeovers), and
    a producer id is one transactional id's. `found_*` hold only the ids actually seen.
    """

    def __init__(self, wanted: str) -> None:
        self.wanted = wanted
        self.txn_ids: set[str] = {wanted}
        self.pids: set[int] = {int(wanted)} if wanted.lstrip("-").isdigit() else set()
        self.found_txn_ids: set[str] = set()
        self.found_pids: set[int] = set()

    def take(self, txn_id: str | None, pid: int | None) -> bool:
        """Whether something carrying these ids belongs to the producer; learns the ids it brings."""
        if txn_id not in self.txn_ids and (pid is None or pid not in self.pids):
            return False
        if txn_id is not None:
            self.txn_ids.add(txn_id)
            self.found_txn_ids.add(txn_id)
        if pid is not None and pid >= 0:
            self.pids.add(pid)
            self.found_pids.add(pid)
        return True

    def take_row(self, row: dict) -> bool:
        return self.take(row.get("transactional_id"), row.get("producer_id"))


def resolve_producer(
    result: AuditResult, producer: str, exchanges: Sequence[dict] = ()
) -> tuple[set[str], set[int]]:
    """The transactional ids and producer ids `producer` stands for, as seen in the result's producers,
    transactions and `exchanges` rows; two empty sets when nothing matches."""
    match = ProducerMatch(producer)
    for _ in range(2):  # an id learnt late can match what came before it
        for p in result.producers:
            match.take(p.transactional_id, p.producer_id)
        for t in result.transactions:
            match.take(t.transactional_id, t.producer_id)
        for row in exchanges:
            match.take_row(row)
    return match.found_txn_ids, match.found_pids


class ProducerRows:
    """The rows `--producer ID` shows, kept while the other rows stream past to the exports.

    Rows of every transactional id are held until the wanted producer id is first seen, since the
    timeline also shows its transactional id's earlier instances; from then on only the wanted ones are
    kept (ProducerMatch learns the ids as rows come).
    """

    def __init__(self, producer: str) -> None:
        self.producer = producer
        self.restart()

    def restart(self) -> None:
        """Forgets every row kept so far (the run reads its captures again)."""
        self.match = ProducerMatch(self.producer)
        self.exchanges: list[dict[str, Any]] = []
        self.batches: list[dict[str, Any]] = []
        # Before a wanted producer id shows up: rows of any transactional id, which it may turn out to have.
        self._pending: list[tuple[str, dict[str, Any]]] | None = [] if self.match.pids else None

    def add(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        if table not in ("exchanges", "batches"):
            return  # the timeline shows no records
        keep = self.exchanges if table == "exchanges" else self.batches
        for row in rows:
            if self.match.take_row(row):
                self._release_pending()  # the wanted producer id seen: its transactional id is known now
                keep.append(row)
            elif self._pending is not None and row.get("transactional_id") is not None:
                self._pending.append((table, row))

    def _release_pending(self) -> None:
        pending, self._pending = self._pending, None
        for table, row in pending or ():
            if row.get("transactional_id") in self.match.txn_ids:
                (self.exchanges if table == "exchanges" else self.batches).append(row)


def _identity(txn_ids: set[str], pids: set[int]) -> str:
    parts = []
    if txn_ids:
        parts.append("transactional id " + ", ".join(shown(t) for t in sorted(txn_ids)))
    if pids:
        label = "producer ids " if len(pids) > 1 else "producer id "
        parts.append(label + ", ".join(map(str, sorted(pids))))
    return ", ".join(parts)


def _mine(row: dict, txn_ids: set[str], pids: set[int]) -> bool:
    return row.get("transactional_id") in txn_ids or row.get("producer_id") in pids


def _timeline_rows(
    exchanges: Sequence[dict], batches: Sequence[dict], txn_ids: set[str], pids: set[int]
) -> list[dict]:
    my_batches = [dict(b, api="Produce", kind="batch") for b in batches if _mine(b, txn_ids, pids)]
    with_batches = {(b["conn"], b["correlation_id"]) for b in my_batches}
    my_exchanges = [
        dict(e, kind="exchange")
        for e in exchanges
        if _mine(e, txn_ids, pids) and (e.get("conn"), e.get("correlation_id")) not in with_batches
    ]
    return sorted(my_exchanges + my_batches, key=lambda r: r["ts"])


def _instances(rows: Sequence[dict]) -> dict[tuple[str, str], str]:
    """A short tag per (client address, client id), in order of first appearance."""
    tags: dict[tuple[str, str], str] = {}
    for row in rows:
        key = (row.get("client") or "", row.get("client_id") or "")
        if key not in tags:
            tags[key] = f"#{len(tags) + 1}"
    return tags


TIMELINE_COLUMNS = ("Time", "#", "API", "Partition", "Seq", "Epoch", "Outcome")


PARTITIONS_SHOWN = 3  # per timeline row; --csv has them all


def _timeline_cells(row: dict, instances: dict[tuple[str, str], str]) -> list[Text]:
    batch = row["kind"] == "batch"
    if batch:
        partition = f"{shown(row['topic'])}-{row['partition']}"
    else:
        partition = _first_of(_json_list(row.get("partitions")), PARTITIONS_SHOWN)
    seq = ""
    if batch and row.get("base_sequence") is not None and row["base_sequence"] >= 0:
        seq = f"{row['base_sequence']}-{row['last_sequence']}"
    epoch = row.get("producer_epoch")
    api = Text(shown(row["api"]))
    detail = row.get("request_detail")
    if detail and not detail.startswith("timeout"):  # commit/abort, the group: what the step was
        api.append(f" {shown(detail)}", style="bold" if detail in ("commit", "abort") else "")
    return [
        Text(clock(row["ts"])),
        Text(instances[(row.get("client") or "", row.get("client_id") or "")], style="bold"),
        api,
        Text(partition),
        Text(seq),
        Text("" if epoch is None else str(epoch)),
        _outcome(row),
    ]


def _json_list(text: str | None) -> list:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _first_of(items: Sequence, count: int) -> str:
    text = ", ".join(shown(i) for i in items[:count])
    return text + (f" +{len(items) - count}" if len(items) > count else "")


def _outcome(row: dict) -> Text:
    status = row.get("status")
    worst = row.get("worst_error") or row.get("error")
    if status == "unanswered" or (row["kind"] == "batch" and row.get("response_ts") is None):
        text = Text("no answer", style="yellow")
    elif status == "no_response":
        text = Text("acks=0")
    elif worst not in (None, "NONE"):
        text = Text(shown(worst), style="red")
        failed = [str(f).rsplit(" ", 1) for f in _json_list(row.get("partition_errors"))]
        if failed and all(len(f) == 2 and f[1] == worst for f in failed):  # one error: say where
            text.append(f" on {_first_of([f[0] for f in failed], PARTITIONS_SHOWN)}", style="red")
        elif failed:  # which partitions got which error
            text.append(f" ({_first_of([' '.join(f) for f in failed], PARTITIONS_SHOWN)})", style="red")
    elif row.get("error_code") not in (None, 0):
        text = Text(f"error {row['error_code']}", style="red")
    else:
        text = Text("ok", style="green")
        if row.get("base_offset") is not None:
            text.append(f" @{row['base_offset']}", style="dim")
    if row.get("unverified"):
        text.append(" (unverified)", style="dim")
    return text


def _timeline_body(
    rows: list[dict], findings: list[Finding], instances: dict, limit: int | None
) -> list[RenderableType]:
    """Rows in chunks between findings; every chunk shares fixed column widths, so they read as one
    table with the findings set in where they happened (rich tables have no cells spanning columns)."""
    listed = rows if limit is None else rows[:limit]
    cells = [_timeline_cells(r, instances) for r in listed]
    widths = [max([len(title)] + [c[i].cell_len for c in cells]) for i, title in enumerate(TIMELINE_COLUMNS)]
    widths[3] = min(widths[3], 24)  # long topic names fold rather than push Outcome off the screen
    events = sorted(
        [(r["ts"], 0, i) for i, r in enumerate(listed)] + [(f.ts, 1, j) for j, f in enumerate(findings)]
    )
    parts: list[RenderableType] = []
    chunk: list[list[Text]] = []
    for _, is_finding, index in events:
        if is_finding:
            parts.append(_timeline_table(chunk, widths, header=not parts and bool(chunk)))
            parts.append(finding_headline(findings[index], severity=True))
            parts.append(Padding(Text(finding_message(findings[index]), style="dim"), (0, 0, 0, 4)))
            chunk = []
        else:
            chunk.append(cells[index])
    parts.append(_timeline_table(chunk, widths, header=not parts))
    if len(rows) > len(listed):
        parts.append(more(len(rows) - len(listed), "row", "--verbose or --csv has them all"))
    return [p for p in parts if p is not None]


def _timeline_table(chunk: list[list[Text]], widths: list[int], *, header: bool) -> Table | None:
    if not chunk and not header:
        return None
    table = Table(box=None, padding=(0, 1, 0, 0), show_header=header, header_style="bold", show_edge=False)
    for title, width in zip(TIMELINE_COLUMNS, widths, strict=True):
        # Outcome takes what is left and wraps; fixing its width too could push the table past the screen.
        fixed = title != "Outcome"
        table.add_column(
            title,
            min_width=width if fixed else None,
            max_width=width if fixed else None,
            overflow="fold",
            no_wrap=title in ("Time", "#", "Seq"),
        )
    for cells in chunk:
        table.add_row(*cells)
    return table
