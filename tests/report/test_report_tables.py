"""Row builders and frames: the columns docs/contract.md promises, stable dtypes, sorted by time."""

import json

import pandas as pd
import pytest

from ksniff.audit.model import AuditOutput
from ksniff.capture.events import CaptureStats
from ksniff.decode.events import DecodeStats, last_sequence
from ksniff.decode.rows import batch_row, exchange_row
from ksniff.report import tables
from ksniff.report.tables import finding_row, frames, transaction_row
from ksniff.result import AuditResult


def test_exchange_row_has_exactly_the_documented_columns(exchanges):
    for ex in exchanges:
        assert tuple(exchange_row(ex)) == tables.EXCHANGE_COLUMNS


def test_exchange_row_takes_the_producer_from_the_answer_of_init_producer_id(exchanges):
    init = next(e for e in exchanges if e.api_name == "InitProducerId" and e.client_id == "orders-app-2")
    row = exchange_row(init)
    assert (row["transactional_id"], row["producer_id"], row["producer_epoch"]) == ("orders-txn", 4001, 1)
    assert row["error_code"] == 0 and row["error"] == "NONE"
    assert row["latency_ms"] == pytest.approx(12.0)


def test_exchange_row_takes_the_producer_of_produce_from_its_batches(exchanges):
    row = exchange_row(next(e for e in exchanges if e.api_name == "Produce"))
    assert (row["producer_id"], row["producer_epoch"]) == (4001, 0)
    assert row["error_code"] is None  # Produce answers per partition: see the batches table


def test_exchange_row_without_bodies_leaves_cells_empty(exchanges):
    row = exchange_row(next(e for e in exchanges if e.api_name == "Metadata"))
    assert row["status"] == "unanswered" and row["unverified"] is True
    assert row["response_ts"] is None and row["latency_ms"] is None
    assert row["producer_id"] is None and row["transactional_id"] is None and row["error"] is None


def test_batch_row(exchanges):
    produce = next(e for e in exchanges if e.api_name == "Produce")
    row = batch_row(produce.batches[0])
    assert tuple(row) == tables.BATCH_COLUMNS
    assert row["base_sequence"] == 0 and row["last_sequence"] == 9 and row["records"] == 10
    assert row["error"] == "NONE" and row["base_offset"] == 100 and row["transactional"] is True


def test_last_sequence_wraps_like_kafka():
    assert last_sequence(2**31 - 2, 4) == 2
    assert last_sequence(-1, 4) == -1


def test_transaction_and_finding_rows(result):
    txn = transaction_row(result.transactions[0])
    assert tuple(txn) == tables.TRANSACTION_COLUMNS
    assert json.loads(txn["partitions"]) == ["orders-0", "orders-1"]
    assert txn["duration_ms"] == pytest.approx(49.0)
    finding = finding_row(result.findings[0])
    assert tuple(finding) == tables.FINDING_COLUMNS
    assert json.loads(finding["evidence"]) == result.findings[0].evidence


def test_every_engine_result_sorts_rows_by_request_time(exchanges):
    """Exchanges complete in response order; AuditResult.of_run, which every engine ends with, sorts."""
    late_first = list(reversed(exchanges))
    result = AuditResult.of_run(
        "local",
        inputs=[],
        capture=CaptureStats(),
        decode=DecodeStats(),
        output=AuditOutput((), (), ()),
        warnings=[],
        exchanges=[exchange_row(e) for e in late_first],
        batches=[batch_row(b) for e in late_first for b in e.batches],
    )
    ex_rows, batch_rows = result.exchanges, result.batches
    assert len(ex_rows) == len(exchanges)
    assert len(batch_rows) == sum(len(e.batches) for e in exchanges)
    assert [r["ts"] for r in ex_rows] == sorted(e.request_ts for e in exchanges)
    assert [r["ts"] for r in batch_rows] == sorted(r["ts"] for r in batch_rows)


def test_frames_have_schema_columns_and_dtypes(result):
    dfs = frames(result)
    assert set(dfs) == {"exchanges", "batches", "transactions", "findings", "partitions", "partition_log"}
    for name, df in dfs.items():
        assert list(df.columns) == list(tables.SCHEMAS[name])
        assert {c: str(t) for c, t in df.dtypes.items()} == {
            c: str(pd.Series([], dtype=t).dtype) for c, t in tables.SCHEMAS[name].items()
        }
        assert df[tables.SORT_COLUMN[name]].is_monotonic_increasing
    assert len(dfs["findings"]) == len(result.findings)
    assert len(dfs["transactions"]) == len(result.transactions)


def test_empty_frames_keep_columns_and_dtypes(empty, result):
    full = frames(result)
    for name, df in frames(empty).items():
        assert df.empty
        assert df.dtypes.to_dict() == full[name].dtypes.to_dict()


def test_with_datetimes_keeps_microseconds():
    df = tables.frame([{"ts": 1714564800.123456, "response_ts": None}], "exchanges")
    out = tables.with_datetimes(df, "exchanges")
    assert out["ts"][0] == pd.Timestamp("2024-05-01 12:00:00.123456", tz="UTC")
    assert pd.isna(out["response_ts"][0])
    assert str(out["ts"].dtype) == "datetime64[us, UTC]"
