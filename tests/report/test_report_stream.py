"""Exports written in chunks as rows come (ksniff.report.stream): the same files as the whole-table export,
late rows still sorted, nothing left behind by an interrupted run, and the --producer rows kept apart."""

from __future__ import annotations

import io
import math
import os
import random

import pandas as pd
import pytest
from contract_keys import TABLES

from ksniff.report import stream, tables
from ksniff.report.cells import neutral
from ksniff.report.stream import CSV_TIME_FORMAT, UTC_SUFFIX, TableExport, write_tables
from ksniff.report.timeline import ProducerRows, producer_timeline

from .conftest import T0


def csv_frame(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """The CSV layout built with pandas, independently of the writer: each time column followed by its
    `_utc` text twin, text cells neutralised for spreadsheets."""
    out = df.copy()
    for col, dtype in tables.SCHEMAS[table].items():
        if dtype == "string":
            out[col] = out[col].map(neutral, na_action="ignore").astype("string")
    for col in tables.TIME_COLUMNS[table]:
        text = tables.utc_timestamps(df[col]).dt.strftime(CSV_TIME_FORMAT)
        out.insert(out.columns.get_loc(col) + 1, col + UTC_SUFFIX, text.astype("string"))
    return out


def _pandas_csv(rows, table) -> str:
    """What pandas writes for the table, the reference for the chunked writer."""
    buf = io.StringIO()
    csv_frame(tables.frame(rows, table), table).to_csv(buf, index=False)
    return buf.getvalue()


def _stream_csv(result, tmp_path, monkeypatch, chunk: int) -> dict[str, str]:
    monkeypatch.setattr(stream, "CHUNK_ROWS", chunk)
    write_tables(result, csv_dir=str(tmp_path))
    return {t: (tmp_path / f"{t}.csv").read_text(encoding="utf-8") for t in TABLES}


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_chunked_csv_is_what_pandas_wrote(result, tmp_path, monkeypatch, chunk):
    written = _stream_csv(result, tmp_path, monkeypatch, chunk)
    expected = {
        "exchanges": _pandas_csv(result.exchanges, "exchanges"),
        "batches": _pandas_csv(result.batches, "batches"),
        "transactions": _pandas_csv([tables.transaction_row(t) for t in result.transactions], "transactions"),
        "findings": _pandas_csv([tables.finding_row(f) for f in result.findings], "findings"),
        "partitions": _pandas_csv(tables.partition_rows(result.partitions), "partitions"),
        "partition_log": _pandas_csv(tables.partition_log_rows(result.partitions), "partition_log"),
    }
    assert written == expected


def test_cells_match_pandas_on_awkward_values():
    rng = random.Random(7)
    floats = [
        None,
        math.nan,
        0.0,
        1.5,
        1e-05,
        0.0001,
        1e16,
        123456789012345.67,
        1714564802.156,
        1714564802.0000005,
        *(rng.uniform(1.6e9, 1.8e9) for _ in range(200)),
        *(rng.uniform(0, 1e4) for _ in range(200)),
    ]
    texts = [None, "", "a,b", 'say "hi"', "two\nlines", "ünïcode", " lead", "x\r\ny"]
    rows = []
    for i, f in enumerate(floats):
        row = dict.fromkeys(tables.EXCHANGE_SCHEMA)
        when = None if f is None or f != f else T0 + f % 1e5
        row.update(
            ts=T0 + i,
            response_ts=when,
            latency_ms=f,
            conn=None if i % 3 == 0 else i,
            client=texts[i % len(texts)],
            unverified=(None, True, False)[i % 3],
            api=texts[(i + 3) % len(texts)],
        )
        rows.append(row)
    buf = io.StringIO()
    import csv

    writer = csv.writer(buf, lineterminator="\n")
    cells = stream._csv_cells("exchanges")
    writer.writerow([name for name, _, _ in cells])
    ordered = sorted(rows, key=lambda r: r["ts"])
    writer.writerows(map(stream._line_function(cells), ordered))
    assert buf.getvalue() == _pandas_csv(rows, "exchanges")


def _late(result):
    """The result's exchanges released as an engine would after a slow exchange: one row comes late."""
    rows = list(result.exchanges)
    late = rows.pop(1)
    rows.append(late)
    return rows


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_late_row_still_lands_in_time_order(result, tmp_path, monkeypatch, kind):
    monkeypatch.setattr(stream, "CHUNK_ROWS", 2)
    target = str(tmp_path / kind)
    with TableExport(**{f"{kind}_dir": target}) as out:
        for row in _late(result):
            out.add("exchanges", [row])
        out.finish(result)
    path = tmp_path / kind / f"exchanges.{kind}"
    if kind == "csv":
        got = pd.read_csv(path, dtype=tables.EXCHANGE_SCHEMA)[list(tables.EXCHANGE_SCHEMA)]
        assert path.read_text(encoding="utf-8") == _pandas_csv(result.exchanges, "exchanges")
        pd.testing.assert_frame_equal(got, tables.frame(result.exchanges, "exchanges"))
    else:
        got = pd.read_parquet(path)
        expected = tables.with_datetimes(tables.frame(result.exchanges, "exchanges"), "exchanges")
        pd.testing.assert_frame_equal(got, expected)


def test_an_interrupted_run_leaves_no_file(result, tmp_path):
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "exchanges.csv").write_text("the previous export\n")
    with (
        pytest.raises(KeyboardInterrupt),
        TableExport(csv_dir=str(tmp_path / "csv"), parquet_dir=str(tmp_path / "pq")) as out,
    ):
        out.add("exchanges", result.exchanges * 3000)  # past a chunk: data already on disk
        raise KeyboardInterrupt
    assert os.listdir(tmp_path / "csv") == ["exchanges.csv"]
    assert (tmp_path / "csv" / "exchanges.csv").read_text() == "the previous export\n"
    assert os.listdir(tmp_path / "pq") == []


def test_parquet_is_written_in_row_groups(result, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    monkeypatch.setattr(stream, "CHUNK_ROWS", 2)
    write_tables(result, parquet_dir=str(tmp_path))
    meta = pq.ParquetFile(tmp_path / "exchanges.parquet").metadata
    assert meta.num_rows == len(result.exchanges) and meta.num_row_groups > 1


@pytest.mark.parametrize("producer", ["orders-txn", "4001", "5002", "payments-txn", "no-such-txn"])
def test_producer_rows_give_the_same_timeline(result, producer):
    keep = ProducerRows(producer)
    for row in result.exchanges:
        keep.add("exchanges", [row])
        keep.add(
            "batches",
            [
                b
                for b in result.batches
                if (b["conn"], b["correlation_id"]) == (row["conn"], row["correlation_id"])
            ],
        )
    whole = producer_timeline(result, producer, limit=None)
    kept = producer_timeline(result, producer, keep.exchanges, keep.batches, limit=None)
    from rich.console import Console

    def text(renderable):
        console = Console(record=True, width=160, no_color=True)
        console.print(renderable)
        return console.export_text()

    assert text(kept) == text(whole)
    assert len(keep.exchanges) <= len(result.exchanges)


@pytest.mark.parametrize("table", [*TABLES, "records"])
def test_arrow_schema_is_the_one_pandas_gives(table):
    import json

    import pyarrow as pa

    theirs = pa.Table.from_pandas(
        tables.with_datetimes(tables.frame([], table), table), preserve_index=False
    ).schema
    ours = stream.arrow_schema(table)
    assert ours.equals(theirs, check_metadata=False)
    assert json.loads(ours.metadata[b"pandas"]) == json.loads(theirs.metadata[b"pandas"])
