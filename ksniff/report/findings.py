"""The findings: grouped by severity, each a headline (when, what, who, where), the audit's sentence and
its evidence; then, per kind present, what to do about it (the advice, kept here beside the renderers
of the kinds it explains)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.text import Text

from ksniff.audit.codes import error_name
from ksniff.audit.digest import FindingsDigest, Tally
from ksniff.audit.model import Finding
from ksniff.report.text import clock, more, plural, producer_label, shown, shown_message

if TYPE_CHECKING:
    from rich.table import Table

# rich's tables (and their fractions and decimals) are loaded by the reports that have findings to show:
# a run with none, --quiet, prints one line of them (bench/README.md, "Start-up").

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
    "corrupt_batch": "A record batch in the capture fails its CRC-32C: the file or the capture path damaged "
    "it, or its sender wrote it so (a client: the broker answers CORRUPT_MESSAGE; a broker: consumers "
    "that check CRCs fail on it). Nothing in it is judged and later findings on that connection are "
    "unverified: check the capture file, and capture again on the broker host.",
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
    "markers_disagree": "The coordinator wrote markers opposite to the EndTxn it accepted: read_committed "
    "consumers see that transaction the other way round; compare the coordinator's and "
    "the partition leaders' logs for that producer id and treat the data as suspect.",
    "transaction_ended_after_timeout": "The broker accepted the end of a transaction after its own "
    "timeout: Kafka's coordinator would have aborted it; check the "
    "broker's timeout enforcement and the producer's "
    "transaction.timeout.ms against how long it really takes.",
    "aborted_read": "A read_committed consumer got records of an aborted transaction with no aborted-"
    "transaction entry to skip them: it handed them out. The broker does not honour "
    "read_committed (check its version and transaction support); reprocess what that "
    "consumer wrote downstream from those offsets.",
    "uncommitted_read": "A read_committed consumer got records before their transaction ended: the broker's "
    "last stable offset did not hold it back. Data was not lost, but isolation was "
    "broken; check the broker's read_committed support.",
    "lost_write": "An acknowledged batch is not at its offset when read back: check the broker's log, "
    "unclean leader elections (unclean.leader.election.enable) and acks; the producer believes "
    "it was written.",
    "duplicate_write": "The same producer sequence range sits at two offsets: consumers read it twice. The "
    "broker failed to deduplicate a retry; check its idempotence support and the "
    "producer's retries around that time.",
    "torn_transaction": "A Produce of a transaction landed after its EndTxn was answered, so it belongs to "
    "the next transaction or none: use a client and broker with transaction version 2 "
    "(KIP-890), whose epoch bump refuses such late writes.",
    "offset_commit_past_end": "A group committed an offset past the end of the log: the records later "
    "written below it will be skipped by the group. Look for a bad manual commit "
    "or offset reset in the application.",
    "fetch_position_backwards": "A consumer asked again from an offset it had already read, with no reset "
    "or seek answer in between: it processes records again; look for a "
    "rebalance or a seek in the application.",
    "fetch_position_skip": "A consumer asked from past what it had been given, with no reset or seek "
    "answer in between: it never saw the records in between; look for a seek in "
    "the application or a client bug.",
    "idempotence_not_in_effect": "The client asked for idempotence but the broker refused its "
    "InitProducerId, and it wrote anyway with producer id -1: a retried batch "
    "can be written twice. Make the client fail on that error (Sarama 1.22 "
    "ignores it), check the broker supports the client's InitProducerId "
    "version, and look for duplicates downstream.",
    "hanging_partition": "The partition's last stable offset is held by a transaction nobody ends: "
    "read_committed consumers get nothing past it. Abort it (kafka-transactions.sh "
    "find-hanging, then abort), and check why the coordinator did not time it out.",
}

FINDINGS_SHOWN = {"critical": 50, "warning": 15, "info": 10}


def findings_view(findings: FindingsDigest | Sequence[Finding], *, verbose: bool = False) -> RenderableType:
    """Counts by kind and severity; findings grouped by severity, critical first, repeats folded; then,
    per kind present, what to do about it. `findings`: a list, or its digest (ksniff.audit.digest)."""
    digest = findings if isinstance(findings, FindingsDigest) else FindingsDigest.of(findings)
    if not digest.tallies:
        return Text("No findings.", style="green")
    groups = digest.groups()
    parts: list[RenderableType] = [counts_table(digest), Text("")]
    for severity in _severities_present(groups):
        mine = [g for g in groups if g.first.severity == severity]
        of_severity = sum(g.count for g in mine)
        folded = f" in {plural(len(mine), 'group')}" if len(mine) < of_severity else ""
        title = Text(
            f"{severity.upper()} ({of_severity:,}{folded})", style=SEVERITY_STYLE.get(severity, "bold")
        )
        title.append(f"  {SEVERITY_MEANING.get(severity, '')}", style="dim")
        parts.append(title)
        limit = None if verbose else FINDINGS_SHOWN.get(severity, 10)
        listed = mine[:limit]
        parts += [
            finding_block(g.first, verbose=verbose, times=(g.first.ts, g.last_ts), count=g.count)
            for g in listed
        ]
        if len(mine) > len(listed):
            hidden = sum(g.count for g in mine[len(listed) :])
            parts.append(more(hidden, f"{severity} finding", "--verbose or --json"))
        parts.append(Text(""))
    parts.append(advice(groups))
    return Group(*parts)


def counts_table(findings: FindingsDigest) -> Table:
    """How many findings of each kind at each severity; the most severe kinds first."""
    counts = findings.counts()
    severities = _severities_present(findings.tallies)
    kinds = sorted(
        {k for k, _s in counts}, key=lambda k: tuple(-counts.get((k, s), 0) for s in severities) + (k,)
    )
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("Kind")
    for s in severities:
        table.add_column(s.capitalize(), justify="right", style=SEVERITY_STYLE.get(s, ""))
    table.add_column("Total", justify="right")
    for kind in kinds:
        row = [counts.get((kind, s), 0) for s in severities]
        table.add_row(Text(shown(kind)), *[f"{n:,}" if n else "-" for n in row], f"{sum(row):,}")
    totals = [sum(counts.get((k, s), 0) for k in kinds) for s in severities]
    table.add_row(Text("all", style="bold"), *[f"{n:,}" for n in totals], f"{sum(counts.values()):,}")
    return table


def _severities_present(tallies: Sequence[Tally]) -> list[str]:
    present = {t.first.severity for t in tallies}
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


def finding_block(
    f: Finding, *, verbose: bool = False, times: Sequence[float] = (), count: int | None = None
) -> RenderableType:
    """The headline, then the audit's message and its evidence indented beneath it; a folded group's
    `count` (else: how many `times`) and its first and last `times` say how often and from when to when."""
    body = Text(finding_message(f))
    count = len(times) if count is None else count
    if count > 1:
        body = Text(f"{count:,} times, {clock(times[0])} to {clock(times[-1])}: ", style="bold")
        body.append(finding_message(f), style="")
    evidence = evidence_text(f.evidence, verbose=verbose)
    if evidence.plain:
        body.append("\n")
        body.append_text(evidence)
    from rich.padding import Padding

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


def advice(groups: Sequence[Tally]) -> RenderableType:
    """Per kind present (the most severe first, then in order of appearance), what to do about it."""
    kinds = list(
        dict.fromkeys(
            g.first.kind for s in _severities_present(groups) for g in groups if g.first.severity == s
        )
    )
    from rich.table import Table

    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    for kind in kinds:
        if kind in ADVICE:
            table.add_row(Text(kind), Text(ADVICE[kind]))
    if not table.row_count:
        return Text("")
    return Group(Text("What to do", style="bold"), table)
