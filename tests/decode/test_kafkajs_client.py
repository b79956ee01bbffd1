"""KafkaJS 2.2.4 on the wire: txn_kafkajs_mock.pcap decoded by ksniff and checked against the client's own
report (`client_report` in the expectations: the producer ids it logged, KafkaJS's RecordMetadata of every
send call, one per partition with its base offset). tshark decodes these versions too (test_pcaps.py
compares field by field); this is the client's side of it."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from corpus_decode import decode

from ksniff.decode.events import Exchange

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
EXPECT_PATH = PCAPS / "txn_kafkajs_mock.expect.json"
pytestmark = pytest.mark.skipif(not EXPECT_PATH.exists(), reason="no txn_kafkajs_mock capture")
CLIENTS = ("corpus-kafkajs-1", "corpus-kafkajs-2")


@pytest.fixture(scope="module")
def kafkajs() -> tuple[dict, list[Exchange]]:
    expect = json.loads(EXPECT_PATH.read_text())
    dec, exchanges = decode(PCAPS / expect["capture"], expect["kafka_ports"])
    assert dec.stats.errors == 0
    exchanges.sort(key=lambda e: e.request_ts)
    # (Two of the mock's answers to its keeper, a confluent-kafka client, leave bytes after what the schema
    # defines, as in every mock capture: the UNSUPPORTED_VERSION answer to ApiVersions v3, read as a v3
    # body, and the Metadata v13 answer, one byte over. KafkaJS's own exchanges all decode.)
    assert not [e for e in exchanges if e.client_id in CLIENTS and e.decode_error is not None]
    return expect["client_report"], exchanges


def test_init_producer_id_answers_are_what_the_client_logged(kafkajs) -> None:
    report, exchanges = kafkajs
    answers = [
        (e.client_id, e.response.producer_id, e.response.producer_epoch)
        for e in exchanges
        if e.api_name == "InitProducerId" and e.client_id in CLIENTS
    ]
    logged = [
        (c, i["producer_id"], i["producer_epoch"])
        for c in CLIENTS
        for i in report["producers"][c]["initialized"]
    ]
    assert answers == logged


def test_every_send_call_is_the_decoded_produce_answer(kafkajs) -> None:
    """Each send call's RecordMetadata (per partition: base offset, error code) is a decoded Produce
    answer of that client, and its batches carry the records the call sent to that partition."""
    report, exchanges = kafkajs
    from_client = defaultdict(list)
    for s in report["sends"]:
        for m in s["metadata"]:
            from_client[s["producer"]].append(
                (m["topic"], m["partition"], m["error_code"], m["base_offset"], m["records"])
            )
    from_wire = defaultdict(list)
    for e in exchanges:
        for b in e.batches:
            if e.client_id in CLIENTS:
                from_wire[e.client_id].append(
                    (b.topic, b.partition, b.error_code, b.base_offset, b.header.records_count)
                )
    assert {c: sorted(v) for c, v in from_wire.items()} == {c: sorted(v) for c, v in from_client.items()}


def test_the_zombie_is_let_through_and_says_so(kafkajs) -> None:
    """The mock does not fence: the client caught no error, and every transaction it reports ended on the
    wire with the EndTxn it asked for, the zombie's commit included."""
    report, exchanges = kafkajs
    assert report["errors"] == []
    for client in CLIENTS:
        ends = [e.request.committed for e in exchanges if e.api_name == "EndTxn" and e.client_id == client]
        said = [t["outcome"] == "commit" for t in report["transactions"] if t["producer"] == client]
        assert ends == said, client
    assert all(e.response.error_code == 0 for e in exchanges if e.api_name == "EndTxn")
