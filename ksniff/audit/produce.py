"""Produce: every batch judged for identity (epochs, zombies, fencing), sequence and transaction.

Only batches the broker accepted advance the expected sequence. A resend of an accepted batch is a
normal retry when the client could not have had the first answer (it went to another connection, or
came before the answer) and the broker deduplicated it (DUPLICATE_SEQUENCE_NUMBER, or the original's
offset). The same batch sent again on the connection that had already carried its answer is a
duplicate: `warning` when the broker deduplicated it, `critical` when it wrote it again.
"""

from __future__ import annotations

import sys
from typing import Any

from ksniff.audit import identity
from ksniff.audit.codes import DUPLICATE_SEQUENCE_NUMBER, FENCING_ERRORS
from ksniff.audit.findings import batch_evidence, broker_verdict, judge, make
from ksniff.audit.model import Finding, FindingKind, Severity
from ksniff.audit.sequences import SEQ_MOD, Placement, distance, last_sequence, next_sequence, place
from ksniff.audit.state import RECENT_BATCHES, Accepted, AuditState, PartitionSeq, ProducerState
from ksniff.audit.transactions import new_instance, write
from ksniff.common.sources import made
from ksniff.decode.events import Exchange, ProducedBatch, made_by_position

_ACCEPTED = made_by_position(Accepted)  # one per accepted batch: in C when built

_SEQ_KIND = {
    Placement.GAP: FindingKind.SEQUENCE_GAP,
    Placement.DUPLICATE: FindingKind.SEQUENCE_DUPLICATE,
    Placement.OUT_OF_ORDER: FindingKind.SEQUENCE_OUT_OF_ORDER,
}
# Whether lost bytes alone could explain the placement: a gap, yes (the missing batch may be in them).
_EXPLAINED_BY_LOSS = {Placement.GAP: True, Placement.DUPLICATE: False, Placement.OUT_OF_ORDER: False}
# As module constants for the per-batch path (an enum member read off its class costs ~70 ns in Python
# 3.11, a global ~8 ns).
_IN_ORDER, _GAP, _DUPLICATE = Placement.IN_ORDER, Placement.GAP, Placement.DUPLICATE


def on_produce(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    # Once per batch of every Produce: the identity checks' usual outcomes are read inline (the claim is
    # made only when a check has something to say), and so is the common sequence path (`_sequence`).
    tid = ex.request.transactional_id or None
    fenced_reported = False  # one fencing finding per request, not per partition
    regressed: set[int] = set()
    producers = state.producers
    for b in ex.batches:
        h = b.header
        if h.crc_ok is False:  # not the bytes sent: not judged; the connection's ConnectionLost before the
            continue  # exchange (ksniff.decode.connection.damage) makes what it leaves behind unverified
        pid, epoch = h.producer_id, h.producer_epoch
        if h.control or pid < 0:
            continue  # plain (non-idempotent) producers have no identity to audit
        if tid is None and not state.owns(f"pid:{pid}"):
            continue
        answer = b.error_code
        unverified = b.unverified or ex.unverified
        c = None  # the batch's Claim, made when a check needs it
        seen = producers.get(pid)
        highest = -1 if seen is None else seen.top_epoch
        p = identity.see_producer(state, pid, epoch, ex, tid)
        if epoch < highest and pid not in regressed:
            regressed.add(pid)
            c = _claim(ex, b, unverified)
            identity.epoch_regression(tid, highest, c, out)
        if tid is not None:
            t = state.txn_ids[tid]  # see_producer made it
            if t.is_superseded(pid, epoch):
                identity.zombie(
                    state, t, c or _claim(ex, b, unverified), out, report_rejection=not fenced_reported
                )
                fenced_reported = fenced_reported or answer not in (0, None)
                _count(p, b, answer == 0)
                if answer == 0 and h.transactional:
                    write(state, t, t.zombie_lane(pid, epoch), ex, b, out, unverified=unverified)
                continue
            if answer == 0:
                cur = t.current  # identity.adopt, when the instance is newer than the one we know
                if (cur is None or cur.producer_id != pid or epoch > cur.epoch) and identity.adopt(
                    t, pid, epoch, ex
                ):
                    new_instance(state, t, pid, epoch, ex.request_ts)
        else:
            t = None
            if epoch < highest:
                _count(p, b, answer == 0)
                continue  # sequences belong to the newer epoch
        if answer in FENCING_ERRORS and identity.fenced_by_broker(
            state, t, c or _claim(ex, b, unverified), [] if fenced_reported else out
        ):
            fenced_reported = True
            continue
        if _sequence(state, ex, b, p, out, unverified):
            p.batches += 1
            p.records += h.records_count
        if t is not None and h.transactional:
            write(state, t, t, ex, b, out, unverified=unverified)


def _claim(ex: Exchange, b: ProducedBatch, unverified: bool) -> identity.Claim:
    h = b.header
    return identity.Claim(
        ex, h.producer_id, h.producer_epoch, b.error_code, None, unverified, b.topic, b.partition
    )


def _count(p: ProducerState, b: ProducedBatch, written: bool) -> None:
    if written:
        p.batches += 1
        p.records += b.header.records_count


def _sequence(
    state: AuditState, ex: Exchange, b: ProducedBatch, p: ProducerState, out: list[Finding], unverified: bool
) -> bool:
    """Judge the batch's sequence; returns whether the broker wrote it (it counts as produced)."""
    h = b.header
    answer = b.error_code
    accepted = answer == 0 or (answer is None and b.acks == 0)
    base = h.base_sequence
    if base < 0:
        return accepted  # idempotence off for this batch
    epoch = h.producer_epoch
    key = (h.producer_id, b.topic, b.partition)
    seq = state.sequences.get(key)
    since = None  # from when lost bytes could explain a gap: the last accepted batch's time, unless new
    if seq is None or epoch > seq.epoch:
        # A partition's first batch of an epoch: bytes lost since the producer was first seen (or since
        # its older epoch's last batch here) may hold the batches before it.
        since = p.first_ts if seq is None else seq.last_ts
        # A new epoch starts again at 0, and so does a partition first written in an epoch whose
        # start we saw; otherwise the capture began mid-stream and the first batch sets the pace.
        known_start = seq is not None or epoch in p.started_epochs
        seq = PartitionSeq(epoch, 0 if known_start else None, ex.request_ts)
        state.sequences[key] = seq
    elif epoch < seq.epoch:
        return accepted  # an older epoch on this partition: the epoch rules judge it
    records = h.records_count
    last = (base + records - 1) % SEQ_MOD if records > 1 else base  # last_sequence(base, records)
    expected = seq.next_seq
    if expected is None or expected == base:  # place(): in order
        placement = _IN_ORDER
    else:
        placement = place(expected, base, records)
        if placement is _GAP and _covered_by_unanswered(seq, expected, base):
            placement = _IN_ORDER
    if placement is _IN_ORDER:
        # Answered as a duplicate while in order: an unanswered original was written; this is its retry.
        if accepted or answer == DUPLICATE_SEQUENCE_NUMBER:
            _advance(seq, base, last, b, ex)
            return True
        if answer is None:
            seq.unanswered.append((base, last))
        return False
    deduplicated = False
    if placement is _DUPLICATE:
        original = seq.recent.get(base)
        exact = original is not None and original.last_seq == last
        deduplicated = answer == DUPLICATE_SEQUENCE_NUMBER or (
            exact and answer == 0 and b.base_offset == original.offset
        )
        if exact and (
            answer not in (0, DUPLICATE_SEQUENCE_NUMBER)
            or (deduplicated and _client_missed_the_answer(original, b, ex))
        ):
            return False
    lost = unverified or state.lost_since(p.conns, seq.last_ts if since is None else since)
    _sequence_finding(ex, b, p, placement, expected, lost, deduplicated, out)
    written = accepted and not deduplicated
    if written:
        _advance(seq, base, last, b, ex)
    return written


def _client_missed_the_answer(original: Accepted, b: ProducedBatch, ex: Exchange) -> bool:
    """Whether a resend is a retry: the first answer was not on this connection before it."""
    return original.conn != ex.conn or original.answered_ts is None or ex.request_ts < original.answered_ts


def _covered_by_unanswered(seq: PartitionSeq, expected: int, base: int) -> bool:
    """Whether unanswered batches, which the broker may have written, fill the gap exactly."""
    ranges = {b: last for b, last in seq.unanswered}
    at = expected
    while at in ranges and at != base:
        at = next_sequence(ranges.pop(at))
    return at == base


def _advance(seq: PartitionSeq, base: int, last: int, b: ProducedBatch, ex: Exchange) -> None:
    seq.next_seq = (last + 1) % SEQ_MOD  # next_sequence(last)
    seq.last_ts = ex.request_ts
    if seq.unanswered:
        seq.unanswered.clear()
    # the batch remembered among the partition's recent ones (`recent` and `order`)
    recent = seq.recent
    if base not in recent:
        order = seq.order
        order.append(base)
        if len(order) > RECENT_BATCHES:
            recent.pop(order.popleft(), None)
    recent[base] = _ACCEPTED(last, b.base_offset, ex.conn, ex.response_ts)


def _sequence_finding(
    ex: Exchange,
    b: ProducedBatch,
    p: ProducerState,
    placement: Placement,
    expected: int,
    lost: bool,
    deduplicated: bool,
    out: list[Finding],
) -> None:
    h = b.header
    answer = b.error_code
    if answer is None and b.acks == 0:
        answer = 0  # acks=0: the broker writes what it gets and never says
    evidence = batch_evidence(b, ex)
    evidence.update(
        expected_sequence=expected,
        got_sequence=h.base_sequence,
        last_sequence=last_sequence(h.base_sequence, h.records_count),
    )
    if placement is Placement.GAP:
        evidence["missing"] = distance(expected, h.base_sequence)
        if expected == 0:
            evidence["new_epoch"] = True
    if deduplicated:
        evidence["deduplicated"] = True
        severity = Severity.WARNING  # the broker caught it: nothing was written twice
        verdict = "broker deduplicated it"
    else:
        severity = judge(answer, unverified=lost, explained_by_loss=_EXPLAINED_BY_LOSS[placement])
        verdict = broker_verdict(answer)
    label = placement.value.replace("_", " ")
    out.append(
        make(
            _SEQ_KIND[placement],
            severity,
            ex.request_ts,
            f"{label} on {b.topic}-{b.partition}: producer id {h.producer_id} epoch "
            f"{h.producer_epoch} sent sequence {h.base_sequence}, expected {expected}; "
            f"{verdict}",
            evidence,
            unverified=lost,
            transactional_id=p.transactional_id,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            topic=b.topic,
            partition=b.partition,
        )
    )


def _compiled_on_produce(python: Any = on_produce) -> Any:
    """`on_produce` in C (ksniff.audit._steps.Producing, when built): the same checks in the same order
    on the same objects, its usual outcomes in C and the rest through this module's functions, `python`
    (the function above) the reference it is held to (tests/audit/test_steps.py) and what runs for
    anything of other classes; None without the compiled module."""
    from ksniff.audit.state import Instance, Lane, TxnIdState, TxnRecord
    from ksniff.audit.txn import ALLOWED, Trigger, TxnState
    from ksniff.decode.events import RecordBatchHeader

    classes = {
        "AuditState": AuditState,
        "Exchange": Exchange,
        "ProducedBatch": ProducedBatch,
        "RecordBatchHeader": RecordBatchHeader,
        "ProducerState": ProducerState,
        "Lane": Lane,
        "TxnIdState": TxnIdState,
        "TxnRecord": TxnRecord,
        "Instance": Instance,
        "PartitionSeq": PartitionSeq,
    }
    producing = made(
        "ksniff.audit._steps",
        "Producing",
        python,
        classes,
        _ACCEPTED,
        sys.modules[__name__],
        FENCING_ERRORS,
        DUPLICATE_SEQUENCE_NUMBER,
        (ALLOWED, TxnState.ONGOING, Trigger.WRITE, Trigger.WRITE_TV2),
    )
    return None if producing is None else producing.on_produce


# Once per Produce exchange (ksniff.audit.fold's HANDLERS): in C when built.
on_produce_python = on_produce
on_produce = _compiled_on_produce() or on_produce_python
