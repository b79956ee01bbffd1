"""The audit's memory: what it knows of each producer id, transactional id, partition and connection.

Mutable on purpose: `step` updates it in place for speed and returns it. Everything in it is keyed so
that it can be split by producer key (see ksniff.audit.keys): a transactional id's state holds its
instances and transactions, a producer id's state its epochs and sequences; only connection losses and
the cluster's transaction.version are shared, and those arrive as context events every partition sees.
"""

from __future__ import annotations

from collections import deque
from dataclasses import field
from typing import Any

from ksniff.audit.idempotence import IdempotenceWatch
from ksniff.audit.keys import CONTEXT_KEY
from ksniff.audit.model import Finding, Transaction
from ksniff.audit.partlog import LogState, lost_in
from ksniff.audit.txn import TxnState
from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.decode.events import Exchange, made_by_position

_TRANSACTION = made_by_position(Transaction)  # one per transaction: in C when built

# How many accepted batches per partition are remembered to recognise a retry (brokers cache five).
RECENT_BATCHES = 16


@frozen_dataclass
class AuditConfig:
    """The audit fold's settings: the transaction timeout and the duplicate-exchange window."""

    txn_timeout_ms: int = 60000  # when the producer's own TransactionTimeoutMillis was not seen
    # An exchange seen again (captured at both ends) within this many seconds counts once.
    duplicate_window_s: float = 5.0


@slotted_dataclass
class Instance:
    """One producer instance: the (producer id, epoch) a transactional id was handed, and who holds it."""

    producer_id: int
    epoch: int
    since: float
    client: str | None = None
    client_id: str | None = None


@slotted_dataclass
class ProducerState:
    """One producer id: its epochs, where it was seen, and what it wrote."""

    producer_id: int
    first_ts: float
    transactional_id: str | None = None
    epochs: set[int] = field(default_factory=set)
    # Epochs whose start the capture saw (InitProducerId, EndTxn v5, or a bump seen in Produce): every
    # partition's sequence starts at 0 in them.
    started_epochs: set[int] = field(default_factory=set)
    clients: set[str] = field(default_factory=set)
    client_ids: set[str] = field(default_factory=set)
    conns: set[int] = field(default_factory=set)
    batches: int = 0
    records: int = 0
    # The highest of `epochs` (-1 while none), kept as they are added (identity.see_producer): read once
    # per batch, where max() over the set was a hundredth of a run over many small transactions.
    top_epoch: int = -1

    @property
    def max_epoch(self) -> int:
        return self.top_epoch


@slotted_dataclass
class TxnRecord:
    """A transaction being built; `as_transaction` gives the contract's row."""

    transactional_id: str
    producer_id: int | None
    producer_epoch: int | None
    start_ts: float
    # False when the transaction began before the capture: its registrations were not seen.
    registration_known: bool = True
    end_ts: float | None = None
    outcome: str | None = None  # None while open
    partitions: dict[str, None] = field(default_factory=dict)  # "topic-partition", in order seen
    registered: set[tuple[str, int]] = field(default_factory=set)
    groups: dict[str, None] = field(default_factory=dict)
    groups_added: set[str] = field(default_factory=set)
    records: int = 0
    batches: int = 0
    end_requested: bool = False  # an EndTxn went unanswered
    intent: str | None = None  # "commit"/"abort": what that unanswered EndTxn asked for
    end_request_ts: float | None = None  # when it was sent
    # An accepted InitProducerId for its transactional id came while it was open: the coordinator
    # aborts it (KIP-98) unless later evidence (its own accepted EndTxn, markers) says otherwise.
    taken_over_ts: float | None = None
    markers: str | None = None  # "commit"/"abort" from WriteTxnMarkers, where captured
    client: str | None = None  # "ip:port" of the instance whose request began it
    # How the outcome is known: "end_txn" (the broker's answer), "markers", "takeover",
    # "next_transaction" (the same producer id and epoch went on after an unanswered EndTxn), "request"
    # (an unanswered EndTxn's intent alone); None while open or unknown.
    outcome_source: str | None = None

    def add_partition(self, topic: str, partition: int) -> None:
        self.partitions.setdefault(f"{topic}-{partition}", None)

    def as_transaction(self) -> Transaction:
        # Once per transaction: by position (Transaction's fields in order; capture_set and cluster are
        # the engine's to stamp).
        return _TRANSACTION(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.start_ts,
            self.end_ts,
            self.outcome or "open",
            tuple(self.partitions),
            self.records,
            tuple(self.groups) if self.groups else (),
            self.client,
            None,
            None,
            self.outcome_source,
        )


@slotted_dataclass
class Lane:
    """Where one instance of a transactional id stands in the transaction table (ksniff.audit.txn)."""

    transactional_id: str
    state: TxnState = TxnState.UNKNOWN
    txn: TxnRecord | None = None  # the transaction open or last ended


@slotted_dataclass
class TxnIdState(Lane):
    """One transactional id: its current instance (whose lane it is), the ones it superseded, and the
    lanes of superseded instances whose requests a broker still accepted (their transactions count)."""

    first_ts: float = 0.0
    current: Instance | None = None
    timeout_ms: int | None = None
    superseded_pids: set[int] = field(default_factory=set)
    fenced_upto: dict[int, int] = field(default_factory=dict)  # producer id -> highest fenced epoch
    zombies: dict[tuple[int, int], Lane] = field(default_factory=dict)  # (producer id, epoch) -> lane
    conns: set[int] = field(default_factory=set)
    tv2: bool = False  # the client speaks transaction.version 2 (EndTxn v5, Produce v12)
    # An AddPartitionsToTxn or AddOffsetsToTxn of this id went unanswered in the capture (its answer lost,
    # or never sent) since the last end the broker accepted: the transaction may then be open and hold
    # what it asked for, which nothing later can be judged without.
    unanswered: bool = False

    def zombie_lane(self, producer_id: int, epoch: int) -> Lane:
        lane = self.zombies.get((producer_id, epoch))
        if lane is None:
            lane = self.zombies[(producer_id, epoch)] = Lane(self.transactional_id)
        return lane

    def lanes(self) -> list[Lane]:
        return [self, *self.zombies.values()]

    def is_superseded(self, producer_id: int, epoch: int) -> bool:
        """Whether (producer id, epoch) belongs to an instance a later one replaced."""
        if producer_id in self.superseded_pids:
            return True
        if epoch <= self.fenced_upto.get(producer_id, -1):
            return True
        cur = self.current
        return cur is not None and cur.producer_id == producer_id and epoch < cur.epoch


@fast_init
@frozen_dataclass(init=False)
class Accepted:
    """What a retry of an accepted batch is compared with."""

    last_seq: int
    offset: int | None
    conn: int
    answered_ts: float | None  # when the client could have had the answer


@slotted_dataclass
class PartitionSeq:
    """Sequence numbers of one producer id on one partition."""

    epoch: int
    next_seq: int | None  # None: not known yet (the capture began mid-stream)
    last_ts: float
    # base sequence -> the recently accepted batch that started there (the last RECENT_BATCHES, in
    # `order`: produce._advance keeps both).
    recent: dict[int, Accepted] = field(default_factory=dict)
    order: deque[int] = field(default_factory=deque)
    # Batches that got no answer: (base, last); the broker may have written them.
    unanswered: list[tuple[int, int]] = field(default_factory=list)


@slotted_dataclass
class AuditState:
    """Everything the fold knows. `keys`: the producer keys it owns (a Spark group: keys that share state,
    see ksniff.audit.keys.touched_keys); None: all. `key` names the group (CONTEXT_KEY for the group that
    reports capture gaps); a one-key state owns just that key."""

    config: AuditConfig
    key: str | None = None
    keys: frozenset[str] | None = None
    producers: dict[int, ProducerState] = field(default_factory=dict)
    txn_ids: dict[str, TxnIdState] = field(default_factory=dict)
    transactions: list[TxnRecord] = field(default_factory=list)
    sequences: dict[tuple[int, str, int], PartitionSeq] = field(default_factory=dict)
    # (group, topic, partition) -> last committed offset the broker accepted.
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    losses: dict[int, list[float]] = field(default_factory=dict)  # conn -> when bytes went missing
    unanswered: dict[int, list[Exchange]] = field(default_factory=dict)  # conn -> waiting for its end
    # (client, broker, api key, correlation id) -> (conn, request_ts): exchanges seen twice count once.
    seen: dict[tuple[str, str, int, int], tuple[int, float]] = field(default_factory=dict)
    seen_pruned_ts: float = 0.0
    cluster_txn_version: int | None = None  # transaction.version finalized feature, from ApiVersions
    first_ts: float | None = None
    last_ts: float | None = None
    emitted: list[Finding] = field(default_factory=list)  # every finding `step` returned, for `finish`
    # The partition logs (ksniff.audit.partlog): kept by the fold over every key, or by the group of the
    # context key in a partitioned run, which is given the exchanges they read (keys.is_log_event).
    logs: LogState | None = None
    # Clients whose InitProducerId was refused (ksniff.audit.idempotence): kept beside the logs.
    idempotence: IdempotenceWatch | None = None
    # What the partition logs are given of the rest of the audit (partlog.Context over `losses`), made
    # by the fold's first exchange for the logs.
    log_context: Any = None

    @classmethod
    def initial(
        cls, config: AuditConfig | None = None, key: str | None = None, keys: frozenset[str] | None = None
    ) -> AuditState:
        """A fresh state: over every key, over `key` alone, or over the group `key` of the keys `keys`."""
        if keys is None and key is not None:
            keys = frozenset((key,))
        whole = key is None or key == CONTEXT_KEY
        return cls(
            config=config or AuditConfig(),
            key=key,
            keys=keys,
            logs=LogState() if whole else None,
            idempotence=IdempotenceWatch() if whole else None,
        )

    def owns(self, key: str | None) -> bool:
        return key is not None and (self.keys is None or key in self.keys)

    def producer(self, producer_id: int, ts: float) -> ProducerState:
        p = self.producers.get(producer_id)
        if p is None:
            p = self.producers[producer_id] = ProducerState(producer_id, ts)
        return p

    def txn_id(self, transactional_id: str, ts: float) -> TxnIdState:
        t = self.txn_ids.get(transactional_id)
        if t is None:
            t = self.txn_ids[transactional_id] = TxnIdState(transactional_id, first_ts=ts)
        return t

    def lost_since(self, conns: set[int], since: float) -> bool:
        """Whether the capture lost bytes of any of `conns` at or after `since`."""
        return lost_in(self.losses, conns, since)
