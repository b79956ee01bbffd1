"""The notebook API: `ksniff.audit(paths)` gives the result tables as pandas DataFrames."""

import json
from pathlib import Path

import pytest

import ksniff
from ksniff.capture import CaptureError

PCAPS = Path(__file__).parent / "pcaps"


def test_audit_returns_dataframes_of_a_real_capture():
    result = ksniff.audit(str(PCAPS / "txn_confluent_tansu.pcap"))
    txns = result.transactions
    outcomes = sorted(txns[txns["transactional_id"] == "tx-A"]["outcome"])
    assert outcomes == ["abort", "commit", "commit", "commit"]
    assert "producer_fenced" in set(result.findings["kind"])
    assert (result.exchanges["api"] == "EndTxn").sum() == 4
    assert result.batches["records"].sum() == 16
    assert result.document["version"] == ksniff.__version__


def test_audit_takes_a_list_and_ports():
    ports = json.loads((PCAPS / "ctp_confluent_tansu.expect.json").read_text())["kafka_ports"]
    result = ksniff.audit([PCAPS / "ctp_confluent_tansu.pcap"], ports=ports)
    assert result.findings.empty
    assert not result.producers.empty
    assert set(result.exchanges["api"]) >= {"AddOffsetsToTxn", "TxnOffsetCommit", "OffsetCommit"}


def test_unreadable_input_raises_capture_error():
    with pytest.raises(CaptureError):
        ksniff.audit("no-such-file.pcap")


def test_paths_and_ports_as_a_user_writes_them():
    """A pathlib.Path, a port as int, and the CLI's comma text all audit the same way."""
    path = PCAPS / "txn_confluent_tansu.pcap"
    by_text = ksniff.audit(str(path), ports="9092")
    by_path_and_int = ksniff.audit(path, ports=9092)
    by_list = ksniff.audit([path], ports=[9092, "19093"])
    findings = by_text.document["findings"]
    assert by_path_and_int.document["findings"] == findings == by_list.document["findings"]
    assert by_text.document["inputs"][0]["path"] == str(path)
    with pytest.raises(ValueError, match="not a TCP port: '70000'"):
        ksniff.audit(path, ports="9092,70000")


def test_unknown_engine_is_an_error():
    with pytest.raises(ValueError, match="unknown engine 'sparkk'"):
        ksniff.audit(PCAPS / "txn_confluent_tansu.pcap", engine="sparkk")


def test_help_shows_the_call_and_the_room_stays_importable():
    import inspect
    import pydoc

    text = pydoc.render_doc(ksniff.audit, renderer=pydoc.plaintext)
    assert "Audit capture files or folders" in text and "engine:" in text
    assert list(inspect.signature(ksniff.audit).parameters)[:2] == ["paths", "ports"]
    import ksniff.audit as room
    from ksniff.audit import step

    assert room.step is step and ksniff.audit_captures.__module__ == "ksniff.api"


def test_dataframes_carry_utc_datetimes_and_the_repr_is_short():
    result = ksniff.audit(PCAPS / "txn_confluent_tansu.pcap")
    for table, column in (
        ("transactions", "start_ts"),
        ("findings", "ts"),
        ("exchanges", "ts"),
        ("batches", "ts"),
    ):
        series = getattr(result, table)[column]
        assert str(series.dtype) == "datetime64[us, UTC]", (table, series.dtype)
        assert series.min().year == 2026
    text = repr(result)
    assert len(text) < 200 and "\n" not in text
    assert text == (
        "<ksniff Audit (local): 1 input, 6 Kafka connections, 4 transactions, 3 findings (2 warning, 1 info)>"
    )


def test_partition_logs_as_dataframes():
    """A consumer capture's logs: the aborted transactions' batches and markers where the wire put them."""
    result = ksniff.audit(PCAPS / "consume_mock.pcap")
    parts = result.partitions
    assert {("reads", 0), ("reads", 1)} <= set(zip(parts["topic"], parts["partition"], strict=True))
    log = result.partition_log
    part1 = log[(log["topic"] == "reads") & (log["partition"] == 1)]
    assert list(part1["first_offset"]) == sorted(part1["first_offset"])
    assert {"COMMIT", "ABORT"} <= set(part1["kind"])
    assert (log["capture_set"] == 1).all()
