"""`ksniff audit` over real captures, as scripts and users call it: exit codes, every option, the outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from contract_keys import FINDING_KEYS, SET_FINDING_KEYS, TABLES, TOP_KEYS

from ksniff.cli import main

PCAPS = Path(__file__).parent / "pcaps"
CLEAN = PCAPS / "ctp_confluent_tansu.pcap"  # consume-transform-produce: no anomaly
FENCED = PCAPS / "txn_confluent_tansu.pcap"  # a zombie rejected with PRODUCER_FENCED


def ksniff(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_clean_capture_exits_zero():
    result = ksniff("audit", CLEAN, "--no-color")
    assert result.exit_code == 0, result.output
    assert "Producers" in result.output


def test_findings_exit_one_and_exit_zero_overrides():
    assert ksniff("audit", FENCED).exit_code == 1
    assert ksniff("audit", FENCED, "--exit-zero").exit_code == 0


def test_json_on_stdout_is_only_the_document():
    result = ksniff("audit", FENCED, "--json", "-", "--exit-zero")
    doc = json.loads(result.stdout)
    assert TOP_KEYS <= doc.keys()
    assert doc["inputs"][0]["format"] == "pcap"
    assert doc["decode"]["by_api"]["EndTxn"]["exchanges"] == 4
    outcomes = [t["outcome"] for t in doc["transactions"] if t["transactional_id"] == "tx-A"]
    assert sorted(outcomes) == ["abort", "commit", "commit", "commit"]
    kinds = {(f["kind"], f["severity"]) for f in doc["findings"]}
    assert ("producer_fenced", "warning") in kinds
    for finding in doc["findings"]:
        # The contract's keys, plus the additions of capture sets (README: "Capture sets and clusters").
        assert set(finding) == FINDING_KEYS | SET_FINDING_KEYS


def test_json_to_a_file(tmp_path):
    out = tmp_path / "result.json"
    result = ksniff("audit", CLEAN, "--json", out)
    assert result.exit_code == 0
    assert TOP_KEYS <= json.loads(out.read_text()).keys()


def test_csv_and_parquet_tables(tmp_path):
    result = ksniff("audit", FENCED, "--csv", tmp_path / "csv", "--parquet", tmp_path / "pq", "--exit-zero")
    assert result.exit_code == 0
    for table in TABLES:
        csv = pd.read_csv(tmp_path / "csv" / f"{table}.csv")
        parquet = pd.read_parquet(tmp_path / "pq" / f"{table}.parquet")
        assert len(csv) == len(parquet)
        if table in ("partitions", "partition_log"):  # a log is read by offset: no time column
            offset = ["first_offset"] if table == "partition_log" else []
            keys = list(zip(*(csv[c] for c in ["topic", "partition", "capture_set", *offset]), strict=True))
            assert keys == sorted(keys) and "ts" not in csv.columns
            continue
        time_column = "start_ts" if table == "transactions" else "ts"
        assert list(csv[time_column]) == sorted(csv[time_column])
        assert pd.to_datetime(csv[f"{time_column}_utc"]).notna().all()
    exchanges = pd.read_csv(tmp_path / "csv" / "exchanges.csv")
    assert (exchanges["api"] == "Produce").sum() == 8
    transactions = pd.read_parquet(tmp_path / "pq" / "transactions.parquet")
    assert sorted(transactions["outcome"]) == ["abort", "commit", "commit", "commit"]


def test_producer_timeline():
    result = ksniff("audit", FENCED, "--producer", "tx-A", "--no-color", "--exit-zero")
    assert result.exit_code == 0
    assert "InitProducerId" in result.output and "EndTxn" in result.output


def test_quiet_prints_findings_only():
    result = ksniff("audit", FENCED, "--quiet", "--exit-zero")
    assert "producer_fenced" in result.output
    assert "Producers" not in result.output


def test_no_color_has_no_escape_codes():
    assert "\x1b[" not in ksniff("audit", FENCED, "--no-color", "--exit-zero").output


def test_folder_input_audits_every_capture():
    doc = json.loads(ksniff("audit", PCAPS, "--json", "-", "--exit-zero").stdout)
    captures = {p for p in PCAPS.rglob("*") if p.suffix in (".pcap", ".pcapng")}
    assert len(doc["inputs"]) == len(captures)


def test_explicit_port_that_carries_no_kafka_decodes_nothing():
    doc = json.loads(ksniff("audit", CLEAN, "--port", "1234", "--json", "-").stdout)
    assert doc["decode"]["exchanges"] == 0 and doc["findings"] == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["audit", "no-such-file.pcap"], "no-such-file.pcap"),
        (["audit", __file__], "not a pcap"),
        (["audit", str(CLEAN), "--engine", "local", "--master", "local[2]"], "--master"),
    ],
)
def test_errors_are_one_line_and_exit_two(args, needle):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert needle in result.output


def test_topic_partition_view_and_tables(tmp_path):
    result = ksniff(
        "audit",
        PCAPS / "consume_mock.pcap",
        "-T",
        "reads-1",
        "--no-color",
        "--csv",
        tmp_path,
        "--parquet",
        tmp_path / "pq",
        "--exit-zero",
    )
    assert result.exit_code == 0
    view = result.output[result.output.index("Partition reads-1") :]
    assert "The log as seen" in view and "Who read it" in view and "aborted_read" in view
    assert "ABORT" in view and "COMMIT" in view
    log = pd.read_csv(tmp_path / "partition_log.csv")
    part1 = log[log["partition"] == 1]
    assert list(part1["first_offset"]) == [0, 2, 3, 5, 6, 8, 9, 11]
    assert list(part1["kind"]) == [
        "transactional",
        "COMMIT",
        "transactional",
        "ABORT",
        "transactional",
        "COMMIT",
        "transactional",
        "ABORT",
    ]
    assert pd.read_parquet(tmp_path / "pq" / "partition_log.parquet")["first_offset"].tolist() == list(
        log["first_offset"]
    )
    parts = pd.read_csv(tmp_path / "partitions.csv")
    assert set(zip(parts["topic"], parts["partition"], strict=True)) >= {("reads", 0), ("reads", 1)}
    missing = ksniff("audit", PCAPS / "consume_mock.pcap", "-T", "nope-3", "--no-color", "--exit-zero")
    assert "No partition nope-3" in missing.output
