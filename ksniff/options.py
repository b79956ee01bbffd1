"""What a run was asked for, after parsing, and how it ends: `Options`, the exit codes and `abort`.

The CLI (ksniff.cli) builds `Options` from the command line; the runner (ksniff.run) reads them. Both
import this module and neither imports the other's internals. What changes the run itself (ports,
limits, records...) is the one EngineConfig (ksniff.config) inside `Options.config`; the rest says
where the results go and how they are shown. The contract: docs/contract.md.
"""

from __future__ import annotations

import sys

import click

from ksniff.common.frozen import frozen_dataclass
from ksniff.config import EngineConfig
from ksniff.report.filters import ResultFilter

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_UNVERIFIED = 3  # only with --strict: no finding, but the audit could not see or read everything


def abort(message: str, code: int = EXIT_ERROR) -> None:
    """Ends the process with one line on stderr: every error of the CLI ends here."""
    # A path or an id in the message must not act on the terminal.
    from ksniff.report.text import shown_message

    click.echo(f"ksniff: error: {shown_message(message, limit=4096)}", err=True)
    sys.exit(code)


@frozen_dataclass
class Options:
    """What both commands take (docs/contract.md), after parsing."""

    config: EngineConfig  # everything that changes the run
    ports_explicit: bool  # --port given: only those ports, no auto-detection elsewhere
    json_path: str | None
    csv_dir: str | None
    parquet_dir: str | None
    producer: str | None
    exit_zero: bool
    quiet: bool
    verbose: bool
    color: bool
    html_path: str | None = None
    full_report: bool = False  # --report: the whole report even with --producer
    topic_partition: str | None = None  # -T TOPIC-N: that partition's log after the report
    filters: ResultFilter = ResultFilter()
    strict: bool = False  # --strict: exit 3 when the verdict is "unverified"
    partition_by: tuple[str, ...] = ()  # --partition-by: the Parquet folders' partition columns (Spark)

    @property
    def ports(self) -> tuple[int, ...]:
        return self.config.ports

    @property
    def records(self) -> bool:
        return self.config.keep_records
