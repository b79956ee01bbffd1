"""The exports: JSON keys of docs/contract.md, CSV/Parquet round trips with pandas, atomic writes."""

import json
import os
import stat
from dataclasses import replace
from datetime import datetime, timezone

import pandas as pd
import pytest
from contract_keys import (
    CAPTURE_KEYS,
    DECODE_KEYS,
    FINDING_KEYS,
    PRODUCER_KEYS,
    TABLES,
    TOP_KEYS,
    TXN_KEYS,
)

from ksniff.audit.model import Finding
from ksniff.report import atomic, tables
from ksniff.report.formats import ReportError, write_csv, write_json, write_outputs, write_parquet


def test_json_has_every_contract_key(result, tmp_path):
    path = tmp_path / "out" / "result.json"
    write_json(result, str(path))
    doc = json.loads(path.read_text())
    assert set(doc) >= TOP_KEYS
    assert set(doc["inputs"][0]) >= {"path", "format", "linktype", "packets", "bytes"}
    assert set(doc["capture"]) >= CAPTURE_KEYS
    assert set(doc["decode"]) >= DECODE_KEYS
    assert set(doc["decode"]["by_api"]["Produce"]) >= {"requests", "responses", "exchanges", "versions"}
    assert all(set(p) >= PRODUCER_KEYS for p in doc["producers"])
    assert set(doc["producers"][0]["transactions"]) == {"commit", "abort", "open", "unknown"}
    assert all(set(t) >= TXN_KEYS for t in doc["transactions"])
    assert all(set(f) >= FINDING_KEYS for f in doc["findings"])
    assert isinstance(doc["findings"][0]["ts"], float) and isinstance(doc["producers"][0]["producer_id"], int)


def test_json_of_an_empty_result_has_every_key(empty, tmp_path):
    path = tmp_path / "empty.json"
    write_json(empty, str(path))
    doc = json.loads(path.read_text())
    assert set(doc) >= TOP_KEYS
    assert doc["findings"] == [] and doc["decode"]["by_api"] == {}


def test_json_to_stdout_carries_only_the_document(result, capsys):
    write_json(result, "-")
    out = capsys.readouterr().out
    assert json.loads(out)["version"] == "0.1.0"


def _with_unserialisable_finding(result):
    bad = Finding("sequence_gap", "critical", result.findings[-1].ts + 1, "late", evidence={"x": object()})
    result.findings.append(bad)
    return result


def test_json_that_cannot_be_serialised_leaves_no_file(result, tmp_path):
    path = tmp_path / "result.json"
    path.write_text('{"previous": true}')
    with pytest.raises(ReportError, match="not JSON serialisable"):
        write_json(_with_unserialisable_finding(result), str(path))
    assert json.loads(path.read_text()) == {"previous": True}  # the old file is untouched
    assert os.listdir(tmp_path) == ["result.json"]  # and no temporary file is left behind


@pytest.mark.parametrize("interruption", [ValueError, KeyboardInterrupt])
def test_failure_midway_through_a_file_removes_the_temporary_file(tmp_path, interruption):
    target = tmp_path / "half.txt"

    def write_half(fh):
        fh.write("first half\n")
        raise interruption("interrupted")

    with pytest.raises(interruption):
        atomic.write_atomically(str(target), write_half)
    assert os.listdir(tmp_path) == []


def test_csv_with_unserialisable_evidence_fails_without_partial_files(result, tmp_path):
    with pytest.raises(ReportError, match="not JSON serialisable"):
        write_csv(_with_unserialisable_finding(result), str(tmp_path / "csv"))
    assert os.listdir(tmp_path / "csv") == []


def test_csv_round_trip(result, tmp_path):
    write_csv(result, str(tmp_path / "csv"))
    assert sorted(os.listdir(tmp_path / "csv")) == sorted(f"{t}.csv" for t in TABLES)
    expected = tables.frames(result)
    for table in TABLES:
        schema = tables.SCHEMAS[table]
        df = pd.read_csv(tmp_path / "csv" / f"{table}.csv", dtype=schema)
        time_cols = tables.TIME_COLUMNS[table]
        assert list(df.columns) == _csv_columns(table)
        assert len(df) == len(expected[table])
        pd.testing.assert_frame_equal(df[list(schema)], expected[table])
        for col in time_cols:
            parsed = pd.to_datetime(df[col + "_utc"], utc=True, format="ISO8601")
            assert ((parsed - tables.utc_timestamps(df[col])).dropna() == pd.Timedelta(0)).all()
            assert parsed.notna().sum() == df[col].notna().sum()


def _csv_columns(table):
    cols = []
    for col in tables.SCHEMAS[table]:
        cols.append(col)
        if col in tables.TIME_COLUMNS[table]:
            cols.append(col + "_utc")
    return cols


def test_csv_time_text_is_iso_8601_utc_to_the_microsecond(result, tmp_path):
    result.findings[2] = replace(result.findings[2], ts=1714564802.156789)
    write_csv(result, str(tmp_path))
    zombie = (tmp_path / "findings.csv").read_text().splitlines()[3]
    assert zombie.startswith("1714564802.156789,2024-05-01T12:00:02.156789Z,critical,zombie_write_accepted,")
    when = datetime.fromisoformat(zombie.split(",")[1].replace("Z", "+00:00"))
    assert when == datetime(2024, 5, 1, 12, 0, 2, 156789, tzinfo=timezone.utc)


def test_empty_csv_has_headers(empty, tmp_path):
    write_csv(empty, str(tmp_path))
    for table in TABLES:
        df = pd.read_csv(tmp_path / f"{table}.csv")
        assert df.empty and list(df.columns) == _csv_columns(table)


def test_parquet_round_trip(result, tmp_path):
    write_parquet(result, str(tmp_path / "pq"))
    expected = tables.frames(result)
    for table in TABLES:
        df = pd.read_parquet(tmp_path / "pq" / f"{table}.parquet")
        assert list(df.columns) == list(tables.SCHEMAS[table])
        assert len(df) == len(expected[table])
        for col in tables.TIME_COLUMNS[table]:
            assert str(df[col].dtype) == "datetime64[us, UTC]"
        pd.testing.assert_frame_equal(df, tables.with_datetimes(expected[table], table))


def test_empty_parquet_keeps_types(empty, tmp_path):
    write_parquet(empty, str(tmp_path))
    df = pd.read_parquet(tmp_path / "findings.parquet")
    assert df.empty and str(df["ts"].dtype) == "datetime64[us, UTC]" and str(df["partition"].dtype) == "Int64"


def test_exports_get_the_mode_the_umask_gives(result, tmp_path):
    old = os.umask(0o022)
    try:
        write_json(result, str(tmp_path / "r.json"))
        write_csv(result, str(tmp_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "findings.csv").stat().st_mode) == 0o644


def test_write_outputs_writes_what_was_asked(result, tmp_path):
    write_outputs(result, json_path=str(tmp_path / "r.json"), parquet_dir=str(tmp_path / "pq"))
    assert sorted(os.listdir(tmp_path)) == ["pq", "r.json"]


def test_unwritable_paths_raise_one_line_report_errors(result, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for write in (write_csv, write_parquet):
        with pytest.raises(ReportError) as err:
            write(result, str(blocker / "sub"))
        assert "\n" not in str(err.value) and str(blocker) in str(err.value)
    with pytest.raises(ReportError):
        write_json(result, str(blocker / "r.json"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_directory(result, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(ReportError, match="cannot write"):
            write_csv(result, str(ro))
        with pytest.raises(ReportError, match="cannot write"):
            write_json(result, str(ro / "r.json"))
    finally:
        ro.chmod(stat.S_IRWXU)
