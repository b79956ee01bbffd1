"""Apache Kafka's own Java client (kafka-clients 3.9.1) on the wire: txn_java_tansu.pcap decoded by ksniff
and checked against the client's own report (`client_report` in the expectations: the producer ids and
epochs it held, the RecordMetadata of every send, the exceptions it caught). tshark 4.0 decodes none of
these versions (Produce v11, InitProducerId v5, AddPartitionsToTxn v3, EndTxn v4, Metadata v12,
FindCoordinator v6, ApiVersions v4), so the client is the only other witness."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from corpus_decode import decode

from ksniff.decode.events import Exchange

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
EXPECT_PATH = PCAPS / "txn_java_tansu.expect.json"
pytestmark = pytest.mark.skipif(not EXPECT_PATH.exists(), reason="no txn_java_tansu capture")

PRODUCER_FENCED = 90


@pytest.fixture(scope="module")
def java() -> tuple[dict, list[Exchange]]:
    expect = json.loads(EXPECT_PATH.read_text())
    dec, exchanges = decode(PCAPS / expect["capture"], expect["kafka_ports"])
    assert dec.stats.errors == 0 and dec.stats.bodies_with_leftover == 0
    exchanges.sort(key=lambda e: e.request_ts)
    assert not [e for e in exchanges if e.decode_error not in (None, "skipped_api")]
    return expect["client_report"], exchanges


def test_init_producer_id_answers_are_what_the_client_held(java) -> None:
    report, exchanges = java
    answers = {
        e.client_id: (e.response.producer_id, e.response.producer_epoch)
        for e in exchanges
        if e.api_name == "InitProducerId" and e.response is not None and e.response.error_code == 0
    }
    held = {
        client: (p[when]["producer_id"], p[when]["producer_epoch"])
        for client, p in report["producers"].items()
        for when in ("after_init", "after_sends")
        if when in p
    }
    assert answers == held


def test_every_acknowledged_offset_is_a_decoded_batch_of_that_producer(java) -> None:
    """The offsets the client's RecordMetadata gave are exactly those the decoded Produce answers
    assigned (base offset plus the batch's records), each in a batch of the producer id the client held."""
    report, exchanges = java
    pid_of = {
        client: p.get("after_init", p.get("after_sends"))["producer_id"]
        for client, p in report["producers"].items()
    }
    from_client: dict[tuple, set[int]] = defaultdict(set)
    for s in report["sends"]:
        if "offset" in s:
            from_client[(pid_of[s["producer"]], s["topic"], s["partition"])].add(s["offset"])
    from_wire: dict[tuple, set[int]] = defaultdict(set)
    for e in exchanges:
        for b in e.batches:
            if b.error_code == 0 and not b.header.control:
                where = (b.header.producer_id, b.topic, b.partition)
                from_wire[where].update(range(b.base_offset, b.base_offset + b.header.records_count))
    assert from_wire == from_client


def test_the_zombie_is_fenced_on_its_add_partitions_and_goes_no_further(java) -> None:
    """The client threw ProducerFencedException; on the wire the first instance's AddPartitionsToTxn after
    the takeover was answered PRODUCER_FENCED, and it sent no Produce and no EndTxn after that."""
    report, exchanges = java
    assert {e["class"].rsplit(".", 1)[1] for e in report["exceptions"]} == {"ProducerFencedException"}
    takeover = next(e for e in exchanges if e.api_name == "InitProducerId" and e.client_id == "corpus-java-2")
    after = [
        e
        for e in exchanges
        if e.client_id == "corpus-java-1"
        and e.request_ts > takeover.request_ts
        and e.api_name in ("AddPartitionsToTxn", "Produce", "EndTxn")
    ]
    assert [e.api_name for e in after] == ["AddPartitionsToTxn"]
    (fenced,) = after
    errors = [
        p.partition_error_code
        for t in fenced.response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert errors == [PRODUCER_FENCED]
    ends = [
        e.request.committed for e in exchanges if e.api_name == "EndTxn" and e.client_id == "corpus-java-1"
    ]
    said = [
        t["outcome"] == "commit"
        for t in report["transactions"]
        if t["producer"] == "corpus-java-1" and t["succeeded"]
    ]
    assert ends == said


def test_the_audit_finds_the_fencing_and_nothing_else() -> None:
    """The takeover (info), the fenced zombie (warning) and its stale epoch (warning): one finding each,
    none beyond the expectations; 20 records over two producers, as the client's RecordMetadata say."""
    from ksniff.engine.local import audit_paths

    expect = json.loads(EXPECT_PATH.read_text())
    out = audit_paths([str(PCAPS / expect["capture"])])
    got = sorted((f.kind, f.severity, f.transactional_id) for f in out.findings)
    assert got == sorted((w["kind"], w["severity"], w["transactional_id"]) for w in expect["findings"])
    acked = [s for s in expect["client_report"]["sends"] if "offset" in s]
    assert sum(p.records for p in out.producers) == len(acked) == expect["records_produced"]
