"""The fold wrapped for engines that feed events one at a time (the in-process run, the live view)."""

from __future__ import annotations

from ksniff.audit.fold import feed, finish
from ksniff.audit.model import AuditOutput, Finding, Transaction
from ksniff.audit.state import AuditConfig, AuditState
from ksniff.audit.txn import TxnState
from ksniff.decode.events import DecodeEvent


class Auditor:
    def __init__(
        self, config: AuditConfig | None = None, key: str | None = None, keys: frozenset[str] | None = None
    ) -> None:
        self.state = AuditState.initial(config, key, keys)

    def feed(self, event: DecodeEvent) -> list[Finding]:
        return feed(self.state, event)  # `step`, which changes the state in place

    def finish(self, end_ts: float | None = None) -> AuditOutput:
        return finish(self.state, end_ts)

    def snapshot(self) -> dict[str, int]:
        """Counters for the live view."""
        open_txns = sum(
            1
            for t in self.state.txn_ids.values()
            if t.state is TxnState.ONGOING and t.txn is not None and t.txn.outcome is None
        )
        return {
            "producers": len(self.state.producers),
            "open_transactions": open_txns,
            "findings": len(self.state.emitted),
        }

    def open_transactions(self) -> list[tuple[Transaction, int]]:
        """The transactions open now, oldest first, each with the timeout that applies to it (ms): the
        live view's panel."""
        out = []
        for t in self.state.txn_ids.values():
            for lane in t.lanes():
                rec = lane.txn
                if rec is not None and rec.outcome is None:
                    out.append((rec.as_transaction(), t.timeout_ms or self.state.config.txn_timeout_ms))
        return sorted(out, key=lambda pair: pair[0].start_ts)
