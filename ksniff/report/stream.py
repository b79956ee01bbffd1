"""Table exports written while the run goes (`--csv DIR`, `--parquet DIR`), so memory stays flat.

The engine hands over the rows of `exchanges` and `batches` (and `records` with --records) as it releases
exchanges, in request-time order. They are buffered per table and written in chunks of `CHUNK_ROWS`, each
to a temporary file beside its target (ksniff.report.atomic): CSV through the csv module (cell for cell
what pandas' `to_csv` writes, which tests/report/test_report_stream.py holds it to, without importing
pandas), Parquet through one
`pyarrow.parquet.ParquetWriter` per table, a row group per chunk. `transactions` and `findings` are small
and come with the result at the end. Only when every table is complete are the temporary files renamed
onto their targets; an error or an interrupt before that removes them and leaves the previous exports as
they were.

Rows arrive in time order, except an exchange the engine released after its reorder window: when a
chunk starts before the end of what its table already holds, the table is sorted once at the end (read
back, sorted stably, written again). Each chunk is itself sorted stably, so either way the order is that
of one stable sort over all rows, as `tables.frame` gives.
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import IO, Any

from ksniff.common.codegen import define
from ksniff.report import tables
from ksniff.report.atomic import ReportError, create_temporary, ensure_dir, reason, unlink_quietly
from ksniff.report.cells import neutral
from ksniff.result import AuditResult

UTC_SUFFIX = "_utc"  # each CSV time column is followed by its text twin `<name>_utc`
CSV_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # ISO 8601 in UTC with microseconds (see ksniff.report.formats)
CHUNK_ROWS = 4096  # rows per write and per Parquet row group: memory stays near pandas' own footprint
STREAMED = ("exchanges", "batches", "records")  # tables whose rows come during the run
AT_END = ("transactions", "findings", "partitions", "partition_log")
INF = float("inf")


class _TableFile:
    """One table of one format, being written to a temporary file."""

    suffix = ""

    def __init__(self, directory: str, table: str) -> None:
        self.table = table
        self.path = os.path.join(directory, f"{table}.{self.suffix}")
        self.tmp, fd = create_temporary(self.path)
        self.fh: IO = self._open(fd)
        self.rows = 0
        self.last = None  # the highest sort value written so far
        self.unsorted = False

    def _open(self, fd: int) -> IO:
        raise NotImplementedError

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append a chunk (sorted here); notes when it starts before what was already written."""
        if not rows:
            return
        column = tables.SORT_COLUMN[self.table]
        rows = sorted(rows, key=lambda r: _sort_value(r[column]))  # stable, like frame()'s sort_values
        first, last = _sort_value(rows[0][column]), _sort_value(rows[-1][column])
        if self.last is not None and first < self.last:
            self.unsorted = True
        if self.last is None or last > self.last:
            self.last = last
        self._write(rows)
        self.rows += len(rows)

    def _write(self, rows: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Header or schema for an empty table, the late sort if needed, then the data on disk."""
        if self.rows == 0:
            self._write([])
        self._close()
        if self.unsorted:
            self._sort()

    def _close(self) -> None:
        raise NotImplementedError

    def _sort(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        try:
            self.fh.close()
        except Exception:  # noqa: BLE001 - a file being thrown away may fail to flush; it goes anyway
            pass
        unlink_quietly(self.tmp)


def _sort_value(value: float | None) -> float:
    return INF if value is None or value != value else value  # empty cells last, as pandas sorts NaN


def _fsync_close(fh: IO) -> None:
    fh.flush()
    os.fsync(fh.fileno())  # the rename must not land before the data does
    fh.close()


class _CsvTable(_TableFile):
    """The CSV layout (each time column followed by its `_utc` text, text cells neutralised) that pandas
    would write, cell for cell, but through the csv module (which pandas itself writes with): importing
    pandas alone would take 100 MiB, more than the rows."""

    suffix = "csv"

    def _open(self, fd: int) -> IO:
        self.cells = _csv_cells(self.table)
        self.line = _line_function(self.cells)
        self.out = None
        return os.fdopen(fd, "w", encoding="utf-8", newline="")

    def _write(self, rows: list[dict[str, Any]]) -> None:
        if self.out is None:
            self.out = csv.writer(self.fh, lineterminator="\n")
            self.out.writerow([name for name, _column, _cell in self.cells])
        self.out.writerows(map(self.line, rows))

    def _close(self) -> None:
        _fsync_close(self.fh)

    def _sort(self) -> None:
        # Rows are sorted as text lines through the csv module (which pandas writes with), so every
        # cell keeps its exact text; only the order changes.
        with open(self.tmp, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            rows = list(reader)
        at = header.index(tables.SORT_COLUMN[self.table])
        rows.sort(key=lambda r: float(r[at]) if r[at] else float("inf"))
        with open(self.tmp, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
            fh.flush()
            os.fsync(fh.fileno())


def _float_cell(value: Any) -> str:
    # repr is the shortest text that reads back to the same float, which is what pandas writes without a
    # float_format (numpy's str of a float64); NaN and None are empty.
    return "" if value is None or value != value else repr(float(value))


def _int_cell(value: Any) -> str:
    return "" if value is None else str(int(value))


def _bool_cell(value: Any) -> str:
    return "" if value is None else str(bool(value))


def _text_cell(value: Any) -> str:
    # ids, topics, client ids: no formula, no raw control character (ksniff.report.cells)
    return "" if value is None else neutral(value if value.__class__ is str else str(value))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _utc_cell(value: Any) -> str:
    """`CSV_TIME_FORMAT`, from the time rounded to whole microseconds (as
    `tables.utc_timestamps` does). strftime once per second of capture: it was most of the export."""
    if not tables.in_calendar(value):  # also None and NaN
        return ""
    seconds, micros = divmod(round(value * 1e6), 1_000_000)
    return f"{_utc_second(seconds)}.{micros:06d}Z"


@functools.lru_cache(maxsize=4096)
def _utc_second(seconds: int) -> str:
    return (_EPOCH + timedelta(seconds=seconds)).strftime(CSV_TIME_FORMAT.removesuffix(".%fZ"))


_CELLS = {"float64": _float_cell, "Int64": _int_cell, "boolean": _bool_cell, "string": _text_cell}


def _csv_cells(table: str) -> list[tuple[str, str, Any]]:
    """(header, row key, cell text function) per CSV column: each time column is followed by its twin."""
    out = []
    for column, dtype in tables.SCHEMAS[table].items():
        out.append((column, column, _CELLS[dtype]))
        if column in tables.TIME_COLUMNS[table]:
            out.append((column + UTC_SUFFIX, column, _utc_cell))
    return out


# Arrow type, pandas_type and numpy_type (pandas' Parquet metadata) of each dtype of tables.SCHEMAS. Time
# columns are UTC timestamps in microseconds, as `tables.with_datetimes` makes them.
_ARROW_TYPES = {
    "float64": ("float64", "float64", "float64"),
    "Int64": ("int64", "int64", "Int64"),
    "boolean": ("bool_", "bool", "boolean"),
    "string": ("string", "unicode", "string"),
}


def arrow_schema(table: str):
    """The Arrow schema `DataFrame.to_parquet` gives the table's frame, pandas metadata included, made
    from tables.SCHEMAS instead of a frame per chunk."""
    import pyarrow as pa

    fields, columns = [], []
    for name, dtype in tables.SCHEMAS[table].items():
        if name in tables.TIME_COLUMNS[table]:
            fields.append(pa.field(name, pa.timestamp("us", tz="UTC")))
            columns.append(
                {
                    "name": name,
                    "field_name": name,
                    "pandas_type": "datetimetz",
                    "numpy_type": "datetime64[us]",
                    "metadata": {"timezone": "UTC"},
                }
            )
            continue
        arrow, pandas_type, numpy_type = _ARROW_TYPES[dtype]
        fields.append(pa.field(name, getattr(pa, arrow)()))
        columns.append(
            {
                "name": name,
                "field_name": name,
                "pandas_type": pandas_type,
                "numpy_type": numpy_type,
                "metadata": None,
            }
        )
    meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": columns,
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": _pandas_version(),
    }
    return pa.schema(fields, metadata={"pandas": json.dumps(meta)})


def _pandas_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pandas")
    except PackageNotFoundError:  # pragma: no cover - pandas is a dependency
        return "0"


def _micros(value: Any) -> int | None:
    # Whole microseconds, rounded as `tables.utc_timestamps` rounds (half to even).
    return round(value * 1e6) if tables.in_calendar(value) else None


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else str(value)


def _line_function(cells: list[tuple[str, str, Any]]):
    """row -> the tuple of its cells' texts, as one generated function (a loop over the columns per row
    cost a third of the export)."""
    namespace: dict[str, Any] = {}
    parts = []
    for i, (_name, column, cell) in enumerate(cells):
        namespace[f"_cell{i}"] = cell
        parts.append(f"_cell{i}(row[{column!r}])")
    return define(
        f"def line(row):\n    return ({', '.join(parts)},)\n", "line", namespace, "<ksniff CSV row>"
    )


class _ParquetTable(_TableFile):
    suffix = "parquet"

    def _open(self, fd: int) -> IO:
        self.schema = self.writer = None  # at the first chunk: pyarrow (and the pandas it loads) costs
        return os.fdopen(fd, "wb")  # 100 MiB, which a run with fewer rows than a chunk never needs

    def _write(self, rows: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            self.schema = arrow_schema(self.table)
            self.writer = pq.ParquetWriter(self.fh, self.schema)
        arrays = []
        for f in self.schema:
            values = [row[f.name] for row in rows]
            if pa.types.is_timestamp(f.type):
                values = [_micros(v) for v in values]
            elif pa.types.is_string(f.type):
                values = [_text(v) for v in values]
            elif pa.types.is_floating(f.type):
                values = [None if v != v else v for v in values]  # NaN is missing, as in the frames
            arrays.append(pa.array(values, type=f.type))
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))

    def _close(self) -> None:
        self.writer.close()
        _fsync_close(self.fh)

    def discard(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()  # before its file: a writer left open would try again when collected
            except Exception:  # noqa: BLE001 - the file is being thrown away
                pass
        super().discard()

    def _sort(self) -> None:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        whole = pq.read_table(self.tmp)
        # Arrow's sort_indices is stable, and puts nulls last as pandas puts NaN.
        whole = whole.take(pc.sort_indices(whole, sort_keys=[(tables.SORT_COLUMN[self.table], "ascending")]))
        with open(self.tmp, "wb") as fh, pq.ParquetWriter(fh, self.schema) as writer:
            writer.write_table(whole, row_group_size=CHUNK_ROWS)
            fh.flush()
            os.fsync(fh.fileno())


_KINDS = {"csv": _CsvTable, "parquet": _ParquetTable}


class TableExport:
    """The table exports of one run: rows in as they come, every file renamed into place by `finish`.

    Use as a context manager: leaving the block by an exception removes the temporary files.
    """

    def __init__(
        self, *, csv_dir: str | None = None, parquet_dir: str | None = None, records: bool = False
    ) -> None:
        self._records = records
        self._done = False
        self._folders = [(kind, d) for kind, d in (("csv", csv_dir), ("parquet", parquet_dir)) if d]
        self._begin()

    def _begin(self) -> None:
        self._files: list[_TableFile] = []
        self._streamed: dict[str, list[_TableFile]] = {}
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._stale: list[str] = []  # tables of an earlier run that this one does not write
        try:
            for kind, directory in self._folders:
                self._open(kind, directory)
        except BaseException:
            self.discard()
            raise

    def restart(self) -> None:
        """Forgets every row written so far (the run reads its captures again): the files begin anew."""
        self.discard()
        self._begin()

    def _open(self, kind: str, directory: str) -> None:
        ensure_dir(directory)
        names = [*STREAMED[:2], *STREAMED[2:] * self._records, *AT_END]
        for table in names:
            path = os.path.join(directory, f"{table}.{kind}")
            try:
                f = _KINDS[kind](directory, table)
            except OSError as err:
                raise ReportError(f"cannot write {path}: {reason(err)}") from err
            self._files.append(f)
            self._streamed.setdefault(table, []).append(f)
        self._stale += [
            os.path.join(directory, f"{table}.{kind}") for table in tables.SCHEMAS if table not in names
        ]

    def __enter__(self) -> TableExport:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.discard()
        return False

    def add(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        """Rows of a streamed table, in the order the engine releases them."""
        buffer = self._buffers.setdefault(table, [])
        buffer.extend(rows)
        if len(buffer) >= CHUNK_ROWS:
            self._flush(table)

    def _flush(self, table: str) -> None:
        rows = self._buffers.pop(table, None)
        if not rows:
            return
        for f in self._streamed.get(table, ()):
            self._guard(f, f.write, rows)

    def _guard(self, f: _TableFile, action, *args) -> None:
        try:
            action(*args)
        except OSError as err:
            raise ReportError(f"cannot write {f.path}: {reason(err)}") from err
        except (TypeError, ValueError) as err:
            raise ReportError(f"cannot build the tables: {err}") from err

    def finish(self, result: AuditResult) -> None:
        """Write the last rows and the end-of-run tables, then rename every file onto its target."""
        for table in list(self._buffers):
            self._flush(table)
        if self._files:
            try:
                at_end = {
                    "transactions": [tables.transaction_row(t) for t in result.transactions],
                    "findings": [tables.finding_row(f) for f in result.findings],
                    "partitions": tables.partition_rows(result.partitions),
                    "partition_log": tables.partition_log_rows(result.partitions),
                }
            except (TypeError, ValueError) as err:
                raise ReportError(f"cannot build the tables: {err}") from err
            for table, rows in at_end.items():
                for f in self._streamed[table]:
                    self._guard(f, f.write, rows)
        for f in self._files:
            self._guard(f, f.close)
        for f in self._files:
            self._guard(f, os.replace, f.tmp, f.path)
        self._done = True
        # A folder holds one run's tables: e.g. records.csv of an earlier --records run would otherwise
        # sit beside tables it does not belong to. Only ksniff's own table names are removed.
        for path in self._stale:
            try:
                unlink_quietly(path)
            except OSError as err:
                raise ReportError(f"cannot remove {path}, a table of an earlier run: {reason(err)}") from err

    def discard(self) -> None:
        if not self._done:
            for f in self._files:
                f.discard()


def write_tables(result: AuditResult, *, csv_dir: str | None = None, parquet_dir: str | None = None) -> None:
    """All tables of a result that holds its rows (the Spark engine's, a notebook's) in one go."""
    streamed = {"exchanges": result.exchanges, "batches": result.batches}
    if result.records is not None:
        streamed["records"] = result.records
    with TableExport(csv_dir=csv_dir, parquet_dir=parquet_dir, records=result.records is not None) as out:
        for table, rows in streamed.items():
            for start in range(0, len(rows), CHUNK_ROWS):
                out.add(table, rows[start : start + CHUNK_ROWS])
        out.finish(result)
