"""Produce: every batch judged for identity (zombies, fencing, epochs), sequence and transaction.

Only batches the broker accepted advance the expected sequence. A retried batch that the broker answers
as DUPLICATE_SEQUENCE_NUMBER, or with the offset it gave the original, is normal; a batch whose original
got no answer and whose retry is answered as a duplicate was written once, by the original.
"""

from __future__ import annotations

from ksniff.audit.codes import DUPLICATE_SEQUENCE_NUMBER, error_name
from ksniff.audit.findings import batch_evidence, judge, make
from ksniff.audit.identity import adopt, fenced_by_broker, see_producer, zombie
from ksniff.audit.model import Finding, FindingKind
from ksniff.audit.sequences import Placement, distance, last_sequence, next_sequence, place
from ksniff.audit.state import AuditState, PartitionSeq, ProducerState
from ksniff.audit.transactions import new_instance, write
from ksniff.decode.events import Exchange, ProducedBatch

_SEQ_KIND = {
    Placement.GAP: FindingKind.SEQUENCE_GAP,
    Placement.DUPLICATE: FindingKind.SEQUENCE_DUPLICATE,
    Placement.OUT_OF_ORDER: FindingKind.SEQUENCE_OUT_OF_ORDER,
}
# Whether lost bytes alone could explain the placement: a gap, yes (the missing batch may be in them).
_EXPLAINED_BY_LOSS = {Placement.GAP: True, Placement.DUPLICATE: False, Placement.OUT_OF_ORDER: False}


def on_produce(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    tid = ex.request.transactional_id or None
    fenced_reported = False
    for b in ex.batches:
        h = b.header
        pid, epoch = h.producer_id, h.producer_epoch
        if h.control or pid < 0:
            continue  # plain (non-idempotent) producers have no identity to audit
        if tid is None and not state.owns(f"pid:{pid}"):
            continue
        answer = b.error_code
        unverified = b.unverified or ex.unverified
        prior_max = state.producers[pid].max_epoch if pid in state.producers else -1
        p = see_producer(state, pid, epoch, ex, tid)
        t = state.txn_id(tid, ex.request_ts) if tid is not None else None
        what = f"a write to {b.topic}-{b.partition}"
        if t is not None:
            if zombie(state, t, pid, epoch, answer, ex, out, what=what, unverified=unverified,
                      report_rejection=not fenced_reported, topic=b.topic, partition=b.partition):
                fenced_reported = fenced_reported or answer not in (0, None)
                _count(p, b, answer == 0)
                continue
            if answer == 0 and adopt(t, pid, epoch, ex):
                new_instance(state, t, pid, epoch, ex.request_ts)
        elif epoch < prior_max:
            _epoch_regression(ex, b, p, prior_max, out, unverified)
            _count(p, b, answer == 0)
            continue
        if not fenced_reported and fenced_by_broker(state, t, pid, epoch, answer, ex, out, what=what,
                                                    unverified=unverified, topic=b.topic,
                                                    partition=b.partition):
            fenced_reported = True
            continue
        written = _sequence(state, ex, b, p, out, unverified)
        _count(p, b, written)
        if t is not None and h.transactional:
            write(state, t, ex, b.topic, b.partition, pid, epoch, h.records_count, answer, out,
                  unverified=unverified)


def _count(p: ProducerState, b: ProducedBatch, written: bool) -> None:
    if written:
        p.batches += 1
        p.records += b.header.records_count


def _epoch_regression(ex: Exchange, b: ProducedBatch, p: ProducerState, prior_max: int,
                      out: list[Finding], unverified: bool) -> None:
    h = b.header
    evidence = batch_evidence(b, ex)
    evidence["highest_epoch"] = prior_max
    verdict = "accepted" if b.error_code == 0 else f"answered {error_name(b.error_code)}"
    out.append(make(FindingKind.EPOCH_REGRESSION,
                    judge(b.error_code, unverified=unverified, explained_by_loss=False), ex.request_ts,
                    f"producer id {h.producer_id} wrote to {b.topic}-{b.partition} with epoch "
                    f"{h.producer_epoch} after epoch {prior_max}; broker {verdict}", evidence,
                    unverified=unverified, transactional_id=p.transactional_id,
                    producer_id=h.producer_id, producer_epoch=h.producer_epoch, topic=b.topic,
                    partition=b.partition))


def _sequence(state: AuditState, ex: Exchange, b: ProducedBatch, p: ProducerState, out: list[Finding],
              unverified: bool) -> bool:
    """Judge the batch's sequence; returns whether the batch was written (and counts as produced)."""
    h = b.header
    answer = b.error_code
    accepted = answer == 0 or (answer is None and b.acks == 0)
    if h.base_sequence < 0:
        return accepted  # idempotence off for this batch
    key = (h.producer_id, b.topic, b.partition)
    seq = state.sequences.get(key)
    if seq is None or h.producer_epoch > seq.epoch:
        # A new epoch starts again at 0, and so does a partition first written in an epoch whose
        # start we saw; otherwise the capture began mid-stream and the first batch sets the pace.
        known_start = seq is not None or h.producer_epoch in p.started_epochs
        seq = PartitionSeq(h.producer_epoch, 0 if known_start else None, ex.request_ts)
        state.sequences[key] = seq
    elif h.producer_epoch < seq.epoch:
        return accepted  # an older epoch on this partition: the epoch rules judge it
    base, last = h.base_sequence, last_sequence(h.base_sequence, h.records_count)
    expected = seq.next_seq
    placement = Placement.IN_ORDER if expected is None else place(expected, base, h.records_count)
    if placement is Placement.GAP and _covered_by_unanswered(seq, expected, base):
        placement = Placement.IN_ORDER
    if placement is Placement.IN_ORDER:
        if accepted or answer == DUPLICATE_SEQUENCE_NUMBER:
            _advance(seq, base, last, b.base_offset, ex.request_ts)
            return True
        if answer is None:
            seq.unanswered.append((base, last))
        return False
    if placement is Placement.DUPLICATE and _is_retry(seq, base, last, b):
        return False
    lost = unverified or state.lost_since(p.conns, seq.last_ts)
    _sequence_finding(ex, b, p, placement, expected, lost, out)
    if accepted:
        _advance(seq, base, last, b.base_offset, ex.request_ts)
    return accepted


def _covered_by_unanswered(seq: PartitionSeq, expected: int, base: int) -> bool:
    """Whether unanswered batches, which the broker may have written, fill the gap exactly."""
    ranges = {b: last for b, last in seq.unanswered}
    at = expected
    while at in ranges and at != base:
        at = next_sequence(ranges.pop(at))
    return at == base


def _is_retry(seq: PartitionSeq, base: int, last: int, b: ProducedBatch) -> bool:
    """A resend of an accepted batch, answered as a duplicate or with the original's offset (or
    rejected: then nothing was written twice either)."""
    original = seq.recent.get(base)
    if original is None or original[0] != last:
        return False
    return b.error_code != 0 or b.base_offset == original[1]


def _advance(seq: PartitionSeq, base: int, last: int, offset: int | None, ts: float) -> None:
    seq.next_seq = next_sequence(last)
    seq.last_ts = ts
    seq.unanswered.clear()
    seq.remember(base, last, offset)


def _sequence_finding(ex: Exchange, b: ProducedBatch, p: ProducerState, placement: Placement,
                      expected: int, lost: bool, out: list[Finding]) -> None:
    h = b.header
    answer = b.error_code
    if answer is None and b.acks == 0:
        answer = 0  # acks=0: the broker writes what it gets and never says
    evidence = batch_evidence(b, ex)
    evidence.update(expected_sequence=expected, got_sequence=h.base_sequence,
                    last_sequence=last_sequence(h.base_sequence, h.records_count))
    if placement is Placement.GAP:
        evidence["missing"] = distance(expected, h.base_sequence)
        if expected == 0:
            evidence["new_epoch"] = True
    severity = judge(answer, unverified=lost, explained_by_loss=_EXPLAINED_BY_LOSS[placement])
    verdict = {0: "accepted", None: "no answer"}.get(answer, f"answered {error_name(answer)}")
    label = placement.value.replace("_", " ")
    out.append(make(_SEQ_KIND[placement], severity, ex.request_ts,
                    f"{label} on {b.topic}-{b.partition}: producer id {h.producer_id} epoch "
                    f"{h.producer_epoch} sent sequence {h.base_sequence}, expected {expected}; broker "
                    f"{verdict}", evidence, unverified=lost, transactional_id=p.transactional_id,
                    producer_id=h.producer_id, producer_epoch=h.producer_epoch, topic=b.topic,
                    partition=b.partition))
