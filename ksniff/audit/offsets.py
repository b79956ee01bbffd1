"""Consumer-group offsets: a committed offset that moves backwards makes the group read again.

Only commits the broker accepted count. A member's commit below the group's last accepted one is
`critical`: the broker stored it, so the group will process those records again after the next rebalance
or restart (duplicated processing, the contract's "data may be duplicated"). The same from an admin
tool (no generation, no member id: a reset) is `info`, since that is what a reset is for.
"""

from __future__ import annotations

from ksniff.audit.findings import exchange_evidence, judge, make
from ksniff.audit.model import Finding, FindingKind, Severity
from ksniff.audit.state import AuditState
from ksniff.decode.events import Exchange


def topic_name(topic) -> str:
    """The topic's name; from the versions that name topics by id, the id."""
    return topic.name or str(getattr(topic, "topic_id", ""))


def on_offset_commit(state: AuditState, ex: Exchange, out: list[Finding]) -> None:
    req, resp = ex.request, ex.response
    if resp is None:
        return
    answers = {(topic_name(t), p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
    group = req.group_id
    admin = req.generation_id_or_member_epoch < 0 and not req.member_id
    for t in req.topics:
        topic = topic_name(t)
        for p in t.partitions:
            if answers.get((topic, p.partition_index)) != 0 or p.committed_offset < 0:
                continue
            key = (group, topic, p.partition_index)
            previous = state.offsets.get(key)
            state.offsets[key] = p.committed_offset
            if previous is None or p.committed_offset >= previous:
                continue
            evidence = exchange_evidence(ex, 0)
            evidence.update(
                previous_offset=previous,
                committed_offset=p.committed_offset,
                generation=req.generation_id_or_member_epoch,
                member_id=req.member_id,
                admin_reset=admin,
            )
            severity = Severity.INFO if admin else judge(0, unverified=ex.unverified, explained_by_loss=False)
            out.append(
                make(
                    FindingKind.OFFSET_COMMIT_BACKWARDS,
                    severity,
                    ex.request_ts,
                    f"group {group!r} committed {topic}-{p.partition_index} at offset "
                    f"{p.committed_offset}, back from {previous}"
                    + (" (admin reset)" if admin else f" (member {req.member_id!r})"),
                    evidence,
                    unverified=ex.unverified,
                    group=group,
                    topic=topic,
                    partition=p.partition_index,
                )
            )
