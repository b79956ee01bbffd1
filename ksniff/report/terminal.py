"""The terminal report: rich renderables as pure functions of the result, readable at 80 columns.

Every function here returns a renderable and prints nothing, so the report is snapshot-tested with
`Console(record=True)`; only `render_report` prints, and only to the console it is given. Values that come
off the wire or from file names (ids, topics, client ids, paths) go through `text.shown` (escaped, long ones
cut) and are always wrapped in `Text`, never interpreted as rich markup.
Times are UTC time of day with milliseconds; the header gives the date once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ksniff.audit.model import Finding, ProducerSummary, Transaction
from ksniff.report.tables import error_name, in_calendar
from ksniff.report.text import shown, shown_message

if TYPE_CHECKING:
    from ksniff.result import AuditResult

SEVERITIES = ("critical", "warning", "info")
SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
SEVERITY_MEANING = {
    "critical": "data may be lost, duplicated or exposed",
    "warning": "the broker caught it or the client recovered",
    "info": "context",
}

# One line per finding kind: what to do about it. Kinds the audit adds later simply have no advice.
ADVICE: dict[str, str] = {
    "sequence_gap": "Records between the expected and the received sequence were never written: look for "
                    "expired batches (delivery.timeout.ms) or OUT_OF_ORDER_SEQUENCE_NUMBER in the producer's "
                    "log and re-send the missing range from its source.",
    "sequence_duplicate": "A batch was sent twice: harmless if the broker refused it "
                          "(DUPLICATE_SEQUENCE_NUMBER); if it accepted it, consumers read duplicates - check "
                          "that enable.idempotence is on and that no two instances share a producer id.",
    "epoch_regression": "An instance kept using an older epoch: make sure only one process runs per "
                        "transactional.id, and that a restarted instance's predecessor is really stopped.",
    "producer_fenced": "Two instances used the same transactional.id (or one restarted): give each live "
                       "instance its own stable transactional.id, and close a producer on "
                       "ProducerFencedException instead of retrying with it.",
    "zombie_write_accepted": "A fenced instance still wrote: its records may be duplicated or visible to "
                             "consumers; stop the instance at that address, check the partitions downstream, "
                             "and prefer brokers with KIP-890 transaction verification.",
    "hanging_transaction": "An open transaction holds back read_committed consumers (the LSO) on its "
                           "partitions: if its producer is gone, end it with `kafka-transactions.sh "
                           "find-hanging` then `abort`; lower transaction.timeout.ms if it is very long.",
    "capture_gap": "The capture lost bytes, so findings on that connection are unverified: capture with a "
                   "bigger buffer (tcpdump -B), full packets (-s 0) and a port filter, ideally on the "
                   "broker host.",
    "sequence_out_of_order": "The broker and the producer disagree on sequence numbers, usually after a "
                             "retry of an expired batch: an idempotent producer must reset and a "
                             "transactional one abort; keep max.in.flight.requests.per.connection <= 5.",
    "write_to_unregistered_partition": "A transactional write went to a partition never added with "
                                       "AddPartitionsToTxn: brokers without KIP-890 verification accept it "
                                       "and the partition may hang; upgrade the client, or look for a "
                                       "capture gap before the write.",
    "txn_offset_commit_unregistered_group": "A transaction committed offsets for a group it never added "
                                            "with AddOffsetsToTxn, so they may not commit atomically with "
                                            "its writes: check how the client calls "
                                            "sendOffsetsToTransaction, or look for a capture gap.",
    "end_txn_without_transaction": "EndTxn came with no transaction open, typically a commit or abort "
                                   "retried after a timeout: harmless if the broker refused it; otherwise "
                                   "check the client's error handling around commitTransaction.",
    "unanswered_request": "The broker never answered (connection closed or capture ended): check the "
                          "broker's log at that time and request.timeout.ms, or whether the capture "
                          "stopped early.",
    "write_outside_transaction": "A transactional producer wrote while no transaction was open (before "
                                 "AddPartitionsToTxn or after EndTxn): the records escape any commit or "
                                 "abort; upgrade the client, or look for a capture gap before the write.",
    "offset_commit_backwards": "A consumer group committed an offset below its previous one: its consumers "
                               "will re-read records; look for a zombie group member, a rebalance, or a "
                               "manual offset reset at that time.",
}

PRODUCERS_SHOWN = 30
CLIENTS_SHOWN = 3
SLOWEST_SHOWN = 5
OPEN_SHOWN = 10
FINDINGS_SHOWN = {"critical": 50, "warning": 15, "info": 10}
TIMELINE_ROWS = 1000
INPUTS_SHOWN = 5


# ---- formatting -------------------------------------------------------------------------------------------

def _utc(ts: float) -> datetime | None:
    """The calendar time, or None for a time no calendar holds (a capture may carry any 64-bit time)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc) if in_calendar(ts) else None


def clock(ts: float | None) -> str:
    """UTC time of day with milliseconds, `12:00:02.156`; epoch seconds for a time outside years 1-9999."""
    if ts is None or (isinstance(ts, float) and math.isnan(ts)):
        return ""
    utc = _utc(ts)
    return f"@{ts:.6g}s" if utc is None else utc.strftime("%H:%M:%S.%f")[:12]


def stamp(ts: float) -> str:
    """Date and time, for the one place a date is shown."""
    utc = _utc(ts)
    return clock(ts) if utc is None else utc.strftime("%Y-%m-%d ") + clock(ts)


def span(first: float | None, last: float | None) -> str:
    if first is None or last is None:
        return "nothing captured"
    a, b = _utc(first), _utc(last)
    end = clock(last) if a is not None and b is not None and a.date() == b.date() else stamp(last)
    return f"{stamp(first)} -> {end} UTC ({duration(last - first)})"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns at GB


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def ranges(values: Iterable[int]) -> str:
    """`0, 1, 2, 5` as `0-2, 5`: epochs and API versions read better compressed."""
    out: list[str] = []
    run: list[int] = []
    for v in sorted(set(values)):
        if run and v != run[-1] + 1:
            out.append(_run_text(run))
            run = []
        run.append(v)
    if run:
        out.append(_run_text(run))
    return ", ".join(out)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def producer_label(txn_id: str | None, pid: int | None, epoch: int | None = None) -> str:
    parts = [shown(txn_id)] if txn_id else []
    if pid is not None:
        parts.append(f"pid {pid}")
    if epoch is not None:
        parts.append(f"epoch {epoch}")
    return " ".join(parts) or "-"


def _more(n: int, what: str, hint: str = "--verbose shows all") -> Text:
    return Text(f"... and {plural(n, what)} more ({hint})", style="dim")


def _section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left", style="dim")


# ---- header -----------------------------------------------------------------------------------------------

def header(result: AuditResult, *, verbose: bool = False) -> RenderableType:
    """Where the numbers come from: inputs, capture span, traffic, decode health, gaps, engine."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("ksniff", Text(f"{result.version}, engine {result.engine}"))
    grid.add_row("Inputs", _inputs_text(result, verbose))
    cap, dec = result.capture, result.decode
    grid.add_row("Capture", Text(span(cap.first_ts, cap.last_ts)))
    traffic = (f"{plural(cap.packets, 'packet')}, {plural(cap.tcp_segments, 'TCP segment')}, "
               f"{plural(cap.connections, 'connection')} ({cap.kafka_connections:,} Kafka)")
    grid.add_row("Traffic", Text(traffic))
    grid.add_row("Decoded", _decode_text(result))
    grid.add_row("Gaps", _gaps_text(result))
    limits = _limits_text(result)
    if limits.plain:
        grid.add_row("Limits", limits)
    for warning in result.warnings:
        grid.add_row(Text("Warning", style="yellow"), Text(shown_message(warning)))
    parts: list[RenderableType] = [grid]
    if dec.by_api:
        parts += [Text(""), api_table(result)]
    return Group(*parts)


def _inputs_text(result: AuditResult, verbose: bool) -> Text:
    if not result.inputs:
        return Text("none")
    listed = result.inputs if verbose else result.inputs[:INPUTS_SHOWN]
    lines = [f"{shown(i.path, 4096)} ({i.format}, {i.linktype}, {plural(i.packets, 'packet')}, "
             f"{size(i.bytes)})"
             for i in listed]
    text = Text("\n".join(lines))
    if len(result.inputs) > len(listed):
        text.append("\n")
        text.append_text(_more(len(result.inputs) - len(listed), "input"))
    return text


def _decode_text(result: AuditResult) -> Text:
    dec = result.decode
    text = Text(f"{plural(dec.requests, 'request')}, {plural(dec.responses, 'response')}, "
                f"{plural(dec.exchanges, 'exchange')}")
    unmatched = dec.unmatched_requests + dec.unmatched_responses
    if unmatched:
        text.append(f"; {dec.unmatched_requests:,} unanswered, {dec.unmatched_responses:,} unmatched "
                    "responses")
    text.append("; ")
    text.append(plural(dec.errors, "decode error"), style="red" if dec.errors else "")
    if dec.undecoded_bodies:
        text.append(f"; {plural(dec.undecoded_bodies, 'body', 'bodies')} not decoded")
    if dec.resyncs:
        text.append(f"; {plural(dec.resyncs, 'resync')}")
    if dec.tls_connections:
        text.append(f"; {plural(dec.tls_connections, 'TLS connection')} (unreadable)", style="yellow")
    return text


def _gaps_text(result: AuditResult) -> Text:
    cap = result.capture
    if not cap.gaps:
        return Text("none: every Kafka byte was captured", style="green")
    return Text(f"{plural(cap.gaps, 'gap')}, {size(cap.gap_bytes)} missing; what rests on them is "
                "unverified", style="yellow")


def _limits_text(result: AuditResult) -> Text:
    cap = result.capture
    notes = [
        (cap.kernel_drops, "dropped by the kernel"),
        (cap.dropped_by_limits, "dropped by memory limits"),
        (cap.truncated_packets, "truncated packets"),
        (cap.overlaps_differing, "conflicting retransmissions"),
        (cap.ip_fragments, "IP fragments"),
    ]
    return Text(", ".join(f"{n:,} {what}" for n, what in notes if n), style="yellow")


def api_table(result: AuditResult) -> Table:
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False)
    table.add_column("API")
    table.add_column("Versions")
    for name in ("Requests", "Responses", "Exchanges"):
        table.add_column(name, justify="right")
    for name, counts in sorted((result.decode.by_api or {}).items()):
        table.add_row(Text(shown(name)), Text(ranges(counts.versions or ())), f"{counts.requests:,}",
                      f"{counts.responses:,}", f"{counts.exchanges:,}")
    return table


# ---- producers --------------------------------------------------------------------------------------------

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
        return Group(table, _more(len(producers) - len(listed), "producer"))
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


# ---- transactions -----------------------------------------------------------------------------------------

def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: an actual observed duration, never an interpolated one."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def transactions_summary(transactions: Sequence[Transaction], findings: Sequence[Finding] = (),
                         capture_end: float | None = None, *, verbose: bool = False) -> RenderableType:
    """Counts by outcome, durations of the ended ones, the slowest, and those still open at the end."""
    if not transactions:
        return Text("No transaction seen.", style="dim")
    parts: list[RenderableType] = [_outcome_counts(transactions)]
    ended = sorted((t for t in transactions if t.end_ts is not None), key=lambda t: t.end_ts - t.start_ts)
    if ended:
        times = [t.end_ts - t.start_ts for t in ended]
        parts.append(Text(f"Durations of the {plural(len(ended), 'ended one')}: p50 "
                          f"{duration(percentile(times, 50))}, p95 {duration(percentile(times, 95))}, "
                          f"max {duration(times[-1])}"))
        slowest = ended[::-1][: None if verbose else SLOWEST_SHOWN]
        parts += [Text(""), Text("Slowest", style="bold"),
                  _txn_table(slowest, "Duration", lambda t: t.end_ts)]
    still_open = [t for t in transactions if t.outcome == "open"]
    if still_open:
        parts += [Text(""), *_open_part(still_open, findings, capture_end, verbose)]
    return Group(*parts)


def _outcome_counts(transactions: Sequence[Transaction]) -> Text:
    counts = Counter(t.outcome for t in transactions)
    words = [("commit", "committed"), ("abort", "aborted"), ("open", "open"), ("unknown", "unknown")]
    text = Text(f"{plural(len(transactions), 'transaction')}: ")
    text.append(", ".join(f"{counts.get(key, 0):,} {word}" for key, word in words))
    others = sorted(set(counts) - {key for key, _ in words})
    if others:
        text.append(", " + ", ".join(f"{counts[o]:,} {o}" for o in others))
    return text


def _open_part(still_open: list[Transaction], findings: Sequence[Finding], capture_end: float | None,
               verbose: bool) -> list[RenderableType]:
    hanging = {(f.transactional_id, f.producer_epoch) for f in findings if f.kind == "hanging_transaction"}
    end = capture_end if capture_end is not None else max(t.start_ts for t in still_open)
    still_open.sort(key=lambda t: t.start_ts)
    listed = still_open if verbose else still_open[:OPEN_SHOWN]
    title = Text("Open at the end of the capture", style="bold")
    n_hanging = sum((t.transactional_id, t.producer_epoch) in hanging for t in still_open)
    if n_hanging:
        title.append(f" ({n_hanging:,} hanging: past their timeout)", style="yellow")
    table = _txn_table(listed, "Open for", lambda t: end,
                       lambda t: "HANGING" if (t.transactional_id, t.producer_epoch) in hanging else "open")
    parts: list[RenderableType] = [title, table]
    if len(still_open) > len(listed):
        parts.append(_more(len(still_open) - len(listed), "open transaction"))
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
        table.add_row(clock(t.start_ts), Text(shown(t.transactional_id)), _pid_epoch(t),
                      duration(end_of(t) - t.start_ts),
                      Text(outcome, style=style), _partitions_text(t.partitions), f"{t.records:,}")
    return table


def _partitions_text(partitions: Sequence[str], count: int = 3) -> Text:
    text = ", ".join(shown(p) for p in partitions[:count])
    if len(partitions) > count:
        text += f" +{len(partitions) - count}"
    return Text(text)


# ---- findings ---------------------------------------------------------------------------------------------

def findings_view(findings: Sequence[Finding], *, verbose: bool = False) -> RenderableType:
    """Findings grouped by severity, critical first; then, per kind present, what to do about it."""
    if not findings:
        return Text("No findings.", style="green")
    parts: list[RenderableType] = []
    for severity in _severities_present(findings):
        group = sorted((f for f in findings if f.severity == severity), key=lambda f: f.ts)
        title = Text(f"{severity.upper()} ({len(group):,})", style=SEVERITY_STYLE.get(severity, "bold"))
        title.append(f"  {SEVERITY_MEANING.get(severity, '')}", style="dim")
        parts.append(title)
        limit = None if verbose else FINDINGS_SHOWN.get(severity, 10)
        listed = group[:limit]
        parts += [finding_block(f, verbose=verbose) for f in listed]
        if len(group) > len(listed):
            parts.append(_more(len(group) - len(listed), f"{severity} finding", "--verbose or --json"))
        parts.append(Text(""))
    parts.append(advice(findings))
    return Group(*parts)


def _severities_present(findings: Sequence[Finding]) -> list[str]:
    present = {f.severity for f in findings}
    return [s for s in SEVERITIES if s in present] + sorted(present - set(SEVERITIES))


def finding_headline(f: Finding, *, severity: bool = False) -> Text:
    """`12:00:03.206 sequence_gap orders-txn pid 4001 epoch 1 orders-1`: when, what, who, where."""
    text = Text(clock(f.ts) + " ")
    style = SEVERITY_STYLE.get(f.severity, "bold")
    if severity:
        text.append(f"{f.severity.upper()} ", style=style)
    text.append(f.kind, style=style)
    who = producer_label(f.transactional_id, f.producer_id, f.producer_epoch)
    if who != "-":
        text.append(" " + who)
    where = _where(f)
    if where:
        text.append(" " + where, style="bold")
    if f.evidence.get("unverified"):
        text.append(" (unverified)", style="dim")
    return text


def _where(f: Finding) -> str:
    parts = []
    if f.topic is not None:
        parts.append(shown(f.topic) if f.partition is None else f"{shown(f.topic)}-{f.partition}")
    if f.group:
        parts.append(f"group {shown(f.group)}")
    return " ".join(parts)


def finding_block(f: Finding, *, verbose: bool = False) -> RenderableType:
    """The headline, then the audit's message and its evidence indented beneath it."""
    body = Text(finding_message(f))
    evidence = evidence_text(f.evidence, verbose=verbose)
    if evidence.plain:
        body.append("\n")
        body.append_text(evidence)
    return Group(finding_headline(f), Padding(body, (0, 0, 0, 4)))


def finding_message(f: Finding) -> str:
    """The audit's sentence, with the identifiers it quotes escaped and cut (they may be megabytes)."""
    quoted = [f.transactional_id, f.topic, f.group, *(v for v in f.evidence.values() if isinstance(v, str))]
    return shown_message(f.message, quoted)


# Evidence keys every exchange-based finding carries (ksniff.audit.findings): said once, compactly, up front.
_ANSWER_KEYS = ("broker_error", "error", "error_code")
# In the JSON and CSV for joining; noise on a terminal unless --verbose.
_QUIET_KEYS = frozenset({"conn", "correlation_id", "broker", "unverified"})


def evidence_text(evidence: dict[str, Any], *, verbose: bool = False) -> Text:
    """Evidence as one run of text: the request and its sender, what the broker answered, then the rest
    as `key value` pairs (times of day for epoch seconds); empty values are left out."""
    rest = {k: v for k, v in evidence.items() if v is not None and (verbose or k not in _QUIET_KEYS)}
    items = [_request_item(rest, verbose), _answer_item(rest)]
    items += [_evidence_item(k, v) for k, v in rest.items() if k != "unverified"]
    return Text(", ".join(i for i in items if i), style="dim")


def _request_item(ev: dict[str, Any], verbose: bool) -> str:
    api, client, client_id = ev.pop("api", None), ev.pop("client", None), ev.pop("client_id", None)
    text = shown(api) if api else ""
    if verbose and "correlation_id" in ev:
        text += f" #{ev.pop('correlation_id')}"
    if client:
        text += f" from {shown(client)}" if text else f"client {shown(client)}"
    if client_id:
        text += f" ({shown(client_id)})" if text else f"client_id {shown(client_id)}"
    return text


def _answer_item(ev: dict[str, Any]) -> str:
    for key in _ANSWER_KEYS:
        if key in ev:
            value = ev.pop(key)
            name = error_name(value) if isinstance(value, int) else value
            return f"broker answered {shown(name or value)}"
    return ""


EVIDENCE_ITEMS_SHOWN = 10  # of a list in the evidence (registered partitions, groups): --json has them all


def _evidence_item(key: str, value: Any) -> str:
    key = shown(key)
    if isinstance(value, float) and (key.endswith("_ts") or key.endswith("_at")):
        return f"{key} {clock(value)}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value) if isinstance(value, (list, tuple)) else sorted(value, key=repr)
        text = ", ".join(shown(v) for v in items[:EVIDENCE_ITEMS_SHOWN]) or "-"
        if len(items) > EVIDENCE_ITEMS_SHOWN:
            text += f" +{len(items) - EVIDENCE_ITEMS_SHOWN:,} more"
        return f"{key} {text}"
    if isinstance(value, bool):
        return key if value else f"not {key}"
    return f"{key} {shown(value)}"


def advice(findings: Sequence[Finding]) -> RenderableType:
    kinds = list(dict.fromkeys(f.kind for s in _severities_present(findings) for f in findings
                               if f.severity == s))
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    for kind in kinds:
        if kind in ADVICE:
            table.add_row(Text(kind), Text(ADVICE[kind]))
    if not table.row_count:
        return Text("")
    return Group(Text("What to do", style="bold"), table)


# ---- one producer's timeline ------------------------------------------------------------------------------

def producer_timeline(result: AuditResult, producer: str, exchanges: Sequence[dict] | None = None,
                      batches: Sequence[dict] | None = None, *, limit: int | None = TIMELINE_ROWS
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
        return Text(f"No producer matches '{shown(producer)}': give a transactional id or a producer id.",
                    style="yellow")
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


def resolve_producer(result: AuditResult, producer: str, exchanges: Sequence[dict] = ()
                     ) -> tuple[set[str], set[int]]:
    """The transactional ids and producer ids `producer` stands for (a producer id may be several
    instances' over time; a transactional id may have had several producer ids)."""
    txn_ids: set[str] = set()
    pids: set[int] = set()
    known_txn = {p.transactional_id for p in result.producers}
    known_txn |= {t.transactional_id for t in result.transactions}
    known_txn |= {r.get("transactional_id") for r in exchanges}
    if producer in known_txn:
        txn_ids.add(producer)
    elif producer.lstrip("-").isdigit():
        pids.add(int(producer))
    for p in result.producers:
        if p.transactional_id in txn_ids and p.producer_id is not None:
            pids.add(p.producer_id)
        elif p.producer_id in pids and p.transactional_id:
            txn_ids.add(p.transactional_id)
    return txn_ids, pids


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


def _timeline_rows(exchanges: Sequence[dict], batches: Sequence[dict], txn_ids: set[str],
                   pids: set[int]) -> list[dict]:
    my_batches = [dict(b, api="Produce", kind="batch") for b in batches if _mine(b, txn_ids, pids)]
    with_batches = {(b["conn"], b["correlation_id"]) for b in my_batches}
    my_exchanges = [dict(e, kind="exchange") for e in exchanges if _mine(e, txn_ids, pids)
                    and (e.get("conn"), e.get("correlation_id")) not in with_batches]
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


def _timeline_cells(row: dict, instances: dict[tuple[str, str], str]) -> list[Text]:
    batch = row["kind"] == "batch"
    partition = f"{shown(row['topic'])}-{row['partition']}" if batch else ""
    seq = ""
    if batch and row.get("base_sequence") is not None and row["base_sequence"] >= 0:
        seq = f"{row['base_sequence']}-{row['last_sequence']}"
    epoch = row.get("producer_epoch")
    return [
        Text(clock(row["ts"])),
        Text(instances[(row.get("client") or "", row.get("client_id") or "")], style="bold"),
        Text(shown(row["api"])),
        Text(partition),
        Text(seq),
        Text("" if epoch is None else str(epoch)),
        _outcome(row),
    ]


def _outcome(row: dict) -> Text:
    status = row.get("status")
    if status == "unanswered" or (row["kind"] == "batch" and row.get("response_ts") is None):
        text = Text("no answer", style="yellow")
    elif status == "no_response":
        text = Text("acks=0")
    elif row.get("error") not in (None, "NONE"):
        text = Text(shown(row["error"]), style="red")
    elif row.get("error_code") not in (None, 0):
        text = Text(f"error {row['error_code']}", style="red")
    else:
        text = Text("ok", style="green")
        if row.get("base_offset") is not None:
            text.append(f" @{row['base_offset']}", style="dim")
    if row.get("unverified"):
        text.append(" (unverified)", style="dim")
    return text


def _timeline_body(rows: list[dict], findings: list[Finding], instances: dict, limit: int | None
                   ) -> list[RenderableType]:
    """Rows in chunks between findings; every chunk shares fixed column widths, so they read as one
    table with the findings set in where they happened (rich tables have no cells spanning columns)."""
    listed = rows if limit is None else rows[:limit]
    cells = [_timeline_cells(r, instances) for r in listed]
    widths = [max([len(title)] + [c[i].cell_len for c in cells]) for i, title in enumerate(TIMELINE_COLUMNS)]
    widths[3] = min(widths[3], 24)  # long topic names fold rather than push Outcome off the screen
    events = sorted([(r["ts"], 0, i) for i, r in enumerate(listed)] + [(f.ts, 1, j) for j, f in
                                                                        enumerate(findings)])
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
        parts.append(_more(len(rows) - len(listed), "row", "--verbose or --csv has them all"))
    return [p for p in parts if p is not None]


def _timeline_table(chunk: list[list[Text]], widths: list[int], *, header: bool) -> Table | None:
    if not chunk and not header:
        return None
    table = Table(box=None, padding=(0, 1, 0, 0), show_header=header, header_style="bold", show_edge=False)
    for title, width in zip(TIMELINE_COLUMNS, widths, strict=True):
        # Outcome takes what is left and wraps; fixing its width too could push the table past the screen.
        fixed = title != "Outcome"
        table.add_column(title, min_width=width if fixed else None, max_width=width if fixed else None,
                         overflow="fold", no_wrap=title in ("Time", "#", "Seq"))
    for cells in chunk:
        table.add_row(*cells)
    return table


# ---- the whole report -------------------------------------------------------------------------------------

def render_report(console: Console, result: AuditResult, *, quiet: bool = False, verbose: bool = False,
                  producer: str | None = None) -> None:
    """Prints the report: header, producers, transactions, findings (quiet: findings only), then the
    timeline of `producer` when one was asked for."""
    if not quiet:
        console.print(header(result, verbose=verbose))
        console.print()
        console.print(_section("Producers"))
        console.print(producers_table(result.producers, verbose=verbose))
        console.print()
        console.print(_section("Transactions"))
        console.print(transactions_summary(result.transactions, result.findings, result.capture.last_ts,
                                           verbose=verbose))
        console.print()
        console.print(_section("Findings"))
    console.print(findings_view(result.findings, verbose=verbose))
    if producer:
        console.print()
        console.print(_section(f"Producer {shown(producer)}"))
        console.print(producer_timeline(result, producer, limit=None if verbose else TIMELINE_ROWS))


# ---- progress ---------------------------------------------------------------------------------------------

class ByteProgress:
    """A bytes-of-bytes bar on a terminal console; does nothing otherwise, so callers need no `if`."""

    def __init__(self, console: Console, total_bytes: int | None, description: str = "reading") -> None:
        self._progress: Progress | None = None
        if console.is_terminal:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                      TransferSpeedColumn(), TimeRemainingColumn(), console=console,
                                      transient=True)
            self._task = self._progress.add_task(description, total=total_bytes or None)
            self._progress.start()

    def update(self, bytes_read: int, total_bytes: int | None = None) -> None:
        """`bytes_read` is the running total, not an increment; `total_bytes` may be learnt late."""
        if self._progress is not None:
            kwargs = {"total": total_bytes} if total_bytes else {}
            self._progress.update(self._task, completed=bytes_read, **kwargs)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(console: Console, total_bytes: int | None) -> ByteProgress:
    """A progress bar for long reads; give it the stderr console, it shows only on a terminal."""
    return ByteProgress(console, total_bytes)
