"""The life of a transaction as the wire shows it: states, what enters them, and the legal transitions.

Modelled on the transaction coordinator's own states (Empty, Ongoing, PrepareCommit, PrepareAbort), seen
from outside: a transition happens when the broker accepted the request that causes it. The auditor
checks the client's attempt against `ALLOWED` before it knows the answer; an attempt the table does not
allow is a finding (`ILLEGAL`), never an exception, and leaves the state as it was.
"""

from __future__ import annotations

from enum import Enum

from ksniff.audit.model import FindingKind


class TxnState(str, Enum):
    """A transactional id's state; each member carries `entered_by`, the request that enters it."""

    def __new__(cls, value: str, entered_by: str) -> TxnState:
        member = str.__new__(cls, value)
        member._value_ = value
        member.entered_by = entered_by
        return member

    UNKNOWN = (
        "unknown",
        "nothing yet: the capture began after this id's InitProducerId, so a transaction may already "
        "be open; every trigger is allowed from here, because nothing can be judged",
    )
    EMPTY = ("empty", "an accepted InitProducerId: an instance is ready and no transaction is open")
    ONGOING = (
        "ongoing",
        "an accepted AddPartitionsToTxn or AddOffsetsToTxn, or (transaction.version 2) an accepted "
        "transactional Produce v12+ or TxnOffsetCommit v5+: a transaction is open",
    )
    PREPARE_COMMIT = (
        "prepare_commit",
        "an accepted EndTxn(committed=true): the transaction ended; writing its markers is the "
        "coordinator's business from here on",
    )
    PREPARE_ABORT = ("prepare_abort", "an accepted EndTxn(committed=false)")


class Trigger(str, Enum):
    """A request that may move a transactional id from one state to another."""

    INIT = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    OFFSET_COMMIT = "TxnOffsetCommit"  # v0-4: the group must have been added by AddOffsetsToTxn
    OFFSET_COMMIT_TV2 = "TxnOffsetCommit (transaction.version 2)"  # v5+: the coordinator adds the group
    WRITE = "Produce"  # v3-11: the partition must have been added by AddPartitionsToTxn
    WRITE_TV2 = "Produce (transaction.version 2)"  # v12+: the leader adds the partition itself
    END_COMMIT = "EndTxn(commit)"
    END_ABORT = "EndTxn(abort)"
    END_ABORT_TV2 = "EndTxn(abort, transaction.version 2)"  # may abort nothing, to bump the epoch


S, T = TxnState, Trigger

# Triggers that open a transaction from any state where none is open.
_BEGIN = {
    T.ADD_PARTITIONS: S.ONGOING,
    T.ADD_OFFSETS: S.ONGOING,
    T.WRITE_TV2: S.ONGOING,
    T.OFFSET_COMMIT_TV2: S.ONGOING,
    T.INIT: S.EMPTY,
}

ALLOWED: dict[TxnState, dict[Trigger, TxnState]] = {
    S.UNKNOWN: {
        **_BEGIN,
        T.WRITE: S.ONGOING,
        T.OFFSET_COMMIT: S.ONGOING,
        T.END_COMMIT: S.PREPARE_COMMIT,
        T.END_ABORT: S.PREPARE_ABORT,
        T.END_ABORT_TV2: S.PREPARE_ABORT,
    },
    S.EMPTY: {**_BEGIN, T.END_ABORT_TV2: S.EMPTY},
    S.ONGOING: {
        **_BEGIN,
        T.ADD_PARTITIONS: S.ONGOING,
        T.ADD_OFFSETS: S.ONGOING,
        T.WRITE: S.ONGOING,
        T.OFFSET_COMMIT: S.ONGOING,
        T.END_COMMIT: S.PREPARE_COMMIT,
        T.END_ABORT: S.PREPARE_ABORT,
        T.END_ABORT_TV2: S.PREPARE_ABORT,
    },
    # A retried EndTxn with the same result is answered NONE by the coordinator: allowed, no new end.
    S.PREPARE_COMMIT: {**_BEGIN, T.END_COMMIT: S.PREPARE_COMMIT, T.END_ABORT_TV2: S.PREPARE_COMMIT},
    S.PREPARE_ABORT: {**_BEGIN, T.END_ABORT: S.PREPARE_ABORT, T.END_ABORT_TV2: S.PREPARE_ABORT},
}

# What an attempt the table does not allow is reported as.
ILLEGAL: dict[Trigger, FindingKind] = {
    T.WRITE: FindingKind.WRITE_OUTSIDE_TRANSACTION,
    T.OFFSET_COMMIT: FindingKind.TXN_OFFSET_COMMIT_UNREGISTERED_GROUP,
    T.END_COMMIT: FindingKind.END_TXN_WITHOUT_TRANSACTION,
    T.END_ABORT: FindingKind.END_TXN_WITHOUT_TRANSACTION,
    T.END_ABORT_TV2: FindingKind.END_TXN_WITHOUT_TRANSACTION,
}

OPEN_STATES = frozenset({S.UNKNOWN, S.ONGOING})


def next_state(state: TxnState, trigger: Trigger) -> TxnState | None:
    """The state `trigger` leads to from `state`, or None when the table does not allow it."""
    return ALLOWED[state].get(trigger)
