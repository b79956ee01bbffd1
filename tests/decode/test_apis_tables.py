"""Structural checks on every protocol table: names, version ranges, tags, key coverage, error codes."""

import re

import pytest

from ksniff.decode.apis import ALL_APIS, BY_NAME, FULL_BODY, HEADER_ONLY, body_skipped
from ksniff.decode.apis.errors import ERROR_CODES, error_name
from ksniff.decode.schema import NONE, Api, Array, Field, VersionRange

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
KAFKA_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def _structs(fields: tuple[Field, ...], path: str = ""):
    """Every struct of a table with its path: the message itself, then nested structs and arrays."""
    yield path or "<body>", fields
    for f in fields:
        inner = f.type.of if isinstance(f.type, Array) else f.type
        if isinstance(inner, tuple):
            yield from _structs(inner, f"{path}{f.name}.")


def _fields(api: Api):
    for direction, body in (("request", api.request), ("response", api.response)):
        for path, struct in _structs(body):
            for f in struct:
                yield direction, path, f


def _within(inner: VersionRange, outer: VersionRange) -> bool:
    return inner == NONE or (outer.low <= inner.low and inner.high <= outer.high)


def _overlaps(a: VersionRange, b: VersionRange) -> bool:
    return max(a.low, b.low) <= min(a.high, b.high)


API_IDS = [f"{a.key}-{a.name}" for a in ALL_APIS.values()]


def test_every_api_key_present_once():
    keys = sorted(ALL_APIS)
    assert keys == list(range(max(keys) + 1))
    assert max(keys) >= 92
    assert len(FULL_BODY) + len(HEADER_ONLY) == len(ALL_APIS)
    assert {a.key for a in FULL_BODY}.isdisjoint({a.key for a in HEADER_ONLY})
    assert all(ALL_APIS[k].key == k for k in keys)


def test_by_name_matches_by_key():
    assert len(BY_NAME) == len(ALL_APIS)
    for name, api in BY_NAME.items():
        assert ALL_APIS[api.key] is api
        assert KAFKA_NAME.match(name), name


@pytest.mark.parametrize("api", ALL_APIS.values(), ids=API_IDS)
def test_ranges_well_formed(api: Api):
    assert api.valid.low <= api.valid.high
    # flexible is "none" or an open range starting inside (or right after) the valid range
    assert api.flexible == NONE or api.flexible.high == VersionRange.parse("0+").high
    if api.flexible != NONE:
        assert api.flexible.low <= api.valid.high + 1


@pytest.mark.parametrize("api", FULL_BODY, ids=[a.name for a in FULL_BODY])
def test_field_names_snake_case_and_unique(api: Api):
    for direction, body in (("request", api.request), ("response", api.response)):
        for path, struct in _structs(body):
            names = [f.name for f in struct]
            assert len(names) == len(set(names)), f"{direction} {path}: duplicate names {names}"
            for n in names:
                assert SNAKE.match(n), f"{api.name} {direction} {path}{n}"


@pytest.mark.parametrize("api", FULL_BODY, ids=[a.name for a in FULL_BODY])
def test_field_ranges(api: Api):
    for direction, path, f in _fields(api):
        where = f"{api.name} {direction} {path}{f.name}"
        assert f.versions != NONE, where
        assert _overlaps(f.versions, api.valid), f"{where}: {f.versions} outside valid {api.valid}"
        if f.nullable != NONE:
            assert _within(f.nullable, f.versions) or f.nullable.high > api.valid.high, where
            assert f.nullable.low >= f.versions.low, where


@pytest.mark.parametrize("api", FULL_BODY, ids=[a.name for a in FULL_BODY])
def test_tagged_fields_only_in_flexible_versions(api: Api):
    for direction, path, f in _fields(api):
        where = f"{api.name} {direction} {path}{f.name}"
        if f.tag is None:
            assert f.tagged == NONE, where
            continue
        assert f.tag >= 0, where
        assert f.tagged != NONE, where
        assert f.tagged.low >= f.versions.low, where
        assert f.tagged.low >= api.flexible.low, f"{where}: tagged {f.tagged} before flexible {api.flexible}"


@pytest.mark.parametrize("api", FULL_BODY, ids=[a.name for a in FULL_BODY])
def test_tags_unique_per_struct(api: Api):
    for direction, body in (("request", api.request), ("response", api.response)):
        for path, struct in _structs(body):
            tags = [f.tag for f in struct if f.tag is not None]
            assert len(tags) == len(set(tags)), f"{api.name} {direction} {path}: tags {tags}"


@pytest.mark.parametrize("api", HEADER_ONLY, ids=[a.name for a in HEADER_ONLY])
def test_header_only_entries_skip_bodies(api: Api):
    assert body_skipped(api)
    assert api.request == () and api.response == ()


@pytest.mark.parametrize("api", FULL_BODY, ids=[a.name for a in FULL_BODY])
def test_full_body_entries_decode_bodies(api: Api):
    assert not body_skipped(api)


def test_only_api_versions_answers_with_header_v0():
    assert [a.name for a in ALL_APIS.values() if a.response_header_v0] == ["ApiVersions"]


@pytest.mark.parametrize(
    "name, valid, flexible",
    [
        ("Produce", "0-13", "9+"),
        ("Fetch", "0-18", "12+"),
        ("ListOffsets", "0-11", "6+"),
        ("Metadata", "0-13", "9+"),
        ("OffsetCommit", "0-10", "8+"),
        ("OffsetFetch", "0-10", "6+"),
        ("FindCoordinator", "0-6", "3+"),
        ("JoinGroup", "0-9", "6+"),
        ("Heartbeat", "0-4", "4+"),
        ("LeaveGroup", "0-5", "4+"),
        ("SyncGroup", "0-5", "4+"),
        ("SaslHandshake", "0-1", "none"),
        ("ApiVersions", "0-4", "3+"),
        ("SaslAuthenticate", "0-2", "2+"),
        ("InitProducerId", "0-6", "2+"),
        ("AddPartitionsToTxn", "0-5", "3+"),
        ("AddOffsetsToTxn", "0-4", "3+"),
        ("EndTxn", "0-5", "3+"),
        ("WriteTxnMarkers", "0-2", "1+"),
        ("TxnOffsetCommit", "0-5", "3+"),
        ("DescribeProducers", "0", "0+"),
        ("DescribeTransactions", "0", "0+"),
        ("ListTransactions", "0-2", "0+"),
    ],
)
def test_versions_of_the_audited_apis(name, valid, flexible):
    api = BY_NAME[name]
    assert (str(api.valid), str(api.flexible)) == (valid, flexible)


def _field(api: Api, direction: str, dotted: str) -> Field:
    fields = api.request if direction == "request" else api.response
    *parents, last = dotted.split(".")
    for p in parents:
        f = next(f for f in fields if f.name == p)
        fields = f.type.of if isinstance(f.type, Array) else f.type
    return next(f for f in fields if f.name == last)


@pytest.mark.parametrize(
    "api, direction, field, versions, default",
    [
        ("Produce", "request", "transactional_id", "3+", None),
        ("Produce", "response", "throttle_time_ms", "1+", 0),
        ("Produce", "response", "responses.partition_responses.log_start_offset", "5+", -1),
        ("Produce", "response", "responses.partition_responses.log_append_time_ms", "2+", -1),
        ("InitProducerId", "request", "producer_id", "3+", -1),
        ("InitProducerId", "request", "producer_epoch", "3+", -1),
        ("InitProducerId", "response", "ongoing_txn_producer_id", "6+", -1),
        ("EndTxn", "response", "producer_id", "5+", -1),
        ("EndTxn", "response", "producer_epoch", "5+", -1),
        ("AddPartitionsToTxn", "request", "v3_and_below_transactional_id", "0-3", None),
        ("AddPartitionsToTxn", "request", "transactions.verify_only", "4+", False),
        ("TxnOffsetCommit", "request", "generation_id", "3+", -1),
        ("WriteTxnMarkers", "request", "markers.transaction_version", "2+", 0),
        ("Fetch", "response", "responses.partitions.last_stable_offset", "4+", -1),
        ("Fetch", "request", "isolation_level", "4+", 0),
        ("ApiVersions", "response", "finalized_features_epoch", "3+", -1),
    ],
)
def test_audit_relevant_fields(api, direction, field, versions, default):
    f = _field(BY_NAME[api], direction, field)
    assert str(f.versions) == versions
    assert f.default == default


def test_sasl_secrets_are_marked():
    auth = BY_NAME["SaslAuthenticate"]
    assert _field(auth, "request", "auth_bytes").secret
    assert _field(auth, "response", "auth_bytes").secret


@pytest.mark.parametrize(
    "code, name",
    [
        (-1, "UNKNOWN_SERVER_ERROR"),
        (0, "NONE"),
        (15, "COORDINATOR_NOT_AVAILABLE"),
        (45, "OUT_OF_ORDER_SEQUENCE_NUMBER"),
        (46, "DUPLICATE_SEQUENCE_NUMBER"),
        (47, "INVALID_PRODUCER_EPOCH"),
        (48, "INVALID_TXN_STATE"),
        (49, "INVALID_PRODUCER_ID_MAPPING"),
        (50, "INVALID_TRANSACTION_TIMEOUT"),
        (51, "CONCURRENT_TRANSACTIONS"),
        (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        (59, "UNKNOWN_PRODUCER_ID"),
        (90, "PRODUCER_FENCED"),
        (120, "TRANSACTION_ABORTABLE"),
    ],
)
def test_error_names(code, name):
    assert error_name(code) == name


def test_error_codes_contiguous():
    assert sorted(ERROR_CODES) == list(range(-1, max(ERROR_CODES) + 1))
    assert len(set(ERROR_CODES.values())) == len(ERROR_CODES)
    assert error_name(None) is None
    assert error_name(30000) == "UNKNOWN_ERROR_CODE_30000"
