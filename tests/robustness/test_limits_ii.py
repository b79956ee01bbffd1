"""Caps on what hostile input can make ksniff hold or inflate (the second round): each cut is counted in
the JSON and named in one warning line, memory stays under the ceiling the README documents (measured in a
child process), and no input is skipped in silence."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator

import cramjam
import pytest
from capture_builders import Flow, ethernet, pcap_bytes, pcapng_section
from decode_builders import end_txn, frame, produce_request, record_batch
from robustness_support import assert_no_traceback, cli, cli_peak_mib, cli_process, corpus

STORY = next(p for p in corpus() if p.name.startswith("txn_confluent_tansu.pcap"))
CEILING_MIB = 400  # these captures stay far under the README's ceiling for default limits (about 1 GiB)


def audit(capture, tmp_path, *options: str) -> tuple[dict, list[str]]:
    out = tmp_path / "out.json"
    r = cli("audit", capture, "--json", out, "-q", "--exit-zero", *options)
    assert r.exit_code == 0, r.output
    assert_no_traceback(r.stdout, r.stderr)
    return json.loads(out.read_text()), [x for x in r.stderr.splitlines() if x.startswith("ksniff: warning:")]


def write(path, packets, step: float = 1e-3) -> str:
    path.write_bytes(pcap_bytes([(1000 + i * step, ethernet(p)) for i, p in enumerate(packets)]))
    return str(path)


# -- item 4: decompression --------------------------------------------------------------------------


def bomb_batch(frames: int) -> bytes:
    """A zstd batch whose records are `frames` concatenated zstd frames of 16 MiB each (a few KB on the
    wire): each frame alone is under the batch cap, together they are not."""
    real = bytearray(record_batch(codec="zstd", records=1))
    body = bytes(cramjam.zstd.compress(b"\0" * (16 << 20))) * frames
    struct.pack_into(">i", real, 8, 61 - 12 + len(body))  # batch length: what follows its first 12 bytes
    attributes = struct.unpack_from(">h", real, 21)[0]
    struct.pack_into(">h", real, 21, attributes & ~7 | 4)  # codec: zstd
    return bytes(real[:61]) + body


def produce_capture(path, batches: list[bytes]) -> str:
    flow = Flow()
    request = produce_request(partitions={("orders", 0): batches})
    data = frame(request, 9, 1)
    packets = flow.handshake()
    packets += [flow.send(True, data[i : i + 1448]) for i in range(0, len(data), 1448)]
    return write(path, packets + flow.close())


def test_concatenated_zstd_frames_share_the_batch_cap(tmp_path):
    capture = produce_capture(tmp_path / "bomb.pcap", [bomb_batch(8)])  # 128 MiB claimed in all
    doc, warnings = audit(capture, tmp_path, "--records", "--csv", tmp_path / "csv")
    assert doc["decode"]["records_cut_by_batch_cap"] == 1
    assert doc["decode"]["records_inflated_bytes"] == 0
    assert any("records decompression limit per batch" in w for w in warnings), warnings
    assert (tmp_path / "csv" / "records.csv").stat().st_size < 1000  # the header row only


def test_run_cap_stops_records_across_requests(tmp_path):
    capture = produce_capture(tmp_path / "many.pcap", [bomb_batch(1), bomb_batch(1), bomb_batch(1)])
    doc, warnings = audit(
        capture, tmp_path, "--records", "--csv", tmp_path / "csv", "--max-records-total", str(40 << 20)
    )
    assert doc["decode"]["records_inflated_bytes"] == 32 << 20  # two of the three batches fit
    assert doc["decode"]["records_cut_by_run_cap"] == 1
    assert any("records decompression limit per run" in w for w in warnings), warnings


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_decompression_bomb_memory_under_the_ceiling(tmp_path):
    capture = produce_capture(tmp_path / "bomb.pcap", [bomb_batch(64)] * 4)  # 4 GiB claimed
    code, peak, stderr = cli_peak_mib(
        "audit", capture, "--records", "--csv", tmp_path / "csv", "-q", "--exit-zero"
    )
    assert code == 0, stderr
    assert peak < CEILING_MIB, peak


def gzip_bomb(path, inflated_mib: int) -> str:
    """A .pcap.gz whose records are 64 KiB non-IP frames of zeros: a thousand to one."""
    record = struct.pack("<IIII", 1, 0, 65535, 65535) + b"\0" * 65535
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    z = gzip.GzipFile(path, "wb", compresslevel=9)
    z.write(head)
    for _ in range(inflated_mib * 16):
        z.write(record)
    z.close()
    return str(path)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_gzip_capture_inflation_is_capped(tmp_path):
    capture = gzip_bomb(tmp_path / "bomb.pcap.gz", 1024)  # 1 GiB inflated, about 1 MB on disk
    code, peak, stderr = cli_peak_mib("audit", capture, "-q", "--exit-zero", "--max-gunzip-ratio", "10")
    assert code == 0, stderr
    assert "gzip inflation limit (10x the file" in stderr, stderr
    assert peak < CEILING_MIB, peak


# -- item 5: caps on what grows with the traffic ----------------------------------------------------


def test_in_flight_cap_across_connections(tmp_path):
    """The run-wide caps act on what the reassembler hands out: a connection's bytes merged over one
    chunk cell (ksniff.capture.reassembly.CHUNK_CELL) come as one chunk. Packets a cell apart here, so
    each request reaches the decoder alone, in the order they were sent."""
    flows = [Flow(client=("10.0.0.1", 40000 + i)) for i in range(3)]
    packets = [p for f in flows for p in f.handshake()]
    packets += [f.send(True, frame(end_txn(3), 3, cid)) for cid in range(3) for f in flows]
    capture = write(tmp_path / "c.pcap", packets + [p for f in flows for p in f.close()], step=0.02)
    doc, warnings = audit(capture, tmp_path, "--max-in-flight-total", "4")
    assert doc["decode"]["in_flight_total_evicted"] == 5
    assert doc["decode"]["unmatched_requests"] == 9  # five given up early, four when connections closed
    assert any("in-flight request limit (4 in all) reached: 5 requests" in w for w in warnings), warnings


def test_partial_frames_cap_across_connections(tmp_path):
    flows = [Flow(client=("10.0.0.1", 40000 + i)) for i in range(4)]
    packets = [p for f in flows for p in f.handshake()]
    # Each client starts a 1 MB request and sends only 3000 bytes of it.
    packets += [f.send(True, struct.pack(">ihhih", 1 << 20, 0, 9, 1, 1) + b"c" + b"x" * 2987) for f in flows]
    capture = write(tmp_path / "c.pcap", packets + [p for f in flows for p in f.close()], step=0.02)
    doc, warnings = audit(capture, tmp_path, "--max-partial-total", "7000")
    assert doc["decode"]["partial_dropped"] == 2
    assert doc["capture"]["gaps"] == 0  # the capture lost nothing: the decoder gave them up
    assert any("partial frame limit (7000 bytes in all) reached: 2" in w for w in warnings), warnings


def test_pcapng_interface_cap(tmp_path):
    f = Flow()
    packets = f.handshake() + [f.send(True, frame(end_txn(3), 3, 1))]
    blocks = [(6, 1000.0 + i, ethernet(p)) for i, p in enumerate(packets)]
    path = tmp_path / "many.pcapng"
    path.write_bytes(pcapng_section([(1, None)] * 8, blocks))
    doc, warnings = audit(path, tmp_path, "--max-interfaces", "4")
    assert doc["capture"]["packets"] == 0
    assert any("interface limit (4 per section) reached: 4 packets" in w for w in warnings), warnings
    doc, warnings = audit(path, tmp_path)
    assert doc["capture"]["packets"] == 4 and warnings == []


# -- item 9: inputs that cannot be read are named ---------------------------------------------------

unprivileged = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to switch users"
)


@contextlib.contextmanager
def readable_folder() -> Iterator[str]:
    """A folder every user may list, holding one capture every user may read (a.pcap)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        shutil.copy(STORY, os.path.join(tmp, "a.pcap"))
        yield tmp


@unprivileged
def test_unreadable_capture_in_a_folder_is_named():
    with readable_folder() as tmp:
        secret = os.path.join(tmp, "b.pcap")
        shutil.copy(STORY, secret)
        os.chmod(secret, 0)
        r = cli_process("audit", tmp, "-q", "--exit-zero", user="65534")
    assert r.returncode == 0, r.stderr
    assert f"ksniff: warning: {secret}: skipped: Permission denied" in r.stderr.splitlines(), r.stderr


@unprivileged
def test_unreadable_folder_is_an_error_that_says_so():
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        folder = os.path.join(tmp, "caps")
        os.mkdir(folder)
        shutil.copy(STORY, os.path.join(folder, "a.pcap"))
        os.chmod(folder, 0)
        r = cli_process("audit", folder, user="65534")
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"ksniff: error: {folder}: cannot list this folder: Permission denied"]


@unprivileged
def test_unreadable_subfolder_is_named():
    with readable_folder() as tmp:
        sub = os.path.join(tmp, "sub")
        os.mkdir(sub)
        os.chmod(sub, 0)
        r = cli_process("audit", tmp, "-q", "--exit-zero", user="65534")
    assert r.returncode == 0, r.stderr
    assert f"ksniff: warning: {sub}: folder skipped: Permission denied" in r.stderr.splitlines(), r.stderr


def test_temporary_files_of_dead_runs_are_removed(tmp_path):
    """A run killed with -9 leaves its hidden temporary files; the next run writing there removes them,
    and leaves alone those of a run still writing."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "out.json"
    orphan = tmp_path / f".out.json.{dead.pid}-0badf00d.tmp"
    legacy = tmp_path / ".out.json.0badf00d.tmp"  # named before the writer's id was in the name
    alive = tmp_path / f".out.json.{os.getpid()}-0badf00d.tmp"
    for p in (orphan, legacy, alive):
        p.write_bytes(b"")
    os.utime(legacy, (0, 0))
    r = cli("audit", STORY, "--json", out, "-q", "--exit-zero")
    assert r.exit_code == 0, r.output
    assert not orphan.exists() and not legacy.exists()
    assert alive.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, alive.name])


def test_zstd_frames_without_a_size_are_inflated_under_the_cap():
    import zstandard

    from ksniff.decode.records import TooLarge, decompress

    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"a" * (10 << 20))
    assert len(decompress("zstd", frame * 3, 64 << 20)) == 30 << 20  # what Kafka clients write, decoded
    with pytest.raises(TooLarge):
        decompress("zstd", frame * 8, 64 << 20)  # 80 MiB: stopped one byte past the cap


# -- item 5: one body naming millions of partitions or batches -------------------------------------------


def many_items_capture(path, partitions: int = 0, legacy_batches: int = 0) -> str:
    """One Produce request (v3, no transactional id) naming `partitions` partitions without records, or
    one partition holding `legacy_batches` minimal magic-0 messages (26 bytes each): a few bytes per item
    on the wire, a Python object each once decoded."""
    if legacy_batches:
        inner = struct.pack(">bbii", 0, 0, -1, -1)  # magic 0, attributes, null key, null value
        message = struct.pack(">qiI", 0, 4 + len(inner), zlib.crc32(inner)) + inner  # size: crc and on
        records = message * legacy_batches
        entries = struct.pack(">ii", 0, len(records)) + records
        count = 1
    else:
        entries = struct.pack(">ii", 0, -1) * partitions
        count = partitions
    body = struct.pack(">hhi", -1, -1, 30000)  # no transactional id, acks=-1, timeout
    body += struct.pack(">ih", 1, 6) + b"orders" + struct.pack(">i", count)
    data = frame_bytes(0, 3, body + entries)
    flow = Flow()
    packets = flow.handshake()
    packets += [flow.send(True, data[i : i + 65000]) for i in range(0, len(data), 65000)]
    return write(path, packets + flow.close())


def frame_bytes(api_key: int, version: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 6) + b"client"
    return struct.pack(">i", len(head) + len(body)) + head + body


@pytest.mark.parametrize("kind", ["partitions", "legacy_batches"])
def test_body_item_cap(tmp_path, kind):
    """A body within --max-body-items is decoded; one item more and it is not, counted and said once."""

    # Items: the topic, then its partitions (or its one partition and that one's batches).
    def holding(items: int) -> dict:
        return {kind: items - 1 if kind == "partitions" else items - 2}

    at_cap = many_items_capture(tmp_path / "at.pcap", **holding(500))
    doc, warnings = audit(at_cap, tmp_path, "--max-body-items", "500")
    assert doc["decode"]["bodies_over_item_cap"] == 0 and not warnings
    assert doc["decode"]["by_api"]["Produce"]["not_decoded"] == {}
    over = many_items_capture(tmp_path / "over.pcap", **holding(501))
    doc, warnings = audit(over, tmp_path, "--max-body-items", "500")
    assert doc["decode"]["bodies_over_item_cap"] == 1
    assert doc["decode"]["by_api"]["Produce"]["not_decoded"] == {"over_item_cap": 1}
    assert doc["decode"]["errors"] == 0
    assert warnings == [
        "ksniff: warning: body item limit (500 array elements and record batches) reached: "
        "1 bodies not decoded"
    ]


@pytest.mark.parametrize("kind, n", [("partitions", 12_000_000), ("legacy_batches", 1_500_000)])
def test_body_items_memory_under_the_ceiling(tmp_path, kind, n):
    """Twelve million partitions in one 96 MB Produce (under the 100 MiB frame cap) are refused before any
    is made; a million and a half 26-byte batches make at most the default cap's million headers."""
    capture = many_items_capture(tmp_path / "many.pcap", **{kind: n})
    out = tmp_path / "out.json"
    code, peak, stderr = cli_peak_mib("audit", capture, "--json", out, "-q", "--exit-zero")
    assert code == 0, stderr
    assert json.loads(out.read_text())["decode"]["bodies_over_item_cap"] == 1
    assert peak < 512, (peak, "MiB")
