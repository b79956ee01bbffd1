"""Building findings: the severity a broker's answer implies, and the evidence every finding carries.

Severity (docs/contract.md): `critical` where the broker accepted an anomaly that may lose, duplicate or
expose data; `warning` where the broker caught it (rejected) or the answer is unknown; `info` for context. A
finding that rests on bytes the capture lost carries `evidence.unverified = true` and is never critical:
it drops to `info` where the lost bytes could explain it entirely (a missing batch behind a sequence gap,
a lost AddPartitionsToTxn behind an "unregistered" write), else to `warning`.
"""

from __future__ import annotations

from typing import Any

from ksniff.audit.codes import error_name
from ksniff.audit.model import Finding, FindingKind, Severity
from ksniff.decode.events import Exchange, ProducedBatch


def judge(
    answer: int | None,
    *,
    unverified: bool,
    explained_by_loss: bool,
    accepted: Severity = Severity.CRITICAL,
    rejected: Severity = Severity.WARNING,
) -> Severity:
    """The severity of an anomalous request given the broker's answer (0 accepted, None no answer)."""
    severity = accepted if answer == 0 else rejected
    if unverified and severity is not Severity.INFO:
        if explained_by_loss:
            return Severity.INFO
        if severity is Severity.CRITICAL:
            return Severity.WARNING
    return severity


def broker_verdict(answer: int | None) -> str:
    """What the broker did with a request, for a finding's message."""
    if answer is None:
        return "no answer from the broker"
    return "broker accepted it" if answer == 0 else f"broker answered {error_name(answer)}"


def exchange_evidence(ex: Exchange, answer: int | None = None) -> dict[str, Any]:
    evidence: dict[str, Any] = {
        "api": f"{ex.api_name} v{ex.api_version}",
        "client": ex.client,
        "broker": ex.broker,
        "client_id": ex.client_id,
        "correlation_id": ex.correlation_id,
        "conn": ex.conn,
    }
    if ex.response is not None or answer is not None:
        evidence["broker_error"] = error_name(answer)
    return evidence


def batch_evidence(b: ProducedBatch, ex: Exchange) -> dict[str, Any]:
    h = b.header
    evidence = exchange_evidence(ex)
    evidence.update(
        broker_error=error_name(b.error_code),
        base_sequence=h.base_sequence,
        records=h.records_count,
        base_offset=b.base_offset,
    )
    return evidence


def make(
    kind: FindingKind,
    severity: Severity,
    ts: float,
    message: str,
    evidence: dict[str, Any],
    *,
    unverified: bool = False,
    **where: Any,
) -> Finding:
    if unverified:
        evidence = {**evidence, "unverified": True}
    return Finding(
        kind=kind.value, severity=severity.value, ts=ts, message=message, evidence=evidence, **where
    )
