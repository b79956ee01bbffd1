"""The compiled body reader (`ksniff.decode._bodies`) against the generated decoders, the reference: the
same value and end (or the same error) on every fixture of the tables, under every item budget, on
truncations, mutations and random bytes; the plain fixtures read by the compiled path itself (not handed
back); and the same decode events for every capture of the corpus.

Where the project is built without a C compiler the module is missing and these tests skip; in CI (`CI`
set) it must have been built, so there they fail instead."""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path

import pytest
from compiled_support import require_compiled
from corpus_decode import decoded
from decode_builders import (
    CODECS,
    control_batch,
    frame,
    mutations,
    produce_bodies,
    produce_request,
    produce_response,
    record_batch,
)
from decode_encoder import fixture, uvarint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from ksniff.capture import read_files
from ksniff.config import EngineConfig
from ksniff.decode import compiled, records
from ksniff.decode.apis import ALL_APIS, FULL_BODY

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))

CASES = [
    pytest.param(api, v, is_request, id=f"{api.name}-v{v}-{'req' if is_request else 'resp'}")
    for api in FULL_BODY
    for v in range(api.valid.low, api.valid.high + 1)
    for is_request in (True, False)
]


def _bodies():
    return require_compiled("ksniff.decode._bodies", "the compiled body reader")


@pytest.fixture(autouse=True)
def built():
    _bodies()
    if compiled._bodies is None:
        pytest.skip("KSNIFF_PURE_PYTHON is set: the compiled body reader is not loaded")


class Counted:
    """The generated decoder, counting the bodies handed back to it."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, view, items):
        self.calls += 1
        return self.fn(view, items)


def readers(api, version, is_request, keep_records=False):
    """(compiled reader whose hand-backs are counted, generated decoder)."""
    fast = compiled.fast_decoder_for(api, version, is_request, keep_records)
    python = compiled.decoder_for(api, version, is_request, keep_records)
    assert fast.python.generated() is python
    parse = compiled.parse_batches_keeping_records if keep_records else compiled.parse_batches
    counted = Counted(python)
    return compiled._bodies.Body(fast.program, counted, parse, compiled.uuid.UUID), counted, python


def outcome(fn, data, items):
    try:
        value, end = fn(memoryview(data), items)
    except Exception as e:  # noqa: BLE001 - the same exception from both, whatever it is
        return "error", type(e), str(e)
    return "ok", value, end, type(value), tuple(type(v) for v in value)


def same(api, version, is_request, data, items=1_000_000, keep_records=False):
    fast, counted, python = readers(api, version, is_request, keep_records)
    ours, ref = outcome(fast, data, items), outcome(python, data, items)
    assert ours == ref
    if ours[0] == "ok" and keep_records:
        assert [getattr(v, "raw", None) for v in ours[1]] == [getattr(v, "raw", None) for v in ref[1]]
    return ours, counted.calls


@pytest.mark.parametrize("api, version, is_request", CASES)
@pytest.mark.parametrize("nulls, tags", [(False, True), (True, True), (False, False), (True, False)])
def test_equal_on_table_fixtures(api, version, is_request, nulls, tags):
    data = fixture(api, version, is_request, nulls=nulls, tags=tags)
    (kind, *_), handed_back = same(api, version, is_request, data)
    assert kind == "ok"
    # Tagged fields too (every known one and an unknown tag in each flexible struct): the compiled path
    # reads the whole body itself.
    assert handed_back == 0


@pytest.mark.parametrize("api, version, is_request", CASES)
def test_equal_under_every_item_budget(api, version, is_request):
    data = fixture(api, version, is_request, nulls=False, tags=False)
    for budget in range(12):
        same(api, version, is_request, data, items=budget)


@pytest.mark.parametrize("api, version, is_request", CASES)
@pytest.mark.parametrize("tags", [False, True])
def test_equal_on_truncations(api, version, is_request, tags):
    data = fixture(api, version, is_request, tags=tags)
    for n in range(len(data)):
        same(api, version, is_request, data[:n])


@pytest.mark.parametrize("api, version, is_request", CASES)
@pytest.mark.parametrize("tags", [False, True])
def test_equal_on_mutations(api, version, is_request, tags):
    data = bytearray(fixture(api, version, is_request, tags=tags))
    if not data:
        pytest.skip("empty body at this version")
    for mutated in mutations(bytes(data), f"{api.key}-{version}-{is_request}"):
        same(api, version, is_request, mutated)


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("keep_records", [False, True])
def test_equal_on_real_client_produce(version, keep_records):
    produce = ALL_APIS[0]
    req_body, resp_body = produce_bodies(version)
    for is_request, body in ((True, req_body), (False, resp_body)):
        (kind, *_), handed_back = same(produce, version, is_request, body, keep_records=keep_records)
        assert kind == "ok" and handed_back == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.binary(max_size=80))
def test_equal_on_random_bytes(case, data):
    api, version, is_request = case.values
    same(api, version, is_request, data)


@pytest.mark.parametrize("api, version, is_request", CASES)
def test_equal_on_negative_lengths(api, version, is_request):
    """Lengths of -2 (and other negatives) wherever a length can be: every INT16 and INT32 read as -2,
    from the body's first byte and from each of the next three. The compiled reader once took a length
    of -2 for its own error signal and raised a SystemError where the generated decoder says malformed."""
    for pattern in (b"\xff\xfe", b"\xff\xff\xff\xfe", b"\xff\xfe\x00\x01"):
        for shift in range(4):
            (kind, *rest), _ = same(api, version, is_request, bytes(shift) + pattern * 24)
            assert kind == "ok" or rest[0] is not SystemError


FETCH = ALL_APIS[1]  # Fetch


def _endpoints(*nodes: tuple) -> bytes:
    """A Fetch answer's node_endpoints value (v16+): a compact array of (node id, host, port, rack)."""
    out = uvarint(len(nodes) + 1)
    for node_id, host, port, rack in nodes:
        out += struct.pack(">i", node_id) + uvarint(len(host) + 1) + host + struct.pack(">i", port)
        out += b"\x00" if rack is None else uvarint(len(rack) + 1) + rack
        out += b"\x00"  # the node's own tagged section
    return out


def _section(*tags: tuple[int, bytes]) -> bytes:
    return uvarint(len(tags)) + b"".join(uvarint(tag) + uvarint(len(data)) + data for tag, data in tags)


ONE = _endpoints((1, b"broker-1", 9092, b"rack-a"))
TWO = _endpoints((2, b"broker-2", 9093, None), (3, b"b3", 9094, b""))
TAG_SECTIONS = {  # name: (the answer's tagged section, the outcome, the node endpoints read)
    "no endpoints, as a broker sends them": ((_section((0, _endpoints()))), "ok", ()),
    "two endpoints": (_section((0, TWO)), "ok", ((2, "broker-2", 9093, None), (3, "b3", 9094, ""))),
    "the tag twice: the later one wins": (_section((0, ONE), (0, TWO)), "ok", ((2,), (3,))),
    "unknown tags around it, kept in order": (_section((7, b"abc"), (0, ONE), (3, b"")), "ok", ((1,),)),
    "a value shorter than its tag's bytes": (_section((0, ONE + b"\x05\x06")), "ok", ((1, "broker-1"),)),
    "a tag number past 2**31": (_section((2**31 + 5, b"x")), "ok", ()),
    "a value past its tag's bytes": (_section((0, ONE[:-4])), "error", None),
    "a tag's size past the body": (uvarint(1) + uvarint(0) + uvarint(200) + ONE, "error", None),
    "more tags than bytes": (uvarint(50) + uvarint(0), "error", None),
    "a tag varint too long": (uvarint(1) + b"\xff\xff\xff\xff\xff\x01", "error", None),
}


@pytest.mark.parametrize("name", TAG_SECTIONS)
def test_tagged_sections_read_in_c_as_the_generated_decoder_reads_them(name):
    """A broker may end every Fetch answer of v16+ with a tagged node_endpoints (Tansu, the corpus's
    broker, does, most often empty): the compiled reader reads such sections itself, known tags into their
    fields and unknown ones kept, with the generated decoder's value; a bad section is handed back and
    gets its error."""
    section, kind, endpoints = TAG_SECTIONS[name]
    plain = fixture(FETCH, 16, False, tags=False)
    assert plain.endswith(b"\x00")  # the answer's own (empty) tagged section ends the body
    ours, handed_back = same(FETCH, 16, False, plain[:-1] + section)
    assert ours[0] == kind
    if kind == "ok":
        assert handed_back == 0
        read = [(e.node_id, e.host, e.port, e.rack) for e in ours[1].node_endpoints]
        assert len(read) == len(endpoints)
        assert [r[: len(want)] for r, want in zip(read, endpoints, strict=True)] == list(endpoints)
        unknown = ((7, b"abc"), (3, b"")) if name.startswith("unknown") else ()
        unknown += ((2**31 + 5, b"x"),) if name.startswith("a tag number") else ()
        assert ours[1]._unknown_tags == unknown
    else:
        assert handed_back == 1


def test_a_uuid_read_again_is_the_one_made_before_and_the_table_of_them_is_bounded():
    """Topic ids (every Fetch and Produce of v13+) are made once per id seen lately, as uuid.UUID makes
    them; ids chosen by a client, all different, leave the table at its bound."""
    import uuid

    fast = compiled.fast_decoder_for(FETCH, 16, False)
    body = fixture(FETCH, 16, False, tags=False)
    first = fast(memoryview(body), 1_000_000)[0].responses[0].topic_id
    at = body.index(first.bytes)
    again = fast(memoryview(body), 1_000_000)[0].responses[0].topic_id
    assert again is first
    m = compiled._bodies
    for n in range(m.UUIDS_KEPT * 3):
        chosen = uuid.UUID(int=(n * 2654435761) % (1 << 128) | (1 << 120))
        value = fast(memoryview(body[:at] + chosen.bytes + body[at + 16 :]), 1_000_000)[0]
        assert value.responses[0].topic_id == chosen and type(value.responses[0].topic_id) is uuid.UUID
        assert m.uuids_kept() <= m.UUIDS_KEPT


def test_every_body_of_the_corpus_is_read_in_c(monkeypatch):
    """No body of a real client or broker in the corpus goes back to the generated decoder: the plain path
    covers what real traffic sends (a Fetch answer's tagged node_endpoints sent all of them back)."""
    handed_back: list[tuple] = []
    generated_call = compiled.Generated.__call__

    def counted(self, view, items):
        handed_back.append((self.key[0].name, self.key[1], self.key[2]))
        return generated_call(self, view, items)

    monkeypatch.setattr(compiled.Generated, "__call__", counted)
    bodies = 0
    for path in CORPUS:
        for event in _decoded(path)[0]:
            bodies += getattr(event, "request", None) is not None
    assert bodies > 1000
    assert handed_back == []


def test_made_once_per_version():
    api = ALL_APIS[0]
    assert compiled.fast_decoder_for(api, 9, True) is compiled.fast_decoder_for(api, 9, True)
    assert compiled.fast_decoder_for(api, 9, True) is not compiled.fast_decoder_for(api, 9, False)


def _decoded(path: Path) -> list:
    return decoded(path)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_decode_events_identical(path, monkeypatch):
    """Every exchange (bodies, batches, answers) and the decode counters of every capture of the corpus."""
    from ksniff.decode import connection, frames

    ours = _decoded(path)
    monkeypatch.setattr(compiled, "_bodies", None)
    monkeypatch.setattr(connection, "_PRODUCED", None)
    monkeypatch.setattr(connection, "_FETCHED", None)
    monkeypatch.setattr(connection, "_EXCHANGE", connection.Exchange)
    monkeypatch.setattr(connection, "LANE", None)
    monkeypatch.setattr(connection, "request_head", frames.request_head_python)
    assert compiled.fast_decoder_for(ALL_APIS[0], 9, True) is compiled.decoder_for(ALL_APIS[0], 9, True)
    assert ours == _decoded(path)


# -- record batch headers ---------------------------------------------------------------------------------


def _walks(data: bytes, limit: int = records.NO_LIMIT) -> tuple:
    """(compiled walk, Python walk) of one records field: values and types, field by field."""
    assert records.parse_batches is not records.parse_batches_python
    out = []
    for walk in (records.parse_batches, records.parse_batches_python):
        headers = walk(memoryview(data), limit)
        assert type(headers) is tuple
        out.append([(h, tuple(type(v) for v in dataclasses.astuple(h))) for h in headers])
    return tuple(out)


def _fields() -> list[bytes]:
    kinds = [
        record_batch(),
        record_batch(producer_id=-1, epoch=-1, sequence=-1, transactional=False),
        record_batch(producer_id=2**40, epoch=32000, sequence=2**31 - 5, records=7, base_offset=2**40),
    ]
    kinds += [record_batch(sequence=i, codec=c) for i, c in enumerate(CODECS)]
    kinds.append(control_batch(77, 3, True, 10, coordinator_epoch=5))
    kinds.append(control_batch(77, 3, False, 11))
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"v")
    kinds.append(bytes(legacy.build()))
    return kinds


FIELDS = _fields()


@pytest.mark.parametrize("i", range(len(FIELDS)))
def test_batch_headers_equal_alone_and_in_runs(i):
    data = FIELDS[i]
    ours, ref = _walks(data)
    assert ours == ref and ours
    ours, ref = _walks(data + FIELDS[0] + data)
    assert ours == ref and len(ours) >= 3


def test_batch_headers_equal_on_every_cut_and_limit():
    run = FIELDS[0] + FIELDS[3] + FIELDS[1]
    for n in range(len(run) + 1):
        ours, ref = _walks(run[:n])
        assert ours == ref, n
    for limit in range(5):
        ours, ref = _walks(run, limit)
        assert ours == ref, limit


def test_batch_headers_equal_with_a_bad_crc_and_unknown_codec():
    data = bytearray(FIELDS[0])
    data[-1] ^= 0xFF  # the CRC no longer matches
    ours, ref = _walks(bytes(data))
    assert ours == ref and ours[0][0].crc_ok is False
    data = bytearray(FIELDS[0])
    data[22] |= 0x07  # codec 7: unknown (the CRC is then off too)
    ours, ref = _walks(bytes(data))
    assert ours == ref and ours[0][0].codec == "unknown"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, len(FIELDS) - 1), st.integers(0, 200), st.integers(0, 255))
def test_batch_headers_equal_on_random_and_mutated_bytes(data, i, where, value):
    assert _walks(data)[0] == _walks(data)[1]
    mutated = bytearray(FIELDS[i])
    mutated[where % len(mutated)] = value
    ours, ref = _walks(bytes(mutated))
    assert ours == ref


# -- the batches of a Produce exchange --------------------------------------------------------------------


def _bodies_of(version: int, partitions: dict, answers: dict | None, ids: dict, keep_records: bool):
    produce = ALL_APIS[0]
    flexible = produce.flexible.contains(version)
    req = frame(produce_request(version, partitions=partitions, topic_ids=ids), version, 1)
    body = req[4 + 10 + len("ksniff-test") + (1 if flexible else 0) :]
    request, _ = compiled.decoder_for(produce, version, True, keep_records)(memoryview(body), 1_000_000)
    if answers is None:
        return request, None
    resp = frame(produce_response(version, answers=answers, topic_ids=ids), version, 1)
    response, _ = compiled.decoder_for(produce, version, False)(
        memoryview(resp[8 + (1 if flexible else 0) :]), 100
    )
    return request, response


@pytest.mark.parametrize("version", [3, 7, 9, 12, 13])
@pytest.mark.parametrize("keep_records", [False, True])
@pytest.mark.parametrize(
    "answers",
    [
        {("orders", 0): (0, 100), ("orders", 3): (0, -1), ("audit", 1): (47, -1)},
        {("orders", 0): (0, 5)},  # the other partitions got no answer
        None,  # no response (acks=0, unanswered)
    ],
    ids=["answered", "partly", "none"],
)
def test_produced_batches_equal(version, keep_records, answers):
    """Several topics, partitions and batches per partition (each later batch's offset after the one
    before it), errors, refused offsets, named topics, topic ids known and not known."""
    from ksniff.decode.connection import _PRODUCED, Connection, Pending
    from ksniff.decode.context import DecodeContext

    assert _PRODUCED is not None
    import uuid

    ids = {"orders": uuid.UUID(int=5), "audit": uuid.UUID(int=9)}
    partitions = {
        ("orders", 0): [record_batch(sequence=0, records=3), record_batch(sequence=3, records=2)],
        ("orders", 3): [record_batch(sequence=0)],
        ("audit", 1): [record_batch(sequence=0, records=4)],
    }
    request, response = _bodies_of(version, partitions, answers, ids, keep_records)
    ctx = DecodeContext(ALL_APIS, max_frame=1 << 20, max_in_flight=10, keep_records=keep_records)
    ctx.topic_names[uuid.UUID(int=5)] = "orders"  # learnt from a Metadata answer; "audit" was not
    c = Connection(ctx, 7, "10.0.0.1:5000", "10.0.0.2:9092", True, False)
    p = Pending(1, ALL_APIS[0], 0, "Produce", version, 11, "app", request, None, 1.0, 1.2, False, None)
    for unverified in (False, True):
        ref = c._produced(p, response, 2.5 if response else None, unverified)
        head = (p.first_ts, c.conn, c.client, c.broker, p.client_id, p.correlation_id, p.api_version)
        ours = _PRODUCED(request, response, ctx.topic_names, head, 2.5 if response else None, unverified)
        assert type(ours) is tuple and len(ours) == 4
        assert ours == ref
        assert [tuple(map(type, dataclasses.astuple(b))) for b in ours] == [
            tuple(map(type, dataclasses.astuple(b))) for b in ref
        ]


def test_produced_batches_leave_other_bodies_to_python():
    from ksniff.decode.connection import _PRODUCED

    request, response = _bodies_of(9, {("orders", 0): [record_batch()]}, {("orders", 0): (0, 1)}, {}, False)
    head = (1.0, 7, "c", "b", None, 1, 9)
    assert _PRODUCED(tuple(request), response, {}, head, None, False) is None  # not a ProduceRequest
    assert _PRODUCED(request, tuple(response), {}, head, None, False) is None


# -- the partitions of a Fetch exchange -------------------------------------------------------------------


@pytest.mark.parametrize("version", range(FETCH.valid.low, FETCH.valid.high + 1))
@pytest.mark.parametrize("nulls, tags", [(False, True), (True, True), (False, False)])
def test_fetched_partitions_equal(version, nulls, tags):
    """Every version's request and answer (the protocol fixtures: aborted transactions or none, records
    or none, the replica_state a v15+ follower sends in its tags), topic ids known and not known."""
    from ksniff.decode.connection import _FETCHED, Connection, Pending
    from ksniff.decode.context import DecodeContext

    assert _FETCHED is not None
    request = compiled.decoder_for(FETCH, version, True)(
        memoryview(fixture(FETCH, version, True, nulls=nulls, tags=tags)), 1_000_000
    )[0]
    response = compiled.decoder_for(FETCH, version, False)(
        memoryview(fixture(FETCH, version, False, nulls=nulls, tags=tags)), 1_000_000
    )[0]
    ctx = DecodeContext(ALL_APIS, max_frame=1 << 20, max_in_flight=10, keep_records=False)
    ctx.topic_names[response.responses[0].topic_id] = "orders"  # learnt from a Metadata answer; not the other
    c = Connection(ctx, 7, "10.0.0.1:5000", "10.0.0.2:9092", True, False)
    p = Pending(1, FETCH, 1, "Fetch", version, 11, "app", request, None, 1.0, 1.2, False, None)
    head = (p.first_ts, c.conn, c.client, c.broker, p.client_id, p.correlation_id, p.api_version)
    for unverified in (False, True):
        ref = c._fetched(p, response, 2.5, unverified)
        ours = _FETCHED(request, response, ctx.topic_names, head, 2.5, unverified)
        assert type(ours) is tuple and len(ours) == 4
        assert ours == ref
        assert [tuple(map(type, dataclasses.astuple(f))) for f in ours] == [
            tuple(map(type, dataclasses.astuple(f))) for f in ref
        ]
    if version >= 15 and tags:  # a follower's id from its replica_state
        assert ours[0].replica_id == request.replica_state.replica_id != request.replica_id


def test_fetched_partitions_asked_offsets_of_the_corpus():
    """Real consumers' Fetch answers are each joined to the offset its request asked the partition from."""
    asked = answered = 0
    for path in CORPUS:
        for event in _decoded(path)[0]:
            for part in getattr(event, "fetched", ()):
                answered += 1
                asked += part.fetch_offset is not None
    assert answered > 500 and asked == answered


def test_fetched_partitions_leave_other_bodies_to_python():
    from ksniff.decode.connection import _FETCHED

    request = compiled.decoder_for(FETCH, 12, True)(memoryview(fixture(FETCH, 12, True, tags=False)), 100)[0]
    response = compiled.decoder_for(FETCH, 12, False)(memoryview(fixture(FETCH, 12, False, tags=False)), 100)[
        0
    ]
    head = (1.0, 7, "c", "b", None, 1, 12)
    assert _FETCHED(tuple(request), response, {}, head, None, False) is None  # not a FetchRequest
    assert _FETCHED(request, tuple(response), {}, head, None, False) is None
    assert len(_FETCHED(request, response, {}, head, None, False)) == 4


# -- events made by position ------------------------------------------------------------------------------


def _newer(name: str):
    """`name` of the compiled body reader: a build older than it counts as not built (skipped here, a
    failure in CI)."""
    m = _bodies()
    if not hasattr(m, name):
        if os.environ.get("CI"):
            pytest.fail(f"the compiled body reader was built without {name} (pip install -e .)")
        pytest.skip(f"the compiled body reader here was built before {name}: build it again")
    return getattr(m, name)


def _maker() -> type:
    return _newer("Maker")


@pytest.mark.parametrize(
    "where",
    [
        "ksniff.decode.events:Exchange",
        "ksniff.decode.events:ProducedBatch",
        "ksniff.decode.events:RecordBatchHeader",
        "ksniff.decode.connection:Pending",
        "ksniff.audit.partlog:Placed",
        "ksniff.audit.model:Transaction",
        "ksniff.audit.state:TxnRecord",
    ],
)
def test_maker_makes_what_the_class_makes(where):
    """`made_by_position` (a Maker, with the module built) against the class's own `__init__`: equal
    objects of the class, holding the very values given, frozen or not as the class is, tracked by the
    collector as the class's are, pickled alike, and every value released with the object."""
    import gc
    import importlib
    import pickle
    import sys

    from ksniff.decode.events import made_by_position

    module, name = where.split(":")
    cls = getattr(importlib.import_module(module), name)
    make = made_by_position(cls)
    assert type(make) is _maker() and make.made is cls
    values = [f"{name}-{i}-{'x' * i}" for i in range(len(dataclasses.fields(cls)))]
    counts = [sys.getrefcount(v) for v in values]
    made, ref = make(*values), cls(*values)
    assert type(made) is cls and made == ref and repr(made) == repr(ref)
    assert all(getattr(made, f.name) is v for f, v in zip(dataclasses.fields(cls), values, strict=True))
    assert gc.is_tracked(made) == gc.is_tracked(ref)
    assert pickle.loads(pickle.dumps(made)) == ref
    first = dataclasses.fields(cls)[0].name
    if cls.__dataclass_params__.frozen:
        assert hash(made) == hash(ref)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, first, None)
    else:
        setattr(made, first, "changed")
        assert getattr(made, first) == "changed" and made != ref
        setattr(made, first, values[0])
    del made, ref
    assert [sys.getrefcount(v) for v in values] == counts
    with pytest.raises(TypeError):
        make(*values[:-1])  # every field, by position
    with pytest.raises(TypeError):
        make(*values, None)


@pytest.mark.parametrize(
    "where",
    [
        "ksniff.audit.partlog:AckedBatch",
        "ksniff.audit.partlog:AckedExchange",
        "ksniff.audit.partlog:Placed",
        "ksniff.audit.state:TxnRecord",
    ],
)
def test_an_untracked_maker_makes_the_same_records_out_of_the_collectors_walks(where):
    """`made_by_position(cls, untracked=True)`: the class's objects, equal, not tracked by the cyclic
    collector, and every value released with the object (reference counting frees them)."""
    import gc
    import importlib
    import sys

    from ksniff.decode.events import made_by_position

    if not hasattr(_maker(), "untracked"):
        if os.environ.get("CI"):
            pytest.fail("the compiled body reader was built without a Maker's untracked (pip install -e .)")
        pytest.skip("the compiled body reader here was built before a Maker's untracked: build it again")
    module, name = where.split(":")
    cls = getattr(importlib.import_module(module), name)
    make = made_by_position(cls, untracked=True)
    assert type(make) is _maker() and make.made is cls and make.untracked
    values = [f"{name}-{i}-{'x' * i}" for i in range(len(dataclasses.fields(cls)))]
    counts = [sys.getrefcount(v) for v in values]
    made, ref = make(*values), cls(*values)
    assert made == ref and repr(made) == repr(ref)
    assert not gc.is_tracked(made) and gc.is_tracked(ref)
    del made, ref
    assert [sys.getrefcount(v) for v in values] == counts


def _cannot_refer_back(record, kept: tuple[type, ...]) -> list[str]:
    """What in `record` could make it part of a reference cycle: anything it holds (through containers,
    and through other records of the classes `kept`) that is not a number, text, bytes or None, and
    `record` itself, reached again."""
    import gc

    atomic = (str, int, float, bool, bytes, type(None))
    found, todo, seen = [], list(gc.get_referents(record)), set()
    while todo:
        obj = todo.pop()
        if obj is record:
            found.append(f"{type(record).__name__} refers back to itself")
        if isinstance(obj, (type, *atomic)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (tuple, list, set, frozenset, dict, *kept)):
            todo.extend(gc.get_referents(obj))
        else:
            found.append(f"{type(record).__name__} holds a {type(obj).__name__}")
    return found


def test_the_untracked_records_of_the_corpus_audits_cannot_be_in_a_cycle():
    """Every placed batch (with its acknowledgement records) and every transaction record the fold kept,
    auditing each capture of the corpus, holds only numbers, text, None and such records or containers of
    them: nothing that could refer back to it, which is what leaving them out of the collector needs."""
    from ksniff.audit.partlog import AckedBatch, AckedExchange, Placed
    from ksniff.audit.state import TxnRecord
    from ksniff.engine.local import PIECES_FROM, Pipeline, fewer_collections

    kept = (AckedBatch, AckedExchange, Placed, TxnRecord)
    checked = 0
    for path in CORPUS:
        run = read_files([str(path)])
        run.reassembler.hand_pieces(PIECES_FROM)
        pipeline = Pipeline(EngineConfig(keep_tables=False), run.drop, run.reassembler, None, run.drop)
        with fewer_collections():
            for event in run:
                pipeline.feed(event)
            pipeline.result(run, "local")
        state = pipeline.auditor.state
        records = list(state.transactions)
        for lg in state.logs.logs.values() if state.logs is not None else ():
            records.extend(lg.at.values())
        for record in records:
            assert _cannot_refer_back(record, kept) == [], (path.name, record)
            checked += 1
    assert checked > 100


def test_maker_refuses_a_class_whose_fields_are_not_its_slots():
    @dataclasses.dataclass
    class Plain:
        a: int

    with pytest.raises(TypeError):
        _maker()(Plain, ("a",))


def _made_by_makers() -> list[tuple]:
    """(module, name, class) of every Maker ksniff's modules made (`made_by_position`) and hold."""
    import sys

    found, maker = [], _maker()
    for module_name, module in sorted(sys.modules.items()):
        if module_name.startswith("ksniff.") and module is not None:
            for name, value in sorted(vars(module).items()):
                if type(value) is maker:
                    found.append((module, name, value.made))
    return found


def test_corpus_audit_documents_identical_with_the_makers_and_the_classes(monkeypatch):
    """The whole audit of every capture of the corpus with the events and the fold's records made by
    their Makers and by their classes: the same JSON document, byte for byte."""
    import json

    import ksniff.audit.fold  # noqa: F401 - every module that makes its records by position
    from ksniff.decode import connection
    from ksniff.engine.local import audit_paths

    config = EngineConfig(keep_tables=False)

    def documents():
        return [json.dumps(audit_paths([str(p)], config).as_contract(), sort_keys=True) for p in CORPUS]

    makers = _made_by_makers()
    made = {cls.__name__ for _, _, cls in makers}
    assert {
        "Exchange",
        "Pending",
        "AckedBatch",
        "AckedExchange",
        "Placed",
        "TxnWrite",
        "Accepted",
        "Transaction",
        "TxnRecord",
    } <= made
    ours = documents()
    for module, name, cls in makers:
        monkeypatch.setattr(module, name, cls)
    # and the batch headers and Produce batches the compiled readers make, by their classes
    monkeypatch.setattr(connection, "made_by_position", lambda cls: cls)
    monkeypatch.setattr(connection, "_PRODUCED", connection._compiled_produced())
    walk = compiled._bodies.BatchWalk(
        records.RecordBatchHeader, records.crc32c, records.CODECS, records.parse_batches_python
    )
    monkeypatch.setattr(records, "parse_batches", walk)
    monkeypatch.setattr(compiled, "parse_batches", walk)
    monkeypatch.setattr(compiled, "_fast_cache", {})  # the body readers made again, with that walk
    assert _made_by_makers() == []
    assert len(ours) == len(CORPUS) > 10
    assert ours == documents()


# -- request headers --------------------------------------------------------------------------------------


def _compiled_request_head():
    return _newer("request_head")


def _heads(payload: bytes, flexible: bool) -> list:
    """The compiled and the Python request_head of `payload`, as bytes and as views, with their types."""
    from ksniff.decode import frames

    out = []
    for head in (_compiled_request_head(), frames.request_head_python):
        for view in (payload, memoryview(payload), memoryview(b"??" + payload)[2:]):
            got = head(view, flexible)
            out.append((got, None if got is None else tuple(map(type, got))))
    return out


def _header(client_id: bytes | None, flexible: bool, tags: bytes = b"\0") -> bytes:
    length = -1 if client_id is None else len(client_id)
    return struct.pack(">hhih", 0, 9, -7, length) + (client_id or b"") + (tags if flexible else b"") + b"body"


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("client_id", [None, b"", b"app-1", "\u00e9t\u00e9".encode(), b"\xff\xfe bad utf-8"])
def test_request_head_equal_on_plain_headers(flexible, client_id):
    from ksniff.decode import frames

    payload = _header(client_id, flexible)
    heads = _heads(payload, flexible)
    assert len({repr(h) for h in heads}) == 1
    assert heads[0][0][0] == -7 and heads[0][0][2] == len(payload) - 4
    calls = []
    real = frames.request_head_python

    def counted(*args):
        calls.append(args)
        return real(*args)

    frames.request_head_python, saved = counted, real
    try:
        _compiled_request_head()(payload, flexible)
    finally:
        frames.request_head_python = saved
    assert calls == []  # read in C, not handed back


@pytest.mark.parametrize("flexible", [False, True])
def test_request_head_equal_off_the_plain_path(flexible):
    """Tagged fields, a client id longer than the bytes, a bad length, payloads shorter than a header:
    the same answers (the compiled one hands these back to the reference)."""
    cases = [_header(b"app", True, tags=b"\x01\x00\x02ab"), _header(b"app", flexible)[:12]]
    cases += [struct.pack(">hhih", 0, 9, 1, n) + b"xy" for n in (-2, -1, 5, 32767, -32768)]
    cases += [_header(b"app", flexible)[:k] for k in range(0, 11)]
    for payload in cases:
        heads = _heads(payload, flexible)
        assert len({repr(h) for h in heads}) == 1, payload


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=40), flexible=st.booleans())
def test_request_head_equal_on_random_bytes(data, flexible):
    heads = _heads(data, flexible)
    assert len({repr(h) for h in heads}) == 1


def test_structs_are_made_in_place_only_for_plain_tuple_classes():
    """A body's structs are allocated as their class and filled as they are read when the class is a
    tuple subclass whose construction nobody changed (every Struct class); any other class is called
    with the values, as before. Both give the class's instance of the same values."""
    m = _bodies()
    if not hasattr(m.Program(tuple, False, ()), "direct"):
        _newer("Program.direct")  # built before it: skipped here, a failure in CI
    assert compiled.fast_decoder_for(ALL_APIS[0], 9, True).program.direct

    class Plain(tuple):
        __slots__ = ()

    class Own(tuple):
        __slots__ = ()

        def __new__(cls, values):
            return super().__new__(cls, (*values[:-1], "own"))

    made = {}
    for cls in (Plain, Own):
        program = m.Program(cls, False, (m.Op(m.CONST, value=5), m.Op(m.FIXED, code=ord("h"))))
        assert program.direct is (cls is Plain)
        body = m.Body(program, None, compiled.parse_batches, compiled.uuid.UUID)
        made[cls] = body(memoryview(b"\x00\x07"), 100)
    assert type(made[Plain][0]) is Plain and made[Plain] == ((5, 7, ()), 2)
    assert type(made[Own][0]) is Own and made[Own] == ((5, 7, "own"), 2)


def test_struct_fields_read_by_the_compiled_descriptor_as_by_the_property():
    """Struct classes read their fields through `_bodies.Field` when it is built: every field of every
    struct of a real Produce exchange reads as the reference property reads it, and fields stay
    read-only."""
    from operator import itemgetter

    from ksniff.decode import values

    field = _newer("Field")
    request, response = _bodies_of(9, {("orders", 0): [record_batch()]}, {("orders", 0): (0, 1)}, {}, False)
    structs, todo = [], [request, response]
    while todo:
        s = todo.pop()
        if isinstance(s, values.Struct):
            structs.append(s)
            todo.extend(v for v in s if isinstance(v, tuple))
        elif isinstance(s, tuple):
            todo.extend(s)
    assert len(structs) >= 6
    for s in structs:
        for i, name in enumerate(s._fields):
            descriptor = type(s).__dict__[name]
            assert type(descriptor) is field and descriptor.index == i
            assert getattr(s, name) is property(itemgetter(i)).__get__(s, type(s))
            with pytest.raises(AttributeError):
                setattr(s, name, None)
            with pytest.raises(AttributeError):
                delattr(s, name)
    assert type(structs[0]).__dict__[structs[0]._fields[0]].__get__(None, type(structs[0])) is not None
