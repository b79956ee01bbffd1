"""The committed corpus is whole: every expectations file has its capture, small and readable, and the
expectations say what the README promises they say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap

HERE = Path(__file__).resolve().parent
EXPECTATIONS = sorted(HERE.glob("*.expect.json"))
MAX_BYTES = 1_000_000

REQUIRED = {
    "capture": str,
    "scenario": str,
    "broker": str,
    "client": str,
    "kafka_ports": list,
    "transactions": dict,
    "fenced": list,
    "findings": list,
    "clean": bool,
    "records_produced": int,
    "exchanges_by_api": dict,
    "api_versions": dict,
    "notes": str,
}
BROKERS = {"tansu", "librdkafka-mock"}
OUTCOMES = {"commit", "abort", "open", "unknown"}
KINDS = {
    "sequence_gap",
    "sequence_duplicate",
    "epoch_regression",
    "producer_fenced",
    "zombie_write_accepted",
    "hanging_transaction",
    "capture_gap",
}
# Kinds the audit room added beyond the contract's table ("more may be added"); the misuse, endtxn_empty
# and offsets_back captures expect them.
EXTRA_KINDS = {
    "sequence_out_of_order",
    "write_to_unregistered_partition",
    "write_outside_transaction",
    "txn_offset_commit_unregistered_group",
    "end_txn_without_transaction",
    "unanswered_request",
    "offset_commit_backwards",
    "transaction_ended_after_timeout",
    # what consumers were given (ksniff.audit.partlog): the consume_* and rewritten captures
    "aborted_read",
    "uncommitted_read",
    "lost_write",
    "duplicate_write",
    "torn_transaction",
    "offset_commit_past_end",
    "fetch_position_backwards",
    "fetch_position_skip",
    # sarama_idempotent_tansu (ksniff.audit.idempotence)
    "idempotence_not_in_effect",
    # hanging_tansu (ksniff.audit.partlog)
    "hanging_partition",
    # markers_tansu (WriteTxnMarkers built from the protocol facts: tests/pcaps/markers.py)
    "markers_disagree",
    # damaged_batch_tansu (a batch's bytes changed, its CRC-32C not: tests/pcaps/rewrite.py)
    "corrupt_batch",
}
SEVERITIES = {"critical", "warning", "info"}


def test_there_is_a_corpus() -> None:
    assert len(EXPECTATIONS) >= 15, "tests/pcaps lost captures: run tests/pcaps/generate.py"


def test_every_capture_has_expectations() -> None:
    captures = {p.name for p in HERE.iterdir() if p.suffix in (".pcap", ".pcapng")}
    described = {json.loads(p.read_text())["capture"] for p in EXPECTATIONS}
    assert captures - described == set(), "captures without NAME.expect.json"


@pytest.fixture(params=EXPECTATIONS, ids=lambda p: p.name.removesuffix(".expect.json"))
def expect(request) -> tuple[Path, dict]:
    return request.param, json.loads(request.param.read_text())


def test_capture_exists_small_and_readable(expect) -> None:
    path, doc = expect
    capture = path.with_name(doc["capture"])
    assert capture.name.removesuffix(".pcapng").removesuffix(".pcap") + ".expect.json" == path.name
    assert capture.is_file(), f"{capture.name} is missing"
    assert 0 < capture.stat().st_size < MAX_BYTES, f"{capture.name}: {capture.stat().st_size} bytes"
    packets = rdpcap(str(capture))
    assert len(packets) > 10
    ports = set(doc["kafka_ports"])
    assert any(TCP in p and {p[TCP].sport, p[TCP].dport} & ports for p in packets), (
        "no TCP traffic on the Kafka ports"
    )


def test_expectations_have_the_documented_shape(expect) -> None:
    _, doc = expect
    for key, kind in REQUIRED.items():
        assert key in doc, f"missing key {key}"
        assert isinstance(doc[key], kind), f"{key} should be {kind.__name__}"
    assert doc["broker"] in BROKERS
    assert doc["kafka_ports"] and all(isinstance(p, int) and 0 < p < 65536 for p in doc["kafka_ports"])
    for tid, outcomes in doc["transactions"].items():
        assert set(outcomes) == OUTCOMES, tid
        assert all(isinstance(n, int) and n >= 0 for n in outcomes.values()), tid
    for fence in doc["fenced"]:
        assert set(fence) >= {"transactional_id", "broker_error"}
    for finding in doc["findings"]:
        assert finding["kind"] in KINDS | EXTRA_KINDS and finding["severity"] in SEVERITIES, finding
    for extra in doc.get("may_also_find", []):
        assert extra["kind"] in KINDS | EXTRA_KINDS and extra["max_severity"] in SEVERITIES, extra
    assert doc["clean"] == (not any(f["severity"] in ("warning", "critical") for f in doc["findings"]))
    assert doc["records_produced"] >= 0
    assert all(isinstance(n, int) and n >= 0 for n in doc["exchanges_by_api"].values())
    assert all(v and all(isinstance(x, int) for x in v) for v in doc["api_versions"].values())
    assert set(doc["exchanges_by_api"]) <= set(doc["api_versions"])


def test_nothing_critical_rests_on_lost_bytes(expect) -> None:
    _, doc = expect
    if any(f["kind"] == "capture_gap" for f in doc["findings"]):
        assert not [f for f in doc["findings"] if f["severity"] == "critical"]
        assert all(e["max_severity"] != "critical" for e in doc.get("may_also_find", []))
