"""`ksniff live` end to end: a real broker and a real transactional client on loopback, captured live.

Needs root (a raw capture socket); the broker is a Tansu process on a free loopback port that the test
starts and stops itself.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import harness
import pytest
from live_cli import replay_copy, start_live

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root"),
]


def transactional_story(bootstrap: str) -> None:
    """commit, abort, commit; then a second instance fences the first, whose next attempt fails."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    for future in admin.create_topics([NewTopic("live", 2, 1)]).values():
        future.result(10)
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": "live-tx", "client.id": "first"})
    first.init_transactions(10)
    for commit in (True, False, True):
        first.begin_transaction()
        for i in range(4):
            first.produce("live", value=b"x" * 20, partition=i % 2)
        first.flush(10)
        (first.commit_transaction if commit else first.abort_transaction)(10)
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": "live-tx", "client.id": "second"})
    second.init_transactions(10)
    first.begin_transaction()
    first.produce("live", value=b"zombie", partition=0)
    with pytest.raises(KafkaException):
        first.commit_transaction(5)


def check(doc: dict, source_format: str = "live") -> None:
    outcomes = sorted(t["outcome"] for t in doc["transactions"] if t["transactional_id"] == "live-tx")
    assert outcomes == ["abort", "commit", "commit"]
    kinds = {(f["kind"], f["severity"]) for f in doc["findings"]}
    assert ("producer_fenced", "warning") in kinds  # the broker rejected the zombie
    assert doc["inputs"][0]["format"] == source_format and doc["capture"]["gaps"] == 0


def test_live_duration_reports_and_keeps_the_capture(tmp_path):
    with harness.tansu() as bootstrap:
        port = int(bootstrap.rsplit(":", 1)[1])
        proc = start_live(tmp_path, port, "--duration", "12")
        transactional_story(bootstrap)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # findings of severity warning
    assert "Traceback" not in err
    doc = json.loads((tmp_path / "live.json").read_text())
    check(doc)
    # what --write kept audits to the same transactions
    again = subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "audit", str(tmp_path / "live.pcap"), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    check(json.loads(again.stdout), "pcap")


def test_live_sigterm_stops_and_writes_the_final_report(tmp_path):
    with harness.tansu() as bootstrap:
        port = int(bootstrap.rsplit(":", 1)[1])
        proc = start_live(tmp_path, port)
        transactional_story(bootstrap)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert "Findings" in out
    check(json.loads((tmp_path / "live.json").read_text()))


def test_live_on_a_missing_interface_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "live", "no-such-if0", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


REPLAYED = Path(__file__).resolve().parents[1] / "pcaps" / "txn_confluent_tansu_mtu1500.pcap"


def _comparable(doc: dict) -> dict:
    """What a replay must give as the file gives: every count and every finding and transaction, without
    the times (a replay is the same traffic at another time)."""
    untimed = {"ts", "start_ts", "end_ts", "first_ts", "last_ts"}
    return {
        "decode": doc["decode"],
        "capture": {k: v for k, v in doc["capture"].items() if k not in untimed},
        "findings": sorted(
            json.dumps({k: v for k, v in f.items() if k not in untimed}) for f in doc["findings"]
        ),
        "transactions": sorted(
            json.dumps({k: v for k, v in t.items() if k not in untimed}) for t in doc["transactions"]
        ),
    }


@pytest.mark.skipif(not shutil.which("tcpreplay"), reason="needs tcpreplay")
@pytest.mark.parametrize("ring", ["1", "0"], ids=["ring", "recvfrom"])
def test_a_replayed_capture_audits_live_as_from_the_file(tmp_path, ring, monkeypatch):
    """tcpreplay puts a corpus capture (real client, real broker) on loopback at its recorded pace while
    `ksniff live lo` audits it: through the ring and through the recvfrom loop, the same exchanges,
    findings and transactions as `ksniff audit` of the file, and what --write kept audits the same."""
    monkeypatch.setenv("KSNIFF_LIVE_RING", ring)
    replayed, net = replay_copy(REPLAYED, tmp_path)
    proc = start_live(tmp_path, 9092, "--filter", f"net {net}")
    try:
        replay = ["tcpreplay", "-q", "-i", "lo", str(replayed)]
        subprocess.run(replay, capture_output=True, check=True, timeout=60)
        time.sleep(0.5)  # the last packets through the kernel's loopback queue
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    live = json.loads((tmp_path / "live.json").read_text())
    assert not [w for w in live["warnings"] if "no capture ring" in w]
    filed = subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "audit", str(replayed), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    want = _comparable(json.loads(filed.stdout))
    assert want["decode"]["exchanges"] == 35 and want["findings"]  # the comparison has something to compare
    assert _comparable(live) == want
    kept = subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "audit", str(tmp_path / "live.pcap"), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert _comparable(json.loads(kept.stdout)) == want
