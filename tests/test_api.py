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
