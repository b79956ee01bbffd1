"""The export formats behind `--json`, `--csv DIR` and `--parquet DIR`, one interface for all three.

Every file is written to a temporary file in its own directory and then renamed over the target
(ksniff.report.atomic), so a reader (or an interrupted run) never sees half a file: either the previous
file or the whole new one. Failures to write come out as `ReportError` with one line the CLI can print
as is.

CSV: one file per table (`exchanges.csv`, `batches.csv`, `transactions.csv`, `findings.csv`). Each time
column keeps its float epoch seconds (exact, and the same number as in the JSON) and gains a
`<name>_utc` column right after it, `YYYY-MM-DDTHH:MM:SS.ffffffZ`: ISO 8601 / RFC 3339 in UTC with its
zone and the capture's microseconds, so nobody has to guess the zone and two packets a few microseconds
apart keep their order. (Before, the text was `YYYY-MM-DD HH:MM:SS.mmm`, which spreadsheets read
without a wizard; they read this form as text, and the README says how to get a date-time back.)
Every text cell is neutralised against formulas and control characters (ksniff.report.cells).

Parquet: the same four tables; time columns are `timestamp[us, tz=UTC]`.

Both table formats are written in chunks by ksniff.report.stream (the local engine feeds it while it runs,
so no table is held whole); each directory's files are renamed into place together once all are written.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Protocol

from ksniff.common import sources
from ksniff.common.cells import json_default
from ksniff.report.atomic import ReportError, ensure_parent, write_atomically

if TYPE_CHECKING:
    from ksniff.result import AuditResult

__all__ = [
    "FORMATS",
    "STDOUT",
    "OutputFormat",
    "ReportError",
    "json_text",
    "write_csv",
    "write_json",
    "write_html",
    "write_outputs",
    "write_parquet",
]

STDOUT = "-"


class OutputFormat(Protocol):
    """What `--json`, `--csv` and `--parquet` have in common: a name and where the result goes."""

    name: str

    def write(self, result: AuditResult, target: str) -> None: ...


def json_text(result: AuditResult) -> str:
    """The JSON document of docs/contract.md, whole, ending with a newline."""
    try:
        return _two_levels(result.as_contract()) + "\n"
    except (TypeError, ValueError) as err:
        raise ReportError(f"cannot write the JSON document: {err}") from err


# No indent: json then uses its C encoder. With `indent` it falls back to a pure-Python one, three times
# slower, which made writing the document a twentieth of a whole audit of many small transactions.
_ONE_LINE = json.JSONEncoder(default=json_default, separators=(", ", ": ")).encode


# The long lists' items in one pass (ksniff.report._jsonitems): None when not built or KSNIFF_PURE_PYTHON
# is set, and json's encoder writes each item.
_jsonitems = sources.load("ksniff.report._jsonitems")


def _one_line_encoder():
    """`_ONE_LINE` for many values of one document: the C encoder that `JSONEncoder.encode` makes on
    every call (with its options and its circular-reference table), made once; the same text for every
    value (json's own `encode` with these options: ASCII only, NaN allowed, keys in their order)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ONE_LINE
    encode = make(
        {}, json_default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )

    def one_line(value) -> str:
        return "".join(encode(value, 0))

    return one_line


def _two_levels(doc: dict) -> str:
    """Indented like `json.dumps(indent=2)` down to the top-level keys and their items (one producer,
    transaction or finding per line); each item's own value is on that one line."""
    one_line = _one_line_encoder()
    parts = []
    for key, value in doc.items():
        name = one_line(key)
        if isinstance(value, list) and value:
            if _jsonitems is not None:  # the same text, written in one pass (its docstring)
                items = _jsonitems.joined(value, ",\n    ", one_line)
            else:
                items = ",\n    ".join([one_line(v) for v in value])
            parts.append(f"  {name}: [\n    {items}\n  ]")
        elif isinstance(value, dict) and value:
            items = ",\n    ".join([f"{one_line(k)}: {one_line(v)}" for k, v in value.items()])
            parts.append(f"  {name}: {{\n    {items}\n  }}")
        else:
            parts.append(f"  {name}: {one_line(value)}")
    return "{\n" + ",\n".join(parts) + "\n}"


class JsonFormat:
    name = "json"

    def write(self, result: AuditResult, target: str) -> None:
        # Serialise first, write second: a value that cannot be serialised then costs nothing on disk
        # or on stdout, and stdout never carries half a document.
        text = json_text(result)
        if target == STDOUT:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        ensure_parent(target)
        write_atomically(target, lambda fh: fh.write(text))


class CsvFormat:
    name = "csv"

    def write(self, result: AuditResult, target: str) -> None:
        # The tables are written in chunks by ksniff.report.stream, as the local engine does while it runs.
        from ksniff.report.stream import write_tables  # the table writer: only when tables are asked for

        write_tables(result, csv_dir=target)


class ParquetFormat:
    name = "parquet"

    def write(self, result: AuditResult, target: str) -> None:
        from ksniff.report.stream import write_tables

        write_tables(result, parquet_dir=target)


class HtmlFormat:
    name = "html"

    def write(self, result: AuditResult, target: str) -> None:
        from ksniff.report.html import html_report  # the page's renderer: only when one is asked for

        text = html_report(result)
        ensure_parent(target)
        write_atomically(target, lambda fh: fh.write(text))


FORMATS: dict[str, OutputFormat] = {
    f.name: f for f in (JsonFormat(), CsvFormat(), ParquetFormat(), HtmlFormat())
}


def write_json(result: AuditResult, path: str) -> None:
    FORMATS["json"].write(result, path)


def write_csv(result: AuditResult, directory: str) -> None:
    FORMATS["csv"].write(result, directory)


def write_parquet(result: AuditResult, directory: str) -> None:
    FORMATS["parquet"].write(result, directory)


def write_html(result: AuditResult, path: str) -> None:
    FORMATS["html"].write(result, path)


def write_outputs(
    result: AuditResult,
    *,
    json_path: str | None = None,
    csv_dir: str | None = None,
    parquet_dir: str | None = None,
) -> None:
    """Writes every export asked for, in the order the CLI documents them."""
    for name, target in (("json", json_path), ("csv", csv_dir), ("parquet", parquet_dir)):
        if target:
            FORMATS[name].write(result, target)
