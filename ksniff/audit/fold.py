"""The audit as a fold: `step(state, event) -> (state, findings)` and `finish(state, end_ts) -> output`.

No I/O and no clock: the same events in the same order give the same findings, in the live view, the
in-process run and a Spark group alike. Events come in order of request time; an exchange released a
little late by an engine's reorder window is judged when it comes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ksniff.audit import idempotence, partlog
from ksniff.audit.findings import exchange_evidence, judge, make
from ksniff.audit.keys import CONTEXT_APIS, CONTEXT_KEY, LOG_APIS, producer_keys
from ksniff.audit.model import AuditOutput, Finding, FindingKind, ProducerSummary, Severity, Transaction
from ksniff.audit.offsets import on_offset_commit
from ksniff.audit.produce import on_produce
from ksniff.audit.state import AuditState, TxnIdState, TxnRecord
from ksniff.audit.transactions import (
    on_add_offsets,
    on_add_partitions,
    on_end_txn,
    on_init_producer_id,
    on_txn_offset_commit,
    on_write_txn_markers,
)
from ksniff.decode.events import ConnectionEnded, ConnectionLost, DecodeEvent, Exchange

Handler = Callable[[AuditState, Exchange, list[Finding]], None]

HANDLERS: dict[str, Handler] = {
    "Produce": on_produce,
    "InitProducerId": on_init_producer_id,
    "AddPartitionsToTxn": on_add_partitions,
    "AddOffsetsToTxn": on_add_offsets,
    "EndTxn": on_end_txn,
    "TxnOffsetCommit": on_txn_offset_commit,
    "WriteTxnMarkers": on_write_txn_markers,
    "OffsetCommit": on_offset_commit,
}

# Closes that are the capture's doing, not the connection's: nothing to say about what was in flight.
_CAPTURE_CLOSES = frozenset({"end_of_capture"})
_REAL_CLOSES = frozenset({"fin", "rst"})


def step(state: AuditState, event: DecodeEvent) -> tuple[AuditState, list[Finding]]:
    return state, feed(state, event)


def feed(state: AuditState, event: DecodeEvent) -> list[Finding]:
    """`step` without the state in its answer (it is changed in place): the findings of `event`."""
    out: list[Finding] = []
    if isinstance(event, Exchange):
        _on_exchange(state, event, out)
    elif isinstance(event, ConnectionLost):
        _on_lost(state, event, out)
    elif isinstance(event, ConnectionEnded):
        _on_ended(state, event, out)
    if out:
        state.emitted.extend(out)
    return out


def _clock(state: AuditState, start: float, end: float | None) -> None:
    if state.first_ts is None or start < state.first_ts:
        state.first_ts = start
    last = max(start, end) if end is not None else start
    if state.last_ts is None or last > state.last_ts:
        state.last_ts = last


def _on_exchange(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    # Once per exchange, the fold's hottest function: the clock is kept inline (as `_clock` does), an
    # exchange is context when its API is one every partition sees (`is_context` for an Exchange).
    api = ex.api_name
    start, end = ex.request_ts, ex.response_ts
    if state.first_ts is None or start < state.first_ts:
        state.first_ts = start
    last = end if end is not None and end > start else start
    if state.last_ts is None or last > state.last_ts:
        state.last_ts = last
    if api == "ApiVersions":
        _on_api_versions(state, ex)
        return
    logs = state.logs
    if logs is not None and api in LOG_APIS:
        ctx = state.log_context
        if ctx is None:
            ctx = state.log_context = partlog.Context(state.losses)
        partlog.on_exchange(logs, ex, out, ctx)
        watch = state.idempotence
        if watch is not None and (api == "InitProducerId" or (watch.refused and api == "Produce")):
            idempotence.on_exchange(watch, ex, out)  # which reads a Produce only after a refusal
    handler = HANDLERS.get(api)
    if handler is None or ex.request is None:
        return
    if api not in CONTEXT_APIS and not (
        # a transactional Produce of the whole fold is its own, else `producer_keys` says whose it is
        (api == "Produce" and state.keys is None and ex.request.transactional_id)
        or _owns_any(state, producer_keys(ex))
    ):
        return
    # An exchange captured at both ends (two captures merged) counts once: the usual case, a key not
    # seen before, inline.
    window = state.config.duplicate_window_s
    seen = state.seen
    if start - state.seen_pruned_ts > window:
        _forget_before(seen, start - window)
        state.seen_pruned_ts = start
    key = (ex.client, ex.broker, ex.api_key, ex.correlation_id)
    earlier = seen.get(key)
    if earlier is None:  # the usual case: a new key goes at the end, where the latest times are
        seen[key] = (ex.conn, start)
    elif _seen_again(seen, key, earlier, ex, window):
        return
    if ex.status == "unanswered":
        state.unanswered.setdefault(ex.conn, []).append(ex)
    handler(state, ex, out)


def _owns_any(state: AuditState, keys: tuple[str, ...]) -> bool:
    if state.keys is None:  # the whole fold: every key
        for key in keys:
            if key is not None:
                return True
        return False
    for key in keys:  # usually one key: a loop, not any() over a generator
        if state.owns(key):
            return True
    return False


def _on_api_versions(state: AuditState, ex: Exchange) -> None:
    if ex.response is None:
        return
    for feature in getattr(ex.response, "finalized_features", ()):
        if feature.name == "transaction.version":
            state.cluster_txn_version = feature.max_version_level


def _seen_again(seen: dict, key: tuple, earlier: tuple[int, float], ex: Exchange, window: float) -> bool:
    """`key` was seen before (`earlier`: its connection and time): whether `ex` is that exchange again."""
    ts = ex.request_ts
    del seen[key]  # set again below, at the end: the dict stays in order of time seen
    if earlier[0] != ex.conn and abs(ts - earlier[1]) <= window:
        seen[key] = earlier
        return True
    seen[key] = (ex.conn, ts)
    return False


def _forget_before(seen: dict[tuple, tuple[int, float]], oldest: float) -> None:
    """Drop the entries older than `oldest` from the front of `seen` (insertion order is nearly time
    order), instead of rebuilding the whole dict: each entry is looked at about once. An entry held
    back behind a later one is only kept longer; lookups compare times themselves."""
    stale = []
    for key, (_conn, ts) in seen.items():
        if ts >= oldest:
            break
        stale.append(key)
    for key in stale:
        del seen[key]


def _on_lost(state: AuditState, ev: ConnectionLost, out: list[Finding]) -> None:
    _clock(state, ev.ts, None)
    state.losses.setdefault(ev.conn, []).append(ev.ts)
    if state.key not in (None, CONTEXT_KEY):
        return  # the context group reports it, once
    direction = "client to broker" if ev.to_broker else "broker to client"
    if ev.damaged is not None:  # bytes held but damaged (ksniff.decode.connection.damage)
        if ev.damaged == "crc":  # a malformed body is counted by decode (the verdict says how many)
            what = "a Produce request" if ev.to_broker else "a Fetch answer"
            # A topic named by id (Fetch v13+) by its name, as the partition logs learnt it: the decoder
            # of a connection alone (a Spark task's) may not have seen the Metadata answer that names it.
            topic = ev.topic if state.logs is None else state.logs.name(ev.topic)
            out.append(
                make(
                    FindingKind.CORRUPT_BATCH,
                    Severity.INFO,
                    ev.ts,
                    f"a record batch of {what} on {topic}-{ev.partition} fails its CRC-32C: not judged",
                    {
                        "conn": ev.conn,
                        "client": ev.client,
                        "broker": ev.broker,
                        "length": ev.length,
                        "direction": "to_broker" if ev.to_broker else "to_client",
                    },
                    topic=topic,
                    partition=ev.partition,
                )
            )
        return
    out.append(
        make(
            FindingKind.CAPTURE_GAP,
            Severity.INFO,
            ev.ts,
            f"capture lost {ev.length:,} bytes {direction} on {ev.client} <-> {ev.broker}",
            {
                "conn": ev.conn,
                "client": ev.client,
                "broker": ev.broker,
                "offset": ev.offset,
                "length": ev.length,
                "direction": "to_broker" if ev.to_broker else "to_client",
            },
        )
    )


def _on_ended(state: AuditState, ev: ConnectionEnded, out: list[Finding]) -> None:
    _clock(state, ev.ts, None)
    pending = state.unanswered.pop(ev.conn, ())
    if ev.reason in _CAPTURE_CLOSES:
        return
    for ex in pending:
        lost = ex.unverified or state.lost_since({ex.conn}, ex.request_ts)
        # A real close (FIN/RST) left the client not knowing; an idle or evicted connection is the
        # capture's limit, not the client's problem.
        base = Severity.WARNING if ev.reason in _REAL_CLOSES else Severity.INFO
        severity = judge(None, unverified=lost, explained_by_loss=True, rejected=base)
        evidence = exchange_evidence(ex)
        evidence.update(closed_ts=ev.ts, close_reason=ev.reason)
        out.append(
            make(
                FindingKind.UNANSWERED_REQUEST,
                severity,
                ex.request_ts,
                f"{ex.api_name} v{ex.api_version} (correlation id {ex.correlation_id}) from "
                f"{ex.client} got no answer before the connection closed ({ev.reason})",
                evidence,
                unverified=lost,
                transactional_id=_transactional_id(ex),
            )
        )


def _transactional_id(ex: Exchange) -> str | None:
    keys = [k for k in producer_keys(ex) if not k.startswith(("pid:", "group:"))]
    return keys[0] if keys else None


def finish(state: AuditState, end_ts: float | None = None) -> AuditOutput:
    """Close the books at `end_ts` (the capture's last timestamp). Does not change `state`."""
    end = end_ts if end_ts is not None else state.last_ts
    outcomes: dict[int, tuple[str, str | None, float | None]] = {}
    closing: list[Finding] = []
    for t in sorted(state.txn_ids.values(), key=lambda t: (t.first_ts, t.transactional_id)):
        for lane in t.lanes():
            rec = lane.txn
            if rec is not None and rec.outcome is None:
                outcomes[id(rec)] = _close(state, t, rec, end, closing)
    transactions = sorted(
        (_with_outcome(rec, outcomes.get(id(rec))) for rec in state.transactions),
        key=lambda r: (r.start_ts, r.transactional_id, r.producer_id or -1),
    )
    partitions: tuple = ()
    if state.logs is not None:
        # Reads still waiting for an outcome, partitions held past the timeout; `state` stays as it was.
        partlog.finish(state.logs, closing, state.config.txn_timeout_ms)
        partitions = partlog.summaries(state.logs)
    return AuditOutput(
        producers=_summaries(state, transactions),
        transactions=tuple(transactions),
        findings=tuple(sorted([*state.emitted, *closing], key=finding_order)),
        partitions=partitions,
    )


def _close(
    state: AuditState, t: TxnIdState, rec: TxnRecord, end: float | None, out: list[Finding]
) -> tuple[str, str | None, float | None]:
    """(outcome, outcome_source, end time) of a transaction still open at the end of the capture."""
    if rec.taken_over_ts is not None:
        return "abort", "takeover", rec.taken_over_ts  # KIP-98: the takeover aborted it
    if rec.end_requested:
        # Its EndTxn got no answer: what it asked for, said to rest on the request alone.
        return (rec.intent, "request", rec.end_request_ts) if rec.intent else ("unknown", None, None)
    conns = set(t.conns)
    if rec.producer_id is not None and rec.producer_id in state.producers:
        conns |= state.producers[rec.producer_id].conns
    lost = state.lost_since(conns, rec.start_ts)
    timeout_ms = t.timeout_ms or state.config.txn_timeout_ms
    if rec.batches and end is not None and (end - rec.start_ts) * 1000 > timeout_ms:
        evidence = {
            "start_ts": rec.start_ts,
            "capture_end_ts": end,
            "timeout_ms": timeout_ms,
            "timeout_from": "InitProducerId" if t.timeout_ms else "--txn-timeout",
            "partitions": list(rec.partitions),
            "records": rec.records,
        }
        # The partition, when there is one: it is where read_committed consumers are held up.
        only = next(iter(rec.partitions)).rsplit("-", 1) if len(rec.partitions) == 1 else (None, None)
        out.append(
            make(
                FindingKind.HANGING_TRANSACTION,
                Severity.INFO if lost else Severity.WARNING,
                end,
                f"transaction of {t.transactional_id!r} (producer id {rec.producer_id} epoch "
                f"{rec.producer_epoch}) wrote {rec.records} records and did not end within "
                f"{timeout_ms} ms" + ("; the capture lost bytes of its connections" if lost else ""),
                evidence,
                unverified=lost,
                transactional_id=t.transactional_id,
                producer_id=rec.producer_id,
                producer_epoch=rec.producer_epoch,
                topic=only[0],
                partition=None if only[1] is None else int(only[1]),
            )
        )
    return ("unknown" if lost else "open"), None, None


def _with_outcome(rec: TxnRecord, outcome: tuple[str, str | None, float | None] | None) -> Transaction:
    row = rec.as_transaction()
    if outcome is None:
        return row
    outcome, source, end_ts = outcome
    return Transaction(
        row.transactional_id,
        row.producer_id,
        row.producer_epoch,
        row.start_ts,
        end_ts if end_ts is not None else row.end_ts,
        outcome,
        row.partitions,
        row.records,
        row.groups,
        row.client,
        outcome_source=source,
    )


def _summaries(state: AuditState, transactions: list[Transaction]) -> tuple[ProducerSummary, ...]:
    counts: dict[tuple[str | None, int | None], dict[str, int]] = {}
    for tr in transactions:
        c = counts.setdefault((tr.transactional_id, tr.producer_id), {})
        c[tr.outcome] = c.get(tr.outcome, 0) + 1
    rows = []
    for p in state.producers.values():
        c = counts.get((p.transactional_id, p.producer_id), {})
        rows.append(
            ProducerSummary(
                transactional_id=p.transactional_id,
                producer_id=p.producer_id,
                epochs=tuple(sorted(p.epochs)),
                clients=tuple(sorted(p.clients)),
                client_ids=tuple(sorted(p.client_ids)),
                batches=p.batches,
                records=p.records,
                commit=c.get("commit", 0),
                abort=c.get("abort", 0),
                open=c.get("open", 0),
                unknown=c.get("unknown", 0),
                first_ts=p.first_ts,
            )
        )
    return tuple(sorted(rows, key=producer_order))


def producer_order(p: ProducerSummary) -> tuple:
    return (p.first_ts if p.first_ts is not None else 0.0, -1 if p.producer_id is None else p.producer_id)


_SEVERITY_RANK = {Severity.CRITICAL.value: 0, Severity.WARNING.value: 1, Severity.INFO.value: 2}


def finding_order(f: Finding) -> tuple:
    """Time first; ties broken by everything else so that every engine lists findings alike."""
    return (
        f.ts,
        _SEVERITY_RANK.get(f.severity, 3),
        f.kind,
        f.transactional_id or "",
        -1 if f.producer_id is None else f.producer_id,
        f.topic or "",
        -1 if f.partition is None else f.partition,
        f.group or "",
        f.message,
    )


def merge_outputs(outputs: Iterable[AuditOutput]) -> AuditOutput:
    """Join the outputs of the groups of a partitioned run (one per producer key, plus CONTEXT_KEY)."""
    producers: list[ProducerSummary] = []
    transactions: list[Transaction] = []
    findings: list[Finding] = []
    partitions: list = []
    for o in outputs:
        producers.extend(o.producers)
        transactions.extend(o.transactions)
        findings.extend(o.findings)
        partitions.extend(o.partitions)
    return AuditOutput(
        producers=tuple(sorted(producers, key=producer_order)),
        transactions=tuple(
            sorted(transactions, key=lambda r: (r.start_ts, r.transactional_id, r.producer_id or -1))
        ),
        findings=tuple(sorted(findings, key=finding_order)),
        partitions=tuple(sorted(partitions, key=lambda p: (p.topic, p.partition))),
    )
