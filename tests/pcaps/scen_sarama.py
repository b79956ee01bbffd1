"""Scenario 11: Sarama (Go) asks for idempotence against tansu.

`sarama/idempotent.go`, built with Debian's golang and golang-github-shopify-sarama-dev (Sarama 1.22, in
GOPATH mode), runs twice (acks=all, MaxOpenRequests 1, Version 2.0.0, 6 records one at a time to
partitions 0 and 1): first as an ordinary producer (Idempotent=false: no InitProducerId, producer id -1,
not a finding), then as an idempotent one. Sarama sends InitProducerId v0 on its bootstrap
connection and takes the producer id from the answer without looking at its error code; tansu answers
that request with an error and producer id -1, so Sarama logs "Obtained a ProducerId: -1" and writes
every batch with producer id -1: idempotence asked for and not in effect.

The expectations come from the client's own report (its configuration, the producer id it logged, the
offsets its sends returned) and from tshark's reading of the InitProducerId answer, never from ksniff.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import clients
from harness import Ledger, error_name, log, tansu, tcpdump, tshark_fields, write_expectations
from registry import scenario

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "sarama" / "idempotent.go"
GOPATH = "/usr/share/gocode"  # where Debian's Go library packages install their sources
TOPIC = "sarama-idem"
RECORDS = 6  # per producer
PLAIN_CLIENT = "corpus-sarama-plain"
IDEMPOTENT_CLIENT = "corpus-sarama-idempotent"


def build(into: Path) -> Path:
    """The Sarama producer, compiled in GOPATH mode against Debian's packaged Sarama."""
    if not shutil.which("go") or not Path(GOPATH, "src/github.com/Shopify/sarama").is_dir():
        raise RuntimeError(
            "needs Debian's golang and golang-github-shopify-sarama-dev "
            "(apt-get install golang golang-github-shopify-sarama-dev)"
        )
    binary = into / "sarama-idempotent"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{GOPATH}:{into / 'gopath'}",
        "GOCACHE": str(into / "gocache"),
        "GOFLAGS": "",
    }
    subprocess.run(
        ["go", "build", "-o", str(binary), str(SOURCE)], check=True, env=env, capture_output=True, text=True
    )
    return binary


def init_producer_id_answers(capture: Path, port: int) -> list[dict]:
    """tshark's reading of the InitProducerId answers (API key 22, version 0: tshark 4.0 decodes it)."""
    rows = tshark_fields(
        capture,
        [port],
        "kafka.response_key == 22",
        "kafka.error",
        "kafka.producer_id",
        "kafka.producer_epoch",
    )
    answers = []
    for row in rows:
        err, pid, epoch = (row + ["", "", ""])[:3]
        code = int(err) if err else None
        answers.append(
            {
                "what": "InitProducerId (no transactional id)",
                "api": "InitProducerId",
                "error_code": code,
                "error": error_name(code),
                "producer_id": int(pid) if pid else None,
                "producer_epoch": int(epoch) if epoch else None,
                "source": "tshark",
            }
        )
    return answers


def _produce(binary: Path, bootstrap: str, client_id: str, idempotent: bool) -> dict:
    done = subprocess.run(
        [
            str(binary),
            "-brokers",
            bootstrap,
            "-topic",
            TOPIC,
            "-n",
            str(RECORDS),
            "-client-id",
            client_id,
            f"-idempotent={'true' if idempotent else 'false'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    log(f"sarama {client_id}: {report}")
    if done.returncode or report.get("client_error") or report.get("producer_error") or report["failed"]:
        raise RuntimeError(f"the Sarama producer failed: {report} {done.stderr[-500:]}")
    if report["idempotent"] != idempotent:
        raise RuntimeError(f"Sarama reports Idempotent={report['idempotent']}")
    return report


@scenario("sarama_idempotent_tansu", "Sarama (Go): an ordinary producer, then Idempotent=true; tansu")
def sarama_idempotent(out: Path) -> None:
    name = "sarama_idempotent_tansu"
    capture = out / f"{name}.pcap"
    ledger = Ledger(name, "tansu", "sarama")
    with tempfile.TemporaryDirectory(prefix="ksniff-sarama-") as tmp:
        binary = build(Path(tmp))
        with tansu() as bootstrap:
            clients.create_topics(bootstrap, {TOPIC: 2})
            port = int(bootstrap.rsplit(":", 1)[1])
            with tcpdump(capture, [port]):
                plain = _produce(binary, bootstrap, PLAIN_CLIENT, idempotent=False)
                idem = _produce(binary, bootstrap, IDEMPOTENT_CLIENT, idempotent=True)
    if "obtained_producer_id" in plain:
        raise RuntimeError("the ordinary producer logged a producer id: it sent InitProducerId")
    pid = idem.get("obtained_producer_id")
    if pid is None:
        raise RuntimeError("the idempotent Sarama producer did not log the producer id it obtained")
    answers = init_producer_id_answers(capture, port)
    ledger.broker_answers.extend(answers)
    ledger.extra["client_reports"] = [
        {
            k: r[k]
            for k in (
                "client_id",
                "idempotent",
                "acks",
                "max_open_requests",
                "version",
                "obtained_producer_id",
                "obtained_producer_epoch",
            )
            if k in r
        }
        for r in (plain, idem)
    ]
    # Records acknowledged with no producer id: the audit's producers table (idempotent and
    # transactional producers) has none of them, so `records_produced` counts only an idempotent
    # producer that got a producer id.
    without = len(plain["acked"]) + (len(idem["acked"]) if pid < 0 else 0)
    ledger.extra["records_acked_without_producer_id"] = without
    ledger.records_produced = len(idem["acked"]) if pid >= 0 else 0
    ledger.note(
        f"Sarama 1.22, two producers one after the other, each writing {RECORDS} records one at a "
        f"time to {TOPIC} partitions 0 and 1 with acks=all (-1), MaxOpenRequests 1, Version 2.0.0. "
        f"First {PLAIN_CLIENT!r}, Idempotent=false: no InitProducerId, producer id -1, an ordinary "
        "producer (not a finding)."
    )
    if pid < 0:
        first = idem["acked"][0]
        ledger.finding(
            "idempotence_not_in_effect",
            "warning",
            transactional_id=None,
            producer_id=None,
            topic=TOPIC,
            partition=first["partition"],
        )
        got = f"{answers[0]['error']} with producer id {answers[0]['producer_id']}" if answers else "?"
        ledger.note(
            f"Then {IDEMPOTENT_CLIENT!r}, Idempotent=true: it sent InitProducerId v0, tansu answered "
            f"{got}, Sarama logged 'Obtained a ProducerId: {pid}' and wrote all {len(idem['acked'])} "
            "acknowledged records in batches with producer id -1 (with sequence numbers): "
            "idempotence asked for and not in effect (idempotence_not_in_effect, a warning: the "
            "broker cannot deduplicate a retry)."
        )
    else:
        ledger.note(
            f"Then {IDEMPOTENT_CLIENT!r}, Idempotent=true, obtained producer id {pid}: idempotence in effect."
        )
    write_expectations(ledger, capture, [port])
