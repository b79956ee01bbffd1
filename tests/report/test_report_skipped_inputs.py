"""A folder of an incident's files holds more than captures (notes, logs, exports): each file that is
not a capture is named in a warning and counted in the JSON, never skipped in silence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from ksniff.cli import main

CAPTURE = Path(__file__).parent.parent / "pcaps" / "txn_confluent_tansu.pcap"


def _incident(tmp_path: Path, others: int) -> Path:
    folder = tmp_path / "incident"
    (folder / "broker-1").mkdir(parents=True)
    shutil.copy(CAPTURE, folder / "broker-1" / "dump.pcap")
    (folder / "README.txt").write_text("what happened")
    for i in range(others):
        (folder / "broker-1" / f"server-{i:02d}.log").write_text("INFO nothing to see\n")
    return folder


def _audit(tmp_path: Path, *inputs: Path):
    out = tmp_path / "r.json"
    run = CliRunner().invoke(
        main, ["audit", *map(str, inputs), "--json", str(out), "--exit-zero", "-q", "--no-color"]
    )
    assert run.exit_code == 0, run.output
    warnings = [line for line in run.output.splitlines() if line.startswith("ksniff: warning:")]
    return warnings, json.loads(out.read_text())


def test_each_non_capture_is_named_and_counted(tmp_path):
    folder = _incident(tmp_path, others=2)
    warnings, doc = _audit(tmp_path, folder)
    skipped = [w for w in warnings if "not a capture" in w]
    names = " ".join(skipped)
    for name in ("README.txt", "server-00.log", "server-01.log"):
        assert name in names
    assert doc["capture"]["skipped_files"] == 3
    assert [i["path"] for i in doc["inputs"]] == [str(folder / "broker-1" / "dump.pcap")]
    assert any("not a capture" in w for w in doc["warnings"])
    assert doc["transactions"]  # the capture itself was audited


def test_many_non_captures_are_one_line_per_folder_and_all_counted(tmp_path):
    folder = _incident(tmp_path, others=40)
    warnings, doc = _audit(tmp_path, folder)
    skipped = [w for w in warnings if "not a capture" in w]
    assert len(skipped) == 2  # the folder and its subfolder, each one line
    assert any("and 35 more" in w for w in skipped)
    assert doc["capture"]["skipped_files"] == 41


def test_a_clean_folder_has_nothing_skipped(tmp_path):
    folder = tmp_path / "only"
    folder.mkdir()
    shutil.copy(CAPTURE, folder / "dump.pcap")
    warnings, doc = _audit(tmp_path, folder)
    assert not [w for w in warnings if "not a capture" in w]
    assert doc["capture"]["skipped_files"] == 0
