"""Frames written byte by byte from the protocol's facts, for the transaction flows the audit reads.

Independent of every client library: these pin the flexible versions of transaction version 2
(KIP-890) that no hand-written client struct covers.
"""

import struct
import uuid

from decode_encoder import uvarint

from ksniff.decode import interp
from ksniff.decode.apis import BY_NAME


def cstr(s: str | None) -> bytes:
    """A compact (nullable) string."""
    if s is None:
        return b"\x00"
    data = s.encode()
    return uvarint(len(data) + 1) + data


def carr(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def i8(n):
    return struct.pack(">b", n)


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def i64(n):
    return struct.pack(">q", n)


NO_TAGS = b"\x00"


def decode(api: str, version: int, is_request: bool, data: bytes):
    return interp.decode_body(BY_NAME[api], version, is_request, memoryview(data), strict=True)


def test_add_partitions_to_txn_v5_batched_verify_only():
    topic = cstr("orders") + carr([i32(0), i32(3)]) + NO_TAGS
    txn = cstr("txn-a") + i64(4242) + i16(7) + b"\x01" + carr([topic]) + NO_TAGS
    body = carr([txn]) + NO_TAGS
    req = decode("AddPartitionsToTxn", 5, True, body)
    (t,) = req.transactions
    assert (t.transactional_id, t.producer_id, t.producer_epoch, t.verify_only) == ("txn-a", 4242, 7, True)
    assert [(x.name, list(x.partitions)) for x in t.topics] == [("orders", [0, 3])]
    assert req.v3_and_below_transactional_id == ""
    assert req.v3_and_below_topics == ()


def test_add_partitions_to_txn_v3_single_transaction():
    topic = cstr("orders") + carr([i32(1)]) + NO_TAGS
    body = cstr("txn-b") + i64(9) + i16(0) + carr([topic]) + NO_TAGS
    req = decode("AddPartitionsToTxn", 3, True, body)
    assert (req.v3_and_below_transactional_id, req.v3_and_below_producer_id) == ("txn-b", 9)
    assert req.transactions == ()
    part = i32(1) + i16(48) + NO_TAGS
    resp = decode(
        "AddPartitionsToTxn", 3, False, i32(0) + carr([cstr("orders") + carr([part]) + NO_TAGS]) + NO_TAGS
    )
    assert resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 48


def test_end_txn_v5_returns_the_next_producer_id_and_epoch():
    resp = decode("EndTxn", 5, False, i32(0) + i16(0) + i64(4242) + i16(8) + NO_TAGS)
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, 4242, 8)
    old = decode("EndTxn", 4, False, i32(0) + i16(0) + NO_TAGS)
    assert (old.producer_id, old.producer_epoch) == (-1, -1)


def test_init_producer_id_v5_bump():
    req = decode("InitProducerId", 5, True, cstr("txn-a") + i32(60000) + i64(4242) + i16(7) + NO_TAGS)
    assert (req.transactional_id, req.transaction_timeout_ms, req.producer_id, req.producer_epoch) == (
        "txn-a",
        60000,
        4242,
        7,
    )
    v0 = decode("InitProducerId", 0, True, i16(-1) + i32(100))
    assert (v0.transactional_id, v0.producer_id, v0.producer_epoch) == (None, -1, -1)


def test_produce_v12_transactional_and_v13_topic_ids():
    topic_id = uuid.UUID("11111111-2222-3333-4444-555555555555")
    part = i32(2) + b"\x00" + NO_TAGS  # null records keep this about the envelope
    v13 = decode(
        "Produce",
        13,
        True,
        cstr("txn-a") + i16(-1) + i32(30000) + carr([topic_id.bytes + carr([part]) + NO_TAGS]) + NO_TAGS,
    )
    assert (v13.transactional_id, v13.acks) == ("txn-a", -1)
    assert v13.topic_data[0].topic_id == topic_id and v13.topic_data[0].name == ""
    v12 = decode(
        "Produce",
        12,
        True,
        cstr(None) + i16(1) + i32(30000) + carr([cstr("orders") + carr([part]) + NO_TAGS]) + NO_TAGS,
    )
    assert v12.transactional_id is None and v12.topic_data[0].name == "orders"


def test_produce_v2_has_no_transactional_id():
    body = i16(1) + i32(1000) + i32(1) + i16(6) + b"orders" + i32(1) + i32(0) + i32(-1)
    req = decode("Produce", 2, True, body)
    assert req.transactional_id is None
    assert req.topic_data[0].partition_data[0].records is None


def test_produce_v10_response_current_leader_tag():
    leader = i32(3) + i32(17) + NO_TAGS
    tags = uvarint(1) + uvarint(0) + uvarint(len(leader)) + leader
    part = i32(0) + i16(6) + i64(-1) + i64(-1) + i64(-1) + carr([]) + cstr(None) + tags
    body = carr([cstr("orders") + carr([part]) + NO_TAGS]) + i32(0) + NO_TAGS
    resp = decode("Produce", 10, False, body)
    p = resp.responses[0].partition_responses[0]
    assert (p.error_code, p.current_leader.leader_id, p.current_leader.leader_epoch) == (6, 3, 17)


def test_txn_offset_commit_v5():
    part = i32(0) + i64(99) + i32(-1) + cstr(None) + NO_TAGS
    body = (
        cstr("txn-a")
        + cstr("group-1")
        + i64(4242)
        + i16(7)
        + i32(3)
        + cstr("member-1")
        + cstr(None)
        + carr([cstr("orders") + carr([part]) + NO_TAGS])
        + NO_TAGS
    )
    req = decode("TxnOffsetCommit", 5, True, body)
    assert (req.transactional_id, req.group_id, req.producer_id, req.generation_id) == (
        "txn-a",
        "group-1",
        4242,
        3,
    )
    assert req.topics[0].partitions[0].committed_offset == 99


def test_write_txn_markers_v2():
    marker = (
        i64(4242)
        + i16(7)
        + b"\x01"
        + carr([cstr("orders") + carr([i32(0)]) + NO_TAGS])
        + i32(5)
        + i8(2)
        + NO_TAGS
    )
    req = decode("WriteTxnMarkers", 2, True, carr([marker]) + NO_TAGS)
    m = req.markers[0]
    assert (
        m.producer_id,
        m.producer_epoch,
        m.transaction_result,
        m.coordinator_epoch,
        m.transaction_version,
    ) == (4242, 7, True, 5, 2)


def test_api_versions_v4_finalized_transaction_version():
    feature = cstr("transaction.version") + i16(2) + i16(2) + NO_TAGS
    epoch, finalized = i64(12), carr([feature])
    tags = (
        uvarint(2)
        + uvarint(1)
        + uvarint(len(epoch))
        + epoch
        + uvarint(2)
        + uvarint(len(finalized))
        + finalized
    )
    body = i16(0) + carr([i16(0) + i16(0) + i16(13) + NO_TAGS]) + i32(0) + tags
    resp = decode("ApiVersions", 4, False, body)
    assert resp.finalized_features_epoch == 12
    assert [(f.name, f.max_version_level) for f in resp.finalized_features] == [("transaction.version", 2)]
    assert resp.api_keys[0].max_version == 13


def test_find_coordinator_v4_batched_transaction_keys():
    req = decode("FindCoordinator", 4, True, i8(1) + carr([cstr("txn-a"), cstr("txn-b")]) + NO_TAGS)
    assert (req.key_type, list(req.coordinator_keys), req.key) == (1, ["txn-a", "txn-b"], "")
