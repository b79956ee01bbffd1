"""Scenario 13: KafkaJS (npm kafkajs 2.2.4, node) tells the transactional story on librdkafka's mock cluster.

`kafkajs/story.js` tells the story of the other `txn_*` captures with KafkaJS and prints its own report
(each producer's configuration, the producer id and epoch each instance logged, KafkaJS's RecordMetadata
of every send call, every error caught). The scenario installs kafkajs 2.2.4 with npm into a temporary
folder (its tarball's integrity checked against `KAFKAJS_INTEGRITY`); nothing of it is committed.

Not on tansu: KafkaJS 2.2.4 speaks InitProducerId v0-v1 only. Tansu 0.6 advertises InitProducerId v0-5 in
its ApiVersions answer, so KafkaJS sends v1, and tansu answers it with UNKNOWN_SERVER_ERROR and producer
id -1 (as it answers v0: sarama_idempotent_tansu); KafkaJS's connect() then fails with a
KafkaJSProtocolError before any Produce, transactional or idempotent alike.

On the mock, KafkaJS's documented transactional configuration (idempotent: true) fails too: connect()
first asks the controller for a non-transactional producer id, and the mock's Metadata answer names
controller 0, a broker that does not exist (its brokers are 1-3): KafkaJSBrokerNotFound. So the
transactional producers here are created with idempotent: false (KAFKAJS_IDEMPOTENT_AT_CONNECT=0); their
transaction() still sends InitProducerId with the transactional id to the coordinator, and the
transaction's sends are idempotent (KafkaJS sends them with sequence numbers either way). For the same
reason no idempotent-only KafkaJS producer can run on the mock, and this capture has none.

The expectations come from the client's report and tshark (which decodes every version KafkaJS uses),
never from ksniff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness import Ledger, log, program_report, tshark_view, write_expectations
from registry import scenario
from scen_txn import TID, record_story

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kafkajs" / "story.js"
KAFKAJS = "kafkajs@2.2.4"
KAFKAJS_INTEGRITY = (
    "sha512-j/YeapB1vfPT2iOIUn/vxdyKEuhuY2PxMBvf5JWux6iSaukAccrMtXEY/Lb7OvavDhOWME589bpLrEdnVHjfjA=="
)
TXN_CLIENTS = ("corpus-kafkajs-1", "corpus-kafkajs-2")


def install_kafkajs(into: Path) -> Path:
    """kafkajs 2.2.4 installed with npm under `into`; returns its node_modules folder."""
    for tool in ("node", "npm"):
        if not shutil.which(tool):
            raise RuntimeError("needs node and npm (apt-get install nodejs npm)")
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(into), KAFKAJS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        raise RuntimeError(f"npm could not install {KAFKAJS}: {done.stderr.strip()[-500:]}")
    lock = json.loads((into / "package-lock.json").read_text())
    got = lock["packages"]["node_modules/kafkajs"]
    if (got["version"], got["integrity"]) != ("2.2.4", KAFKAJS_INTEGRITY):
        raise RuntimeError(f"npm installed kafkajs {got['version']} with integrity {got['integrity']}")
    return into / "node_modules"


def run_story(modules: Path, bootstrap: str, topic: str) -> dict:
    env = {
        **os.environ,
        "NODE_PATH": str(modules),
        "KAFKAJS_NO_PARTITIONER_WARNING": "1",  # the records name their partitions
        "KAFKAJS_IDEMPOTENT_AT_CONNECT": "0",  # see the module's docstring
    }
    done = subprocess.run(
        ["node", str(SOURCE), bootstrap, topic, TID], capture_output=True, text=True, timeout=120, env=env
    )
    return program_report(done, "KafkaJS")


@scenario("txn_kafkajs_mock", "the story with KafkaJS 2.2.4 (node) on librdkafka's 3-broker mock cluster")
def txn_kafkajs_mock(out: Path) -> None:
    name = "txn_kafkajs_mock"
    reports = []

    def story(bootstrap: str, topic: str, tid: str, ledger: Ledger) -> str:
        report = run_story(modules, bootstrap, topic)
        reports.append(report)
        for t in report["transactions"]:
            if t["succeeded"]:
                ledger.txn(tid, t["outcome"])
        ledger.records_produced += sum(
            m["records"] for s in report["sends"] for m in s.get("metadata", []) if m["error_code"] == 0
        )
        zombie = [
            e for e in report["errors"] if e["producer"] == TXN_CLIENTS[0] and e["during"] != "disconnect"
        ]
        # KafkaJS's protocol errors carry the broker's error name as their type.
        return (zombie[0]["type"] or zombie[0]["name"]) if zombie else ""

    with tempfile.TemporaryDirectory(prefix="ksniff-kafkajs-") as tmp:
        modules = install_kafkajs(Path(tmp))
        ledger, ports = record_story(out, name, "kafkajs", story, broker="librdkafka-mock")
    (report,) = reports
    log(f"kafkajs {report['client_version']}: {len(report['sends'])} send calls, errors {report['errors']}")

    # The producer ids the client logged agree with the InitProducerId answers tshark reads.
    capture = out / f"{name}.pcap"
    held = [tuple(i.values()) for c in TXN_CLIENTS for i in report["producers"][c].get("initialized", [])]
    wire = tshark_view(capture, ports).producer_ids
    if wire != held:
        raise RuntimeError(f"the client logged {held}, the InitProducerId answers say {wire}")
    ledger.note(
        f"KafkaJS {report['client_version']} (node {report['node_version']}), transactional producers "
        f"{TXN_CLIENTS[0]!r} and {TXN_CLIENTS[1]!r} with maxInFlightRequests 1, acks -1 and idempotent: "
        "false (KafkaJS's connect() with idempotent: true asks the controller for a producer id, and the "
        "mock names controller 0, which does not exist); the second instance's takeover is its first "
        "transaction() (KafkaJS sends InitProducerId there). No idempotent-only producer: it cannot "
        "connect to the mock for the same reason. Not on tansu: KafkaJS speaks InitProducerId v0-v1 "
        "only and tansu 0.6 answers v1 with UNKNOWN_SERVER_ERROR and producer id -1. client_report is "
        "the KafkaJS program's own report (producer ids from its debug log)."
    )
    ledger.extra["client_report"] = report
    write_expectations(ledger, capture, ports)
