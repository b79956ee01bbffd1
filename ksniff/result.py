"""The whole result of one run, as the report room renders and exports it (docs/contract.md).

Every engine assembles it through `AuditResult.of_run`, so the engines cannot differ in what a result
holds or in the order of its tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter

from ksniff import __version__
from ksniff.audit.model import AuditOutput, Finding, ProducerSummary, Transaction
from ksniff.capture.events import CaptureStats, InputInfo
from ksniff.decode.events import DecodeStats


@dataclass(slots=True)
class AuditResult:
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

    @classmethod
    def of_run(cls, engine: str, *, inputs: Iterable[InputInfo], capture: CaptureStats, decode: DecodeStats,
               output: AuditOutput, warnings: Iterable[str], exchanges: Iterable[dict] = (),
               batches: Iterable[dict] = (), records: list[dict] | None = None) -> AuditResult:
        """The result of a finished run: the audit's output, the counters, and the table rows (put in
        time order here; rows of equal time keep the order the engine gave them)."""
        by_ts = itemgetter("ts")
        return cls(inputs=list(inputs), capture=capture, decode=decode, producers=list(output.producers),
                   transactions=list(output.transactions), findings=list(output.findings),
                   exchanges=sorted(exchanges, key=by_ts), batches=sorted(batches, key=by_ts),
                   engine=engine, warnings=list(warnings), records=records)

    def as_contract(self) -> dict:
        return {
            "version": self.version,
            "inputs": [
                {"path": i.path, "format": i.format, "linktype": i.linktype, "packets": i.packets,
                 "bytes": i.bytes}
                for i in self.inputs
            ],
            "capture": self.capture.as_contract(),
            "decode": self.decode.as_contract(),
            "producers": [p.as_contract() for p in self.producers],
            "transactions": [t.as_contract() for t in self.transactions],
            "findings": [f.as_contract() for f in self.findings],
            # additions to the original contract (docs/contract.md): which engine ran, and the damage a
            # partial result reports
            "engine": self.engine,
            "warnings": list(self.warnings),
        }
