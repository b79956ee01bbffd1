"""The whole result of one run, as the report room renders and exports it (docs/contract.md).

Every engine assembles it through `AuditResult.of_run`, so the engines cannot differ in what a result
holds or in the order of its tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import field
from operator import itemgetter
from typing import Any

from ksniff.audit.digest import Digest, FindingsDigest
from ksniff.audit.groups import fold_findings, group_contract
from ksniff.audit.model import AuditOutput, Finding, PartitionSummary, ProducerSummary, Transaction, stamp
from ksniff.capture.events import CaptureStats, InputInfo
from ksniff.common.frozen import slotted_dataclass
from ksniff.common.version import VERSION as __version__
from ksniff.decode.events import DecodeStats


@slotted_dataclass
class AuditResult:
    """A run's whole result: inputs, counters, the audit's output, warnings and tables."""

    inputs: list[InputInfo]
    capture: CaptureStats
    decode: DecodeStats
    producers: list[ProducerSummary]
    transactions: list[Transaction]
    findings: list[Finding]
    # Table rows for the exports, built incrementally by ksniff.report.tables (lists of dicts, sorted by ts).
    exchanges: list[dict] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    engine: str = "local"
    version: str = __version__
    warnings: list[str] = field(default_factory=list)  # damage reported for a partial result
    records: list[dict] | None = None  # rows of the `records` table; None unless --records asked for them
    filters: dict = field(default_factory=dict)  # what --severity, --kind, --since... kept (report.filters)
    capture_sets: list[Any] = field(default_factory=list)  # ksniff.engine.sets.CaptureSet, in order
    clusters: list[dict] = field(default_factory=list)  # the JSON document's `clusters` rows
    # Each topic-partition's log as the wire showed it, who wrote and who read it (ksniff.audit.partlog).
    partitions: list[PartitionSummary] = field(default_factory=list)
    # A Spark run's summary for the terminal (ksniff.engine.spark): the digest of its findings and
    # transactions, which the driver then does not hold (both lists are empty). None: the lists are whole.
    digest: Digest | None = None

    @classmethod
    def of_run(
        cls,
        engine: str,
        *,
        inputs: Iterable[InputInfo],
        capture: CaptureStats,
        decode: DecodeStats,
        output: AuditOutput,
        warnings: Iterable[str],
        exchanges: Iterable[dict] = (),
        batches: Iterable[dict] = (),
        records: list[dict] | None = None,
    ) -> AuditResult:
        """The result of a finished run: the audit's output, the counters, and the table rows (put in
        time order here; rows of equal time keep the order the engine gave them)."""
        by_ts = itemgetter("ts")
        return cls(
            inputs=list(inputs),
            capture=capture,
            decode=decode,
            producers=list(output.producers),
            transactions=list(output.transactions),
            findings=list(output.findings),
            exchanges=sorted(exchanges, key=by_ts),
            batches=sorted(batches, key=by_ts),
            engine=engine,
            warnings=list(warnings),
            records=records,
            partitions=list(output.partitions),
        )

    def account(self) -> Digest:
        """The findings and transactions as the report reads them (ksniff.audit.digest): the digest a
        Spark run's driver merged, else one made from the lists."""
        if self.digest is not None:
            return self.digest
        return Digest.of(self.findings, self.transactions)

    def _findings_account(self) -> FindingsDigest:
        return self.digest.findings if self.digest is not None else FindingsDigest.of(self.findings)

    def as_contract(self) -> dict:
        if self.digest is not None:
            raise ValueError("a summary that holds only the digest of its findings has no JSON document")
        return {
            "version": self.version,
            "inputs": [
                {
                    "path": i.path,
                    "format": i.format,
                    "linktype": i.linktype,
                    "packets": i.packets,
                    "bytes": i.bytes,
                }
                for i in self.inputs
            ],
            # addition: with named ports (-p), the other ports whose connections looked like Kafka
            "capture": {**self.capture.as_contract(), "kafka_elsewhere": self.kafka_elsewhere()},
            "decode": self.decode.as_contract(),
            "producers": [p.as_contract() for p in self.producers],
            "transactions": [t.as_contract() for t in self.transactions],
            "findings": [f.as_contract() for f in self.findings],
            # additions to the original contract (docs/contract.md): which engine ran, and the damage a
            # partial result reports
            "engine": self.engine,
            "warnings": list(self.warnings),
            # additions: the verdict a script reads (clean, findings, or unverified and why), the counts by
            # severity and kind, and repeated findings folded with their count and times
            "summary": self.summary(),
            "filters": dict(self.filters),
            "finding_groups": [group_contract(g) for g in fold_findings(self.findings)],
            # additions for capture sets and cluster identity (README: "Capture sets and clusters")
            "capture_sets": [c.as_contract() for c in self.capture_sets],
            "clusters": [dict(c) for c in self.clusters],
            # each topic-partition's log as seen (ksniff.audit.partlog)
            "partitions": [p.as_contract() for p in self.partitions],
        }

    def kafka_elsewhere(self) -> list[dict]:
        """With named ports only: the other ports whose connections' first request and response looked like
        Kafka (not audited), most bytes first: `{port, connections, bytes}`."""
        late = self.capture.kafka_elsewhere_bytes
        rows = [
            {"port": port, "connections": c.connections, "bytes": c.bytes + late.get(port, 0)}
            for port, c in self.decode.kafka_elsewhere.items()
        ]
        return sorted(rows, key=lambda r: (-r["bytes"], r["port"]))

    def unverified_because(self, findings: FindingsDigest | None = None) -> list[str]:
        """Why a run without findings cannot be called clean: what it could not see or read. `findings`:
        their digest, when the caller has it."""
        cap, dec = self.capture, self.decode
        reasons = []
        if not cap.kafka_connections:
            reasons.append("no Kafka traffic was decoded: nothing was audited")
        elsewhere = self.kafka_elsewhere()
        if elsewhere:
            ports = ", ".join(str(r["port"]) for r in elsewhere[:5]) + (", ..." if len(elsewhere) > 5 else "")
            reasons.append(
                f"{_count(sum(r['connections'] for r in elsewhere), 'connection')} on other ports "
                f"({ports}) looked like Kafka and were not audited"
            )
        if cap.gaps:
            reasons.append(
                f"the capture lost {_count(cap.gap_bytes, 'byte')} of Kafka connections "
                f"({_count(cap.gaps, 'gap')})"
            )
        for n, what in (
            (cap.kernel_drops, "packet dropped by the kernel"),
            (cap.dropped_by_limits, "segment dropped by memory limits"),
            (dec.errors, "malformed frame or body"),
            (dec.unmatched_responses, "answer whose request the capture did not read"),
            (dec.oversized_frames, "frame over the size limit, skipped"),
        ):
            if n:
                reasons.append(_count(n, what))
        account = findings or self._findings_account()
        corrupt = sum(n for (kind, _), n in account.counts().items() if kind == "corrupt_batch")
        if corrupt:
            batches = "1 record batch fails its" if corrupt == 1 else f"{corrupt:,} record batches fail their"
            reasons.append(f"{batches} CRC-32C in the capture (damaged bytes)")
        unverified = account.unverified()
        if unverified:
            rest = "rests" if unverified == 1 else "rest"
            reasons.append(f"{_count(unverified, 'finding')} {rest} on bytes the capture lost")
        return reasons

    def summary(self) -> dict:
        """`verdict`: `findings` (a warning or critical finding), else `unverified` (see
        `unverified_because`), else `clean`; then the findings counted by severity and by kind."""
        by_severity = {"critical": 0, "warning": 0, "info": 0}
        by_kind: dict[str, dict[str, int]] = {}
        findings = self._findings_account()
        for (kind, severity), n in findings.counts().items():
            by_severity[severity] = by_severity.get(severity, 0) + n
            by_kind.setdefault(kind, {})[severity] = n
        reasons = self.unverified_because(findings)
        serious = by_severity["critical"] + by_severity["warning"]
        verdict = "findings" if serious else "unverified" if reasons else "clean"
        return {
            "verdict": verdict,
            "unverified_because": reasons,
            "findings": by_severity,
            "findings_by_kind": dict(sorted(by_kind.items())),
        }


def _count(n: int, what: str) -> str:
    """`1 gap`, `2 gaps`, `2 malformed frames or bodies`: the noun (the first word, or the one after an
    adjective) takes the plural."""
    if n == 1:
        return f"{n:,} {what}"
    words = what.split(" ")
    at = 1 if words[0] == "malformed" else 0
    words[at] = words[at] + "s"
    if words[at + 1 : at + 3] == ["or", "body"]:
        words[at + 2] = "bodies"
    return f"{n:,} " + " ".join(words)


def stamp_set(result: AuditResult, cset: Any, identity: Any) -> None:
    """Make `result` one capture set's: its producers, transactions, findings and partition logs labelled
    with the set and, when the set's answers named exactly one cluster, that cluster; its `capture_sets`
    and `clusters` from what the run learnt."""
    from dataclasses import replace

    ids = identity.cluster_ids
    result.capture_sets = [replace(cset, cluster_ids=tuple(dict.fromkeys((*cset.cluster_ids, *ids))))]
    cluster = ids[0] if len(ids) == 1 else None
    for items in (result.producers, result.transactions, result.findings, result.partitions):
        stamp(items, cset.number, cluster)
    if result.digest is not None:
        result.digest.stamp(cset.number, cluster)
    rows = []
    for info in identity.clusters():
        rows.append(
            {
                "id": info.cluster_id,
                "capture_set": cset.number,
                "inputs": list(cset.paths),
                "brokers": [b.as_contract() for b in info.brokers],
                "coordinators": [{"kind": k, "key": key, "node_id": n} for k, key, n in info.coordinators],
                "connections": [{"broker": a, "node_id": n} for a, n in info.connections],
            }
        )
    result.clusters = rows


def join_results(
    results: Sequence[AuditResult], sets: Sequence[Any], files: Sequence[str], engine: str
) -> AuditResult:
    """One result from the results of several capture sets (each audited on its own): counters summed,
    rows joined in the order a single run lists them, inputs in the order given."""
    from ksniff.audit.fold import finding_order, producer_order
    from ksniff.common.counters import add_counters

    if len(results) == 1:
        return results[0]
    capture, decode = CaptureStats(), DecodeStats(by_api={})
    for r in results:
        add_counters(capture, r.capture)
        add_counters(decode, r.decode)
    position = {p: i for i, p in enumerate(files)}
    inputs = sorted((i for r in results for i in r.inputs), key=lambda i: position.get(i.path, len(position)))
    records = None
    by_ts = itemgetter("ts")
    if any(r.records is not None for r in results):
        records = sorted((row for r in results for row in r.records or ()), key=by_ts)
    return AuditResult(
        inputs=inputs,
        capture=capture,
        decode=decode,
        producers=sorted((p for r in results for p in r.producers), key=producer_order),
        transactions=sorted(
            (t for r in results for t in r.transactions),
            key=lambda t: (t.start_ts, t.transactional_id, t.producer_id or -1),
        ),
        findings=sorted((f for r in results for f in r.findings), key=finding_order),
        partitions=sorted(
            (p for r in results for p in r.partitions),
            key=lambda p: (p.topic, p.partition, p.capture_set or 0),
        ),
        exchanges=sorted((row for r in results for row in r.exchanges), key=by_ts),
        batches=sorted((row for r in results for row in r.batches), key=by_ts),
        engine=engine,
        warnings=[w for r in results for w in r.warnings],
        records=records,
        capture_sets=list(sets),
        clusters=[c for r in results for c in r.clusters],
        digest=Digest.merge([r.digest for r in results]) if results and results[0].digest else None,
    )
