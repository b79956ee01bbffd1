"""`--html FILE`: one self-contained HTML page of the incident, readable offline.

A timeline per transactional id drawn as inline SVG written here (no plotting library, no script or font
from the network: the page is a few hundred kB at most, opens from a mail attachment and prints): one lane
per instance (producer id and epoch), each transaction a bar coloured by its outcome, the takeovers as
dashed lines, the findings as markers; clicking a marker opens that finding's evidence below. The tables
of the terminal report follow. Every string from the wire or a file name is cut and escaped as on the
terminal (`text.shown`), neutralised as in the CSV (`cells.neutral`), then HTML-escaped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape as html_escape
from typing import TYPE_CHECKING, Any

from ksniff.audit.groups import FindingGroup, finding_cause, fold_findings
from ksniff.audit.model import Finding, Transaction
from ksniff.common.cells import json_default
from ksniff.report.cells import neutral
from ksniff.report.findings import SEVERITIES, finding_message
from ksniff.report.producers import TransactionalStory, transactional_stories
from ksniff.report.text import clock, duration, plural, shown, span

if TYPE_CHECKING:
    from ksniff.result import AuditResult

IDS_DRAWN = 40  # transactional ids with a timeline; the most alarming first
BARS_DRAWN = 400  # transactions drawn per transactional id
FINDINGS_LISTED = 500  # finding groups with their evidence
TRANSACTIONS_LISTED = 500
WIDTH, LEFT, RIGHT, LANE = 1000, 170, 20, 20

OUTCOME_COLOUR = {"commit": "#2e7d32", "abort": "#ef6c00", "open": "#c62828", "unknown": "#9e9e9e"}
SEVERITY_COLOUR = {"critical": "#b71c1c", "warning": "#f9a825", "info": "#1565c0"}

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #212121; background: #fff; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 18px 0 4px; font-family: monospace; }
table { border-collapse: collapse; margin: 6px 0; } td, th { padding: 2px 8px; text-align: left;
  border-bottom: 1px solid #eee; vertical-align: top; } th { background: #f5f5f5; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.id { font-family: monospace; word-break: break-all; }
.critical { color: #b71c1c; font-weight: bold; } .warning { color: #a86d00; } .info { color: #1565c0; }
details { margin: 4px 0; padding: 2px 6px; border-left: 3px solid #ddd; }
details[open] { background: #fafafa; } details:target { border-left-color: #b71c1c; }
pre { white-space: pre-wrap; word-break: break-all; margin: 4px 0; }
svg { display: block; max-width: 100%; height: auto; } svg text { font: 11px monospace; fill: #424242; }
svg a circle { cursor: pointer; stroke: #fff; stroke-width: 1.5; }
.legend span { display: inline-block; width: 12px; height: 12px; margin: 0 4px 0 12px; vertical-align: -1px; }
.note { color: #757575; }
"""

# Clicking a marker opens the finding it links to (an anchor alone would only scroll to it, closed).
SCRIPT = """
document.addEventListener('click', function (e) {
  var a = e.target.closest && e.target.closest('a[href^="#f-"]');
  if (!a) return;
  var d = document.getElementById(a.getAttribute('href').slice(1));
  if (d) { d.open = true; }
});
"""


def _t(value: Any, limit: int = 200) -> str:
    """A value from the wire or a file name, as the page shows it."""
    return html_escape(neutral(shown(value, limit)))


def html_report(result: AuditResult) -> str:
    groups = fold_findings(result.findings)
    anchors = {finding_cause(g.first): f"f-{i}" for i, g in enumerate(groups[:FINDINGS_LISTED])}
    stories = transactional_stories(result.producers, result.account())
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>ksniff report: {_t(_title(result), 120)}</title><style>{STYLE}</style></head><body>",
        f"<h1>ksniff report</h1>{_summary(result, groups)}",
        "<h2>Timeline per transactional id</h2>",
        _legend(),
        _timelines(result, stories, anchors),
        "<h2>Findings</h2>",
        _findings(groups),
        "<h2>Transactional ids</h2>",
        _stories_table(stories),
        "<h2>Transactions</h2>",
        _transactions_table(result.transactions),
        f"<script>{SCRIPT}</script></body></html>",
    ]
    return "\n".join(parts)


def _title(result: AuditResult) -> str:
    return ", ".join(i.path for i in result.inputs[:3]) or "no input"


def _summary(result: AuditResult, groups: list[FindingGroup]) -> str:
    cap, dec = result.capture, result.decode
    severities = {s: sum(1 for f in result.findings if f.severity == s) for s in SEVERITIES}
    rows = [
        ("ksniff", html_escape(f"{result.version}, engine {result.engine}")),
        (
            "Inputs",
            "<br>".join(
                f'<span class="id">{_t(i.path, 4096)}</span> ({html_escape(i.format)}, '
                f"{plural(i.packets, 'packet')})"
                for i in result.inputs[:20]
            )
            or "none",
        ),
        ("Capture", html_escape(span(cap.first_ts, cap.last_ts))),
        (
            "Traffic",
            html_escape(
                f"{plural(cap.connections, 'connection')} ({cap.kafka_connections:,} Kafka), "
                f"{plural(dec.exchanges, 'exchange')}"
            ),
        ),
        (
            "Gaps",
            html_escape(
                f"{plural(cap.gaps, 'gap')}, {cap.gap_bytes:,} bytes missing"
                if cap.gaps
                else "none: every Kafka byte was captured"
            ),
        ),
        (
            "Findings",
            " ".join(f'<span class="{s}">{n:,} {s}</span>' for s, n in severities.items())
            + html_escape(f" ({plural(len(groups), 'group')} after folding repeats)"),
        ),
    ]
    rows += [("Warning", _t(w, 1000)) for w in result.warnings[:20]]
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _legend() -> str:
    items = [f'<span style="background:{c}"></span>{o}' for o, c in OUTCOME_COLOUR.items()]
    items += [
        f'<span style="background:{c};border-radius:6px"></span>{s} finding'
        for s, c in SEVERITY_COLOUR.items()
    ]
    return (
        '<p class="legend">' + "".join(items) + ' <span style="border-left:2px dashed #555;width:0">'
        "</span>takeover. Click a marker for its evidence.</p>"
    )


class _Scale:
    def __init__(self, first: float, last: float) -> None:
        self.first, self.width = first, max(last - first, 1e-6)

    def x(self, ts: float) -> float:
        return LEFT + (min(max(ts, self.first), self.first + self.width) - self.first) / self.width * (
            WIDTH - LEFT - RIGHT
        )


def _timelines(result: AuditResult, stories: list[TransactionalStory], anchors: dict[tuple, str]) -> str:
    """One SVG per transactional id, each on its own time scale (an incident's ids may be minutes apart)."""
    if not stories:
        return '<p class="note">No transactional id in this capture.</p>'
    end = result.capture.last_ts
    by_id: dict[str, list[Transaction]] = {}
    for t in result.transactions:
        by_id.setdefault(t.transactional_id, []).append(t)
    findings_by_id: dict[str, list[Finding]] = {}
    for f in result.findings:
        if f.transactional_id:
            findings_by_id.setdefault(f.transactional_id, []).append(f)
    out = []
    for story in stories[:IDS_DRAWN]:
        txns = by_id.get(story.transactional_id, [])
        findings = findings_by_id.get(story.transactional_id, [])
        times = [t.start_ts for t in txns] + [f.ts for f in findings]
        times += [t.end_ts if t.end_ts is not None else end for t in txns]
        times = [t for t in times if t is not None and math.isfinite(t)]
        if not times:
            continue
        out.append(f'<h3 class="id">{_t(story.transactional_id)}</h3>')
        out.append(_story_svg(story, txns, findings, _Scale(min(times), max(times)), max(times), anchors))
    if len(stories) > IDS_DRAWN:
        out.append(
            f'<p class="note">{len(stories) - IDS_DRAWN:,} more transactional ids are in the '
            "tables below and in --json.</p>"
        )
    return "\n".join(out)


def _story_svg(
    story: TransactionalStory,
    txns: list[Transaction],
    findings: list[Finding],
    scale: _Scale,
    end: float,
    anchors: dict[tuple, str],
) -> str:
    lanes = {inst: i for i, inst in enumerate(story.instances)} or {(None, None): 0}
    height = 24 + LANE * len(lanes) + 4
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img">'
    ]
    ticks = _ticks(scale)
    for i, ts in enumerate(ticks):
        x = scale.x(ts)
        anchor = "start" if i == 0 else "end" if i == len(ticks) - 1 else "middle"
        svg.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="14" y2="{height}" stroke="#eee"/>'
            f'<text x="{x:.1f}" y="11" text-anchor="{anchor}">{html_escape(clock(ts))}</text>'
        )
    for (pid, epoch), row in lanes.items():
        y = 18 + row * LANE
        label = "-" if pid is None else f"pid {pid} epoch {epoch}"
        svg.append(f'<text x="4" y="{y + 13}">{html_escape(label)}</text>')
    for t in txns[:BARS_DRAWN]:
        row = lanes.get((t.producer_id, t.producer_epoch), 0)
        x1, x2 = scale.x(t.start_ts), scale.x(t.end_ts if t.end_ts is not None else end)
        tip = (
            f"{t.outcome}: {clock(t.start_ts)}, "
            f"{duration((t.end_ts or end) - t.start_ts)}, {plural(t.records, 'record')}"
        )
        svg.append(
            f'<rect x="{x1:.1f}" y="{18 + row * LANE + 3}" width="{max(x2 - x1, 2):.1f}" '
            f'height="{LANE - 6}" fill="{OUTCOME_COLOUR.get(t.outcome, "#9e9e9e")}" rx="2">'
            f"<title>{html_escape(tip)}</title></rect>"
        )
    for f in story.takeovers:
        x = scale.x(f.ts)
        svg.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{height - 2}" stroke="#555" '
            f'stroke-dasharray="4 3"><title>{html_escape(_takeover_text(f))}</title></line>'
        )
    for f in findings:
        row = lanes.get((f.producer_id, f.producer_epoch), 0)
        cx, cy = scale.x(f.ts), 18 + row * LANE + LANE / 2
        colour = SEVERITY_COLOUR.get(f.severity, "#555")
        circle = (
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="6" fill="{colour}">'
            f"<title>{html_escape(f'{f.severity} {f.kind} at {clock(f.ts)}')}</title></circle>"
        )
        anchor = anchors.get(finding_cause(f))
        svg.append(f'<a href="#{anchor}" class="finding">{circle}</a>' if anchor else circle)
    if len(txns) > BARS_DRAWN:
        svg.append(
            f'<text x="{WIDTH - RIGHT}" y="{height - 2}" text-anchor="end">'
            f"{len(txns) - BARS_DRAWN:,} more transactions not drawn</text>"
        )
    svg.append("</svg>")
    return "".join(svg)


def _takeover_text(f: Finding) -> str:
    ev = f.evidence
    by = " ".join(str(x) for x in (ev.get("client"), ev.get("client_id")) if x)
    return (
        f"{clock(f.ts)} takeover: pid {f.producer_id} epoch {f.producer_epoch} -> pid "
        f"{ev.get('new_producer_id')} epoch {ev.get('new_epoch')} by {shown(by)}"
    )


def _ticks(scale: _Scale, count: int = 6) -> list[float]:
    return [scale.first + scale.width * i / (count - 1) for i in range(count)]


def _findings(groups: list[FindingGroup]) -> str:
    if not groups:
        return "<p>No findings.</p>"
    out = []
    order = {s: i for i, s in enumerate(SEVERITIES)}
    listed = sorted(
        enumerate(groups[:FINDINGS_LISTED]),
        key=lambda ig: (order.get(ig[1].first.severity, 9), ig[1].first.ts),
    )
    for i, g in listed:
        f = g.first
        who = " ".join(
            x
            for x in (
                _t(f.transactional_id) if f.transactional_id else "",
                f"pid {f.producer_id}" if f.producer_id is not None else "",
                f"epoch {f.producer_epoch}" if f.producer_epoch is not None else "",
            )
            if x
        )
        times = (
            f" &times;{g.count:,}, {html_escape(clock(g.times[0]))} to {html_escape(clock(g.times[-1]))}"
            if g.count > 1
            else ""
        )
        evidence = json.dumps(f.evidence, indent=2, sort_keys=True, default=json_default)
        out.append(
            f'<details id="f-{i}"><summary><span class="{html_escape(f.severity)}">'
            f"{html_escape(f.severity.upper())}</span> {html_escape(clock(f.ts))} <b>{html_escape(f.kind)}"
            f'</b> <span class="id">{who}</span>{times}</summary>'
            f"<p>{html_escape(neutral(finding_message(f)))}</p>"
            f"<pre>{_t(evidence, 20_000)}</pre></details>"
        )
    if len(groups) > FINDINGS_LISTED:
        out.append(f'<p class="note">{len(groups) - FINDINGS_LISTED:,} more in --json.</p>')
    return "\n".join(out)


def _stories_table(stories: Sequence[TransactionalStory]) -> str:
    if not stories:
        return "<p>No transactional id seen.</p>"
    rows = []
    for s in stories[:TRANSACTIONS_LISTED]:
        instances = " &rarr; ".join(f"{pid}/{epoch}" for pid, epoch in s.instances[:50])
        outcomes = ", ".join(f"{n:,} {o}" for o, n in s.outcomes.items())
        severities = ", ".join(f'<span class="{k}">{n:,} {k}</span>' for k, n in s.severities.items())
        rows.append(
            f'<tr><td class="id">{_t(s.transactional_id)}</td><td>{instances}</td>'
            f"<td>{len(s.takeovers):,}</td><td>{html_escape(outcomes)}</td><td>{severities}</td></tr>"
        )
    return (
        "<table><tr><th>Transactional id</th><th>Instances (pid/epoch)</th><th>Takeovers</th>"
        "<th>Transactions</th><th>Findings</th></tr>" + "".join(rows) + "</table>"
    )


def _transactions_table(transactions: Sequence[Transaction]) -> str:
    if not transactions:
        return "<p>No transaction seen.</p>"
    rows = []
    for t in transactions[:TRANSACTIONS_LISTED]:
        took = "" if t.end_ts is None else duration(t.end_ts - t.start_ts)
        parts = ", ".join(_t(p) for p in t.partitions[:5]) + (
            f" +{len(t.partitions) - 5}" if len(t.partitions) > 5 else ""
        )
        rows.append(
            f'<tr><td>{html_escape(clock(t.start_ts))}</td><td class="id">{_t(t.transactional_id)}'
            f"</td><td>{t.producer_id}/{t.producer_epoch}</td><td>{html_escape(took)}</td>"
            f'<td style="color:{OUTCOME_COLOUR.get(t.outcome, "#555")}">{html_escape(t.outcome)}</td>'
            f'<td class="id">{parts}</td><td class="n">{t.records:,}</td></tr>'
        )
    more = (
        ""
        if len(transactions) <= TRANSACTIONS_LISTED
        else (f'<p class="note">{len(transactions) - TRANSACTIONS_LISTED:,} more in --csv or --json.</p>')
    )
    return (
        "<table><tr><th>Start</th><th>Transactional id</th><th>Pid/epoch</th><th>Duration</th>"
        "<th>Outcome</th><th>Partitions</th><th>Records</th></tr>" + "".join(rows) + "</table>" + more
    )
