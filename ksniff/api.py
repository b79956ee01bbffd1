"""The Python API for notebooks and scripts: capture files in, the result's tables as pandas DataFrames.

    import ksniff
    result = ksniff.audit("dump.pcap")      # or a folder, a pathlib.Path, or a list of them
    result.findings                          # DataFrames: findings, transactions, exchanges, batches

The function lives here, at the top of the house beside the CLI, as `audit_captures`: the name
`ksniff.audit` is the audit room's (ksniff/audit/), which must not import the engines above it. The call
`ksniff.audit(...)` is an alias wired by the top package (ksniff/__init__.py), not by the room.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from ksniff.result import AuditResult

if TYPE_CHECKING:
    import pandas as pd

ENGINES = ("local", "spark")
PathLike = str | os.PathLike


class _Table:
    """One of the result's tables as an attribute of `Audit`, named as the table: its DataFrame (None for
    a table the audit was not asked for)."""

    def __init__(self, doc: str | None = None) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, audit: Audit | None, owner: type | None = None) -> pd.DataFrame | None:
        return self if audit is None else audit._frames.get(self.name)


@dataclass(frozen=True)
class Audit:
    """One audit's result: `.findings`, `.transactions`, `.exchanges`, `.batches` (and `.records` when
    asked for) are DataFrames with the columns of the CSV export, their times as UTC datetimes (as in the
    Parquet export); `.producers` one row per producer; `.result` is the whole AuditResult and
    `.document` the JSON document (docs/contract.md)."""

    result: AuditResult

    def __repr__(self) -> str:
        r = self.result
        severities = [f.severity for f in r.findings]
        worst = ", ".join(
            f"{severities.count(s)} {s}" for s in ("critical", "warning", "info") if s in severities
        )
        inputs = f"{len(r.inputs)} input" + ("" if len(r.inputs) == 1 else "s")
        return (
            f"<ksniff Audit ({r.engine}): {inputs}, {r.capture.kafka_connections} Kafka connections, "
            f"{len(r.transactions)} transactions, {len(r.findings)} findings"
            f"{f' ({worst})' if worst else ''}>"
        )

    @cached_property
    def _frames(self) -> dict[str, pd.DataFrame]:
        from ksniff.report.tables import frames, with_datetimes

        return {table: with_datetimes(df, table) for table, df in frames(self.result).items()}

    findings = _Table()
    transactions = _Table()
    exchanges = _Table()
    batches = _Table()
    partitions = _Table(
        "One row per topic-partition and capture set: its offsets, what was written and read."
    )
    partition_log = _Table("Each partition's batches in offset order, as the wire showed them.")
    records = _Table(
        "Record keys, values and headers: only when the audit was asked for them (`records=True`)."
    )

    @property
    def producers(self) -> pd.DataFrame:
        import pandas as pd

        rows = [p.as_contract() for p in self.result.producers]
        return pd.json_normalize(rows) if rows else pd.DataFrame()

    @property
    def document(self) -> dict:
        return self.result.as_contract()


def audit_captures(
    paths: PathLike | Iterable[PathLike],
    *,
    ports: int | str | Sequence[int | str] = (),
    txn_timeout_ms: int | None = None,
    engine: str = "local",
    master: str | None = None,
    records: bool = False,
) -> Audit:
    """Audit capture files or folders (pcap, pcapng; folders recursively) and return an `Audit`.

    paths: a path (str or pathlib.Path), or a list of them.
    ports: the broker ports, as an int, a list of ints, or the CLI's text ("9092,19093"); only those
        ports are then read as Kafka. Default: 9092 plus auto-detection of Kafka on any port.
    txn_timeout_ms: the hanging-transaction threshold when the producer's own timeout was not seen.
    engine: "local" (in-process) or "spark" (a PySpark job on `master`: default what spark-submit or
        Spark's configuration says, else local[*]).
    records: also decode record keys, values and headers (`Audit.records`).

    Raises ValueError for an unknown engine or a port out of range, and ksniff.capture.CaptureError
    when an input cannot be read.
    """
    from ksniff.config import DEFAULT_PORTS, EngineConfig, parse_ports

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: one of {', '.join(map(repr, ENGINES))}")
    wanted = parse_ports([ports] if isinstance(ports, int | str) else ports)
    inputs = [os.fspath(paths)] if isinstance(paths, str | os.PathLike) else [os.fspath(p) for p in paths]
    config = EngineConfig(
        ports=wanted or DEFAULT_PORTS,
        auto_detect=not wanted,
        txn_timeout_ms=txn_timeout_ms,
        keep_tables=True,
        keep_records=records,
    )
    if engine == "spark":
        from ksniff.engine.spark import audit_paths_spark

        return Audit(audit_paths_spark(inputs, config, master=master))
    from ksniff.engine.local import audit_paths

    return Audit(audit_paths(inputs, config))
