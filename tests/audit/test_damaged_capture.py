"""A capture whose bytes were damaged (a bit flipped in a record batch, as a failing disk or capture path
leaves it) gives no finding the damage could have invented: the batch fails its CRC-32C, nothing in it is
judged, what its absence leaves behind (the next batch's sequence) is unverified, and the verdict says
why. Real corpus captures, one bit flipped, audited by the command a user runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from pcap_edit import BASE_SEQUENCE_LOW_BYTE, PRODUCER_ID_LOW_BYTE, damaged, record_batches  # noqa: E402

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
