"""The report's header: where the numbers come from (inputs, capture span, traffic, decode health, gaps,
limits, warnings) and the requests seen per API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from ksniff.report.text import more, plural, ranges, shown, shown_message, size, span

if TYPE_CHECKING:
    from rich.table import Table

    from ksniff.result import AuditResult

INPUTS_SHOWN = 5


def header(result: AuditResult, *, verbose: bool = False) -> RenderableType:
    """Where the numbers come from: inputs, capture span, traffic, decode health, gaps, engine."""
    from rich.table import Table  # loaded by the whole report, not by --quiet's verdict line

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("ksniff", Text(f"{result.version}, engine {result.engine}"))
    grid.add_row("Inputs", _inputs_text(result, verbose))
    if len(result.capture_sets) > 1:
        grid.add_row("Sets", _sets_text(result, verbose))
    if verbose and result.clusters:
        grid.add_row("Clusters", _clusters_text(result))
    if any(s.clocks for s in result.capture_sets):
        grid.add_row("Clocks", _clocks_text(result))
    if any(s.renamed for s in result.capture_sets):
        grid.add_row("Translated", _translated_text(result))
    cap, dec = result.capture, result.decode
    grid.add_row("Capture", Text(span(cap.first_ts, cap.last_ts)))
    traffic = (
        f"{plural(cap.packets, 'packet')}, {plural(cap.tcp_segments, 'TCP segment')}, "
        f"{plural(cap.connections, 'connection')} ({cap.kafka_connections:,} Kafka)"
    )
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


def _sets_text(result: AuditResult, verbose: bool) -> Text:
    """Which inputs were audited together (each set its own producer-id space), and why."""
    sets = result.capture_sets
    listed = sets if verbose else sets[:INPUTS_SHOWN]
    lines = [f"{plural(len(sets), 'capture set')}, each audited apart"]
    for s in listed:
        names = ", ".join(shown(p.rsplit("/", 1)[-1], 200) for p in s.paths[:3])
        if len(s.paths) > 3:
            names += f" and {len(s.paths) - 3:,} more"
        lines.append(f"{s.number}: {names}: {shown_message('; '.join(s.reasons))}")
    text = Text("\n".join(lines))
    if len(sets) > len(listed):
        text.append("\n")
        text.append_text(more(len(sets) - len(listed), "set"))
    return text


def _clocks_text(result: AuditResult) -> Text:
    """Each capture's clock offset against its set's reference capture, as estimated from the protocol's
    own order (ksniff.engine.clock), with what bounds it."""
    lines = []
    for s in result.capture_sets:
        for c in s.clocks:
            names = ", ".join(shown(p.rsplit("/", 1)[-1], 200) for p in c.paths[:3])
            if len(c.paths) > 3:
                names += f" and {len(c.paths) - 3:,} more"
            if c.reference:
                lines.append(f"{names}: reference")
            elif not c.pairs:
                lines.append(f"{names}: kept as recorded (no exchange orders it against the others)")
            else:
                u = c.uncertainty
                within = f" ± {u * 1e3:.3f} ms" if u is not None else " (bounded on one side only)"
                lines.append(f"{names}: {c.offset:+.6f} s{within}, from {plural(c.pairs, 'ordered pair')}")
    return Text("\n".join(lines))


def _translated_text(result: AuditResult) -> Text:
    """The connections seen twice behind an address translation (at two capture points, or in and out
    of one host that translates), each read once as one of its views (ksniff.engine.sets:
    CaptureSet.renamed)."""
    rows = [row for s in result.capture_sets for row in s.as_contract()["translated_connections"]]
    first = rows[0]
    return Text(
        f"{plural(len(rows), 'connection')} seen twice, behind an address translation, each read once "
        f"(e.g. {first['seen_as']} as {first['read_as']})"
    )


def _clusters_text(result: AuditResult) -> Text:
    lines = []
    for c in result.clusters:
        brokers = ", ".join(f"{b['node_id']} at {shown(b['host'], 200)}:{b['port']}" for b in c["brokers"])
        name = "unnamed" if c["id"] is None else shown(c["id"], 200)
        lines.append(
            f"{name} (set {c['capture_set']}): {plural(len(c['brokers']), 'broker')}"
            + (f" ({brokers})" if brokers else "")
            + f", {plural(len(c['connections']), 'broker address', 'broker addresses')} reached"
        )
    return Text("\n".join(lines))


def _inputs_text(result: AuditResult, verbose: bool) -> Text:
    if not result.inputs:
        return Text("none")
    listed = result.inputs if verbose else result.inputs[:INPUTS_SHOWN]
    lines = [
        f"{shown(i.path, 4096)} ({i.format}, {i.linktype}, {plural(i.packets, 'packet')}, {size(i.bytes)})"
        for i in listed
    ]
    text = Text("\n".join(lines))
    if len(result.inputs) > len(listed):
        text.append("\n")
        text.append_text(more(len(result.inputs) - len(listed), "input"))
    return text


def _decode_text(result: AuditResult) -> Text:
    dec = result.decode
    text = Text(
        f"{plural(dec.requests, 'request')}, {plural(dec.responses, 'response')}, "
        f"{plural(dec.exchanges, 'exchange')}"
    )
    unmatched = dec.unmatched_requests + dec.unmatched_responses
    if unmatched:
        text.append(
            f"; {dec.unmatched_requests:,} unanswered, {dec.unmatched_responses:,} unmatched responses"
        )
    text.append("; ")
    text.append(plural(dec.errors, "decode error"), style="red" if dec.errors else "")
    if dec.undecoded_bodies:
        text.append(f"; {plural(dec.undecoded_bodies, 'body', 'bodies')} not decoded: ")
        text.append(_not_decoded(dec), style="dim")
    if dec.resyncs:
        text.append(f"; {plural(dec.resyncs, 'resync')}")
    if dec.tls_connections:
        text.append(f"; {plural(dec.tls_connections, 'TLS connection')} (unreadable)", style="yellow")
    return text


def _gaps_text(result: AuditResult) -> Text:
    cap = result.capture
    if not cap.gaps:
        return Text("none: every Kafka byte was captured", style="green")
    return Text(
        f"{plural(cap.gaps, 'gap')}, {size(cap.gap_bytes)} missing; what rests on them is unverified",
        style="yellow",
    )


def _limits_text(result: AuditResult) -> Text:
    cap = result.capture
    notes = [
        (cap.kernel_drops, "dropped by the kernel"),
        (cap.dropped_by_limits, "dropped by memory limits"),
        (cap.truncated_packets, "truncated packets"),
        (cap.damaged_times, "damaged packet times"),
        (cap.damaged_packets, "damaged packets"),
        (cap.overlaps_differing, "conflicting retransmissions"),
        (cap.ip_fragments, "IP fragments"),
    ]
    return Text(", ".join(f"{n:,} {what}" for n, what in notes if n), style="yellow")


def api_table(result: AuditResult) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), show_edge=False)
    table.add_column("API")
    table.add_column("Versions")
    for name in ("Requests", "Responses", "Exchanges"):
        table.add_column(name, justify="right")
    for name, counts in sorted((result.decode.by_api or {}).items()):
        table.add_row(
            Text(shown(name)),
            Text(ranges(counts.versions or ())),
            f"{counts.requests:,}",
            f"{counts.responses:,}",
            f"{counts.exchanges:,}",
        )
    return table


VERDICT_STYLE = {"clean": "bold green", "findings": "bold red", "unverified": "bold yellow"}


def verdict_line(result: AuditResult) -> Text:
    """The bottom line a responder (and `--strict`) reads: clean, findings, or unverified and why; a run
    that audited nothing never reads as clean."""
    summary = result.summary()
    verdict = summary["verdict"]
    text = Text("Verdict: ", style="bold")
    text.append(verdict, style=VERDICT_STYLE.get(verdict, "bold"))
    counts = summary["findings"]
    if verdict == "findings":
        text.append(f" ({counts['critical']:,} critical, {counts['warning']:,} warning)")
    reasons = summary["unverified_because"]
    if reasons:
        text.append(
            ("; unverified: " if verdict == "findings" else ": ") + "; ".join(reasons), style="yellow"
        )
    if result.filters:
        text.append(" (filtered: --json has what was kept)", style="dim")
    return text


NOT_DECODED_WHY = {
    "skipped_api": "not read: nothing there for the audit",
    "unknown_version": "a version newer than ksniff's tables",
    "unknown_api": "an API key ksniff does not know",
    "malformed": "malformed",
    "over_item_cap": "over --max-body-items",
}
NOT_DECODED_SHOWN = 4


def _not_decoded(dec) -> str:
    """Which APIs' bodies were not decoded and why, most first (the JSON's by_api[...].not_decoded)."""
    items = [
        (n, name, reason)
        for name, c in (dec.by_api or {}).items()
        for reason, n in c.not_decoded_contract().items()
    ]
    items.sort(key=lambda item: (-item[0], item[1]))
    text = ", ".join(
        f"{shown(name)} {n:,} ({NOT_DECODED_WHY.get(reason, reason)})"
        for n, name, reason in items[:NOT_DECODED_SHOWN]
    )
    if len(items) > NOT_DECODED_SHOWN:
        text += f", {len(items) - NOT_DECODED_SHOWN:,} more in --json"
    return text or "see --json"
