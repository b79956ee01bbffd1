"""idempotence_not_in_effect on a real capture: Sarama 1.22 against tansu
(tests/pcaps/sarama_idempotent_tansu), an ordinary Sarama producer first (no InitProducerId, producer id
-1: never flagged), then an idempotent one whose InitProducerId tansu refuses and which writes with
producer id -1 all the same. What the test expects comes from the expectations file: Sarama's own report
and tshark's reading of the answer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ksniff.audit import AuditConfig, Auditor
from ksniff.capture import read_files
from ksniff.decode import Decoder
from ksniff.decode.events import Exchange
from tests.robustness.robustness_support import cli

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CAPTURE = PCAPS / "sarama_idempotent_tansu.pcap"
EXPECT = json.loads((PCAPS / "sarama_idempotent_tansu.expect.json").read_text())
PLAIN, IDEMPOTENT = EXPECT["client_reports"]
KIND = "idempotence_not_in_effect"


def events() -> list:
    run = read_files([str(CAPTURE)])
    decoder = Decoder(ports=EXPECT["kafka_ports"])
    out = [e for ev in run for e in decoder.feed(ev)] + decoder.finish()
    return sorted(out, key=lambda e: getattr(e, "request_ts", None) or getattr(e, "ts", 0.0))


def audit(evs: list) -> list:
    auditor = Auditor(AuditConfig())
    for e in evs:
        auditor.feed(e)
    return [f for f in auditor.finish().findings if f.kind == KIND]


def test_the_clients_own_report_is_what_the_scenario_says():
    assert PLAIN["idempotent"] is False and "obtained_producer_id" not in PLAIN
    assert IDEMPOTENT["idempotent"] is True and IDEMPOTENT["obtained_producer_id"] == -1
    assert PLAIN["acks"] == IDEMPOTENT["acks"] == -1  # acks do not tell the two apart


def test_the_idempotent_client_is_flagged_once_and_the_ordinary_one_never():
    found = audit(events())
    assert len(found) == 1
    f = found[0]
    answer = EXPECT["broker_answers"][0]  # tshark's reading of the InitProducerId answer
    ev = f.evidence
    assert f.severity == "warning" and f.producer_id is None and f.transactional_id is None
    assert ev["client_id"] == IDEMPOTENT["client_id"] != PLAIN["client_id"]
    assert (ev["init_api"], ev["init_error"], ev["init_error_code"], ev["init_producer_id"]) == (
        "InitProducerId v0",
        answer["error"],
        answer["error_code"],
        answer["producer_id"],
    )
    assert (ev["producer_id"], ev["acks"], ev["broker_error"]) == (-1, -1, "NONE")
    assert (f.topic, f.partition) == (EXPECT["findings"][0]["topic"], EXPECT["findings"][0]["partition"])
    assert ev["init_ts"] <= ev["write_ts"] == f.ts
    assert ev["init_client"].rsplit(":", 1)[0] == ev["client"].rsplit(":", 1)[0]
    assert ev["init_conn"] != ev["conn"]  # Sarama asks on its bootstrap connection, writes on another
    assert IDEMPOTENT["client_id"] in f.message and "producer id -1" in f.message


def _init(e) -> bool:
    return isinstance(e, Exchange) and e.api_name == "InitProducerId"


def test_without_the_answer_or_with_a_producer_id_granted_nothing_is_said():
    evs = events()
    # The answer not captured: what the client was told is unknown.
    unanswered = [
        dataclasses.replace(e, response=None, response_ts=None, status="unanswered") if _init(e) else e
        for e in evs
    ]
    assert audit(unanswered) == []
    # The same client granted a producer id before its writes (the answer as a broker that accepts it).
    granted = [
        dataclasses.replace(e, response=e.response._replace(error_code=0, producer_id=7, producer_epoch=0))
        if _init(e)
        else e
        for e in evs
    ]
    assert audit(granted) == []
    # No InitProducerId at all: both Sarama producers are then ordinary ones.
    assert audit([e for e in evs if not _init(e)]) == []


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_the_cli_reports_it_with_its_advice_and_the_json_carries_it(engine):
    if engine == "spark":
        pytest.importorskip("pyspark")
    r = cli("audit", CAPTURE, "--engine", engine)
    assert r.exit_code == 1  # a warning finding
    assert KIND in r.stdout and "refused its InitProducerId" in r.stdout  # the advice line
    doc = json.loads(cli("audit", CAPTURE, "--engine", engine, "--json", "-", "--exit-zero").stdout)
    found = [f for f in doc["findings"] if f["kind"] == KIND]
    assert len(found) == 1 and found[0]["evidence"]["client_id"] == IDEMPOTENT["client_id"]
    summary = doc["summary"]
    assert summary["verdict"] == "findings" and summary["findings_by_kind"] == {KIND: {"warning": 1}}
