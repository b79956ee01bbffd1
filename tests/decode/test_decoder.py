"""The Decoder end to end over synthetic stream events: pairing, batches, gaps, detection, limits."""

from __future__ import annotations

import struct
import uuid

import pytest
from decode_builders import (
    Stream,
    api_versions,
    api_versions_response,
    end_txn,
    end_txn_response,
    frame,
    init_producer_id,
    init_producer_id_response,
    metadata_response,
    produce_request,
    produce_response,
    record_batch,
    run,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from ksniff.capture.events import Endpoint, StreamChunk
from ksniff.decode import Decoder
from ksniff.decode.events import ConnectionEnded, ConnectionLost, Exchange


# Each test opens its own connection and Decoder and feeds the events it is about: 18 of the 26 tests
# start with the same two lines (`s = Stream()`, `dec = Decoder()`), which `duplicates` pairs by shape
# with the events that follow. A fixture would save those 36 lines and hide, in the test, which decoder
# state (fresh, or shared by a second connection) the assertions are about.
def exchanges(events) -> list[Exchange]:
    return [e for e in events if isinstance(e, Exchange)]


def test_request_response_pairing_and_names():
    s = Stream()
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(),
            s.send(frame(api_versions(3), 3, 1)),
            s.send(frame(api_versions_response(3), 3, 1), from_src=False),
            s.send(frame(init_producer_id(4), 4, 2)),
            s.send(frame(init_producer_id_response(4, producer_id=77, epoch=3), 4, 2), from_src=False),
            s.closed(),
        ],
    )
    ex = exchanges(out)
    assert [(e.api_name, e.api_version, e.correlation_id, e.status) for e in ex] == [
        ("ApiVersions", 3, 1, "ok"),
        ("InitProducerId", 4, 2, "ok"),
    ]
    assert ex[0].response.api_keys[0].max_version == 11
    assert ex[1].request.transactional_id == "tx-1"
    assert (ex[1].response.producer_id, ex[1].response.producer_epoch) == (77, 3)
    assert ex[1].client == "10.0.0.1:50000" and ex[1].broker == "10.0.0.2:9092"
    assert ex[1].client_id == "ksniff-test"
    assert ex[1].latency is not None and ex[1].latency > 0
    assert isinstance(out[-1], ConnectionEnded)
    assert dec.kafka_connections == 1
    c = dec.stats.as_contract()
    assert (c["requests"], c["responses"], c["exchanges"]) == (2, 2, 2)
    assert c["by_api"]["InitProducerId"] == {
        "requests": 1,
        "responses": 1,
        "exchanges": 1,
        "versions": [4],
        "not_decoded": {},
        "with_leftover": 0,
    }


@pytest.mark.parametrize("version", range(3, 14))
def test_produce_batches_carry_the_brokers_answer(version):
    tid = uuid.uuid4()
    parts = {
        ("orders", 0): [record_batch(sequence=0, records=2), record_batch(sequence=2, records=3)],
        ("orders", 1): [record_batch(sequence=0, records=1)],
    }
    answers = {("orders", 0): (0, 500), ("orders", 1): (47, -1)}
    ids = {"orders": tid}
    s = Stream()
    dec = Decoder()
    dec.topic_names[tid] = "orders"  # v13+ names topics by id (test_topic_ids_learnt_from_metadata)
    ex = exchanges(
        run(
            dec,
            [
                s.opened(),
                s.send(frame(produce_request(version, partitions=parts, topic_ids=ids), version, 5)),
                s.send(frame(produce_response(version, answers, topic_ids=ids), version, 5), from_src=False),
            ],
        )
    )
    assert len(ex) == 1 and ex[0].status == "ok"
    rows = [
        (b.topic, b.partition, b.header.base_sequence, b.header.records_count, b.error_code, b.base_offset)
        for b in ex[0].batches
    ]
    assert rows == [("orders", 0, 0, 2, 0, 500), ("orders", 0, 2, 3, 0, 502), ("orders", 1, 0, 1, 47, None)]
    batches = ex[0].batches
    assert all(b.header.crc_ok and b.header.transactional for b in batches)
    assert all(b.transactional_id == "tx-1" and b.acks == -1 for b in batches)


def test_topic_ids_learnt_from_metadata():
    from kafka.protocol.metadata import MetadataRequest

    tid = uuid.uuid4()
    s = Stream()
    dec = Decoder()
    req = MetadataRequest(topics=None, allow_auto_topic_creation=False, version=12)
    run(
        dec,
        [
            s.opened(),
            s.send(frame(req, 12, 1)),
            s.send(frame(metadata_response(12, {"orders": tid}), 12, 1), from_src=False),
        ],
    )
    assert dec.topic_name(tid) == "orders"
    out = run(
        dec,
        [
            s.send(frame(produce_request(13, topic_ids={"orders": tid}), 13, 2)),
            s.send(frame(produce_response(13, topic_ids={"orders": tid}), 13, 2), from_src=False),
        ],
    )
    assert exchanges(out)[0].batches[0].topic == "orders"
    unknown = uuid.uuid4()
    out = run(dec, [s.send(frame(produce_request(13, topic_ids={"orders": unknown}), 13, 3))])
    out += dec.finish()
    assert exchanges(out)[0].batches[0].topic == str(unknown)


def test_pipelined_requests_pair_in_order():
    s = Stream()
    dec = Decoder()
    reqs = [s.send(frame(produce_request(9, acks=1), 9, cid)) for cid in (10, 11, 12)]
    resps = [
        s.send(frame(produce_response(9, {("orders", 0): (0, cid)}), 9, cid), from_src=False)
        for cid in (10, 11, 12)
    ]
    ex = exchanges(run(dec, [s.opened(), *reqs, *resps]))
    assert [(e.correlation_id, e.status, e.batches[0].base_offset) for e in ex] == [
        (10, "ok", 10),
        (11, "ok", 11),
        (12, "ok", 12),
    ]


def test_acks_zero_has_no_response():
    s = Stream()
    dec = Decoder()
    ex = exchanges(run(dec, [s.opened(), s.send(frame(produce_request(7, acks=0), 7, 3))]))
    assert [(e.status, e.response, e.batches[0].error_code) for e in ex] == [("no_response", None, None)]
    assert dec.stats.unmatched_requests == 0


def test_unanswered_on_close_and_at_end():
    s = Stream()
    dec = Decoder()
    out = run(dec, [s.opened(), s.send(frame(end_txn(3), 3, 4)), s.closed("rst")])
    ex = exchanges(out)
    assert [(e.api_name, e.status, e.response_ts) for e in ex] == [("EndTxn", "unanswered", None)]
    assert ex[0].request.committed is True
    s2 = Stream(conn=2)
    run(dec, [s2.opened(), s2.send(frame(end_txn(3), 3, 9))])
    ex = exchanges(dec.finish())
    assert [(e.conn, e.status) for e in ex] == [(2, "unanswered")]
    assert dec.stats.unmatched_requests == 2


def test_a_frame_cut_by_an_orderly_close_is_damage():
    """A broker that closes in order has sent every frame whole: an answer whose size claims more bytes
    than came before the FIN (a flipped bit of its size) is a malformed frame, and a loss of the
    connection at the close, so the requests it swallowed are unanswered on bytes the capture lost. An
    aborted connection (RST) may stop mid-frame, and is left as it was."""
    for reason, lost in (("fin", True), ("rst", False)):
        s = Stream()
        dec = Decoder()
        answer = bytearray(frame(end_txn_response(3), 3, 4))
        answer[1] ^= 0x20  # the size: 2 MiB more than the answer
        out = run(
            dec,
            [
                s.opened(),
                s.send(frame(end_txn(3), 3, 4)),
                s.send(bytes(answer), from_src=False),
                s.closed(reason),
            ],
        )
        losses = [e for e in out if isinstance(e, ConnectionLost)]
        if lost:
            assert [(e.to_broker, e.damaged, e.length) for e in losses] == [(False, "malformed", len(answer))]
            assert out.index(losses[0]) < out.index(exchanges(out)[0])  # known before the unanswered
            assert dec.stats.errors == 1
        else:
            assert losses == [] and dec.stats.errors == 0
        assert [e.status for e in exchanges(out)] == ["unanswered"]


def test_skipped_response_makes_earlier_requests_unanswered():
    s = Stream()
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(),
            s.send(frame(end_txn(3), 3, 1)),
            s.send(frame(end_txn(3), 3, 2)),
            s.send(frame(end_txn_response(3), 3, 2), from_src=False),
        ],
    )
    assert [(e.correlation_id, e.status) for e in exchanges(out)] == [(1, "unanswered"), (2, "ok")]


def test_unmatched_response_is_counted():
    s = Stream()
    dec = Decoder()
    out = run(dec, [s.opened(), s.send(frame(end_txn_response(3), 3, 42), from_src=False)])
    assert exchanges(out) == []
    assert dec.stats.unmatched_responses == 1 and dec.stats.responses == 1


def test_unknown_version_is_not_guessed():
    s = Stream()
    dec = Decoder()
    body = frame(end_txn(3), 3, 1)
    future = body[:6] + struct.pack(">h", 99) + body[8:]  # same bytes, a version the tables do not know
    out = run(dec, [s.opened(), s.send(future), s.send(frame(end_txn_response(3), 3, 1), from_src=False)])
    (ex,) = exchanges(out)
    assert (ex.api_name, ex.api_version, ex.request) == ("EndTxn", 99, None)
    assert ex.decode_error == "unknown_version"
    assert dec.stats.undecoded_bodies == 2
    assert dec.stats.by_api["EndTxn"].versions == {99}


def test_header_only_api_is_counted_and_skipped():
    from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

    s = Stream()
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(),
            s.send(frame(ListGroupsRequest(version=4), 4, 1)),
            s.send(frame(ListGroupsResponse(error_code=0, groups=[], version=4), 4, 1), from_src=False),
        ],
    )
    (ex,) = exchanges(out)
    assert (ex.api_name, ex.status, ex.decode_error, ex.request) == ("ListGroups", "ok", "skipped_api", None)


def test_frames_split_at_every_byte_boundary():
    payload = frame(init_producer_id(4), 4, 1) + frame(produce_request(9), 9, 2)
    answer = frame(init_producer_id_response(4), 4, 1) + frame(produce_response(9), 9, 2)
    for cut in range(1, len(payload)):
        answer_cut = cut % len(answer)
        s = Stream()
        dec = Decoder()
        out = run(
            dec,
            [
                s.opened(),
                s.send(payload[:cut]),
                s.send(payload[cut:]),
                s.send(answer[:answer_cut], from_src=False),
                s.send(answer[answer_cut:], from_src=False),
            ],
        )
        ex = exchanges(out)
        assert [(e.api_name, e.status) for e in ex] == [("InitProducerId", "ok"), ("Produce", "ok")], cut
        assert ex[1].batches[0].header.crc_ok


def test_byte_by_byte():
    payload = frame(produce_request(9), 9, 2)
    s = Stream()
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(),
            *[s.send(payload[i : i + 1]) for i in range(len(payload))],
            s.send(frame(produce_response(9), 9, 2), from_src=False),
        ],
    )
    assert [e.status for e in exchanges(out)] == ["ok"]


def test_gap_resynchronises_and_marks_unverified():
    s = Stream()
    dec = Decoder()
    first = frame(produce_request(9), 9, 1)
    lost = frame(produce_request(9), 9, 2)
    after = frame(produce_request(9), 9, 3)
    out = run(
        dec,
        [
            s.opened(),
            s.send(first),
            s.send(frame(produce_response(9), 9, 1), from_src=False),
            s.send(lost[:30]),
            s.gap(len(lost) - 60),
            s.send(lost[-30:] + after),
            s.send(frame(produce_response(9), 9, 2), from_src=False),
            s.send(frame(produce_response(9), 9, 3), from_src=False),
        ],
    )
    lost_events = [e for e in out if isinstance(e, ConnectionLost)]
    # The gap, then the answer to the request it took: a request the capture did not read, said again
    # (an answer can come before the gap is known, when the client sends nothing more for a while).
    assert [(e.to_broker, e.length, e.damaged) for e in lost_events] == [
        (True, len(lost) - 60, None),
        (True, 0, "unmatched"),
    ]
    ex = exchanges(out)
    assert [(e.correlation_id, e.status, e.unverified) for e in ex] == [(1, "ok", False), (3, "ok", True)]
    assert ex[1].batches[0].unverified
    assert dec.stats.unmatched_responses == 1  # the answer to the lost request


def test_gap_in_responses():
    s = Stream()
    dec = Decoder()
    r1, r2 = frame(produce_response(9), 9, 1), frame(produce_response(9), 9, 2)
    out = run(
        dec,
        [
            s.opened(),
            s.send(frame(produce_request(9), 9, 1)),
            s.send(frame(produce_request(9), 9, 2)),
            s.send(r1[:10], from_src=False),
            s.gap(len(r1) - 10, from_src=False),
            s.send(r2, from_src=False),
        ],
    )
    assert [(e.correlation_id, e.status, e.unverified) for e in exchanges(out)] == [
        (1, "unanswered", True),
        (2, "ok", True),
    ]


def test_mid_stream_start_finds_the_first_whole_frame():
    s = Stream()
    dec = Decoder()
    whole = frame(produce_request(9), 9, 7)
    tail = frame(produce_request(9), 9, 6)[-40:]
    resp_tail = frame(produce_response(9), 9, 6)[-9:]
    out = run(
        dec,
        [
            s.opened(handshake=False),
            s.send(tail + whole),
            s.send(resp_tail + frame(produce_response(9), 9, 7), from_src=False),
        ],
    )
    assert [(e.correlation_id, e.status) for e in exchanges(out)] == [(7, "ok")]


def test_frame_above_cap_is_skipped_without_allocating():
    s = Stream()
    dec = Decoder(max_frame=1 << 16)
    huge = struct.pack(">i", 1 << 30) + b"\x00" * 100
    out = run(
        dec,
        [
            s.opened(),
            s.send(huge + frame(end_txn(3), 3, 1)),
            s.send(frame(end_txn_response(3), 3, 1), from_src=False),
        ],
    )
    assert [(e.api_name, e.status) for e in exchanges(out)] == [("EndTxn", "ok")]
    assert dec.stats.errors >= 1
    conn = dec._conns[1]
    assert conn.requests.buffered == 0


def test_tls_on_a_kafka_port_is_reported_not_decoded():
    dropped = []
    s = Stream()
    dec = Decoder(on_not_kafka=dropped.append)
    out = run(dec, [s.opened(), s.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100)])
    assert out == [] and dec.stats.tls_connections == 1 and dropped == [1]
    assert dec.kafka_connections == 0


def test_auto_detects_kafka_on_another_port():
    s = Stream(src=Endpoint("10.0.0.1", 40000), dst=Endpoint("10.0.0.2", 19092))
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(),
            s.send(frame(init_producer_id(4), 4, 1)),
            s.send(frame(init_producer_id_response(4), 4, 1), from_src=False),
        ],
    )
    assert [(e.api_name, e.broker) for e in exchanges(out)] == [("InitProducerId", "10.0.0.2:19092")]
    assert dec.kafka_connections == 1


def test_auto_detection_works_out_the_client_without_handshake():
    # first segment seen is the broker's answer: src is the broker
    s = Stream(src=Endpoint("10.0.0.2", 19092), dst=Endpoint("10.0.0.1", 40000))
    dec = Decoder()
    out = run(
        dec,
        [
            s.opened(handshake=False),
            s.send(frame(init_producer_id(4), 4, 1), from_src=False),
            s.send(frame(init_producer_id_response(4), 4, 1), from_src=True),
        ],
    )
    assert [(e.client, e.broker) for e in exchanges(out)] == [("10.0.0.1:40000", "10.0.0.2:19092")]


def test_not_kafka_is_handed_back():
    dropped = []
    s = Stream(src=Endpoint("10.0.0.1", 40000), dst=Endpoint("10.0.0.2", 80))
    dec = Decoder(on_not_kafka=dropped.append)
    out = run(
        dec,
        [
            s.opened(),
            s.send(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n"),
            s.send(b"HTTP/1.1 200 OK\r\n\r\n", from_src=False),
        ],
    )
    assert out == [] and dropped == [1] and dec.kafka_connections == 0


def test_no_auto_detection_decodes_nothing_elsewhere_but_counts_what_looks_like_kafka():
    dropped, elsewhere = [], []
    dec = Decoder(
        auto_detect=False,
        on_not_kafka=dropped.append,
        on_elsewhere=lambda conn, port: elsewhere.append((conn, port)),
    )
    s = Stream(src=Endpoint("10.0.0.1", 40000), dst=Endpoint("10.0.0.2", 19092))
    request, response = frame(init_producer_id(4), 4, 1), frame(init_producer_id_response(4), 4, 1)
    assert run(dec, [s.opened(), s.send(request)]) == [] and elsewhere == []  # waits for the answer
    assert run(dec, [s.send(response, from_src=False)]) == []
    assert elsewhere == [(1, 19092)] and dropped == [] and dec.kafka_connections == 0
    counted = dec.stats.kafka_elsewhere[19092]
    assert (counted.connections, counted.bytes) == (1, len(request) + len(response))
    web = Stream(src=Endpoint("10.0.0.1", 40001), dst=Endpoint("10.0.0.2", 80), conn=2)
    run(
        dec,
        [
            web.opened(),
            web.send(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n"),
            web.send(b"HTTP/1.1 200 OK\r\n\r\n", from_src=False),
        ],
    )
    assert dropped == [2] and list(dec.stats.kafka_elsewhere) == [19092]


def test_no_auto_detection_and_no_watch_drops_at_once():
    dropped = []
    dec = Decoder(auto_detect=False, on_not_kafka=dropped.append, watch_elsewhere=False)
    s = Stream(src=Endpoint("10.0.0.1", 40000), dst=Endpoint("10.0.0.2", 19092))
    assert run(dec, [s.opened(), s.send(frame(init_producer_id(4), 4, 1))]) == []
    assert dropped == [1] and not dec.stats.kafka_elsewhere


def test_in_flight_limit():
    s = Stream()
    dec = Decoder(max_in_flight=3)
    out = run(dec, [s.opened(), *[s.send(frame(end_txn(3), 3, cid)) for cid in range(5)]])
    assert [(e.correlation_id, e.status) for e in exchanges(out)] == [(0, "unanswered"), (1, "unanswered")]
    assert len(dec._conns[1].pending) == 3


def test_garbage_is_counted_never_raised_nor_turned_into_findings():
    """Random bytes on a Kafka port: never read as an exchange (nor counted as a request); where they
    pass for a frame header they are reported as damage (malformed, oversized); the connection is
    reported ended; and the audit invents no critical or warning finding from them."""
    import random

    from ksniff.audit import AuditConfig, Auditor

    rnd = random.Random(7)
    damaged = 0
    for _ in range(200):
        s = Stream()
        dec = Decoder()
        events = [s.opened(handshake=rnd.random() < 0.5)]
        for _ in range(5):
            events.append(
                s.send(
                    bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 200))), from_src=rnd.random() < 0.6
                )
            )
        events.append(s.closed())
        out = run(dec, events) + dec.finish()
        found = exchanges(out)
        assert found == [] and dec.stats.requests == 0
        assert sum(isinstance(e, ConnectionEnded) for e in out) == (1 if dec.kafka_connections else 0)
        damaged += bool(dec.stats.errors or dec.stats.resyncs or dec.stats.oversized_frames)
        auditor = Auditor(AuditConfig())
        findings = [f for e in out for f in auditor.feed(e)]
        findings += auditor.finish(s.ts).findings
        assert not [f for f in findings if f.severity in ("critical", "warning")]
    assert damaged > 50  # the rest never completed a frame: held as a partial frame, then dropped


def test_records_kept_only_when_asked():
    from ksniff.decode.records import iter_records

    for keep in (False, True):
        s = Stream()
        dec = Decoder(keep_records=keep)
        parts = {("orders", 0): [record_batch(records=2, codec="zstd"), record_batch(sequence=2, records=1)]}
        (ex,) = exchanges(
            run(
                dec,
                [
                    s.opened(),
                    s.send(frame(produce_request(9, partitions=parts), 9, 1)),
                    s.send(frame(produce_response(9), 9, 1), from_src=False),
                ],
            )
        )
        if not keep:
            assert all(b.records is None for b in ex.batches)
            continue
        assert [[r.key for r in iter_records(b.records)] for b in ex.batches] == [
            [b"key-0", b"key-1"],
            [b"key-0"],
        ]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
    st.integers(1, 700),
    st.booleans(),
)
def test_mutated_real_frames_never_raise(mutations, cut, handshake):
    frames = [
        frame(init_producer_id(4), 4, 1),
        frame(produce_request(9), 9, 2),
        frame(produce_request(13, topic_ids={"orders": uuid.UUID(int=1)}), 13, 3),
    ]
    stream = bytearray(b"".join(frames))
    starts = [sum(map(len, frames[:i])) for i in range(len(frames))]
    size_fields = {at + k for at in starts for k in range(4)}
    answer = bytearray(frame(init_producer_id_response(4), 4, 1) + frame(produce_response(9), 9, 2))
    resized = False
    for where, value in mutations:
        target = stream if where % 2 else answer
        target[where % len(target)] = value
        resized |= target is stream and where % len(target) in size_fields
    s = Stream()
    dec = Decoder()
    events = [s.opened(handshake)]
    for i in range(0, len(stream), cut):
        events.append(s.send(stream[i : i + cut]))
    events.append(s.send(answer, from_src=False))
    out = run(dec, events) + dec.finish()
    assert all(isinstance(e, Exchange | ConnectionEnded | ConnectionLost) for e in out)
    if not resized:  # a frame's size changed says it ends elsewhere: what follows is read as a frame
        assert dec.stats.requests <= 3


def test_pipelined_frames_merged_into_one_chunk_decode_as_if_each_came_alone():
    # The reassembler merges a connection's segments for a while, so pipelined requests (or responses)
    # reach the decoder in one chunk, with where the capture time changes in it (marks), and a chunk may
    # end inside a frame. Each exchange must be the one it is when every segment is a chunk of its own:
    # the same pairing, and a request's times those of the segments carrying its first and last bytes.
    reqs = [frame(produce_request(9), 9, cid) for cid in (1, 2, 3, 4)]
    resps = [frame(produce_response(9), 9, cid) for cid in (1, 2, 3, 4)]
    # (direction, bytes, time) of each segment; request 2 in two segments, request 4 starts with 3's.
    segments = [
        (True, reqs[0], 1.0),
        (True, reqs[1][:20], 2.0),
        (True, reqs[1][20:], 2.5),
        (True, reqs[2] + reqs[3][:7], 3.0),
        (True, reqs[3][7:], 4.0),
        (False, resps[0], 5.0),
        (False, resps[1] + resps[2][:3], 6.0),
        (False, resps[2][3:] + resps[3], 7.0),
    ]

    def decoded(merge: list[list[int]]) -> list[tuple]:
        """The exchanges when the segments with the indexes of each list of `merge` form one chunk."""
        s = Stream()
        events = [s.opened()]
        for group in merge:
            from_src = segments[group[0]][0]
            start = s.offsets[from_src]
            pos, marks, parts = start, [], []
            for i in group:
                _, data, ts = segments[i]
                if parts:
                    marks.append((pos, ts))
                parts.append(data)
                pos += len(data)
            s.offsets[from_src] = pos
            first_ts, last_ts = segments[group[0]][2], segments[group[-1]][2]
            events.append(StreamChunk(1, from_src, start, b"".join(parts), first_ts, last_ts, tuple(marks)))
        found = exchanges(run(Decoder(), events))
        return [(e.correlation_id, e.status, e.request_ts, e.request_end_ts, e.response_ts) for e in found]

    alone = decoded([[i] for i in range(len(segments))])
    assert alone == [
        (1, "ok", 1.0, 1.0, 5.0),
        (2, "ok", 2.0, 2.5, 6.0),
        (3, "ok", 3.0, 3.0, 7.0),
        (4, "ok", 3.0, 4.0, 7.0),
    ]
    for merge in (
        [[0, 1, 2, 3, 4], [5, 6, 7]],
        [[0, 1], [2, 3], [4], [5, 6], [7]],
        [[0], [1, 2, 3, 4], [5, 6], [7]],
    ):
        assert decoded(merge) == alone, merge
