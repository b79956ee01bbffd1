"""Fetch answers read down to batch headers, each partition beside what its request asked
(FetchedPartition): real captures of real consumers, and kafka-python-encoded frames of every version
consumers use (v4 first carries the aborted list and the LSO, v12 is flexible, v13+ names topics by id)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from decode_builders import (
    Stream,
    control_batch,
    fetch_request,
    fetch_response,
    frame,
    metadata_response,
    record_batch,
    run,
)

from ksniff.capture import read_files
from ksniff.decode import Decoder, compiled, interp
from ksniff.decode.apis import ALL_APIS
from ksniff.decode.events import Exchange, FetchedPartition

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
FETCH = ALL_APIS[1]


def fetched_from(path: Path) -> list[FetchedPartition]:
    capture = read_files([str(path)])
    dec = Decoder(on_not_kafka=capture.drop)
    out = [e for ev in capture for e in dec.feed(ev)] + dec.finish()
    return [f for e in out if isinstance(e, Exchange) for f in e.fetched]


def test_read_committed_consumer_on_tansu_sees_the_commit_marker():
    # ctp_confluent_tansu: the plain group's read_committed consumer (librdkafka, Fetch v16, topics by id
    # resolved through Metadata) reads 'ctp-out', written by one committed transaction per partition.
    parts = [f for f in fetched_from(PCAPS / "ctp_confluent_tansu.pcap") if f.topic == "ctp-out"]
    assert parts and {f.api_version for f in parts} == {16}
    assert all(
        f.read_committed and f.client_id == "corpus-plain-consumer" and f.replica_id == -1 for f in parts
    )
    first = [f for f in parts if f.fetch_offset == 0]
    assert sorted(f.partition for f in first) == [0, 1]
    for f in first:
        assert (f.error_code, f.high_watermark, f.last_stable_offset, f.log_start_offset) == (0, 4, 4, 0)
        assert f.aborted == ()
        data, marker = f.batches
        assert data.transactional and not data.control and data.producer_id == marker.producer_id
        assert (data.base_offset, data.last_offset_delta, data.base_sequence) == (0, 2, 0)
        assert marker.control and marker.control_type == "COMMIT" and marker.base_offset == 3
    # the next fetches ask from past the marker and get nothing
    assert all(f.batches == () for f in parts if f.fetch_offset == 4)


def test_read_uncommitted_fetch_v12_names_its_topic():
    (f,) = fetched_from(PCAPS / "offsets_back_tansu.pcap")
    assert (f.api_version, f.topic, f.partition, f.isolation_level, f.fetch_offset) == (
        12,
        "offsets-in",
        0,
        0,
        0,
    )
    assert f.high_watermark == f.last_stable_offset == 10
    (batch,) = f.batches
    assert (batch.base_offset, batch.last_offset_delta, batch.producer_id) == (0, 9, -1)


def exchange_of(version: int, request, response, *, metadata=None) -> Exchange:
    s = Stream()
    events = [s.opened()]
    if metadata is not None:
        events += [s.request(frame(metadata[0], 12, 1)), s.send(frame(metadata[1], 12, 1), from_src=False)]
    events += [
        s.request(frame(request, version, 7, "consumer-1")),
        s.send(frame(response, version, 7), from_src=False),
    ]
    (ex,) = [e for e in run(Decoder(), events) if isinstance(e, Exchange) and e.api_name == "Fetch"]
    assert ex.decode_error is None
    return ex


@pytest.mark.parametrize("version", [4, 5, 7, 11, 12, 13, 15, 16, 17, 18])
def test_every_consumer_version(version):
    ids = {"orders": uuid.UUID(int=0xABC)}
    data = record_batch(producer_id=7, epoch=2, sequence=5, records=3, base_offset=40)
    aborted = record_batch(producer_id=8, epoch=0, sequence=0, records=2, base_offset=43)
    marker = control_batch(8, 0, commit=False, base_offset=45, coordinator_epoch=3)
    answer = {
        ("orders", 0): {
            "records": data + aborted + marker,
            "aborted": [(8, 43)],
            "high_watermark": 50,
            "last_stable_offset": 46,
            "log_start_offset": 2 if version >= 5 else -1,
        },
        ("orders", 1): {"error": 1, "high_watermark": -1, "last_stable_offset": -1, "aborted": None},
    }
    meta = None
    if version >= 13:
        from kafka.protocol.metadata import MetadataRequest

        meta = (
            MetadataRequest(topics=None, allow_auto_topic_creation=False, version=12),
            metadata_response(12, ids),
        )
    ex = exchange_of(
        version,
        fetch_request(version, offsets={("orders", 0): 40, ("orders", 1): 9}, topic_ids=ids),
        fetch_response(version, answer, topic_ids=ids),
        metadata=meta,
    )
    p0, p1 = ex.fetched
    assert (p0.topic, p0.partition, p0.fetch_offset, p0.isolation_level, p0.client_id) == (
        "orders",
        0,
        40,
        1,
        "consumer-1",
    )
    assert (p0.high_watermark, p0.last_stable_offset, p0.aborted) == (50, 46, ((8, 43),))
    assert p0.log_start_offset == (2 if version >= 5 else -1)
    got = [
        (
            b.base_offset,
            b.last_offset_delta,
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
            b.transactional,
            b.control,
            b.control_type,
            b.coordinator_epoch,
            b.crc_ok,
        )
        for b in p0.batches
    ]
    assert got == [
        (40, 2, 7, 2, 5, True, False, None, None, True),
        (43, 1, 8, 0, 0, True, False, None, None, True),
        (45, 0, 8, 0, -1, True, True, "ABORT", 3, True),
    ]
    assert (p1.partition, p1.fetch_offset, p1.error_code, p1.aborted, p1.batches) == (1, 9, 1, None, ())
    # the body itself, compiled and interpreted alike
    body = frame(fetch_response(version, answer, topic_ids=ids), version, 7)
    body = body[8 + (1 if FETCH.flexible.contains(version) else 0) :]
    assert compiled.decode_body(FETCH, version, False, body) == interp.decode_body(
        FETCH, version, False, body
    )


def test_partition_not_named_by_an_incremental_session_request():
    ex = exchange_of(
        12,
        fetch_request(12, offsets={}, session_id=77, session_epoch=3),
        fetch_response(12, {("orders", 2): {"records": record_batch(base_offset=5)}}),
    )
    (p,) = ex.fetched
    assert (p.partition, p.fetch_offset, p.session_id, p.session_epoch) == (2, None, 77, 3)


def test_a_trailing_partial_batch_is_a_header_without_a_crc_verdict():
    whole = record_batch(base_offset=0, records=2)
    cut = record_batch(base_offset=2, records=4, value_size=200)[:100]
    ex = exchange_of(12, fetch_request(12), fetch_response(12, {("orders", 0): {"records": whole + cut}}))
    (p,) = ex.fetched
    assert [(b.base_offset, b.crc_ok) for b in p.batches] == [(0, True), (2, None)]


def test_only_headers_are_kept():
    ex = exchange_of(12, fetch_request(12), fetch_response(12))
    (p,) = ex.fetched
    assert not hasattr(p, "records") and not hasattr(p.batches, "raw")


def exchanges_of(path: Path, api: str) -> list[Exchange]:
    capture = read_files([str(path)])
    dec = Decoder(on_not_kafka=capture.drop)
    out = [e for ev in capture for e in dec.feed(ev)] + dec.finish()
    return [e for e in out if isinstance(e, Exchange) and e.api_name == api]


def test_list_offsets_and_offset_fetch_answers_of_real_consumers():
    # offsets_back_tansu: kafka-python's member commits 10, then 4, reading each back (OffsetFetch v8);
    # offsets_back_mock: librdkafka's read_committed consumer asks ListOffsets v7 for the earliest offsets.
    committed = [
        p.committed_offset
        for e in exchanges_of(PCAPS / "offsets_back_tansu.pcap", "OffsetFetch")
        for g in e.response.groups
        for t in g.topics
        for p in t.partitions
    ]
    assert committed == [-1, 10, 4]
    listed = exchanges_of(PCAPS / "offsets_back_mock.pcap", "ListOffsets")
    assert {(e.api_version, e.request.isolation_level) for e in listed} == {(7, 1)}
    answers = {
        p.partition_index: (p.error_code, p.offset)
        for e in listed
        for t in e.response.topics
        for p in t.partitions
    }
    assert answers == {0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0)}
