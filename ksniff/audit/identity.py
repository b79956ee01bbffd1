"""Who is producing: producer ids, their epochs, the instance that holds a transactional id, fencing.

A transactional id is held by one instance at a time, a (producer id, epoch) handed out by InitProducerId
(or bumped by EndTxn v5 under transaction.version 2). A newer InitProducerId supersedes the earlier
instance whatever happens to the producer id; later requests from a superseded instance are zombie
activity, judged by the broker's answer: rejected -> `producer_fenced` (warning), accepted ->
`zombie_write_accepted` (critical).
"""

from __future__ import annotations

from typing import Any

from ksniff.audit.codes import FENCING_ERRORS, error_name
from ksniff.audit.findings import broker_verdict, exchange_evidence, judge, make
from ksniff.audit.model import Finding, FindingKind, Severity
from ksniff.audit.state import AuditState, Instance, ProducerState, TxnIdState
from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass
from ksniff.common.sources import made
from ksniff.decode.events import Exchange


@fast_init
@frozen_dataclass(init=False)
class Claim:
    """A request as the identity checks judge it: the instance that sent it (producer id, epoch), what it
    did (`what`, and where: topic and partition), its exchange, the broker's answer, and whether lost
    bytes leave it unverified."""

    ex: Exchange
    producer_id: int
    epoch: int
    answer: int | None
    what: str | None  # None: "a write to TOPIC-PARTITION" (`described`), worded only for a finding
    unverified: bool
    topic: str | None = None
    partition: int | None = None

    def described(self) -> str:
        """What the request did, in a finding's words."""
        return self.what if self.what is not None else f"a write to {self.topic}-{self.partition}"

    def where(self, transactional_id: str | None) -> dict:
        """The finding's subject fields."""
        return dict(
            transactional_id=transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            topic=self.topic,
            partition=self.partition,
        )


def see_producer(
    state: AuditState, producer_id: int, epoch: int, ex: Exchange, transactional_id: str | None
) -> ProducerState:
    """Note that `producer_id` was seen at `epoch` on this exchange's connection."""
    p = state.producers.get(producer_id)  # state.producer(), inline: once per batch
    if p is None:
        p = state.producer(producer_id, ex.request_ts)
    epochs = p.epochs
    if epoch >= 0 and epoch not in epochs:  # the usual case, an epoch already seen, changes nothing
        if epochs and epoch > p.top_epoch:
            p.started_epochs.add(epoch)  # bumped in front of us: its sequences restart at 0
        epochs.add(epoch)
        if epoch > p.top_epoch:
            p.top_epoch = epoch
    p.clients.add(ex.client)
    if ex.client_id:
        p.client_ids.add(ex.client_id)
    conn = ex.conn
    p.conns.add(conn)
    if transactional_id is not None:
        p.transactional_id = transactional_id
        t = state.txn_ids.get(transactional_id)
        if t is None:
            t = state.txn_id(transactional_id, ex.request_ts)
        t.conns.add(conn)
    return p


def zombie(
    state: AuditState, t: TxnIdState, c: Claim, out: list[Finding], *, report_rejection: bool = True
) -> bool:
    """Judge a request from a superseded instance; False when the instance is not superseded."""
    producer_id, epoch, answer, ex = c.producer_id, c.epoch, c.answer, c.ex
    if not t.is_superseded(producer_id, epoch):
        return False
    what, unverified = c.described(), c.unverified
    cur = t.current
    evidence = exchange_evidence(ex, answer)
    if cur is not None:
        evidence.update(
            current_producer_id=cur.producer_id, current_epoch=cur.epoch, current_client=cur.client
        )
    where = c.where(t.transactional_id)
    if answer == 0:
        sev = judge(0, unverified=unverified, explained_by_loss=False)
        out.append(
            make(
                FindingKind.ZOMBIE_WRITE_ACCEPTED,
                sev,
                ex.request_ts,
                f"broker accepted {what} from superseded instance producer id {producer_id} "
                f"epoch {epoch} of {t.transactional_id!r}",
                evidence,
                unverified=unverified,
                **where,
            )
        )
    elif answer is not None and report_rejection:
        out.append(
            make(
                FindingKind.PRODUCER_FENCED,
                Severity.WARNING,
                ex.request_ts,
                f"broker rejected {what} from superseded instance producer id {producer_id} "
                f"epoch {epoch} of {t.transactional_id!r} with {error_name(answer)}",
                evidence,
                unverified=unverified,
                **where,
            )
        )
    return True


def fenced_by_broker(state: AuditState, t: TxnIdState | None, c: Claim, out: list[Finding]) -> bool:
    """Report a PRODUCER_FENCED / INVALID_PRODUCER_EPOCH answer; False when the answer was another."""
    producer_id, epoch, answer, ex = c.producer_id, c.epoch, c.answer, c.ex
    if answer not in FENCING_ERRORS:
        return False
    if t is not None:
        # The broker knows better: that instance is done, whatever we saw of its successor.
        t.fenced_upto[producer_id] = max(epoch, t.fenced_upto.get(producer_id, -1))
    out.append(
        make(
            FindingKind.PRODUCER_FENCED,
            Severity.WARNING,
            ex.request_ts,
            f"broker answered {c.described()} of producer id {producer_id} epoch {epoch} with "
            f"{error_name(answer)}",
            exchange_evidence(ex, answer),
            unverified=c.unverified,
            **c.where(t.transactional_id if t else None),
        )
    )
    return True


def take_over(
    state: AuditState, t: TxnIdState, new: Instance, ex: Exchange, out: list[Finding], *, via: str
) -> None:
    """`new` now holds the transactional id (InitProducerId or EndTxn v5 answered with it)."""
    prev = t.current
    t.current = new
    if prev is None or (prev.producer_id, prev.epoch) == (new.producer_id, new.epoch):
        return
    where = dict(transactional_id=t.transactional_id, producer_id=new.producer_id, producer_epoch=new.epoch)
    evidence = exchange_evidence(ex, 0)
    evidence.update(
        previous_producer_id=prev.producer_id,
        previous_epoch=prev.epoch,
        previous_client=prev.client,
        previous_client_id=prev.client_id,
    )
    if new.producer_id == prev.producer_id and new.epoch < prev.epoch:
        out.append(
            make(
                FindingKind.EPOCH_REGRESSION,
                judge(0, unverified=ex.unverified, explained_by_loss=False),
                ex.request_ts,
                f"broker handed {t.transactional_id!r} epoch {new.epoch} of producer id "
                f"{new.producer_id} after epoch {prev.epoch}",
                evidence,
                unverified=ex.unverified,
                **where,
            )
        )
        return
    if new.producer_id != prev.producer_id:
        t.superseded_pids.add(prev.producer_id)
    if via != "InitProducerId":
        return  # the epoch bump of every transaction under transaction.version 2: the same instance
    req = ex.request
    evidence.update(
        new_producer_id=new.producer_id,
        new_epoch=new.epoch,
        self_bump=(req.producer_id, req.producer_epoch) == (prev.producer_id, prev.epoch),
    )
    # The finding names the instance that was fenced; the evidence names its successor.
    out.append(
        make(
            FindingKind.PRODUCER_FENCED,
            Severity.INFO,
            ex.request_ts,
            f"a newer instance took over {t.transactional_id!r}: producer id {prev.producer_id} "
            f"epoch {prev.epoch} -> producer id {new.producer_id} epoch {new.epoch} "
            f"({ex.client})",
            evidence,
            unverified=ex.unverified,
            transactional_id=t.transactional_id,
            producer_id=prev.producer_id,
            producer_epoch=prev.epoch,
        )
    )


def adopt(t: TxnIdState, producer_id: int, epoch: int, ex: Exchange) -> bool:
    """An accepted request from an instance newer than the one we know: the capture missed its start.

    Returns True when the instance changed."""
    cur = t.current
    if cur is not None and cur.producer_id == producer_id and epoch <= cur.epoch:
        return False
    t.current = Instance(producer_id, epoch, ex.request_ts, ex.client, ex.client_id)
    return True


def epoch_regression(transactional_id: str | None, highest: int, c: Claim, out: list[Finding]) -> None:
    """A request carrying a lower epoch than one already seen for its producer id."""
    answer, ex, unverified = c.answer, c.ex, c.unverified
    evidence = exchange_evidence(ex, answer)
    evidence["highest_epoch"] = highest
    out.append(
        make(
            FindingKind.EPOCH_REGRESSION,
            judge(answer, unverified=unverified, explained_by_loss=False),
            ex.request_ts,
            f"{c.described()} of producer id {c.producer_id} carried epoch {c.epoch} after epoch {highest}; "
            f"{broker_verdict(answer)}",
            evidence,
            unverified=unverified,
            **c.where(transactional_id),
        )
    )


def highest_epoch(state: AuditState, producer_id: int) -> int:
    """The highest epoch seen so far for `producer_id` (-1 when none)."""
    p = state.producers.get(producer_id)
    return -1 if p is None else p.max_epoch


def _compiled_see_producer(python: Any = see_producer) -> Any:
    """`see_producer` in C (ksniff.audit._steps.Seeing, when built): the same steps on the same objects,
    `python` (the function above) the reference it is held to (tests/audit/test_steps.py) and what runs
    for anything of other classes; None without the compiled module."""
    classes = {
        "AuditState": AuditState,
        "Exchange": Exchange,
        "ProducerState": ProducerState,
        "TxnIdState": TxnIdState,
    }
    seeing = made("ksniff.audit._steps", "Seeing", python, classes)
    return None if seeing is None else seeing.see_producer


# Once per batch of every Produce (produce.on_produce), and by the transaction handlers: in C when built.
see_producer_python = see_producer
see_producer = _compiled_see_producer() or see_producer_python
