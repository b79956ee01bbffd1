"""Each partition's log as the wire shows it, and what consumers were given from it.

Produce answers say at which offset each acknowledged batch was written; Fetch answers say what is
actually at each offset (batch headers: producer id, epoch, sequence range, transactional or control);
EndTxn answers and COMMIT/ABORT markers say how each transaction ended. Folded together per
topic-partition, they give the log as known: who wrote which offsets, in which transaction, where its
marker is, who read it. Findings come from disagreements:

- `aborted_read`: a read_committed Fetch answer gave records of a transaction that aborted, without an
  aborted-transaction entry telling the consumer to skip them (critical: the consumer hands them out);
- `uncommitted_read`: a read_committed answer gave records of a transaction still open when it was sent
  (at or above the answer's own last stable offset, or ended by an EndTxn sent after the answer) that
  later committed, or whose end the capture never shows (warning: isolation broken, data not lost);
- `lost_write`: an acknowledged batch (acks -1 or 1) is not what a Fetch answer that read past its
  offset returns there (critical);
- `duplicate_write`: the same producer id, epoch and sequence range at two offsets of the partition, one
  of them returned by a Fetch answer (critical: consumers read it twice);
- `torn_transaction`: a transactional Produce sent before its transaction's EndTxn was written after
  the EndTxn was answered, so it lands in the producer's next transaction or in none (critical when
  accepted; under transaction.version 2 the epoch bump makes the broker refuse it, which is `info`);
- `offset_commit_past_end`: a group committed an offset past the end of the log as seen (every offset
  fetched or acknowledged, every high watermark): the records written there later are skipped;
- `fetch_position_backwards` / `fetch_position_skip`: a consumer's next Fetch of a partition on one
  connection asks from before / after the end of what its previous answer gave, with no ListOffsets,
  OffsetFetch or error in between to explain it;
- `hanging_partition`: Fetch answers kept the partition's last stable offset at one offset below the
  high watermark for longer than the transaction timeout (of the producer whose open data sits there,
  when its InitProducerId was seen, else --txn-timeout), with no marker for that producer there: a
  transaction the coordinator never ended holds back every read_committed consumer (KIP-664) (warning).

Anything that rests on bytes the capture lost is unverified and never critical. Memory is bounded: per
partition at most MAX_BATCHES placed batches (the oldest forgotten first, and counted), and counters
for everything else, so that gigabytes of Fetch traffic cost a few counters per partition.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable
from dataclasses import field
from typing import Any

from ksniff.audit.codes import FENCING_ERRORS, error_name
from ksniff.audit.findings import exchange_evidence, judge, make
from ksniff.audit.keys import LOG_APIS  # noqa: E402,F401 - the exchanges folded here
from ksniff.audit.model import Finding, FindingKind, PartitionSummary, Severity
from ksniff.common.codegen import fast_init
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass
from ksniff.common.sources import made
from ksniff.decode.events import (
    ISOLATION_LEVELS,
    Exchange,
    FetchedPartition,
    ProducedBatch,
    RecordBatchHeader,
    made_by_position,
)

MAX_BATCHES = 100_000  # placed batches remembered per partition
MAX_PENDING = 10_000  # reads waiting for their transaction's outcome, per partition
MAX_POSITIONS = 100_000  # (connection, partition) read positions followed
MAX_TIMEOUTS = 100_000  # transactional ids whose transaction timeout is remembered

# The finding kinds this module makes (their names and meanings: FindingKind, docs/contract.md).
KINDS = (
    ABORTED_READ := FindingKind.ABORTED_READ.value,
    UNCOMMITTED_READ := FindingKind.UNCOMMITTED_READ.value,
    LOST_WRITE := FindingKind.LOST_WRITE.value,
    DUPLICATE_WRITE := FindingKind.DUPLICATE_WRITE.value,
    TORN_TRANSACTION := FindingKind.TORN_TRANSACTION.value,
    OFFSET_COMMIT_PAST_END := FindingKind.OFFSET_COMMIT_PAST_END.value,
    FETCH_POSITION_BACKWARDS := FindingKind.FETCH_POSITION_BACKWARDS.value,
    FETCH_POSITION_SKIP := FindingKind.FETCH_POSITION_SKIP.value,
    HANGING_PARTITION := FindingKind.HANGING_PARTITION.value,
)


# What a placed batch keeps of the Produce that wrote it, once acknowledged. Not the batch and its
# exchange themselves: held by every placed batch (up to MAX_BATCHES a partition), they kept every Produce
# exchange of a producer-only capture alive to the end of the run, request bodies and all (13,200
# transactions: 40 MiB of the run's peak, and ~0.1 s of CPU to make room for them and free them).


@fast_init
@frozen_dataclass(init=False)
class AckedBatch:
    """The fields of the acknowledged ProducedBatch that the lost_write finding, the log's rows and the
    hanging-partition check read, by the same names."""

    ts: float
    response_ts: float | None
    client: str
    acks: int
    unverified: bool


@fast_init
@frozen_dataclass(init=False)
class AckedExchange:
    """The fields of the acknowledging Produce exchange that `exchange_evidence` and `Context.lost` read,
    by the same names; `response` is True when the exchange had a response (its body is not kept), else
    None."""

    conn: int
    client: str
    broker: str
    api_name: str
    api_version: int
    correlation_id: int
    client_id: str | None
    response: bool | None
    request_ts: float
    unverified: bool


def acked_exchange(ex: Exchange) -> AckedExchange:
    return _ACKED_EXCHANGE(
        ex.conn,
        ex.client,
        ex.broker,
        ex.api_name,
        ex.api_version,
        ex.correlation_id,
        ex.client_id,
        True if ex.response is not None else None,
        ex.request_ts,
        ex.unverified,
    )


@slotted_dataclass
class Placed:
    """One batch at its offsets, as acknowledged (Produce answer) and/or as fetched (Fetch answer). Its
    fields hold numbers, text, None and the acknowledgement records only: it is made untracked by the
    cyclic collector (`_PLACED`), which is right only while nothing it holds can refer back to it."""

    base: int
    last: int
    producer_id: int
    epoch: int
    sequence: int
    transactional: bool
    control: str | None  # "COMMIT"/"ABORT" for a marker
    transactional_id: str | None = None
    acked: AckedBatch | None = None  # the Produce batch that wrote it, when its answer was captured
    acked_ex: AckedExchange | None = None  # and its exchange
    fetched_ts: float | None = None  # the first Fetch answer that returned it
    fetched_by: str | None = None
    outcome: str | None = None  # commit | abort, once a marker or EndTxn says
    outcome_key: Any = None  # which end: ("marker", offset) or ("endtxn", producer id, epoch, time)
    outcome_ts: float | None = None  # when that end was requested (EndTxn) or first seen (marker)

    def same(self, h: RecordBatchHeader) -> bool:
        return (self.producer_id, self.epoch, self.sequence, self.last - self.base) == (
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.last_offset_delta,
        )

    @property
    def records(self) -> int:
        return self.last - self.base + 1


@slotted_dataclass
class Read:
    """A read_committed consumer given a transactional batch whose transaction had not ended yet."""

    ts: float
    response_ts: float | None
    client: str
    client_id: str | None
    conn: int
    lso: int
    high_watermark: int
    above_lso: bool
    unverified: bool
    ex: Exchange


@slotted_dataclass
class Reader:
    """Counters of one client reading one partition at one isolation level."""

    client: str
    client_id: str | None
    isolation: int
    fetches: int = 0
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    next_offset: int | None = None


@slotted_dataclass
class Position:
    """Where a consumer's next Fetch of a partition on one connection should ask from."""

    expected: int
    answered_ts: float


@slotted_dataclass
class ProducerOnPartition:
    """One producer's writes to one partition as the partition's log shows them."""

    producer_id: int
    transactional_id: str | None = None
    epochs: set[int] = field(default_factory=set)
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    first_sequence: int | None = None
    last_sequence: int | None = None


@slotted_dataclass
class PartitionLog:
    """The batches one partition's log is known to hold, by base offset, and who wrote them."""

    topic: str
    partition: int
    at: dict[int, Placed] = field(default_factory=dict)  # base offset -> batch
    acked_bases: list[int] = field(default_factory=list)  # sorted base offsets of acknowledged batches
    by_sequence: dict[tuple[int, int, int, int], int] = field(default_factory=dict)  # -> base offset
    open_txn: dict[int, list[int]] = field(default_factory=dict)  # producer id -> unresolved data bases
    markers: dict[int, list[int]] = field(default_factory=dict)  # producer id -> sorted marker offsets
    pending: dict[int, list[Read]] = field(default_factory=dict)  # base -> reads awaiting its outcome
    pending_count: int = 0
    reported: set[tuple] = field(default_factory=set)  # one finding per (kind, reader, transaction)
    producers: dict[int, ProducerOnPartition] = field(default_factory=dict)
    readers: dict[tuple[str, int], Reader] = field(default_factory=dict)
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    end: int = 0  # one past the highest offset known to hold something
    fetch_answers: int = 0
    fetched_batches: int = 0
    fetched_records: int = 0
    acked_batches: int = 0
    acked_records: int = 0
    commit_markers: int = 0
    abort_markers: int = 0
    aborted_entries: int = 0  # aborted-transaction entries in Fetch answers
    forgotten: int = 0  # placed batches dropped to stay within MAX_BATCHES
    # The last stable offset while Fetch answers hold it below the high watermark (-1: not held): since
    # when, until when, in how many answers, the high watermark last given, who read it read_committed.
    held_at: int = -1
    held_since: float = 0.0
    held_until: float = 0.0
    held_answers: int = 0
    held_hw: int = -1
    held_readers: list[str] = field(default_factory=list)

    def place(self, p: Placed) -> Placed:
        self.at[p.base] = p
        if len(self.at) > MAX_BATCHES:
            self.forget_oldest()
        if p.last + 1 > self.end:
            self.end = p.last + 1
        return p

    def forget_oldest(self) -> None:
        """Drop the batch placed first, past MAX_BATCHES."""
        oldest = next(iter(self.at))
        del self.at[oldest]
        self.forgotten += 1
        i = bisect.bisect_left(self.acked_bases, oldest)
        if i < len(self.acked_bases) and self.acked_bases[i] == oldest:
            del self.acked_bases[i]

    def producer(self, p: Placed) -> None:
        # Once per batch placed: comparisons rather than min() and max() (a call each).
        if p.producer_id < 0 or p.control:
            return
        s = self.producers.get(p.producer_id)
        if s is None:
            s = self.producers[p.producer_id] = ProducerOnPartition(p.producer_id)
        if not s.transactional_id:
            s.transactional_id = p.transactional_id
        s.epochs.add(p.epoch)
        base, last = p.base, p.last
        s.batches += 1
        s.records += last - base + 1
        if s.first_offset is None or base < s.first_offset:
            s.first_offset = base
        if s.last_offset is None or last > s.last_offset:
            s.last_offset = last
        sequence = p.sequence
        if sequence >= 0:
            last_seq = sequence + last - base
            if s.first_sequence is None or sequence < s.first_sequence:
                s.first_sequence = sequence
            if s.last_sequence is None or last_seq > s.last_sequence:
                s.last_sequence = last_seq


@slotted_dataclass
class TxnWrite:
    """An accepted transactional batch, kept until its transaction's EndTxn."""

    log: PartitionLog
    base: int | None  # None when refused
    response_ts: float | None
    request_ts: float
    ex: Exchange
    batch: ProducedBatch


@slotted_dataclass
class LogState:
    """Every partition log of a run, and what the fold keeps beside them: open transactional writes,
    consumer positions, topic names, transaction timeouts."""

    logs: dict[tuple[str, int], PartitionLog] = field(default_factory=dict)
    # (producer id, epoch) -> accepted transactional batches since its last EndTxn
    txn_writes: dict[tuple[int, int], list[TxnWrite]] = field(default_factory=dict)
    txn_ids: dict[int, str] = field(default_factory=dict)  # producer id -> transactional id
    tv2_pids: set[int] = field(default_factory=set)  # producer ids seen ending with EndTxn v5
    positions: dict[tuple[int, str, int], Position] = field(default_factory=dict)
    # (client ip, client id, topic, partition) -> last ListOffsets/OffsetFetch answer time
    resets: dict[tuple[str, str | None, str, int], float] = field(default_factory=dict)
    # topic id (as text) -> name, from Metadata answers: a decoder that did not see the Metadata (another
    # connection's, in a partitioned run) names topics of Fetch v13+ and Produce v13+ by id
    names: dict[str, str] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)  # transactional id -> its InitProducerId's timeout
    # (n, k): this state keeps only the partitions whose index is k modulo n, one of n folds of a run's
    # logs (the Spark engine's, n up to SPLIT_MAX); None: every partition.
    split: tuple[int, int] | None = None

    def name(self, topic: str) -> str:
        return self.names.get(topic, topic) if self.names else topic

    def mine(self, partition: int) -> bool:
        """Whether this state keeps the partitions numbered `partition` (see `split`)."""
        split = self.split
        return split is None or partition % split[0] == split[1]

    def log(self, topic: str, partition: int) -> PartitionLog:
        topic = self.name(topic)
        key = (topic, partition)
        lg = self.logs.get(key)
        if lg is None:
            lg = self.logs[key] = PartitionLog(topic, partition)
        return lg


def lost_in(losses: dict[int, list[float]], conns: set[int], since: float) -> bool:
    """Whether `losses` (connection -> when the capture lost its bytes) has any of `conns` at or after
    `since`."""
    return any(ts >= since for c in conns for ts in losses.get(c, ()))


SPLIT_MAX = 64  # folds a run's logs are split into at most (LogState.split)


def learn_txn_ids(st: LogState, pairs: Iterable[tuple[int, str]]) -> None:
    """What a transactional Produce tells every partition's fold (`_on_produce`): whose producer ids are
    whose, as (producer id, transactional id) pairs, for the folds that do not keep its partitions."""
    for pid, tid in pairs:
        st.txn_ids[pid] = tid


def txn_id_pairs(ex: Exchange) -> tuple[tuple[int, str], ...]:
    """The pairs `_on_produce` learns from Produce `ex` (see `learn_txn_ids`)."""
    return tuple(
        (b.header.producer_id, b.transactional_id)
        for b in ex.batches
        if b.transactional_id and b.header.producer_id >= 0 and b.header.crc_ok is not False
    )


def topic_names(ex: Exchange) -> tuple[tuple[str, str], ...]:
    """What a Metadata answer tells the logs: (topic id as text, name) of each topic it names by both."""
    if ex.response is None:
        return ()
    pairs = []
    for t in ex.response.topics or ():
        topic_id = getattr(t, "topic_id", None)
        if topic_id is not None and topic_id.int and t.name:
            pairs.append((str(topic_id), t.name))
    return tuple(pairs)


def learn_names(st: LogState, pairs: Iterable[tuple[str, str]]) -> None:
    """Topic names by id, from a Metadata answer (`topic_names`)."""
    for topic_id, name in pairs:
        st.names[topic_id] = name


class Context:
    """What the handlers need from the rest of the audit: where bytes went missing (the audit's
    connection -> times table, read as it grows). Made once per audit: it holds the table, not the
    audit's state, so that the state never refers to itself (a cycle would keep the whole state alive
    until a full collection)."""

    __slots__ = ("losses",)

    def __init__(self, losses: dict[int, list[float]]) -> None:
        self.losses = losses

    def lost_since(self, conns: set[int], since: float) -> bool:
        return lost_in(self.losses, conns, since)

    def lost(self, ex: Exchange) -> bool:
        return ex.unverified or lost_in(self.losses, {ex.conn}, ex.request_ts)


# -- the fold ---------------------------------------------------------------------------------------------

# The records made per acknowledged batch, by position: in C when the compiled body reader is built
# (ksniff.decode.events.made_by_position), else by their classes. A placed batch and its acknowledgement
# records are kept for the whole run and hold only numbers, text and each other (never anything that
# refers back to them): made without the cyclic collector's tracking.
_ACKED_BATCH = made_by_position(AckedBatch, untracked=True)
_ACKED_EXCHANGE = made_by_position(AckedExchange, untracked=True)
_PLACED = made_by_position(Placed, untracked=True)
_TXN_WRITE = made_by_position(TxnWrite)


def on_exchange(st: LogState, ex: Exchange, out: list[Finding], ctx: Context) -> None:
    api = ex.api_name
    if ex.request is None:
        return
    if api == "Produce":
        _on_produce(st, ex, out, ctx)
    elif api == "Fetch":
        if st.split is None:
            for part in ex.fetched:
                _on_fetched(st, ex, part, out, ctx)
        else:
            for part in ex.fetched:
                if st.mine(part.partition):
                    _on_fetched(st, ex, part, out, ctx)
    elif api == "EndTxn":
        _on_end_txn(st, ex, out, ctx)
    elif api == "WriteTxnMarkers":
        _on_markers_written(st, ex, out, ctx)
    elif api in ("OffsetCommit", "TxnOffsetCommit"):
        _on_commit(st, ex, out, ctx)
    elif api in ("ListOffsets", "OffsetFetch"):
        _on_reset(st, ex)
    elif api == "InitProducerId":
        req = ex.request
        if req.transactional_id and req.transaction_timeout_ms > 0 and len(st.timeouts) < MAX_TIMEOUTS:
            st.timeouts[req.transactional_id] = req.transaction_timeout_ms
    elif api == "Metadata":
        learn_names(st, topic_names(ex))


def _on_produce(st: LogState, ex: Exchange, out: list[Finding], ctx: Context) -> None:
    # Once per batch of every Produce: the partition's log found, and the batch placed in it, inline
    # (`LogState.log`, `PartitionLog.place`).
    txn_ids = st.txn_ids
    split = st.split
    head = None  # the exchange as placed batches keep it, made for its first acknowledged batch
    for b in ex.batches:
        h = b.header
        if h.crc_ok is False:  # not the bytes sent: nothing in it is placed or learnt (the connection's
            continue  # ConnectionLost before the exchange says so: ksniff.decode.connection.damage)
        pid = h.producer_id
        tid = b.transactional_id
        code = b.error_code
        if tid and pid >= 0:
            txn_ids[pid] = tid
        if split is not None and b.partition % split[0] != split[1]:
            continue  # another fold's partition: only its producer's transactional id is learnt
        if tid and pid >= 0:
            if code in FENCING_ERRORS:  # kept to tell a late write an epoch bump refused
                st.txn_writes.setdefault((pid, h.producer_epoch), []).append(
                    TxnWrite(st.log(b.topic, b.partition), None, ex.response_ts, ex.request_ts, ex, b)
                )
        base = b.base_offset
        if base is None or code != 0 or b.acks == 0 or h.control:
            continue
        topic = st.names.get(b.topic, b.topic) if st.names else b.topic
        key = (topic, b.partition)
        lg = st.logs.get(key)
        if lg is None:
            lg = st.logs[key] = PartitionLog(topic, b.partition)
        delta = h.last_offset_delta
        lg.acked_batches += 1
        lg.acked_records += delta + 1
        at = lg.at
        old = at.get(base)
        if head is None:
            head = acked_exchange(ex)
        acked = _ACKED_BATCH(b.ts, b.response_ts, b.client, b.acks, b.unverified)
        # every field of Placed, by position (the last five as their defaults)
        p = _PLACED(
            base,
            base + delta,
            pid,
            h.producer_epoch,
            h.base_sequence,
            h.transactional,
            None,
            tid,
            acked,
            head,
            None,
            None,
            None,
            None,
            None,
        )
        if old is not None and old.fetched_ts is not None:
            if not old.same(h):
                _lost(lg, p, old, ex, out, ctx)
            old.acked, old.acked_ex, old.transactional_id = acked, head, tid
            p = old
        else:
            at[base] = p
            if len(at) > MAX_BATCHES:
                lg.forget_oldest()
            if base + delta + 1 > lg.end:
                lg.end = base + delta + 1
            if pid >= 0:
                lg.producer(p)
                if p.sequence >= 0:
                    by_sequence = lg.by_sequence
                    by_sequence.setdefault((pid, p.epoch, p.sequence, delta), base)
                    if len(by_sequence) > MAX_BATCHES:  # bounded as the fetched batches' entries are
                        del by_sequence[next(iter(by_sequence))]
        bases = lg.acked_bases
        if not bases or base > bases[-1]:
            bases.append(base)  # bisect.insort, where an offset past the last goes
        else:
            bisect.insort(bases, base)
        if h.transactional and pid >= 0:
            if p.outcome is None and old is None:
                lg.open_txn.setdefault(pid, []).append(base)
            st.txn_writes.setdefault((pid, h.producer_epoch), []).append(
                _TXN_WRITE(lg, base, ex.response_ts, ex.request_ts, ex, b)
            )


def _on_fetched(st: LogState, ex: Exchange, part: FetchedPartition, out: list[Finding], ctx: Context) -> None:
    lg = st.log(part.topic, part.partition)
    lg.fetch_answers += 1
    consumer = part.replica_id < 0
    key = (part.conn, lg.topic, part.partition)
    asked = part.fetch_offset
    position = st.positions.get(key)
    if asked is None and position is not None:
        asked = position.expected  # an incremental session re-asks from where it stood
    if consumer and part.fetch_offset is not None and position is not None:
        _check_position(st, lg, part, position, out, ctx)
    if part.error_code != 0:
        st.positions.pop(key, None)
        return
    for h in part.batches:
        if h.crc_ok is False and not h.control:  # not the bytes sent (connection.damage): none of the
            st.positions.pop(key, None)  # answer is read, and the consumer's position is not known
            return  # again until it next asks
    if part.high_watermark > lg.high_watermark:
        lg.high_watermark = part.high_watermark
    if part.last_stable_offset >= 0:
        lg.last_stable_offset = part.last_stable_offset
        _held(lg, part)
    if part.log_start_offset >= 0:
        lg.log_start_offset = part.log_start_offset
    if part.high_watermark > lg.end:
        lg.end = part.high_watermark
    batches = part.batches
    aborted = part.aborted or ()
    lg.aborted_entries += len(aborted)
    reader = None
    if consumer:
        rkey = (part.client, part.isolation_level)
        reader = lg.readers.get(rkey)
        if reader is None:
            reader = lg.readers[rkey] = Reader(part.client, part.client_id, part.isolation_level)
        reader.fetches += 1
    read_committed = consumer and part.isolation_level == 1
    lost = None  # ctx.lost(ex), asked only for a batch a read_committed consumer reads
    next_offset = asked
    for h in batches:
        lg.fetched_batches += 1
        n = h.last_offset_delta + 1
        lg.fetched_records += n
        if h.crc_ok is not None:
            next_offset = h.base_offset + n
        p = _see_batch(st, lg, h, part, out, ctx)
        if reader is not None and not h.control:
            if reader.first_offset is None or h.base_offset < reader.first_offset:
                reader.first_offset = h.base_offset
            reader.batches += 1
            reader.records += n
        if read_committed and h.transactional and not h.control and h.producer_id >= 0:
            if any(pid == h.producer_id and first <= h.base_offset for pid, first in aborted):
                continue  # the broker told the consumer to skip it
            if lost is None:
                lost = ctx.lost(ex)
            _read_committed(lg, p, h, part, ex, out, lost)
    if reader is not None and next_offset is not None:
        reader.next_offset = next_offset
    if consumer and next_offset is not None:
        if position is not None:  # still the key's (only an error, above, lets it go): moved on in place
            position.expected, position.answered_ts = next_offset, part.response_ts or part.ts
        else:
            if len(st.positions) >= MAX_POSITIONS:
                st.positions.pop(next(iter(st.positions)))
            st.positions[key] = Position(next_offset, part.response_ts or part.ts)
    if batches and part.fetch_offset is not None:
        _check_acked_range(lg, part, ex, out, ctx)


def _see_batch(
    st: LogState,
    lg: PartitionLog,
    h: RecordBatchHeader,
    part: FetchedPartition,
    out: list[Finding],
    ctx: Context,
) -> Placed:
    old = lg.at.get(h.base_offset)
    if old is not None:
        if old.fetched_ts is None:
            old.fetched_ts, old.fetched_by = part.response_ts or part.ts, part.client
        if old.acked is None or old.same(h):
            return old
        # not what was acknowledged there (in this answer, whatever earlier ones said): the write was
        # lost, and what is there is judged as found
        found = Placed(
            h.base_offset,
            h.base_offset + h.last_offset_delta,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.transactional,
            h.control_type if h.control else None,
            st.txn_ids.get(h.producer_id),
            fetched_ts=old.fetched_ts,
            fetched_by=part.client,
        )
        _lost(lg, old, found, part, out, ctx)
        p = found
    else:
        p = lg.place(
            Placed(
                h.base_offset,
                h.base_offset + h.last_offset_delta,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.transactional,
                h.control_type if h.control else None,
                st.txn_ids.get(h.producer_id),
                fetched_ts=part.response_ts or part.ts,
                fetched_by=part.client,
            )
        )
        if h.control:
            _marker(st, lg, p, part, out, ctx)
            return p
        lg.producer(p)
    if h.control:
        return p
    if h.producer_id >= 0 and h.base_sequence >= 0:
        skey = (h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
        other = lg.by_sequence.get(skey)
        if other is None:
            lg.by_sequence[skey] = h.base_offset
            if len(lg.by_sequence) > MAX_BATCHES:
                del lg.by_sequence[next(iter(lg.by_sequence))]
        elif other != h.base_offset:
            _duplicate(lg, p, other, part, out, ctx)
    if h.transactional and h.producer_id >= 0 and p.outcome is None:
        marker = _marker_above(lg, h.producer_id, h.base_offset)
        if marker is not None:  # its transaction's marker was read before it was
            m = lg.at.get(marker)
            if m is not None and m.control in ("COMMIT", "ABORT"):
                p.outcome = "commit" if m.control == "COMMIT" else "abort"
                p.outcome_key, p.outcome_ts = ("marker", marker), m.fetched_ts
                return p
        lg.open_txn.setdefault(h.producer_id, []).append(h.base_offset)
    return p


def _marker_above(lg: PartitionLog, producer_id: int, offset: int) -> int | None:
    """The first marker of the producer id after `offset`: the end of the transaction holding it."""
    offsets = lg.markers.get(producer_id)
    if not offsets:
        return None
    i = bisect.bisect_right(offsets, offset)
    return offsets[i] if i < len(offsets) else None


# -- transaction outcomes ---------------------------------------------------------------------------------


def _marker(
    st: LogState, lg: PartitionLog, m: Placed, part: FetchedPartition, out: list[Finding], ctx: Context
) -> None:
    if m.control == "COMMIT":
        lg.commit_markers += 1
    elif m.control == "ABORT":
        lg.abort_markers += 1
    else:
        return
    outcome = "commit" if m.control == "COMMIT" else "abort"
    bisect.insort(lg.markers.setdefault(m.producer_id, []), m.base)
    bases = lg.open_txn.get(m.producer_id)
    if not bases:
        return
    before = _marker_below(lg, m.producer_id, m.base)
    ending = [b for b in bases if before < b < m.base]
    lg.open_txn[m.producer_id] = [b for b in bases if not before < b < m.base]
    for base in ending:
        _resolve(lg, base, outcome, ("marker", m.base), m.fetched_ts, out)


def _marker_below(lg: PartitionLog, producer_id: int, offset: int) -> int:
    offsets = lg.markers.get(producer_id, ())
    i = bisect.bisect_left(offsets, offset)
    return offsets[i - 1] if i > 0 else -1


def _on_end_txn(st: LogState, ex: Exchange, out: list[Finding], ctx: Context) -> None:
    req, resp = ex.request, ex.response
    if resp is None or resp.error_code != 0:
        return
    pid, epoch = req.producer_id, req.producer_epoch
    st.txn_ids[pid] = req.transactional_id
    if ex.api_version >= 5:
        st.tv2_pids.add(pid)
    outcome = "commit" if req.committed else "abort"
    writes = st.txn_writes.pop((pid, epoch), [])
    later = []
    answered, asked = ex.response_ts, ex.request_ts
    key = ("endtxn", pid, epoch, asked)
    for w in writes:
        if w.response_ts is not None and answered is not None and w.response_ts > answered:
            if w.request_ts < asked:
                _torn(st, w, ex, out, ctx)
            if w.base is not None:
                later.append(w)  # written after this end: it belongs to whatever comes next
            continue
        base = w.base
        if base is None:
            continue  # refused in time: nothing was written
        lg = w.log
        bases = lg.open_txn.get(pid)
        if bases and base in bases:
            bases.remove(base)
        _resolve(lg, base, outcome, key, asked, out)
    if later:
        st.txn_writes[(pid, epoch)] = later


def _on_markers_written(st: LogState, ex: Exchange, out: list[Finding], ctx: Context) -> None:
    """WriteTxnMarkers (coordinator to leader), where captured: an accepted marker ends the producer's
    transaction on each partition it names."""
    if ex.response is None:
        return
    ok = {
        (m.producer_id, t.name, p.partition_index)
        for m in ex.response.markers
        for t in m.topics
        for p in t.partitions
        if p.error_code == 0
    }
    for m in ex.request.markers:
        outcome = "commit" if m.transaction_result else "abort"
        for t in m.topics:
            for index in t.partition_indexes:
                if (m.producer_id, t.name, index) not in ok or not st.mine(index):
                    continue
                lg = st.log(t.name, index)
                for base in lg.open_txn.pop(m.producer_id, []):
                    _resolve(
                        lg,
                        base,
                        outcome,
                        ("marker-request", m.producer_id, ex.request_ts),
                        ex.request_ts,
                        out,
                    )


def _resolve(
    lg: PartitionLog, base: int, outcome: str, key: Any, ts: float | None, out: list[Finding]
) -> None:
    p = lg.at.get(base)
    if p is not None and p.outcome is None:
        p.outcome, p.outcome_key, p.outcome_ts = outcome, key, ts
    if not lg.pending:
        return  # no read waits for an outcome (the usual case for a producer-only capture)
    reads = lg.pending.pop(base, None)
    if not reads:
        return
    lg.pending_count -= len(reads)
    for r in reads:
        open_when_read = _open_when_read(r, key, ts)
        if outcome == "abort":
            _aborted_read(lg, p, r, key, open_when_read, out)
        elif open_when_read:
            _uncommitted_read(lg, p, r, key, "commit", out)


def _open_when_read(r: Read, key: Any, ts: float | None) -> bool:
    """Whether the transaction was still open when the answer was sent: the answer says so (records at or
    above its last stable offset), its marker was not yet in the log (at or past the answer's high
    watermark), or its EndTxn was sent after the answer arrived. When a marker was first seen says
    nothing of when it was written."""
    if r.above_lso:
        return True
    if key is not None and key[0] == "marker":
        return r.high_watermark >= 0 and key[1] >= r.high_watermark
    return ts is not None and r.response_ts is not None and ts > r.response_ts


def _held(lg: PartitionLog, part: FetchedPartition) -> None:
    """Follows how long Fetch answers keep the last stable offset at one offset below the high watermark."""
    lso, hw, t = part.last_stable_offset, part.high_watermark, part.response_ts or part.ts
    if lso >= hw:
        lg.held_at = -1
        return
    if lso != lg.held_at:
        lg.held_at, lg.held_since, lg.held_answers = lso, t, 0
        lg.held_readers = []
    lg.held_until, lg.held_hw = t, hw
    lg.held_answers += 1
    if part.isolation_level == 1 and part.replica_id < 0 and len(lg.held_readers) < 8:
        who = part.client_id or part.client
        if who not in lg.held_readers:
            lg.held_readers.append(who)


def _hanging(st: LogState, lg: PartitionLog, default_ms: int, out: list[Finding]) -> None:
    """hanging_partition, when the last answers held the last stable offset past the timeout."""
    if lg.held_at < 0:
        return
    p = lg.at.get(lg.held_at)
    start, timeout_ms, source = lg.held_since, default_ms, "--txn-timeout"
    tid = None
    if p is not None and p.transactional and not p.control and p.producer_id >= 0:
        tid = p.transactional_id or st.txn_ids.get(p.producer_id)
        if _marker_above(lg, p.producer_id, p.base) is not None:
            return  # its marker is there: the offset is held for another reason
        written = [t for t in (p.acked.ts if p.acked else None, p.fetched_ts) if t is not None]
        start = min([start] + written)
        own = st.timeouts.get(tid) if tid is not None else None
        if own:
            timeout_ms, source = own, "InitProducerId"
    if (lg.held_until - start) * 1000 <= timeout_ms:
        return
    who = (
        f" of producer id {p.producer_id} epoch {p.epoch}" + (f" ({tid!r})" if tid else "")
        if p is not None and p.producer_id >= 0
        else ""
    )
    evidence = {
        "last_stable_offset": lg.held_at,
        "high_watermark": lg.held_hw,
        "held_since_ts": lg.held_since,
        "held_until_ts": lg.held_until,
        "fetch_answers": lg.held_answers,
        "timeout_ms": timeout_ms,
        "timeout_from": source,
        "read_committed_readers": list(lg.held_readers),
    }
    out.append(
        make_kind(
            HANGING_PARTITION,
            Severity.WARNING,
            lg.held_until,
            f"{lg.topic}-{lg.partition}: last stable offset held at {lg.held_at} "
            f"(high watermark {lg.held_hw}) for {lg.held_until - start:.1f} s, past the {timeout_ms} ms "
            f"transaction timeout, by a transaction{who} that no marker ended: read_committed consumers get "
            "nothing past it",
            evidence,
            transactional_id=tid,
            producer_id=p.producer_id if p is not None and p.producer_id >= 0 else None,
            producer_epoch=p.epoch if p is not None and p.producer_id >= 0 else None,
            topic=lg.topic,
            partition=lg.partition,
        )
    )


def finish(st: LogState, out: list[Finding], default_timeout_ms: int = 60000) -> None:
    """End of capture: reads of transactions whose end never showed are uncommitted reads; partitions held
    past the transaction timeout are hanging (the producer's own timeout when its InitProducerId was seen,
    else `default_timeout_ms`). Leaves `st` as it was (the live view finishes more than once)."""
    for lg in st.logs.values():
        _hanging(st, lg, default_timeout_ms, out)
    for lg in st.logs.values():
        if not lg.pending:
            continue
        reported = lg.reported
        lg.reported = set(reported)
        try:
            for base, reads in lg.pending.items():
                p = lg.at.get(base)
                for r in reads:
                    _uncommitted_read(lg, p, r, ("open", p.producer_id if p else None, base), None, out)
        finally:
            lg.reported = reported


def _read_committed(
    lg: PartitionLog,
    p: Placed,
    h: RecordBatchHeader,
    part: FetchedPartition,
    ex: Exchange,
    out: list[Finding],
    lost: bool,
) -> None:
    above = part.last_stable_offset >= 0 and h.base_offset >= part.last_stable_offset
    r = Read(
        part.ts,
        part.response_ts,
        part.client,
        part.client_id,
        part.conn,
        part.last_stable_offset,
        part.high_watermark,
        above,
        lost,
        ex,
    )
    if p.outcome == "abort":
        _aborted_read(lg, p, r, p.outcome_key, _open_when_read(r, p.outcome_key, p.outcome_ts), out)
        return
    if p.outcome == "commit":
        if above:
            _uncommitted_read(lg, p, r, p.outcome_key, "commit", out)
        return
    if lg.pending_count >= MAX_PENDING:
        return
    lg.pending.setdefault(h.base_offset, []).append(r)
    lg.pending_count += 1


# -- findings ---------------------------------------------------------------------------------------------


def _who(p: Placed | None) -> dict[str, Any]:
    if p is None:
        return {}
    return {
        "transactional_id": p.transactional_id,
        "producer_id": p.producer_id if p.producer_id >= 0 else None,
        "producer_epoch": p.epoch if p.producer_id >= 0 else None,
    }


def _first_time(lg: PartitionLog, key: tuple) -> bool:
    if key in lg.reported:
        return False
    lg.reported.add(key)
    return True


def _read_evidence(lg: PartitionLog, p: Placed | None, r: Read, txn: Any) -> dict[str, Any]:
    evidence = exchange_evidence(r.ex)
    evidence.update(
        client=r.client,
        client_id=r.client_id,
        isolation_level="read_committed",
        first_offset=p.base if p else None,
        last_offset=p.last if p else None,
        base_sequence=p.sequence if p else None,
        last_stable_offset=r.lso,
        transaction_end=_txn_text(txn),
    )
    return evidence


def _txn_text(key: Any) -> str | None:
    if key is None:
        return None
    if key[0] == "marker":
        return f"marker at offset {key[1]}"
    if key[0] == "endtxn":
        return "EndTxn answered"
    if key[0] == "marker-request":
        return "WriteTxnMarkers answered"
    return "never seen"


def _aborted_read(
    lg: PartitionLog, p: Placed | None, r: Read, txn: Any, open_when_read: bool, out: list[Finding]
) -> None:
    pid = p.producer_id if p else None
    if not _first_time(lg, (ABORTED_READ, r.client, pid, txn)):
        return
    evidence = _read_evidence(lg, p, r, txn)
    evidence["open_when_read"] = open_when_read
    where = f"{lg.topic}-{lg.partition}"
    when = " while the transaction was still open" if open_when_read else ""
    out.append(
        make_kind(
            ABORTED_READ,
            judge(0, unverified=r.unverified, explained_by_loss=False),
            r.ts,
            f"read_committed consumer {r.client} ({r.client_id!r}) was given records of an aborted "
            f"transaction of producer id {pid} on {where} (offset {p.base if p else '?'}){when}, "
            "with no aborted-transaction entry to skip them",
            evidence,
            unverified=r.unverified,
            topic=lg.topic,
            partition=lg.partition,
            **_who(p),
        )
    )


def _uncommitted_read(
    lg: PartitionLog, p: Placed | None, r: Read, txn: Any, outcome: str | None, out: list[Finding]
) -> None:
    pid = p.producer_id if p else None
    if not _first_time(lg, (UNCOMMITTED_READ, r.client, pid, txn)):
        return
    evidence = _read_evidence(lg, p, r, txn)
    evidence.update(above_last_stable_offset=r.above_lso, outcome=outcome or "unknown")
    severity = Severity.INFO if r.unverified else Severity.WARNING
    later = "committed later" if outcome == "commit" else "whose end the capture does not show"
    out.append(
        make_kind(
            UNCOMMITTED_READ,
            severity,
            r.ts,
            f"read_committed consumer {r.client} ({r.client_id!r}) was given records of a transaction "
            f"of producer id {pid} on {lg.topic}-{lg.partition} (offset {p.base if p else '?'}) "
            f"before it ended ({later}; last stable offset {r.lso})",
            evidence,
            unverified=r.unverified,
            topic=lg.topic,
            partition=lg.partition,
            **_who(p),
        )
    )


def _lost(
    lg: PartitionLog, acked: Placed, found: Placed | None, seen: Any, out: list[Finding], ctx: Context
) -> None:
    """The batch acknowledged at acked.base is not what a Fetch answer returns there."""
    if not _first_time(lg, (LOST_WRITE, acked.base)):
        return
    b, ex = acked.acked, acked.acked_ex
    fetch_ex = seen if isinstance(seen, Exchange) else None
    lost = (
        (b is not None and b.unverified)
        or (ex is not None and ctx.lost(ex))
        or bool(getattr(seen, "unverified", False))
    )
    evidence = exchange_evidence(ex) if ex is not None else {}
    evidence.update(
        offset=acked.base,
        acked_last_offset=acked.last,
        acked_base_sequence=acked.sequence,
        acks=b.acks if b else None,
        acked_ts=b.response_ts if b else None,
    )
    if found is None:
        evidence["found"] = None
        what = "nothing"
    else:
        evidence["found"] = {
            "producer_id": found.producer_id,
            "producer_epoch": found.epoch,
            "base_sequence": found.sequence,
            "last_offset": found.last,
            "control": found.control,
        }
        what = (
            f"a marker ({found.control})"
            if found.control
            else f"producer id {found.producer_id} epoch {found.epoch} sequence {found.sequence}"
        )
    if fetch_ex is None and hasattr(seen, "client"):
        evidence["read_by"] = seen.client
    severity = judge(0, unverified=lost, explained_by_loss=False)
    out.append(
        make_kind(
            LOST_WRITE,
            severity,
            acked.acked.ts if acked.acked else acked.base,
            f"batch of producer id {acked.producer_id} (sequence {acked.sequence}) acknowledged at "
            f"{lg.topic}-{lg.partition} offset {acked.base} is not in the log read back: a Fetch "
            f"answer has {what} there",
            evidence,
            unverified=lost,
            topic=lg.topic,
            partition=lg.partition,
            **_who(acked),
        )
    )


def _check_acked_range(
    lg: PartitionLog, part: FetchedPartition, ex: Exchange, out: list[Finding], ctx: Context
) -> None:
    """Acknowledged batches inside the range a Fetch answer read through must be in it."""
    whole = [h for h in part.batches if h.crc_ok is not None]
    if not whole or not lg.acked_bases:
        return
    low = max(part.fetch_offset, whole[0].base_offset, part.log_start_offset)
    high = whole[-1].base_offset
    i = bisect.bisect_left(lg.acked_bases, low)
    if i >= len(lg.acked_bases) or lg.acked_bases[i] > high:
        return
    present = {h.base_offset for h in part.batches}
    for base in lg.acked_bases[i : bisect.bisect_right(lg.acked_bases, high)]:
        if base in present:
            continue
        acked = lg.at.get(base)
        if acked is None or acked.acked is None:
            continue
        if any(h.base_offset < base <= h.base_offset + h.last_offset_delta for h in whole):
            continue  # inside another batch: judged by its base (a mismatch is found there)
        _lost(lg, acked, None, part, out, ctx)


def _duplicate(
    lg: PartitionLog, p: Placed, other: int, part: FetchedPartition, out: list[Finding], ctx: Context
) -> None:
    first, second = sorted((other, p.base))
    if not _first_time(lg, (DUPLICATE_WRITE, p.producer_id, p.epoch, p.sequence)):
        return
    # The other place known only from a Produce answer (whose offset no CRC covers), at or past the end
    # of the log this Fetch answer reports: what the answer said is contradicted, not a second copy.
    theirs = lg.at.get(other)
    beyond = theirs is not None and theirs.fetched_ts is None and 0 <= part.high_watermark <= other
    lost = part.unverified or beyond or ctx.lost_since({part.conn}, part.ts)
    evidence = {
        "offsets": [first, second],
        "base_sequence": p.sequence,
        "last_sequence": p.sequence + p.last - p.base,
        "records": p.records,
        "client": part.client,
        "client_id": part.client_id,
        "conn": part.conn,
        "api": f"Fetch v{part.api_version}",
        "correlation_id": part.correlation_id,
        "broker": part.broker,
    }
    out.append(
        make_kind(
            DUPLICATE_WRITE,
            judge(0, unverified=lost, explained_by_loss=beyond),
            part.ts,
            f"producer id {p.producer_id} epoch {p.epoch} sequences {p.sequence}-"
            f"{p.sequence + p.last - p.base} are in {lg.topic}-{lg.partition} twice, at offsets "
            f"{first} and {second}: consumers read them twice",
            evidence,
            unverified=lost,
            topic=lg.topic,
            partition=lg.partition,
            **_who(p),
        )
    )


def _torn(st: LogState, w: TxnWrite, end: Exchange, out: list[Finding], ctx: Context) -> None:
    """A transactional Produce sent before its transaction's EndTxn and answered after it: written, it
    lands in the next transaction or in none; refused by a transaction.version 2 epoch bump, it did not."""
    b = w.batch
    h = b.header
    tv2 = end.api_version >= 5 or h.producer_id in st.tv2_pids
    lost = ctx.lost(w.ex) or ctx.lost(end)
    evidence = exchange_evidence(w.ex, b.error_code)
    evidence.update(
        produce_request_ts=w.request_ts,
        produce_answer_ts=w.response_ts,
        end_txn_request_ts=end.request_ts,
        end_txn_answer_ts=end.response_ts,
        end_txn=("commit" if end.request.committed else "abort"),
        offset=w.base,
        base_sequence=h.base_sequence,
        transaction_version_2=tv2,
    )
    where = (
        f"{b.transactional_id!r} (producer id {h.producer_id} epoch {h.producer_epoch}) to {w.log.topic}-"
        f"{w.log.partition}, sent before its transaction's EndTxn"
    )
    if w.base is None:
        severity = Severity.INFO if tv2 else judge(b.error_code, unverified=lost, explained_by_loss=False)
        message = (
            f"Produce of {where}, arrived after the EndTxn was answered and was refused "
            f"({error_name(b.error_code)})"
            + (": the transaction.version 2 epoch bump kept it out of the next transaction" if tv2 else "")
        )
    else:
        severity = judge(0, unverified=lost, explained_by_loss=False)
        message = (
            f"Produce of {where}, was written at offset {w.base} after the EndTxn was answered: it lands "
            "in the producer's next transaction or in none"
            + (" (although transaction.version 2 bumps the epoch at every end)" if tv2 else "")
        )
    out.append(
        make_kind(
            TORN_TRANSACTION,
            severity,
            w.request_ts,
            message,
            evidence,
            unverified=lost,
            transactional_id=b.transactional_id,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            topic=w.log.topic,
            partition=w.log.partition,
        )
    )


# -- consumers and groups ---------------------------------------------------------------------------------


def _check_position(
    st: LogState, lg: PartitionLog, part: FetchedPartition, pos: Position, out: list[Finding], ctx: Context
) -> None:
    asked, expected = part.fetch_offset, pos.expected
    if asked == expected or part.ts < pos.answered_ts:
        return  # as expected, or sent before the previous answer came (overlapping fetches)
    ip = part.client.rsplit(":", 1)[0]
    reset = st.resets.get((ip, part.client_id, lg.topic, part.partition))
    if reset is not None and reset >= pos.answered_ts:
        return  # a ListOffsets or OffsetFetch answer since: a reset or a seek to a committed offset
    if asked > expected and 0 <= expected < part.log_start_offset:
        return  # retention removed what lay between
    backwards = asked < expected
    kind = FETCH_POSITION_BACKWARDS if backwards else FETCH_POSITION_SKIP
    lost = part.unverified or ctx.lost_since({part.conn}, pos.answered_ts)
    evidence = {
        "client": part.client,
        "client_id": part.client_id,
        "conn": part.conn,
        "broker": part.broker,
        "api": f"Fetch v{part.api_version}",
        "correlation_id": part.correlation_id,
        "isolation_level": ISOLATION_LEVELS.get(part.isolation_level, str(part.isolation_level)),
        "expected_offset": expected,
        "fetch_offset": asked,
    }
    what = (
        f"went back from {expected} to {asked}: it reads {expected - asked} offsets again"
        if backwards
        else f"skipped from {expected} to {asked}: {asked - expected} offsets it was never given"
    )
    out.append(
        make_kind(
            kind,
            Severity.INFO if lost else Severity.WARNING,
            part.ts,
            f"consumer {part.client} ({part.client_id!r}) reading {lg.topic}-{lg.partition} {what}, "
            "with no reset, seek answer or error in between",
            evidence,
            unverified=lost,
            topic=lg.topic,
            partition=lg.partition,
        )
    )


def _on_reset(st: LogState, ex: Exchange) -> None:
    resp = ex.response
    if resp is None:
        return
    ip = ex.client.rsplit(":", 1)[0]
    ts = ex.response_ts or ex.request_ts
    if ex.api_name == "ListOffsets":
        for t in resp.topics:
            for p in t.partitions:
                st.resets[(ip, ex.client_id, t.name, p.partition_index)] = ts
                if p.error_code == 0 and p.offset > 0 and st.mine(p.partition_index):
                    lg = st.log(t.name, p.partition_index)
                    # the latest offset a broker lists is its high watermark (or LSO) at the time
                    lg.high_watermark = max(lg.high_watermark, p.offset)
                    lg.end = max(lg.end, p.offset)
        return
    topics = [t for g in resp.groups for t in g.topics] if resp.groups else resp.topics
    for t in topics:
        for p in t.partitions:
            st.resets[(ip, ex.client_id, _topic_of(st, t), p.partition_index)] = ts


def _topic_of(st: LogState, t: Any) -> str:
    """A topic's name in a body that names it, or identifies it by id (OffsetCommit/OffsetFetch v10)."""
    name = getattr(t, "name", None)
    if name:
        return name
    return st.name(str(getattr(t, "topic_id", "")))


def _on_commit(st: LogState, ex: Exchange, out: list[Finding], ctx: Context) -> None:
    req, resp = ex.request, ex.response
    if resp is None:
        return
    answers = {(_topic_of(st, t), p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    transactional = ex.api_name == "TxnOffsetCommit"
    member = req.member_id if not transactional else getattr(req, "member_id", "")
    generation = req.generation_id_or_member_epoch if not transactional else req.generation_id
    admin = not transactional and generation < 0 and not member
    for t in req.topics:
        for p in t.partitions:
            topic = _topic_of(st, t)
            answer = answers.get((topic, p.partition_index))
            lg = st.logs.get((topic, p.partition_index))
            # Judged only where a broker told the end of the log (a high watermark in a Fetch answer, an
            # offset listed): acknowledged writes alone cannot say that nobody else wrote more.
            if answer is None or lg is None or lg.high_watermark < 0 or p.committed_offset <= lg.end:
                continue
            lost = ctx.lost(ex)
            rejected = Severity.INFO if answer != 0 else Severity.WARNING
            severity = (
                Severity.WARNING
                if admin and answer == 0
                else judge(answer, unverified=lost, explained_by_loss=False, rejected=rejected)
            )
            evidence = exchange_evidence(ex, answer)
            evidence.update(
                committed_offset=p.committed_offset,
                log_end=lg.end,
                high_watermark=lg.high_watermark,
                skipped=p.committed_offset - lg.end,
                member_id=member,
                generation=generation,
                admin=admin,
            )
            out.append(
                make_kind(
                    OFFSET_COMMIT_PAST_END,
                    severity,
                    ex.request_ts,
                    f"group {req.group_id!r} committed {topic}-{p.partition_index} at offset "
                    f"{p.committed_offset}, past the end of the log as seen ({lg.end}): records "
                    f"written at {lg.end}-{p.committed_offset - 1} will be skipped; "
                    + ("broker accepted it" if answer == 0 else f"broker answered {error_name(answer)}"),
                    evidence,
                    unverified=lost,
                    group=req.group_id,
                    topic=topic,
                    partition=p.partition_index,
                    transactional_id=req.transactional_id if transactional else None,
                )
            )


def make_kind(kind: str, severity: Severity, ts: float, message: str, evidence: dict, **where) -> Finding:
    return make(FindingKind(kind), severity, ts, message, evidence, **where)


# -- what the report shows ----------------------------------------------------------------------------------

LOG_ROWS = 2000  # batches per partition in the summary's `log` (the first ones, in offset order)


def log_row(p: Placed) -> dict[str, Any]:
    """One batch of a partition's log: its offsets, who wrote it, its transaction, how it is known."""
    kind = p.control or ("transactional" if p.transactional else "data")
    b = p.acked
    return {
        "first_offset": p.base,
        "last_offset": p.last,
        "kind": kind,
        "producer_id": p.producer_id if p.producer_id >= 0 else None,
        "producer_epoch": p.epoch if p.producer_id >= 0 else None,
        "base_sequence": p.sequence if p.sequence >= 0 else None,
        "transactional_id": p.transactional_id,
        "outcome": p.outcome,
        "acked": b is not None,
        "acked_by": b.client if b else None,
        "acks": b.acks if b else None,
        "fetched": p.fetched_ts is not None,
        "first_read_by": p.fetched_by,
    }


def summaries(st: LogState) -> tuple[PartitionSummary, ...]:
    rows = []
    for (topic, partition), lg in sorted(st.logs.items()):
        at = lg.at  # keyed by each batch's base offset: sorting the keys sorts the batches
        placed = [at[base] for base in sorted(at)]
        producers = tuple(
            {
                "producer_id": s.producer_id,
                "transactional_id": s.transactional_id,
                "epochs": sorted(s.epochs),
                "batches": s.batches,
                "records": s.records,
                "first_offset": s.first_offset,
                "last_offset": s.last_offset,
                "first_sequence": s.first_sequence,
                "last_sequence": s.last_sequence,
            }
            for s in sorted(lg.producers.values(), key=lambda s: (s.first_offset or 0, s.producer_id))
        )
        readers = tuple(
            {
                "client": r.client,
                "client_id": r.client_id,
                "isolation_level": ISOLATION_LEVELS.get(r.isolation, str(r.isolation)),
                "fetches": r.fetches,
                "batches": r.batches,
                "records": r.records,
                "first_offset": r.first_offset,
                "next_offset": r.next_offset,
            }
            for r in sorted(lg.readers.values(), key=lambda r: (r.client, r.isolation))
        )
        rows.append(
            PartitionSummary(
                topic=topic,
                partition=partition,
                high_watermark=lg.high_watermark if lg.high_watermark >= 0 else None,
                last_stable_offset=lg.last_stable_offset if lg.last_stable_offset >= 0 else None,
                log_start_offset=lg.log_start_offset if lg.log_start_offset >= 0 else None,
                end_offset=lg.end,
                acked_batches=lg.acked_batches,
                acked_records=lg.acked_records,
                fetch_answers=lg.fetch_answers,
                fetched_batches=lg.fetched_batches,
                fetched_records=lg.fetched_records,
                commit_markers=lg.commit_markers,
                abort_markers=lg.abort_markers,
                aborted_entries=lg.aborted_entries,
                forgotten=lg.forgotten,
                producers=producers,
                readers=readers,
                log=tuple(log_row(p) for p in placed[:LOG_ROWS]),
                log_truncated=max(0, len(placed) - LOG_ROWS),
            )
        )
    return tuple(rows)


def _compiled_on_produce(python: Any = _on_produce) -> Any:
    """`_on_produce` in C (ksniff.audit._steps.Placing, when built): the same steps on the same objects,
    `python` (the function above) the reference it is held to (tests/audit/test_steps.py) and what runs
    for anything of other classes; None without the compiled module."""
    from ksniff.decode.events import Exchange, ProducedBatch, RecordBatchHeader

    classes = {
        "LogState": LogState,
        "Exchange": Exchange,
        "ProducedBatch": ProducedBatch,
        "RecordBatchHeader": RecordBatchHeader,
        "PartitionLog": PartitionLog,
        "Placed": Placed,
        "ProducerOnPartition": ProducerOnPartition,
    }
    makers = {
        "Placed": _PLACED,
        "AckedBatch": _ACKED_BATCH,
        "AckedExchange": _ACKED_EXCHANGE,
        "TxnWrite": _TXN_WRITE,
        "ProducerOnPartition": ProducerOnPartition,
        "PartitionLog": PartitionLog,
    }
    placing = made(
        "ksniff.audit._steps", "Placing", python, classes, makers, FENCING_ERRORS, sys.modules[__name__]
    )
    return None if placing is None else placing.on_produce


# Each Produce exchange's batches placed in their logs (`on_exchange`): in C when built.
_on_produce_python = _on_produce
_on_produce = _compiled_on_produce() or _on_produce_python
