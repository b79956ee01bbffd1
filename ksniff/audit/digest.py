"""What is said of an audit's findings and transactions without holding every one of them: a digest the
terminal report, the verdict and the counts read, made where an audit ran and merged anywhere.

The Spark engine's driver merges one digest per capture set (or per producer group of a shuffled set)
instead of receiving every finding and transaction. Its size follows the fleet's shape, not the length
of its traffic: findings are tallied per cause (ksniff.audit.groups.finding_cause) and capture set, so a
zombie retrying for an hour is one tally; transactions are counted, only the slowest few and those still
open kept whole, and their durations' spread (count, p50, p95, max) is taken from the durations, kept as
floats up to a bound (`DURATIONS_MERGED`; a part may keep fewer); past it, whoever merged the digest works
the spread out where the transactions are (the Spark engine asks its transactions table).

A digest of several parts is the digest of their joined lists (ksniff.result.join_results and
ksniff.audit.fold.merge_outputs sort findings by `finding_order` and transactions by `TXN_ORDER`, a
part's own lists already being in those orders): `Digest.merge(of(a), of(b)) == of(join(a, b))`, which
tests hold on the corpus.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import field
from typing import Any

from ksniff.audit.fold import finding_order
from ksniff.audit.groups import finding_cause
from ksniff.audit.model import Finding, Transaction, stamp
from ksniff.common.frozen import slotted_dataclass

DURATIONS_MERGED = 1 << 20  # durations a merged digest keeps (8 MiB); past it, their spread is asked for


def txn_order(t: Transaction) -> tuple:
    """The order every engine lists transactions in."""
    return (t.start_ts, t.transactional_id, t.producer_id or -1)


def is_takeover(f: Finding) -> bool:
    """A producer_fenced finding that names the instance that took over (a transactional id's story)."""
    return f.kind == "producer_fenced" and bool(f.transactional_id) and "new_producer_id" in f.evidence


@slotted_dataclass
class Tally:
    """The findings of one cause (ksniff.audit.groups.finding_cause) in one capture set: the first of
    them in audit order, how many, and the time of the last."""

    first: Finding
    count: int
    last_ts: float

    @property
    def cause(self) -> tuple:
        return finding_cause(self.first)


@slotted_dataclass
class FindingsDigest:
    """Findings as tallies, in the order of their first finding, and the takeovers (kept whole: one per
    instance that fenced another, which the stories list)."""

    tallies: list[Tally] = field(default_factory=list)
    takeovers: list[Finding] = field(default_factory=list)

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> FindingsDigest:
        """From findings in audit order (`finding_order`; any other order is taken by time, as
        ksniff.audit.groups.fold_findings takes it)."""
        tallies: dict[tuple, Tally] = {}
        takeovers = []
        for f in sorted(findings, key=_ts):
            key = (finding_cause(f), f.capture_set)
            t = tallies.get(key)
            if t is None:
                tallies[key] = Tally(f, 1, f.ts)
            else:
                t.count += 1
                if f.ts > t.last_ts:
                    t.last_ts = f.ts
            if is_takeover(f):
                takeovers.append(f)
        return cls(list(tallies.values()), takeovers)

    @classmethod
    def merge(cls, parts: Sequence[FindingsDigest]) -> FindingsDigest:
        """The parts' digests as one, as if their findings had been joined and sorted (ties: part order).
        Tallies of one cause in one capture set become one."""
        if len(parts) == 1:
            return parts[0]
        joined: dict[tuple, Tally] = {}
        for t in sorted((t for p in parts for t in p.tallies), key=lambda t: finding_order(t.first)):
            key = (t.cause, t.first.capture_set)
            mine = joined.get(key)
            if mine is None:
                joined[key] = Tally(t.first, t.count, t.last_ts)
            else:
                mine.count += t.count
                mine.last_ts = max(mine.last_ts, t.last_ts)
        takeovers = sorted((f for p in parts for f in p.takeovers), key=finding_order)
        return cls(list(joined.values()), takeovers)

    def groups(self) -> list[Tally]:
        """The tallies of one cause across capture sets as one (the report's and the JSON's groups fold
        repeats whatever their set), in the order of their first finding."""
        by_cause: dict[tuple, Tally] = {}
        for t in self.tallies:
            mine = by_cause.get(t.cause)
            if mine is None:
                by_cause[t.cause] = Tally(t.first, t.count, t.last_ts)
            else:
                mine.count += t.count
                mine.last_ts = max(mine.last_ts, t.last_ts)
        return list(by_cause.values())

    def counts(self) -> Counter:
        """How many findings of each (kind, severity)."""
        counts: Counter = Counter()
        for t in self.tallies:
            counts[t.first.kind, t.first.severity] += t.count
        return counts

    def unverified(self) -> int:
        """How many findings rest on bytes the capture lost (or on clocks it cannot order)."""
        return sum(t.count for t in self.tallies if t.first.evidence.get("unverified"))


@slotted_dataclass
class TransactionsDigest:
    """Transactions counted by outcome; per transactional id, its outcomes and when each of its
    instances began one; the durations of the ended ones, sorted (None: not kept, `spread` then says what
    the report reads of them: ended, p50, p95, max); the slowest ended ones (at most `slowest_kept`,
    None: all) and every one still open, in list order."""

    count: int = 0
    outcomes: Counter = field(default_factory=Counter)
    story_outcomes: dict[str, Counter] = field(default_factory=dict)
    began: dict[tuple, float] = field(default_factory=dict)  # (txn id, pid, epoch) -> first start
    durations: Any = field(default_factory=lambda: array("d"))  # or None: more than were kept
    slowest: list[Transaction] = field(default_factory=list)
    still_open: list[Transaction] = field(default_factory=list)
    slowest_kept: int | None = None
    spread: tuple[int, float, float, float] | None = None

    @classmethod
    def of(
        cls, transactions: Sequence[Transaction], slowest: int | None = None, durations: int | None = None
    ) -> TransactionsDigest:
        """From transactions in list order (`txn_order`); their durations kept if there are at most
        `durations` (None: any number), else left for whoever merges the digest to find (`spread`)."""
        d = cls(count=len(transactions), slowest_kept=slowest)
        ended = []
        for t in transactions:
            d.outcomes[t.outcome] += 1
            if t.transactional_id:
                mine = d.story_outcomes.get(t.transactional_id)
                if mine is None:
                    mine = d.story_outcomes[t.transactional_id] = Counter()
                mine[t.outcome] += 1
                if t.producer_id is not None and t.producer_epoch is not None:
                    key = (t.transactional_id, t.producer_id, t.producer_epoch)
                    if key not in d.began or t.start_ts < d.began[key]:
                        d.began[key] = t.start_ts
            if t.end_ts is not None:
                ended.append(t)
            if t.outcome == "open":
                d.still_open.append(t)
        kept = durations is None or len(ended) <= durations
        d.durations = array("d", sorted(t.end_ts - t.start_ts for t in ended)) if kept else None
        d.slowest = _slowest(ended, slowest)
        return d

    @classmethod
    def merge(cls, parts: Sequence[TransactionsDigest]) -> TransactionsDigest:
        if len(parts) == 1:
            return parts[0]
        kept = [p.slowest_kept for p in parts]
        keep = None if None in kept else min(kept)
        d = cls(count=sum(p.count for p in parts), slowest_kept=keep)
        for p in parts:
            d.outcomes.update(p.outcomes)
            for txn_id, counts in p.story_outcomes.items():
                d.story_outcomes.setdefault(txn_id, Counter()).update(counts)
            for key, ts in p.began.items():
                if key not in d.began or ts < d.began[key]:
                    d.began[key] = ts
        kept = [p.durations for p in parts]
        if None in kept or sum(map(len, kept)) > DURATIONS_MERGED:
            d.durations = None
        else:
            d.durations = array("d", sorted(x for ds in kept for x in ds))
        d.slowest = _slowest(sorted((t for p in parts for t in p.slowest), key=txn_order), keep)
        d.still_open = sorted((t for p in parts for t in p.still_open), key=txn_order)
        return d

    def slowest_first(self) -> list[Transaction]:
        """The ended transactions kept, the longest first (of equal durations, the later listed first)."""
        return sorted(self.slowest, key=_duration)[::-1]


def _ts(f: Finding) -> float:
    return f.ts


def _duration(t: Transaction) -> float:
    return t.end_ts - t.start_ts


def _slowest(ended: list[Transaction], keep: int | None) -> list[Transaction]:
    """The `keep` longest of `ended` (all with None), in their list order."""
    if keep is None or len(ended) <= keep:
        return list(ended)
    position = {id(t): n for n, t in enumerate(ended)}
    chosen = sorted(ended, key=_duration)[::-1][:keep]
    return sorted(chosen, key=lambda t: position[id(t)])


@slotted_dataclass
class Digest:
    """An audit's findings and transactions as the report reads them (see the module's words)."""

    findings: FindingsDigest = field(default_factory=FindingsDigest)
    transactions: TransactionsDigest = field(default_factory=TransactionsDigest)

    @classmethod
    def of(
        cls,
        findings: Iterable[Finding],
        transactions: Sequence[Transaction],
        slowest: int | None = None,
        durations: int | None = None,
    ) -> Digest:
        return cls(FindingsDigest.of(findings), TransactionsDigest.of(transactions, slowest, durations))

    @classmethod
    def merge(cls, parts: Sequence[Digest]) -> Digest:
        return cls(
            FindingsDigest.merge([p.findings for p in parts]),
            TransactionsDigest.merge([p.transactions for p in parts]),
        )

    def stamp(self, capture_set: int, cluster: str | None) -> None:
        """Label what it holds with its capture set and cluster (ksniff.audit.model.stamp): a digest of one
        set, made before the run numbered its sets."""
        stamp([t.first for t in self.findings.tallies], capture_set, cluster)
        stamp(self.findings.takeovers, capture_set, cluster)
        stamp(self.transactions.slowest, capture_set, cluster)
        stamp(self.transactions.still_open, capture_set, cluster)
