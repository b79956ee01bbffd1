"""What the audit room produces: findings, transactions and producer summaries (docs/contract.md)."""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Any

from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass


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
    # One transaction across brokers (issue 12): the coordinator's markers against the EndTxn it accepted,
    # and an end that came after the transaction's own timeout.
    MARKERS_DISAGREE = "markers_disagree"
    ENDED_AFTER_TIMEOUT = "transaction_ended_after_timeout"
    # What consumers were given, against the partition log as the wire shows it (ksniff.audit.partlog).
    ABORTED_READ = "aborted_read"
    UNCOMMITTED_READ = "uncommitted_read"
    LOST_WRITE = "lost_write"
    DUPLICATE_WRITE = "duplicate_write"
    TORN_TRANSACTION = "torn_transaction"
    OFFSET_COMMIT_PAST_END = "offset_commit_past_end"
    FETCH_POSITION_BACKWARDS = "fetch_position_backwards"
    FETCH_POSITION_SKIP = "fetch_position_skip"
    # InitProducerId refused, then writes with producer id -1 from the same client (ksniff.audit.idempotence).
    IDEMPOTENCE_NOT_IN_EFFECT = "idempotence_not_in_effect"
    # A partition's last stable offset held below its high watermark past the transaction timeout, with
    # no marker for the transaction there (issue 12: KIP-664's hanging transaction as the leader shows it).
    HANGING_PARTITION = "hanging_partition"
    # A record batch whose CRC-32C does not match its bytes: the capture holds other bytes than were sent
    # (or its sender wrote them so); none of its fields is judged, and the connection counts as having
    # lost bytes from there on (ksniff.decode.connection.damage).
    CORRUPT_BATCH = "corrupt_batch"


# Findings and transactions are made per event (a transaction per EndTxn): built through their slots.
@fast_init
@frozen_dataclass(init=False)
class Finding:
    """One problem the audit found: its kind, severity, time, subject and words."""

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

    def subject(self) -> dict:
        """Whom and what it is about and what it says, as the JSON document and the tables name them."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "topic": self.topic,
            "partition": self.partition,
            "group": self.group,
            "message": self.message,
        }

    def as_contract(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "ts": self.ts,
            **self.subject(),
            "evidence": dict(self.evidence),
            "capture_set": self.capture_set,
            "cluster": self.cluster,
        }


@fast_init
@frozen_dataclass(init=False)
class Transaction:
    """One transaction of a transactional producer, from its first write to its end (or none)."""

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


@frozen_dataclass
class ProducerSummary:
    """What the audit saw of one producer: its ids, epochs, clients, batches, records, transactions."""

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
    """Label freshly made findings, transactions, producer rows or partition logs with their capture set
    and cluster.

    They are frozen for everyone downstream; the engine sets these two slots once, right after the set's
    audit made them and before anyone else holds them (a copy each would cost more than the audit of a
    small transaction)."""
    for item in items:
        cls = type(item)
        cls.capture_set.__set__(item, capture_set)
        cls.cluster.__set__(item, cluster)


@frozen_dataclass
class PartitionSummary:
    """One topic-partition's log as the wire showed it (ksniff.audit.partlog): its offsets, who wrote
    which of them, which transaction each batch belongs to and how it ended, who read it."""

    topic: str
    partition: int
    high_watermark: int | None  # the highest seen in Fetch answers
    last_stable_offset: int | None  # the latest seen
    log_start_offset: int | None
    end_offset: int  # one past the highest offset known to hold something
    acked_batches: int
    acked_records: int
    fetch_answers: int
    fetched_batches: int  # every batch of every Fetch answer, counted again when read again
    fetched_records: int
    commit_markers: int
    abort_markers: int
    aborted_entries: int  # aborted-transaction entries in Fetch answers
    forgotten: int  # batches beyond the per-partition bound, not kept
    producers: tuple[dict, ...]  # {producer_id, transactional_id, epochs, batches, records, offsets, ...}
    readers: tuple[dict, ...]  # {client, client_id, isolation_level, fetches, batches, records, offsets}
    log: tuple[dict, ...]  # batches in offset order (at most LOG_ROWS): see ksniff.audit.partlog.log_row
    log_truncated: int = 0  # batches known but left out of `log`
    # The capture set (ksniff.engine.sets) whose audit kept this log, and its cluster (`stamp`): captures
    # of unrelated sets never share a log, so one topic-partition may have one summary per set.
    capture_set: int | None = None
    cluster: str | None = None

    def as_contract(self) -> dict:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "high_watermark": self.high_watermark,
            "last_stable_offset": self.last_stable_offset,
            "log_start_offset": self.log_start_offset,
            "end_offset": self.end_offset,
            "acked_batches": self.acked_batches,
            "acked_records": self.acked_records,
            "fetch_answers": self.fetch_answers,
            "fetched_batches": self.fetched_batches,
            "fetched_records": self.fetched_records,
            "commit_markers": self.commit_markers,
            "abort_markers": self.abort_markers,
            "aborted_entries": self.aborted_entries,
            "forgotten": self.forgotten,
            "producers": [dict(p) for p in self.producers],
            "readers": [dict(r) for r in self.readers],
            "log": [dict(b) for b in self.log],
            "log_truncated": self.log_truncated,
            "capture_set": self.capture_set,
            "cluster": self.cluster,
        }


@frozen_dataclass
class AuditOutput:
    """The audit fold's result: producers, transactions and findings."""

    producers: tuple[ProducerSummary, ...]
    transactions: tuple[Transaction, ...]
    findings: tuple[Finding, ...]  # sorted by ts
    partitions: tuple[PartitionSummary, ...] = ()  # by topic, partition
