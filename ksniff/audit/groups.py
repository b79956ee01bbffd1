"""Repeated findings folded into groups: the same kind, severity, producer, place and cause (the request
and the broker's answer). A zombie retrying EndTxn 49 times is one group of 49 with its first and last
time, in the report and in the JSON's `finding_groups`; the `findings` list keeps every one."""

from __future__ import annotations

from collections.abc import Sequence

from ksniff.audit.model import Finding
from ksniff.common.frozen import frozen_dataclass


@frozen_dataclass
class FindingGroup:
    """Findings of the same kind, producer, place and cause (the request and the broker's answer): a
    zombie retrying EndTxn 49 times is one group of 49, not 49 findings on screen."""

    first: Finding
    times: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.times)


def finding_cause(f: Finding) -> tuple:
    """What makes two findings repeats of one another: kind, severity, producer, place, request, answer."""
    ev = f.evidence
    return (
        f.kind,
        f.severity,
        f.transactional_id,
        f.producer_id,
        f.producer_epoch,
        f.topic,
        f.partition,
        f.group,
        ev.get("api"),
        ev.get("broker_error"),
        bool(ev.get("unverified")),
    )


def fold_findings(findings: Sequence[Finding]) -> list[FindingGroup]:
    """Repeated findings folded into groups, in order of each group's first finding."""
    groups: dict[tuple, list[Finding]] = {}
    for f in sorted(findings, key=lambda f: f.ts):
        groups.setdefault(finding_cause(f), []).append(f)
    return [FindingGroup(fs[0], tuple(f.ts for f in fs)) for fs in groups.values()]


def group_contract(g: FindingGroup) -> dict:
    """A group in the JSON document: where and what (as its first finding says), how often and when."""
    f = g.first
    return {
        "kind": f.kind,
        "severity": f.severity,
        **f.subject(),
        "count": g.count,
        "first_ts": g.times[0],
        "last_ts": g.times[-1],
        "times": list(g.times),
    }
