"""Record batches: headers for every codec, CRC-32C, control markers, several batches, magic 0/1."""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from decode_builders import CODECS, record_batch
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from ksniff.decode.records import (
    BATCH_HEADER,
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    TooLarge,
    cap_needed,
    decompress,
    iter_records,
    parse_batches,
)


def test_header_layout_is_61_bytes():
    assert BATCH_HEADER.size == 61 and BATCH_HEADER.format == ">qiibIhiqqqhii"


@pytest.mark.parametrize("codec", CODECS)
def test_header_and_records_for_every_codec(codec):
    raw = record_batch(
        producer_id=4242, epoch=7, sequence=99, records=5, codec=codec, value_size=300, base_offset=12
    )
    (h,) = parse_batches(raw)
    assert (h.base_offset, h.magic, h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (
        12,
        2,
        4242,
        7,
        99,
        5,
    )
    got = (h.codec, h.transactional, h.control, h.crc_ok, h.last_offset_delta)
    assert got == (codec, True, False, True, 4)
    assert h.batch_length == len(raw) - 12
    assert h.base_timestamp == 1_700_000_000_000 and h.max_timestamp == 1_700_000_000_004
    records = list(iter_records(raw))
    assert [r.offset for r in records] == [12, 13, 14, 15, 16]
    assert records[1].key == b"key-1" and records[1].value == b"B" * 300
    assert records[4].headers == (("h", b"x"),) and records[4].timestamp == 1_700_000_000_004


def test_raw_snappy_as_well_as_xerial():
    raw = bytearray(record_batch(records=3, codec="none"))
    body = bytes(raw[61:])
    compressed = bytes(cramjam.snappy.compress_raw(body))
    batch = bytearray(raw[:61]) + compressed
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | CODECS["snappy"])
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    (h,) = parse_batches(bytes(batch))
    assert h.codec == "snappy" and h.crc_ok
    assert [r.key for r in iter_records(bytes(batch))] == [b"key-0", b"key-1", b"key-2"]


def test_crc_mismatch_is_reported():
    raw = bytearray(record_batch())
    raw[-1] ^= 0xFF
    (h,) = parse_batches(bytes(raw))
    assert h.crc_ok is False


def test_several_batches_all_read_and_a_cut_one_marked():
    a, b = record_batch(sequence=0, records=2), record_batch(sequence=2, records=4, codec="gzip")
    hs = parse_batches(a + b + a[:70])
    assert [(h.base_sequence, h.records_count, h.crc_ok) for h in hs] == [
        (0, 2, True),
        (2, 4, True),
        (0, 2, None),
    ]
    assert parse_batches(a + a[:40]) == parse_batches(a)  # a cut header is not a batch


def control_batch(commit: bool, coordinator_epoch: int, producer_id: int = 77, epoch: int = 3) -> bytes:
    """A transaction marker as a broker writes it (no client library builds these)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)

    def varint(n: int) -> bytes:
        n = (n << 1) ^ (n >> 31)
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    body = b"\x00" + varint(0) + varint(0) + varint(len(key)) + key + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    attributes = TRANSACTIONAL_BIT | CONTROL_BIT
    header = bytearray(
        BATCH_HEADER.pack(500, 49 + len(record), 0, 2, 0, attributes, 0, 1, 1, producer_id, epoch, -1, 1)
    )
    batch = header + record
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


@pytest.mark.parametrize("commit, marker", [(True, "COMMIT"), (False, "ABORT")])
def test_control_batches(commit, marker):
    (h,) = parse_batches(control_batch(commit, coordinator_epoch=12))
    assert (h.control, h.transactional, h.control_type, h.coordinator_epoch, h.crc_ok) == (
        True,
        True,
        marker,
        12,
        True,
    )
    assert (h.producer_id, h.producer_epoch) == (77, 3)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_magic_0_and_1_message_sets(magic, codec):
    if magic == 0 and codec == "lz4":
        pytest.skip("lz4 arrived with magic 1")
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=CODECS[codec], batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=1_700_000_000_000 + i if magic else None, key=b"k", value=b"v" * 50)
    hs = parse_batches(bytes(b.build()))
    assert hs and all(h.magic == magic and h.producer_id == -1 and h.base_sequence == -1 for h in hs)
    assert all(h.crc_ok for h in hs) and {h.codec for h in hs} == {codec}
    assert len(hs) == (3 if codec == "none" else 1)


@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data):
    for h in parse_batches(data):
        assert h.magic in (0, 1, 2)


@given(st.integers(min_value=0, max_value=200), st.integers(min_value=0, max_value=255))
def test_mutated_batches_never_raise(where, value):
    raw = bytearray(record_batch(records=3, codec="gzip") + control_batch(True, 1))
    raw[where % len(raw)] = value
    for h in parse_batches(bytes(raw)):
        assert h.crc_ok in (True, False, None)


@pytest.mark.parametrize(
    "codec, encode",
    [
        ("gzip", lambda d: bytes(cramjam.gzip.compress(d))),
        ("snappy", lambda d: bytes(cramjam.snappy.compress_raw(d))),
        ("lz4", lambda d: bytes(cramjam.lz4.compress(d))),
        ("zstd", lambda d: bytes(cramjam.zstd.compress(d))),
    ],
)
def test_decompression_is_refused_past_the_cap_and_exact_below(codec, encode):
    data = bytes(1 << 20)  # a megabyte of zeros: a few hundred bytes compressed, a bomb in miniature
    packed = encode(data)
    with pytest.raises(TooLarge):
        decompress(codec, packed, cap=64 << 10)
    assert decompress(codec, packed, cap=1 << 20) == data


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_does_not_decompress_with_a_value_error(codec):
    with pytest.raises(ValueError):
        decompress(codec, b"\x28\xb5\x2f\xfd\x04\x22\x4d\x18 not compressed at all")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("value_size", [0, 300, 5000])
def test_cap_needed_is_the_smallest_cap_that_is_not_refused(codec, value_size):
    # The Spark engine replays the run's --records budget from each batch's need on the driver: it must
    # be exactly where the local engine's decompression stops refusing the batch.
    raw = record_batch(producer_id=1, epoch=0, sequence=0, records=3, codec=codec, value_size=value_size)
    inflated: list[int] = []
    list(iter_records(raw, 1 << 30, inflated))
    need = cap_needed(raw, inflated[0])
    assert len(list(iter_records(raw, need))) == 3
    if need:
        with pytest.raises(TooLarge):
            list(iter_records(raw, need - 1))


def test_a_gzip_cap_of_zero_leaves_no_room():
    # zlib reads a limit of 0 as no limit: a run whose budget is spent must still refuse a gzip batch.
    packed = bytes(cramjam.gzip.compress(bytes(100)))
    for cap in (0, 99):
        with pytest.raises(TooLarge):
            decompress("gzip", packed, cap=cap)
    assert decompress("gzip", packed, cap=100) == bytes(100)
