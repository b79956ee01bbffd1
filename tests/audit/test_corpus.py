"""The audit over the corpus of real captures (tests/pcaps): capture -> decode -> audit, judged against
each capture's expectations file (NAME.expect.json, written from the scenario that recorded it)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from ksniff.audit import AuditConfig, Auditor
from ksniff.audit.model import AuditOutput, FindingKind
from ksniff.capture import read_files
from ksniff.decode import Decoder

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
EXPECTS = sorted(PCAPS.glob("*.expect.json"))
BLOCKING = {"critical", "warning"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def fed_auditor(name: str) -> tuple[Auditor, float | None]:
    """Capture -> decode -> audit of a corpus scenario, events in request order: the auditor they were
    fed to, and the capture's last timestamp (where it closes)."""
    expect = load(PCAPS / f"{name}.expect.json")
    run = read_files([str(PCAPS / expect["capture"])])
    decoder = Decoder(ports=expect.get("kafka_ports") or (9092,))
    events = [e for ev in run for e in decoder.feed(ev)] + decoder.finish()
    events.sort(key=lambda e: getattr(e, "request_ts", None) or getattr(e, "ts", 0.0))
    auditor = Auditor(AuditConfig())
    for event in events:
        auditor.feed(event)
    return auditor, run.stats.last_ts


@cache
def audit(name: str) -> AuditOutput:
    """Capture -> decode -> audit, events in request order, closed at the capture's last timestamp."""
    auditor, last_ts = fed_auditor(name)
    return auditor.finish(last_ts)


def outcome_counts(output: AuditOutput) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for t in output.transactions:
        c = counts.setdefault(t.transactional_id, {"commit": 0, "abort": 0, "open": 0, "unknown": 0})
        c[t.outcome] += 1
    return counts


def matches(finding, wanted: dict) -> bool:
    """Kind and severity exactly; where the expectation names an id, topic or partition, that too."""
    if (finding.kind, finding.severity) != (wanted["kind"], wanted["severity"]):
        return False
    return all(
        wanted.get(k) is None or getattr(finding, k) == wanted[k]
        for k in ("transactional_id", "producer_id", "topic", "partition", "group")
    )


def names(paths: list[Path]) -> list[str]:
    return [p.name.removesuffix(".expect.json") for p in paths]


@pytest.fixture(params=names(EXPECTS))
def case(request) -> tuple[dict, AuditOutput]:
    return load(PCAPS / f"{request.param}.expect.json"), audit(request.param)


def test_transaction_outcomes(case):
    expect, output = case
    assert outcome_counts(output) == expect["transactions"]


def test_expected_findings_at_their_severity(case):
    expect, output = case
    missing = [w for w in expect["findings"] if not any(matches(f, w) for f in output.findings)]
    got = sorted({(f.kind, f.severity, f.transactional_id) for f in output.findings})
    assert not missing, f"not found: {missing}; found: {got}"


def test_clean_captures_have_no_warning_or_critical(case):
    expect, output = case
    if not expect.get("clean"):
        pytest.skip("not a clean capture")
    assert [f for f in output.findings if f.severity in BLOCKING] == []


def test_nothing_critical_rests_on_lost_bytes(case):
    _, output = case
    assert [f for f in output.findings if f.severity == "critical" and f.evidence.get("unverified")] == []


def test_records_produced(case):
    expect, output = case
    if expect.get("records_produced") is None:
        pytest.skip("no record count expected")
    assert sum(p.records for p in output.producers) == expect["records_produced"]


@pytest.mark.parametrize("kind", [k.value for k in FindingKind])
def test_every_finding_kind_is_produced_by_the_corpus(kind: str):
    """Some capture expects each kind, and the audit finds it there at the expected severity."""
    expecting = [
        (name, w)
        for name in names(EXPECTS)
        for w in load(PCAPS / f"{name}.expect.json")["findings"]
        if w["kind"] == kind
    ]
    assert expecting, f"no capture in tests/pcaps expects {kind}: record a scenario for it"
    assert any(any(matches(f, w) for f in audit(name).findings) for name, w in expecting)


WITH_SOURCES = [p for p in EXPECTS if "outcome_sources" in load(p)]


@pytest.mark.parametrize("path", WITH_SOURCES, ids=lambda p: p.name.removesuffix(".expect.json"))
def test_outcomes_say_how_the_capture_proves_them(path: Path) -> None:
    """A takeover aborts an open transaction unless the broker accepts the old instance's EndTxn (then it
    is that one transaction, committed); a commit whose answer was lost is a commit, from the next
    transaction (the expectations file lists outcome and source per transaction, in time order)."""
    expect = load(path)
    out = audit(path.name.removesuffix(".expect.json"))
    for tid, wanted in expect["outcome_sources"].items():
        got = [[t.outcome, t.outcome_source] for t in out.transactions if t.transactional_id == tid]
        assert got == wanted, tid
