"""Transactions per transactional id: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn and WriteTxnMarkers, driven through the table in ksniff.audit.txn.

A transaction begins with the first accepted AddPartitionsToTxn or AddOffsetsToTxn (or, under
transaction.version 2, the first transactional write), and ends with an accepted EndTxn; an EndTxn the
broker rejected does not end it. Its outcome is what the capture proves, and `outcome_source` says how:

- `end_txn`: the broker accepted its EndTxn;
- `markers`: WriteTxnMarkers for its producer id (which override everything but an accepted EndTxn);
- `takeover`: an accepted InitProducerId for its transactional id came while it was open, which makes
  the coordinator abort it (KIP-98). What the broker then does decides: if the superseded instance's
  later EndTxn is accepted (librdkafka's mock does that), it is that one transaction's end;
- `next_transaction`: its EndTxn got no answer, but the same producer id went on with a new transaction
  (the coordinator refuses one while the previous is still completing), so the EndTxn's intent holds;
- `request`: its EndTxn got no answer and nothing came after: the intent alone.

`unknown` stays for a transaction whose end nothing shows (e.g. its EndTxn request itself was lost).
"""

from __future__ import annotations

from ksniff.audit.codes import FENCING_ERRORS, error_name
from ksniff.audit.findings import broker_verdict, exchange_evidence, judge, make
from ksniff.audit.identity import (
    Claim,
    adopt,
    epoch_regression,
    fenced_by_broker,
    see_producer,
    take_over,
    zombie,
)
from ksniff.audit.model import Finding, FindingKind, Severity
from ksniff.audit.state import AuditState, Instance, Lane, TxnIdState, TxnRecord
from ksniff.audit.txn import ALLOWED, ILLEGAL, Trigger, TxnState, next_state
from ksniff.decode.events import Exchange, ProducedBatch, made_by_position

_END = {TxnState.PREPARE_COMMIT: "commit", TxnState.PREPARE_ABORT: "abort"}

# The members the per-exchange paths compare with, as module constants: reading a member off its enum
# class goes through the enum metaclass's attribute hook (~70 ns a read in Python 3.11, ~8 ns for a
# global), and an exchange of a small transaction read a dozen of them.
_UNKNOWN, _EMPTY, _ONGOING = TxnState.UNKNOWN, TxnState.EMPTY, TxnState.ONGOING
_WRITE, _WRITE_TV2, _OFFSET_COMMIT = Trigger.WRITE, Trigger.WRITE_TV2, Trigger.OFFSET_COMMIT
_ADD_PARTITIONS, _END_COMMIT, _END_ABORT, _END_ABORT_TV2 = (
    Trigger.ADD_PARTITIONS,
    Trigger.END_COMMIT,
    Trigger.END_ABORT,
    Trigger.END_ABORT_TV2,
)


def answer_of(ex: Exchange) -> int | None:
    """The broker's top-level error code; None when there was no (decoded) answer."""
    return None if ex.response is None else ex.response.error_code


def close_unknown(t: Lane, ts: float, producer_id: int | None = None, epoch: int | None = None) -> None:
    """The lane's open transaction ended without its end on the wire; `producer_id` and `epoch`: the
    instance whose new transaction shows that (None when it is not a new transaction)."""
    rec = t.txn
    if rec is None or rec.outcome is not None:
        return
    if rec.taken_over_ts is not None:
        rec.outcome, rec.end_ts, rec.outcome_source = "abort", rec.taken_over_ts, "takeover"
    elif rec.intent is not None:
        went_on = (
            producer_id is not None
            and producer_id == rec.producer_id
            and epoch is not None
            and rec.producer_epoch is not None
            and epoch >= rec.producer_epoch
        )
        rec.outcome, rec.end_ts = rec.intent, rec.end_request_ts
        rec.outcome_source = "next_transaction" if went_on else "request"
    else:
        rec.outcome, rec.end_ts = "unknown", ts


def taken_over(t: TxnIdState, producer_id: int, epoch: int, ts: float) -> None:
    """An accepted InitProducerId gave the transactional id to (producer_id, epoch): a transaction the
    previous instance had open moves to that instance's lane, aborted by the takeover unless its own
    later requests show otherwise."""
    rec = t.txn
    if rec is None or rec.outcome is not None or rec.producer_id is None or rec.end_requested:
        return
    if (rec.producer_id, rec.producer_epoch) == (producer_id, epoch):
        return
    lane = t.zombie_lane(rec.producer_id, rec.producer_epoch if rec.producer_epoch is not None else -1)
    if lane.txn is not None and lane.txn.outcome is None:
        return
    lane.txn, lane.state = rec, t.state
    rec.taken_over_ts = ts
    t.txn, t.state = None, TxnState.EMPTY


# One per transaction, kept for the whole run: in C when built, and untracked by the cyclic collector
# (its fields hold numbers, text, None and containers of text and (topic, partition) pairs only).
_TXN_RECORD = made_by_position(TxnRecord, untracked=True)


def _new_record(
    transactional_id: str,
    producer_id: int,
    epoch: int,
    ts: float,
    registration_known: bool,
    client: str | None,
) -> TxnRecord:
    """`TxnRecord(transactional_id, producer_id, epoch, ts, registration_known=..., client=...)`, every
    field given by position (the rest as their defaults, a new container each)."""
    return _TXN_RECORD(
        transactional_id,
        producer_id,
        epoch,
        ts,
        registration_known,
        None,
        None,
        {},
        set(),
        {},
        set(),
        0,
        0,
        False,
        None,
        None,
        None,
        None,
        client,
        None,
    )


def enter(
    state: AuditState,
    t: Lane,
    trigger: Trigger,
    producer_id: int,
    epoch: int,
    ts: float,
    end_ts: float | None = None,
    client: str | None = None,
) -> TxnRecord | None:
    """Apply an allowed, accepted trigger; returns the transaction it belongs to (None if none)."""
    before = t.state
    after = ALLOWED[before].get(trigger)  # next_state()
    assert after is not None, "callers check ALLOWED first"
    rec = t.txn
    is_open = rec is not None and rec.outcome is None
    if after is _ONGOING:
        if (
            is_open
            and (rec.intent is not None or rec.taken_over_ts is not None)
            and trigger is not _WRITE
            and trigger is not _OFFSET_COMMIT
        ):
            # A new transaction of an instance whose EndTxn went unanswered, or whose transaction a
            # takeover aborted: that transaction is over.
            close_unknown(t, ts, producer_id, epoch)
            is_open = False
        if not (before is _ONGOING and is_open):
            if is_open:
                close_unknown(t, ts, producer_id, epoch)
            rec = _new_record(t.transactional_id, producer_id, epoch, ts, before is not _UNKNOWN, client)
            state.transactions.append(rec)
            t.txn = rec
    elif after in _END and before in (_ONGOING, _UNKNOWN):
        if not is_open:  # its beginning was before the capture: still a transaction seen on the wire
            rec = _new_record(t.transactional_id, producer_id, epoch, ts, False, client)
            state.transactions.append(rec)
            t.txn = rec
        rec.outcome, rec.end_ts = _END[after], end_ts if end_ts is not None else ts
        rec.outcome_source = "end_txn"
    elif after is _EMPTY:
        close_unknown(t, ts)
    t.state = after
    rec = t.txn
    return rec if rec is not None and rec.outcome is None else None


def since_last_end(t: TxnIdState) -> float:
    """From when lost bytes could hide the request that would have opened a transaction."""
    rec = t.txn
    return rec.end_ts if rec is not None and rec.end_ts is not None else t.first_ts


def illegal(
    state: AuditState,
    t: TxnIdState,
    lane: Lane,
    trigger: Trigger,
    answer: int | None,
    ex: Exchange,
    out: list[Finding],
    producer_id: int,
    epoch: int,
    *,
    unverified: bool,
    what: str,
    topic: str | None = None,
    partition: int | None = None,
    group: str | None = None,
) -> bool:
    """Whether `lane` cannot take `trigger` in its state; then the request is reported, when it is the
    current instance's (a zombie's misdeeds are already reported as such)."""
    if next_state(lane.state, trigger) is not None:
        return False
    if lane is not t:
        return True
    kind = ILLEGAL[trigger]
    unverified = unverified or t.unanswered or state.lost_since(t.conns, since_last_end(t))
    # An EndTxn with nothing to end loses no data, whatever the answer.
    accepted = Severity.WARNING if kind is FindingKind.END_TXN_WITHOUT_TRANSACTION else Severity.CRITICAL
    sev = judge(answer, unverified=unverified, explained_by_loss=True, accepted=accepted)
    verdict = "accepted" if answer == 0 else f"answered {error_name(answer)}"
    evidence = exchange_evidence(ex, answer)
    evidence.update(state=t.state.value, trigger=trigger.value, cluster_txn_version=state.cluster_txn_version)
    out.append(
        make(
            kind,
            sev,
            ex.request_ts,
            f"{what} of {t.transactional_id!r} with no transaction open ({t.state.value}); broker {verdict}",
            evidence,
            unverified=unverified,
            transactional_id=t.transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            topic=topic,
            partition=partition,
            group=group,
        )
    )
    return True


def new_instance(state: AuditState, t: TxnIdState, producer_id: int, epoch: int, ts: float) -> None:
    """An accepted request revealed an instance newer than the one we knew: the old one's open
    transaction ended out of sight."""
    rec = t.txn
    if (
        rec is not None
        and rec.outcome is None
        and (rec.producer_id, rec.producer_epoch) != (producer_id, epoch)
    ):
        close_unknown(t, ts)
        t.state = TxnState.UNKNOWN


def identify(
    state: AuditState,
    t: TxnIdState,
    ex: Exchange,
    producer_id: int,
    epoch: int,
    answer: int | None,
    what: str,
    out: list[Finding],
) -> Lane | None:
    """Epoch, zombie and fencing checks shared by the transactional requests (`what` names the request
    in a finding's words). Returns the lane the request moves (the current instance's, or a superseded
    one's that the broker still obeys), or None when the request moves nothing."""
    seen = state.producers.get(producer_id)
    highest = -1 if seen is None else seen.top_epoch  # highest_epoch(), inline
    see_producer(state, producer_id, epoch, ex, t.transactional_id)
    c = None  # the request's Claim, made when a check has something to say
    if epoch < highest:
        c = _claim(ex, producer_id, epoch, answer, what)
        epoch_regression(t.transactional_id, highest, c, out)
    if t.is_superseded(producer_id, epoch):
        zombie(state, t, c or _claim(ex, producer_id, epoch, answer, what), out)
        return t.zombie_lane(producer_id, epoch) if answer == 0 else None
    if answer in FENCING_ERRORS:
        fenced_by_broker(state, t, c or _claim(ex, producer_id, epoch, answer, what), out)
        return None
    if answer == 0 and adopt(t, producer_id, epoch, ex):
        new_instance(state, t, producer_id, epoch, ex.request_ts)
    return t


def _claim(ex: Exchange, producer_id: int, epoch: int, answer: int | None, what: str) -> Claim:
    """A transactional request's claim (lost bytes leave it unverified as the exchange says)."""
    return Claim(ex, producer_id, epoch, answer, what, ex.unverified)


def on_init_producer_id(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    req, resp = ex.request, ex.response
    tid = req.transactional_id or None
    answer = answer_of(ex)
    t = state.txn_id(tid, ex.request_ts) if tid is not None else None
    if t is not None:
        t.conns.add(ex.conn)
        if req.transaction_timeout_ms > 0:
            t.timeout_ms = req.transaction_timeout_ms
    if answer != 0:
        if answer is not None and req.producer_id >= 0:
            fenced_by_broker(
                state, t, _claim(ex, req.producer_id, req.producer_epoch, answer, "InitProducerId"), out
            )
        return
    pid, epoch = resp.producer_id, resp.producer_epoch
    p = see_producer(state, pid, epoch, ex, tid)
    p.started_epochs.add(epoch)
    if t is None:
        return
    taken_over(t, pid, epoch, ex.response_ts if ex.response_ts is not None else ex.request_ts)
    take_over(
        state, t, Instance(pid, epoch, ex.request_ts, ex.client, ex.client_id), ex, out, via="InitProducerId"
    )
    enter(state, t, Trigger.INIT, pid, epoch, ex.request_ts, client=ex.client)


def add_partitions_entries(ex: Exchange):
    """(transactional id, producer id, epoch, verify only, [(topic, partition)], {(topic, partition):
    error}) per transaction in an AddPartitionsToTxn, whatever its version."""
    req, resp = ex.request, ex.response
    if ex.api_version <= 3:
        answers = _partition_errors(resp.results_by_topic_v3_and_below) if resp is not None else {}
        yield (
            req.v3_and_below_transactional_id,
            req.v3_and_below_producer_id,
            req.v3_and_below_producer_epoch,
            False,
            _topic_partitions(req.v3_and_below_topics),
            answers,
        )
        return
    by_txn = {}
    if resp is not None:
        by_txn = {r.transactional_id: _partition_errors(r.topic_results) for r in resp.results_by_transaction}
        if resp.error_code:
            by_txn = {r.transactional_id: resp.error_code for r in req.transactions}
    for tr in req.transactions:
        answers = by_txn.get(tr.transactional_id, {})
        if isinstance(answers, int):
            answers = {tp: answers for tp in _topic_partitions(tr.topics)}
        yield (
            tr.transactional_id,
            tr.producer_id,
            tr.producer_epoch,
            tr.verify_only,
            _topic_partitions(tr.topics),
            answers,
        )


def _topic_partitions(topics) -> list[tuple[str, int]]:
    # Once per AddPartitionsToTxn: loops, not a nested comprehension (a function call of its own).
    out = []
    for tp in topics:
        name = tp.name
        for p in tp.partitions:
            out.append((name, p))
    return out


def _partition_errors(results) -> dict[tuple[str, int], int]:
    out = {}
    for r in results:
        name = r.name
        for pr in r.results_by_partition:
            out[(name, pr.partition_index)] = pr.partition_error_code
    return out


def on_add_partitions(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    responded = ex.response is not None
    for tid, pid, epoch, verify_only, wanted, answers in add_partitions_entries(ex):
        # A broker asking the coordinator whether partitions are already in (KIP-890) adds nothing.
        if verify_only or not state.owns(tid):
            continue
        t = state.txn_id(tid, ex.request_ts)
        if not responded:
            t.unanswered = True
        # The partitions the broker accepted, and the request's answer (`_overall`) in the same loop.
        answer = 0 if responded else None
        accepted = []
        for tp in wanted:
            code = answers.get(tp)
            if code == 0:
                accepted.append(tp)
            elif code and answer == 0:
                answer = code
        lane = identify(state, t, ex, pid, epoch, answer, "AddPartitionsToTxn", out)
        if lane is None or not accepted:
            continue
        rec = lane.txn
        if (
            lane.state is _ONGOING
            and rec is not None
            and rec.outcome is None
            and rec.batches
            and all(tp in rec.registered for tp in accepted)
        ):
            # Clients add each partition once per transaction: adding them again means the previous
            # transaction ended out of sight.
            close_unknown(lane, ex.request_ts, pid, epoch)
            lane.state = _EMPTY
        rec = enter(state, lane, _ADD_PARTITIONS, pid, epoch, ex.request_ts, client=ex.client)
        if rec is not None:
            registered, partitions = rec.registered, rec.partitions
            for tp in accepted:
                registered.add(tp)
                partitions.setdefault(f"{tp[0]}-{tp[1]}", None)  # rec.add_partition


def on_add_offsets(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    req = ex.request
    t = state.txn_id(req.transactional_id, ex.request_ts)
    answer = answer_of(ex)
    if answer is None:
        t.unanswered = True
    lane = identify(state, t, ex, req.producer_id, req.producer_epoch, answer, "AddOffsetsToTxn", out)
    if lane is not None and answer == 0:
        rec = enter(
            state,
            lane,
            Trigger.ADD_OFFSETS,
            req.producer_id,
            req.producer_epoch,
            ex.request_ts,
            client=ex.client,
        )
        if rec is not None:
            rec.groups_added.add(req.group_id)
            rec.groups.setdefault(req.group_id, None)


def on_txn_offset_commit(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    req, resp = ex.request, ex.response
    t = state.txn_id(req.transactional_id, ex.request_ts)
    answer = None
    if resp is not None:
        codes = [p.error_code for tp in resp.topics for p in tp.partitions]
        answer = next((c for c in codes if c), 0)
    pid, epoch, group = req.producer_id, req.producer_epoch, req.group_id
    lane = identify(state, t, ex, pid, epoch, answer, "TxnOffsetCommit", out)
    if lane is None:
        return
    trigger = Trigger.OFFSET_COMMIT_TV2 if ex.api_version >= 5 else Trigger.OFFSET_COMMIT
    what = f"TxnOffsetCommit for group {group!r}"
    unverified = ex.unverified
    if illegal(
        state, t, lane, trigger, answer, ex, out, pid, epoch, unverified=unverified, what=what, group=group
    ):
        return
    rec = _registering(t, lane, trigger, Trigger.OFFSET_COMMIT)
    if rec is not None and group not in rec.groups_added:
        kind = FindingKind.TXN_OFFSET_COMMIT_UNREGISTERED_GROUP
        what = (
            f"TxnOffsetCommit of {t.transactional_id!r} for group {group!r} that AddOffsetsToTxn did not add"
        )
        registered = ("groups_added", sorted(rec.groups_added))
        subject = dict(producer_id=pid, producer_epoch=epoch, group=group)
        _unregistered(state, t, rec, ex, answer, out, kind, what, registered, subject, unverified)
    if answer == 0:
        rec = enter(state, lane, trigger, pid, epoch, ex.request_ts, client=ex.client)
        if rec is not None:
            rec.groups.setdefault(group, None)


def _registering(t: TxnIdState, lane: Lane, trigger: Trigger, classic: Trigger) -> TxnRecord | None:
    """The open transaction whose registrations are known, when `trigger` is the classic protocol's
    (`classic`: under transaction.version 2 the coordinator registers by itself); else None."""
    rec = lane.txn
    if (
        lane is t
        and trigger is classic
        and t.state is TxnState.ONGOING
        and rec is not None
        and rec.outcome is None
        and rec.registration_known
    ):
        return rec
    return None


def _unregistered(
    state: AuditState,
    t: TxnIdState,
    rec: TxnRecord,
    ex: Exchange,
    answer: int | None,
    out: list[Finding],
    kind: FindingKind,
    what: str,
    registered: tuple[str, list[str]],
    subject: dict,
    unverified: bool,
) -> None:
    """A write or offset commit to what the transaction never registered: the finding, judged by the
    broker's answer; `registered` names and lists what was registered, for the evidence."""
    unverified = unverified or t.unanswered or state.lost_since(t.conns, rec.start_ts)
    evidence = exchange_evidence(ex, answer)
    evidence[registered[0]] = registered[1]
    verdict = "accepted" if answer == 0 else f"answered {error_name(answer)}"
    out.append(
        make(
            kind,
            judge(answer, unverified=unverified, explained_by_loss=True),
            ex.request_ts,
            f"{what}; broker {verdict}",
            evidence,
            unverified=unverified,
            transactional_id=t.transactional_id,
            **subject,
        )
    )


def on_end_txn(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    req, resp = ex.request, ex.response
    t = state.txn_id(req.transactional_id, ex.request_ts)
    answer = answer_of(ex)
    pid, epoch = req.producer_id, req.producer_epoch
    what = "EndTxn(commit)" if req.committed else "EndTxn(abort)"
    lane = identify(state, t, ex, pid, epoch, answer, what, out)
    if lane is None:
        return
    if req.committed:
        trigger = _END_COMMIT
    else:
        trigger = _END_ABORT_TV2 if ex.api_version >= 5 else _END_ABORT
    if ALLOWED[lane.state].get(trigger) is None and illegal(
        state, t, lane, trigger, answer, ex, out, pid, epoch, unverified=ex.unverified, what=what
    ):
        if answer == 0 and lane is t:
            t.unanswered = False  # the broker ended whatever was open
        return
    if answer is None:
        rec = lane.txn
        if rec is not None and rec.outcome is None:
            rec.end_requested = True
            rec.intent = "commit" if req.committed else "abort"
            rec.end_request_ts = ex.request_ts
        return
    if answer != 0:
        return  # e.g. CONCURRENT_TRANSACTIONS: the client retries; the transaction is still open
    if lane is t:
        t.unanswered = False  # what went unanswered before belonged to the transaction now ended
    rec = lane.txn
    started = rec.start_ts if rec is not None and rec.outcome is None and rec.registration_known else None
    enter(state, lane, trigger, pid, epoch, ex.request_ts, end_ts=ex.response_ts, client=ex.client)
    if started is not None and t.timeout_ms and (ex.request_ts - started) * 1000 > t.timeout_ms:
        _ended_late(state, t, ex, pid, epoch, started, out)
    if lane is t and ex.api_version >= 5 and resp.producer_id >= 0:
        # transaction.version 2: every end bumps the epoch (KIP-890); the answer says which to use next.
        t.tv2 = True
        p = see_producer(state, resp.producer_id, resp.producer_epoch, ex, t.transactional_id)
        p.started_epochs.add(resp.producer_epoch)
        take_over(
            state,
            t,
            Instance(resp.producer_id, resp.producer_epoch, ex.request_ts, ex.client, ex.client_id),
            ex,
            out,
            via="EndTxn",
        )


def _ended_late(
    state: AuditState, t: TxnIdState, ex: Exchange, pid: int, epoch: int, started: float, out: list[Finding]
) -> None:
    """An EndTxn accepted after the transaction's own timeout: the coordinator should have aborted it
    (and fenced the epoch) by then; a commit it accepted anyway is a broker letting the timeout slip."""
    committed = ex.request.committed
    lost = ex.unverified or state.lost_since(t.conns, started)
    took_ms = (ex.request_ts - started) * 1000
    evidence = exchange_evidence(ex, 0)
    evidence.update(start_ts=started, timeout_ms=t.timeout_ms, took_ms=round(took_ms, 3))
    severity = Severity.WARNING if committed else Severity.INFO
    out.append(
        make(
            FindingKind.ENDED_AFTER_TIMEOUT,
            Severity.INFO if lost else severity,
            ex.request_ts,
            f"transaction of {t.transactional_id!r} (producer id {pid} epoch {epoch}) ended with "
            f"{'a commit' if committed else 'an abort'} the broker accepted {took_ms:,.0f} ms after "
            f"it began, past its {t.timeout_ms} ms timeout",
            evidence,
            unverified=lost,
            transactional_id=t.transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
        )
    )


def write(
    state: AuditState,
    t: TxnIdState,
    lane: Lane,
    ex: Exchange,
    b: ProducedBatch,
    out: list[Finding],
    *,
    unverified: bool,
) -> None:
    """A transactional batch that passed the identity checks: judge it against the lane's transaction."""
    # Once per transactional batch: `illegal`'s words are made only when the lane cannot take the write,
    # and the usual write, into the open transaction of the lane, is read inline (`enter` changes
    # nothing then).
    answer, topic, partition, h = b.error_code, b.topic, b.partition, b.header
    tv2 = ex.api_version >= 12  # Produce v12+ is only used within a transaction under transaction.version 2
    if tv2:
        t.tv2 = True
    trigger = _WRITE_TV2 if tv2 else _WRITE
    state_now = lane.state
    if ALLOWED[state_now].get(trigger) is None and illegal(
        state,
        t,
        lane,
        trigger,
        answer,
        ex,
        out,
        h.producer_id,
        h.producer_epoch,
        unverified=unverified,
        what=f"transactional write to {topic}-{partition}",
        topic=topic,
        partition=partition,
    ):
        return
    rec = lane.txn
    is_open = state_now is _ONGOING and rec is not None and rec.outcome is None
    if (
        is_open
        and lane is t
        and trigger is _WRITE
        and rec.registration_known
        and (topic, partition) not in rec.registered
    ):  # `_registering`: a write the classic protocol needed registered first
        kind = FindingKind.WRITE_TO_UNREGISTERED_PARTITION
        what = (
            f"transactional write of {t.transactional_id!r} to {topic}-{partition}, which "
            "AddPartitionsToTxn did not add"
        )
        registered = ("registered", sorted(f"{tp}-{p}" for tp, p in rec.registered))
        subject = dict(
            producer_id=h.producer_id, producer_epoch=h.producer_epoch, topic=topic, partition=partition
        )
        _unregistered(state, t, rec, ex, answer, out, kind, what, registered, subject, unverified)
    if answer == 0:
        if not (is_open and rec.intent is None and rec.taken_over_ts is None):
            # anything but a write into a plain open transaction: what `enter` makes of it
            rec = enter(
                state, lane, trigger, h.producer_id, h.producer_epoch, ex.request_ts, client=ex.client
            )
        if rec is not None:
            rec.partitions.setdefault(f"{topic}-{partition}", None)  # rec.add_partition
            rec.records += h.records_count
            rec.batches += 1
    elif answer is None and rec is not None and rec.outcome is None:
        rec.add_partition(topic, partition)  # unanswered: the data may be there


def on_write_txn_markers(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    """Markers name producer ids only: apply those of producer ids this state knows."""
    for m in ex.request.markers:
        p = state.producers.get(m.producer_id)
        if p is None or p.transactional_id is None or not state.owns(p.transactional_id):
            continue
        t = state.txn_ids[p.transactional_id]
        result = "commit" if m.transaction_result else "abort"
        rec = t.txn
        cur = t.current
        if cur is not None and cur.producer_id == m.producer_id and m.producer_epoch > cur.epoch:
            # The coordinator bumped the epoch itself (timeout or fencing abort, or transaction.version 2).
            t.current = Instance(m.producer_id, m.producer_epoch, ex.request_ts, cur.client, cur.client_id)
        lane = _marked_lane(t, m.producer_id)
        if lane is None:
            continue
        rec = lane.txn
        if rec.outcome is None:
            # No EndTxn seen: the coordinator ended it (timeout, fencing) or the EndTxn was not captured.
            rec.outcome, rec.end_ts = result, ex.request_ts
            lane.state = TxnState.PREPARE_COMMIT if result == "commit" else TxnState.PREPARE_ABORT
            rec.outcome_source = "markers"
        elif rec.outcome_source != "end_txn":
            rec.outcome, rec.outcome_source = result, "markers"
        elif rec.outcome != result:
            _markers_disagree(ex, m, t, rec, result, out)
        rec.markers = result


def _marker_answer(ex: Exchange, producer_id: int) -> int | None:
    """0 when every partition leader accepted the markers for `producer_id`, else the first error."""
    if ex.response is None:
        return None
    for written in ex.response.markers:
        if written.producer_id == producer_id:
            codes = [p.error_code for tp in written.topics for p in tp.partitions]
            return next((c for c in codes if c), 0)
    return None


def _markers_disagree(
    ex: Exchange, m, t: TxnIdState, rec: TxnRecord, result: str, out: list[Finding]
) -> None:
    """The coordinator accepted EndTxn(X) and then wrote markers saying the opposite: read_committed
    consumers see the transaction the other way round."""
    answer = _marker_answer(ex, m.producer_id)
    evidence = exchange_evidence(ex, answer)
    evidence.update(
        end_txn_result=rec.outcome,
        marker_result=result,
        end_ts=rec.end_ts,
        partitions=[f"{tp.name}-{p}" for tp in m.topics for p in tp.partition_indexes],
    )
    out.append(
        make(
            FindingKind.MARKERS_DISAGREE,
            judge(answer, unverified=ex.unverified, explained_by_loss=False),
            ex.request_ts,
            f"the coordinator accepted EndTxn({rec.outcome}) of {t.transactional_id!r} (producer id "
            f"{rec.producer_id} epoch {rec.producer_epoch}) but wrote {result.upper()} markers; "
            f"{broker_verdict(answer)}",
            evidence,
            unverified=ex.unverified,
            transactional_id=t.transactional_id,
            producer_id=rec.producer_id,
            producer_epoch=rec.producer_epoch,
        )
    )


def _marked_lane(t: TxnIdState, producer_id: int) -> Lane | None:
    """The lane whose latest transaction markers for `producer_id` end: the current one's, else a
    superseded instance's (a takeover's abort markers name the old producer id)."""
    for lane in t.lanes():
        rec = lane.txn
        if rec is not None and rec.producer_id == producer_id and rec.markers is None:
            return lane
    return None
