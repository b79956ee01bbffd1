"""Audit room: a pure fold over decoded exchanges into producer timelines, transactions and findings.

    state = AuditState.initial(AuditConfig(txn_timeout_ms=60000))
    state, findings = step(state, event)   # Exchange | ConnectionLost | ConnectionEnded, by request time
    output = finish(state, end_ts)          # AuditOutput: producers, transactions, findings

`Auditor` wraps the same for engines that feed one event at a time. Partitioned engines (Spark) group by
`producer_key`; ksniff.audit.keys says what every group must also see.
"""

from ksniff.audit.auditor import Auditor
from ksniff.audit.fold import finish, merge_outputs, step
from ksniff.audit.keys import CONTEXT_KEY, fold_groups, is_context, producer_key, producer_keys, touched_keys
from ksniff.audit.state import AuditConfig, AuditState

__all__ = [
    "CONTEXT_KEY",
    "AuditConfig",
    "AuditState",
    "Auditor",
    "finish",
    "fold_groups",
    "is_context",
    "merge_outputs",
    "producer_key",
    "producer_keys",
    "step",
    "touched_keys",
]
