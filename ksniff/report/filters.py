"""`--severity`, `--kind`, `--since`, `--until`, `--transactional-id`: what the report and every export
show, alike.

Findings are kept by severity (at least the one given), kind, time and transactional id; transactions by
the time they overlap and their transactional id; producers by transactional id; the exchange, batch and
record rows by time and transactional id. The counters of the capture and the decode are the whole run's.
The exit code follows the findings kept: a run filtered to one kind fails only on that kind.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from ksniff.common.frozen import frozen_dataclass
from ksniff.result import AuditResult

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


class FilterError(ValueError):
    """A filter value that cannot be read; the message is one line for `ksniff: error:`."""


def parse_time(text: str) -> float:
    """Epoch seconds, or an ISO-8601 date and time (UTC unless it says otherwise), as epoch seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
        raise FilterError(f"not a time: {text!r}")
    iso = value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise FilterError(
            f"not a time: {text!r} (give epoch seconds or ISO-8601, e.g. 2026-11-21T08:03:05Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


@frozen_dataclass
class ResultFilter:
    """What the user asked to keep of a result: least severity, kinds, time range, transactional ids."""

    severity: str | None = None  # the least severity kept
    kinds: frozenset[str] = frozenset()
    since: float | None = None
    until: float | None = None
    transactional_ids: frozenset[str] = frozenset()

    @property
    def active(self) -> bool:
        return bool(
            self.severity
            or self.kinds
            or self.since is not None
            or self.until is not None
            or self.transactional_ids
        )

    def as_contract(self) -> dict[str, Any]:
        """The JSON document's `filters`: what was asked, empty when nothing was."""
        out: dict[str, Any] = {}
        if self.severity:
            out["severity"] = self.severity
        if self.kinds:
            out["kinds"] = sorted(self.kinds)
        if self.since is not None:
            out["since"] = self.since
        if self.until is not None:
            out["until"] = self.until
        if self.transactional_ids:
            out["transactional_ids"] = sorted(self.transactional_ids)
        return out

    def _in_time(self, start: float | None, end: float | None = None) -> bool:
        if start is None:
            return True
        end = start if end is None else end
        return (self.since is None or end >= self.since) and (self.until is None or start <= self.until)

    def _txn(self, transactional_id: str | None) -> bool:
        return not self.transactional_ids or transactional_id in self.transactional_ids

    def finding(self, f) -> bool:
        return self._finding(f.severity, f.kind, f.ts, f.transactional_id)

    def _finding(self, severity: str, kind: str, ts: float, transactional_id: str | None) -> bool:
        if self.severity and SEVERITY_RANK.get(severity, 0) < SEVERITY_RANK[self.severity]:
            return False
        if self.kinds and kind not in self.kinds:
            return False
        return self._in_time(ts) and self._txn(transactional_id)

    def transaction(self, t) -> bool:
        return self._in_time(t.start_ts, t.end_ts) and self._txn(t.transactional_id)

    def row(self, row: dict[str, Any]) -> bool:
        return self._in_time(row.get("ts")) and self._txn(row.get("transactional_id"))

    def table_row(self, table: str, row: dict[str, Any]) -> bool:
        """Whether a row of an exported table is kept: a `findings` or `transactions` row as its finding
        or transaction would be, any other as `row`."""
        if table == "findings":
            return self._finding(row["severity"], row["kind"], row["ts"], row["transactional_id"])
        if table == "transactions":
            return self._in_time(row["start_ts"], row["end_ts"]) and self._txn(row["transactional_id"])
        return self.row(row)

    def apply(self, result: AuditResult) -> AuditResult:
        if not self.active:
            return result
        rows = None if result.records is None else [r for r in result.records if self.row(r)]
        return dataclasses.replace(
            result,
            producers=[p for p in result.producers if self._txn(p.transactional_id)],
            transactions=[t for t in result.transactions if self.transaction(t)],
            findings=[f for f in result.findings if self.finding(f)],
            exchanges=[r for r in result.exchanges if self.row(r)],
            batches=[r for r in result.batches if self.row(r)],
            records=rows,
            filters=self.as_contract(),
        )


class FilteredRows:
    """A row sink that passes on only the rows a filter keeps (the exports written during the run)."""

    def __init__(self, sink, keep: ResultFilter) -> None:
        self.sink, self.keep = sink, keep

    def add(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        kept = [r for r in rows if self.keep.row(r)]
        if kept:
            self.sink.add(table, kept)

    def __getattr__(self, name: str):  # finish, discard, restart: the sink's own
        return getattr(self.sink, name)
