"""The Python API for notebooks and scripts: `ksniff.audit(paths)` -> tables as pandas DataFrames."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from ksniff.result import AuditResult


@dataclass(frozen=True)
class Audit:
    """One audit's result: `.findings`, `.transactions`, `.exchanges`, `.batches` are DataFrames with the
    columns of the CSV export; `.result` is the whole AuditResult and `.document` the JSON document."""

    result: AuditResult

    @cached_property
    def _frames(self) -> dict[str, pd.DataFrame]:
        from ksniff.report.tables import frames

        return frames(self.result)

    @property
    def findings(self) -> pd.DataFrame:
        return self._frames["findings"]

    @property
    def transactions(self) -> pd.DataFrame:
        return self._frames["transactions"]

    @property
    def exchanges(self) -> pd.DataFrame:
        return self._frames["exchanges"]

    @property
    def batches(self) -> pd.DataFrame:
        return self._frames["batches"]

    @property
    def producers(self) -> pd.DataFrame:
        rows = [p.as_contract() for p in self.result.producers]
        return pd.json_normalize(rows) if rows else pd.DataFrame()

    @property
    def document(self) -> dict:
        return self.result.as_contract()


def audit(paths: str | Sequence[str], *, ports: Sequence[int] = (), txn_timeout_ms: int | None = None,
          engine: str = "local", master: str = "local[*]", records: bool = False) -> Audit:
    """Audit capture files or folders. `ports` names the broker ports (default 9092 plus auto-detection).

    Raises ksniff.capture.CaptureError when an input cannot be read.
    """
    from ksniff.config import DEFAULT_PORTS, EngineConfig
    from ksniff.engine.local import audit_paths

    paths = [paths] if isinstance(paths, str) else list(paths)
    config = EngineConfig(ports=tuple(ports) or DEFAULT_PORTS, auto_detect=not ports,
                          txn_timeout_ms=txn_timeout_ms, keep_tables=True, keep_records=records)
    if engine == "spark":
        from ksniff.engine.spark import audit_paths_spark

        return Audit(audit_paths_spark(paths, config, master=master))
    return Audit(audit_paths(paths, config))
