"""A capture whose bytes were damaged (a bit flipped in a record batch, as a failing disk or capture path
leaves it) gives no finding the damage could have invented: the batch fails its CRC-32C, nothing in it is
judged, what its absence leaves behind (the next batch's sequence) is unverified, and the verdict says
why. Real corpus captures, one bit flipped, audited by the command a user runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from pcap_edit import (  # noqa: E402
    BASE_SEQUENCE_LOW_BYTE,
    PRODUCER_ID_LOW_BYTE,
    damaged,
    frame_bit_flipped,
    record_batches,
    retimed,
    without,
)

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


def audit(capture: Path, tmp_path: Path) -> dict:
    out = tmp_path / "audit.json"
    run = subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "audit", str(capture), "--json", str(out), "-q", "--exit-zero"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return json.loads(out.read_text())


def serious(doc: dict) -> list[tuple[str, str]]:
    return [(f["kind"], f["severity"]) for f in doc["findings"] if f["severity"] != "info"]


def test_a_flipped_sequence_in_a_produce_batch_invents_no_gap(tmp_path: Path) -> None:
    capture = PCAPS / "idempotent_none_tansu.pcap"
    assert audit(capture, tmp_path)["summary"]["verdict"] == "clean"
    # Without the CRC check this bit (base sequence 15 -> 31 on a partition's second batch, or 0 -> 16 on
    # its first) was a critical sequence gap and a critical duplicate, "accepted by the broker".
    doc = audit(damaged(capture, tmp_path / "flipped.pcap", 0, BASE_SEQUENCE_LOW_BYTE), tmp_path)
    assert serious(doc) == []
    corrupt = [f for f in doc["findings"] if f["kind"] == "corrupt_batch"]
    assert len(corrupt) == 1
    assert corrupt[0]["severity"] == "info" and corrupt[0]["evidence"]["direction"] == "to_broker"
    assert corrupt[0]["topic"] == "bulk" and corrupt[0]["partition"] in range(4)
    # What the missing batch leaves behind on its partition is judged as after a gap: unverified.
    gaps = [f for f in doc["findings"] if f["kind"] == "sequence_gap"]
    assert all(f["evidence"].get("unverified") for f in gaps)
    assert doc["summary"]["verdict"] == "unverified"
    assert any("fails its CRC-32C" in r for r in doc["summary"]["unverified_because"])
    # The producer's other batches are still counted: only the damaged one is left out.
    assert doc["producers"][0]["records"] == 240 - 15


def test_a_flipped_producer_id_in_a_fetched_batch_invents_no_lost_write(tmp_path: Path) -> None:
    capture = PCAPS / "ctp_confluent_tansu.pcap"
    clean = audit(capture, tmp_path)
    assert clean["summary"]["verdict"] == "clean"
    batches = record_batches(capture.read_bytes())
    assert len({crc for _, crc in batches}) < len(batches)  # a produced batch read back by a Fetch
    doc = audit(damaged(capture, tmp_path / "flipped.pcap", 1, PRODUCER_ID_LOW_BYTE), tmp_path)
    # The answer's batch names another producer at the acknowledged offset: without the CRC check, a
    # critical lost write.
    assert serious(doc) == []
    corrupt = [f for f in doc["findings"] if f["kind"] == "corrupt_batch"]
    assert [f["evidence"]["direction"] for f in corrupt] == ["to_client"]
    assert doc["summary"]["verdict"] == "unverified"
    # What the producers did is what the undamaged capture says: the damage was in a consumer's answer.
    assert doc["producers"] == clean["producers"] and doc["transactions"] == clean["transactions"]


@pytest.mark.parametrize(
    "record, bit, what",
    [
        (134, 24, "a transaction 'ended after its timeout' 194 days later"),
        (141, 32 + 25, "a commit to a group the transaction had not registered"),
        (243, 23, "an offset commit 'backwards'"),
        (247, 32 + 19, "an offset commit 'backwards' (half a second)"),
    ],
)
def test_a_flipped_bit_in_a_packet_time_invents_no_finding(tmp_path: Path, record, bit, what) -> None:
    """One bit of a pcap record's time flipped moves its packet half a second to 194 days away from the
    packets around it, and each of these four flips made the audit report `what` (found by
    bench/bench_damage.py). The walk gives such a packet the time of the one before it and says so."""
    capture = PCAPS / "ctp_confluent_tansu.pcap"
    whole = audit(capture, tmp_path)
    doc = audit(retimed(capture, tmp_path / "retimed.pcap", record, bit), tmp_path)
    assert doc["capture"]["damaged_times"] == 1 and whole["capture"]["damaged_times"] == 0
    assert [w for w in doc["warnings"] if "packet time out of line" in w]
    assert serious(doc) == serious(whole) == []
    assert doc["summary"]["verdict"] == whole["summary"]["verdict"]
    assert doc["capture"]["last_ts"] == whole["capture"]["last_ts"]
    assert [t["outcome"] for t in doc["transactions"]] == [t["outcome"] for t in whole["transactions"]]


@pytest.mark.parametrize(
    "capture, record, at, bit",
    [
        ("ctp_confluent_tansu", 134, 14 + 6, 1),  # a fragment offset bit: the packet was a "fragment"
        ("txn_confluent_tansu", 39, 14 + 19, 7),  # the destination address: another connection's bytes
        ("txn_confluent_tansu", 47, 14 + 9, 0),  # the protocol: TCP became "not TCP"
    ],
)
def test_a_flipped_bit_in_an_ip_header_is_a_gap(tmp_path: Path, capture, record, at, bit) -> None:
    """A packet whose IPv4 header fails its checksum is left out and said to be: the bytes it carried
    are a gap of their connection (unverified, never silently missing or another connection's)."""
    path = PCAPS / f"{capture}.pcap"
    whole = audit(path, tmp_path)
    doc = audit(frame_bit_flipped(path, tmp_path / "flipped.pcap", record, at, bit), tmp_path)
    assert whole["capture"]["damaged_packets"] == 0 and whole["capture"]["gaps"] == 0
    assert doc["capture"]["damaged_packets"] == 1
    assert doc["capture"]["gaps"] == 1 and doc["summary"]["verdict"] != "clean"
    assert doc["capture"]["connections"] == whole["capture"]["connections"]
    assert [w for w in doc["warnings"] if "IPv4 header fails its checksum" in w]


@pytest.mark.parametrize("record, lost", [(38, "request"), (39, "answer")])
def test_a_lost_registration_leaves_the_writes_it_allowed_unverified(tmp_path: Path, record, lost) -> None:
    """The capture lost one packet: the AddPartitionsToTxn request of a transaction, or its answer. The
    producer's writes that followed, on its partition leader's connection, look written outside a
    transaction; they were critical findings, because the loss became known only later (when the
    client's next bytes on the coordinator's connection came). Now the answer to a request the capture
    did not read is a loss when it comes, and a registration left unanswered leaves open what it asked
    for: the writes are unverified, and nothing is reported that the whole capture does not have."""
    capture = PCAPS / "txn_confluent_tansu.pcap"
    whole = audit(capture, tmp_path)
    doc = audit(without(capture, tmp_path / "lost.pcap", record), tmp_path)
    assert set(serious(doc)) <= set(serious(whole))
    outside = [f for f in doc["findings"] if f["kind"] == "write_outside_transaction"]
    assert outside and all(f["severity"] == "info" and f["evidence"].get("unverified") for f in outside)
    assert doc["summary"]["verdict"] == whole["summary"]["verdict"] == "findings"
    reasons = " ".join(doc["summary"]["unverified_because"])
    assert ("answer whose request the capture did not read" in reasons) == (lost == "request")


def test_a_flipped_offset_in_a_produce_answer_is_no_duplicate(tmp_path: Path) -> None:
    """A bit of a Produce answer's base offset (no CRC covers it) flipped: the batch acknowledged at
    524,288, and read back by the consumer at 0, looked written twice (a critical duplicate). The Fetch
    answer's high watermark says the log ends long before 524,288: the answer's offset is contradicted,
    so the duplicate rests on damaged bytes (info, unverified)."""
    capture = PCAPS / "ctp_confluent_tansu.pcap"
    whole = audit(capture, tmp_path)
    doc = audit(frame_bit_flipped(capture, tmp_path / "offset.pcap", 146, 66 + 30, 3), tmp_path)
    assert serious(doc) == serious(whole) == []
    duplicates = [f for f in doc["findings"] if f["kind"] == "duplicate_write"]
    assert [(f["severity"], f["evidence"]["offsets"]) for f in duplicates] == [("info", [0, 524288])]
    assert duplicates[0]["evidence"]["unverified"]
