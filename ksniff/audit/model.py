"""What the audit room produces: findings, transactions and producer summaries (docs/contract.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ksniff.common.codegen import fast_init


class Severity(str, Enum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class FindingKind(str, Enum):
    SEQUENCE_GAP = "sequence_gap"
    SEQUENCE_DUPLICATE = "sequence_duplicate"
    EPOCH_REGRESSION = "epoch_regression"
    PRODUCER_FENCED = "producer_fenced"
    ZOMBIE_WRITE_ACCEPTED = "zombie_write_accepted"
    HANGING_TRANSACTION = "hanging_transaction"
    CAPTURE_GAP = "capture_gap"
    # Added by the audit room (docs/contract.md: "more may be added").
    SEQUENCE_OUT_OF_ORDER = "sequence_out_of_order"
    WRITE_TO_UNREGISTERED_PARTITION = "write_to_unregistered_partition"
    WRITE_OUTSIDE_TRANSACTION = "write_outside_transaction"
    TXN_OFFSET_COMMIT_UNREGISTERED_GROUP = "txn_offset_commit_unregistered_group"
    END_TXN_WITHOUT_TRANSACTION = "end_txn_without_transaction"
    UNANSWERED_REQUEST = "unanswered_request"
    OFFSET_COMMIT_BACKWARDS = "offset_commit_backwards"
    # An end that came after the transaction's own timeout (issue 12).
    ENDED_AFTER_TIMEOUT = "transaction_ended_after_timeout"


# Findings and transactions are made per event (a transaction per EndTxn): built through their slots.
@fast_init
@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # a FindingKind value, or a newer kind the audit adds
    severity: str  # a Severity value
    ts: float
    message: str
    transactional_id: str | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    topic: str | None = None
    partition: int | None = None
    group: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    # Which capture set (ksniff.engine.sets) and cluster id it belongs to: set by the engine after the
    # set's audit (`stamp`), None before.
    capture_set: int | None = None
    cluster: str | None = None

    def as_contract(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "ts": self.ts,
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "topic": self.topic,
            "partition": self.partition,
            "group": self.group,
            "message": self.message,
            "evidence": dict(self.evidence),
            "capture_set": self.capture_set,
            "cluster": self.cluster,
        }


@fast_init
@dataclass(frozen=True, slots=True)
class Transaction:
    transactional_id: str
    producer_id: int | None
    producer_epoch: int | None
    start_ts: float
    end_ts: float | None
    outcome: str  # "commit" | "abort" | "open" | "unknown"
    partitions: tuple[str, ...]  # "topic-partition"
    records: int
    groups: tuple[str, ...]
    client: str | None = None  # "ip:port" of the instance whose request began it, where seen
    capture_set: int | None = None
    cluster: str | None = None
    # How the outcome is known: "end_txn", "markers", "takeover", "next_transaction", "request"; None
    # for "open" and "unknown" (ksniff.audit.state.TxnRecord).
    outcome_source: str | None = None

    def as_contract(self) -> dict:
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "start_ts": self.start_ts,
            "end_ts": self.end_ts,
            "outcome": self.outcome,
            "partitions": list(self.partitions),
            "records": self.records,
            "groups": list(self.groups),
            "client": self.client,
            "capture_set": self.capture_set,
            "cluster": self.cluster,
            "outcome_source": self.outcome_source,
        }


@dataclass(frozen=True, slots=True)
class ProducerSummary:
    transactional_id: str | None
    producer_id: int | None
    epochs: tuple[int, ...]
    clients: tuple[str, ...]
    client_ids: tuple[str, ...]
    batches: int
    records: int
    commit: int
    abort: int
    open: int
    unknown: int
    first_ts: float | None = None  # when the capture first saw this producer id (for ordering)
    capture_set: int | None = None
    cluster: str | None = None

    def as_contract(self) -> dict:
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "epochs": list(self.epochs),
            "clients": list(self.clients),
            "client_ids": list(self.client_ids),
            "batches": self.batches,
            "records": self.records,
            "transactions": {
                "commit": self.commit,
                "abort": self.abort,
                "open": self.open,
                "unknown": self.unknown,
            },
            "capture_set": self.capture_set,
            "cluster": self.cluster,
        }


def stamp(items, capture_set: int, cluster: str | None) -> None:
    """Label freshly made findings, transactions or producer rows with their capture set and cluster.

    They are frozen for everyone downstream; the engine sets these two slots once, right after the set's
    audit made them and before anyone else holds them (a copy each would cost more than the audit of a
    small transaction)."""
    for item in items:
        cls = type(item)
        cls.capture_set.__set__(item, capture_set)
        cls.cluster.__set__(item, cluster)


@dataclass(frozen=True, slots=True)
class AuditOutput:
    producers: tuple[ProducerSummary, ...]
    transactions: tuple[Transaction, ...]
    findings: tuple[Finding, ...]  # sorted by ts
