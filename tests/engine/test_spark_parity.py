"""The Spark engine on a real standalone cluster gives exactly the in-process engine's result: a sample of
the corpus as several capture sets (with and without --records, its decompression caps and the --max-*
limits), a capture rotated into two files; inputs and exports as file:// URIs, read and written by the
executors, every table (partitions and partition_log too) equal to the local exports; bad inputs are the
local engine's one-line errors.

The whole matrix (every capture alone with and without the limits, the whole corpus at once as a folder
URI and as paths) takes several minutes on two cores: it runs with KSNIFF_SPARK_FULL=1."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from pcap_edit import shifted

from ksniff.capture import CaptureError
from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CORPUS = sorted(p for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)

pytestmark = [pytest.mark.spark, pytest.mark.skipif(not CORPUS, reason="no corpus captures")]

FULL = os.environ.get("KSNIFF_SPARK_FULL") == "1"
full_only = pytest.mark.skipif(not FULL, reason="the full Spark matrix runs with KSNIFF_SPARK_FULL=1")

CONFIG = EngineConfig(keep_tables=True)
# Small enough that the per-connection limits and the --records caps per batch and per run cut something
# in the sample, so their counters and warnings are compared too: the lz4 set's batches (judged by their
# frames' bound) are past the batch cap, the later sets' run out of the run's budget. The corpus writes
# one batch per Produce request: the request cap is the smallest one in REQUEST_CAP. The caps on one
# process's totals (connections, out-of-order bytes, requests in flight and partial frames of all
# connections) apply per flow on Spark: the engine says so in a warning, and they are not compared.
LIMITED = replace(
    CONFIG,
    keep_records=True,
    max_frame=4096,
    max_in_flight=2,
    max_buffer_bytes=2048,
    max_records_batch=1200,
    max_records_request=2000,
    max_records_run=15000,
)
REQUEST_CAP = replace(CONFIG, keep_records=True, max_records_batch=1500, max_records_request=1000)
# Four capture sets: a consumer's partition logs, records compressed with lz4 and zstd (both judged by the
# sizes their frames declare), frames past --max-frame-bytes.
SAMPLE = (
    "consume_tansu.pcap",
    "idempotent_lz4_tansu.pcap",
    "idempotent_zstd_tansu.pcap",
    "txn_confluent_tansu_mtu1500.pcap",
)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    """A folder of the sample's captures (copies: a folder URI the executors list)."""
    folder = tmp_path_factory.mktemp("sample")
    for name in SAMPLE:
        shutil.copy(PCAPS / name, folder / name)
    return folder


def comparable(result, inputs: bool = True) -> dict:
    """The JSON document without what may differ by engine (version) or by file layout (inputs)."""
    doc = result.as_contract()
    del doc["version"]
    doc.pop("engine", None)
    if not inputs:  # the files' names, also in the capture sets and clusters
        del doc["inputs"]
        for s in doc["capture_sets"]:
            del s["inputs"], s["reasons"]
            for c in s["clock_offsets"]:  # each input as given: a file:// URI on Spark, its path locally
                c["input"] = c["input"].replace("file://", "")
        for c in doc["clusters"]:
            del c["inputs"]
        # Warnings name an input as it was given: a file:// URI on Spark, its path locally.
        doc["warnings"] = [w.replace("file://", "") for w in doc["warnings"]]
    return doc


def assert_same(local, distributed, inputs: bool = True) -> None:
    assert distributed.engine == "spark"
    assert comparable(distributed, inputs) == comparable(local, inputs)
    assert distributed.exchanges == local.exchanges
    assert distributed.batches == local.batches
    assert distributed.records == local.records
    assert comparable(distributed, inputs)["warnings"] == comparable(local, inputs)["warnings"]


@full_only
@pytest.mark.timeout(900)
def test_sample_as_file_uri_matches_local(spark, sample: Path) -> None:
    from ksniff.engine.spark import audit_paths_spark

    local = audit_paths([str(sample)], CONFIG)
    distributed = audit_paths_spark([sample.as_uri()], CONFIG, spark=spark)
    assert_same(local, distributed, inputs=False)
    assert [i.path for i in distributed.inputs] == [
        sample.as_uri() + i.path[len(str(sample)) :] for i in local.inputs
    ]
    assert len(local.capture_sets) == len(SAMPLE)
    assert local.transactions and local.findings and local.partitions  # the comparison compared something
    assert any(p.readers for p in local.partitions)  # a consumer's reads are in the logs


@pytest.mark.parametrize(
    "name, config",
    [("idempotent_lz4_tansu.pcap", REQUEST_CAP), ("txn_confluent_tansu_pcapng.pcapng", LIMITED)],
    ids=["request-cap", "pcapng-limits"],
)
def test_one_capture_alone_matches_local(spark, name: str, config: EngineConfig) -> None:
    from ksniff.engine.spark import audit_paths_spark

    capture = str(PCAPS / name)
    local = audit_paths([capture], config)
    assert_same(local, audit_paths_spark([capture], config, spark=spark))
    if config is REQUEST_CAP:  # lz4 batches are judged by their frames' bound: past the request's cap
        assert local.decode.records_cut_by_request_cap == len(local.batches)


@pytest.mark.timeout(900)  # the cluster starts in this test's setup
def test_records_limits_and_exports_on_file_uris(spark, sample: Path, tmp_path: Path) -> None:
    """--records under its caps and the --max-* limits, then every table written by the executors to a
    file:// URI: the same rows, counters and warnings as the local engine, the same files as its exports."""
    import pyarrow.parquet as pq

    from ksniff.engine.spark import audit_spark
    from ksniff.report.stream import write_tables

    local = audit_paths([str(sample)], LIMITED)
    decode = local.decode
    assert local.records and decode.oversized_frames and decode.in_flight_evicted
    assert decode.records_cut_by_batch_cap and decode.records_cut_by_run_cap
    assert local.partitions and any(p.log for p in local.partitions)
    write_tables(local, csv_dir=str(tmp_path / "local"), parquet_dir=str(tmp_path / "local"))
    run = audit_spark(spark, [sample.as_uri()], LIMITED, whole=True)
    try:
        assert run.exchanges.count() == len(local.exchanges)  # the DataFrames, not a driver-side copy
        assert set(run.exchanges.columns) == set(local.exchanges[0])
        assert run.partition_log.count() == sum(len(p.log) for p in local.partitions)
        run.write(csv_dir=(tmp_path / "spark").as_uri(), parquet_dir=(tmp_path / "spark").as_uri())
        assert_same(local, run.collect(), inputs=False)
    finally:
        run.close()
    assert not (tmp_path / "file:").exists()
    for table in (
        "exchanges",
        "batches",
        "records",
        "transactions",
        "findings",
        "partitions",
        "partition_log",
    ):
        written = pq.read_table(tmp_path / "spark" / f"{table}.parquet")
        expected = pq.read_table(tmp_path / "local" / f"{table}.parquet")
        assert expected.num_rows, table  # every table compared something
        assert written.column_names == expected.column_names
        for name in expected.column_names:
            assert written.column(name).type == expected.column(name).type, (table, name)
        if table in ("transactions", "findings"):  # ties on the sort column may come in another order
            key = lambda r: json.dumps(r, sort_keys=True, default=str)  # noqa: E731
            assert sorted(written.to_pylist(), key=key) == sorted(expected.to_pylist(), key=key)
        else:
            assert written.to_pylist() == expected.to_pylist(), table
        with open(tmp_path / "local" / f"{table}.csv", newline="", encoding="utf-8") as fh:
            local_csv = list(csv.reader(fh))
        spark_csv = _spark_csv(tmp_path / "spark" / f"{table}.csv")
        assert spark_csv[0] == local_csv[0]
        assert sorted(spark_csv[1:]) == sorted(local_csv[1:]), table
        if table not in ("transactions", "findings"):
            assert spark_csv == local_csv, table


@full_only
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", [CONFIG, LIMITED], ids=["defaults", "records-and-limits"])
def test_every_capture_alone_matches_local(spark, config: EngineConfig) -> None:
    """Each capture its own run; the runs share the session and go four at a time (Spark schedules
    concurrent jobs), which keeps 36 runs within the suite's time on two cores."""
    from concurrent.futures import ThreadPoolExecutor

    from ksniff.engine.spark import audit_paths_spark

    def differs(capture: Path) -> str | None:
        local = audit_paths([str(capture)], config)
        distributed = audit_paths_spark([str(capture)], config, spark=spark)
        try:
            assert_same(local, distributed)
        except AssertionError as exc:
            return f"{capture.name}: {str(exc)[:300]}"
        return None

    with ThreadPoolExecutor(4) as pool:
        problems = [p for p in pool.map(differs, CORPUS) if p]
    assert not problems, "\n".join(problems)


@full_only
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("config", [CONFIG, LIMITED], ids=["defaults", "records-and-limits"])
def test_corpus_as_file_uri_matches_local(spark, config: EngineConfig) -> None:
    from ksniff.engine.spark import audit_paths_spark

    local = audit_paths([str(PCAPS)], config)
    distributed = audit_paths_spark([PCAPS.as_uri()], config, spark=spark)
    assert_same(local, distributed, inputs=False)
    assert [i.path for i in distributed.inputs] == [
        PCAPS.as_uri() + i.path[len(str(PCAPS)) :] for i in local.inputs
    ]
    assert local.transactions and local.findings  # the comparison compared something
    if config is LIMITED:
        assert local.records and local.decode.oversized_frames and local.decode.in_flight_evicted
        assert local.decode.records_cut_by_run_cap


@full_only
@pytest.mark.timeout(1800)
def test_corpus_as_paths_matches_local(spark) -> None:
    from ksniff.engine.spark import audit_paths_spark

    paths = [str(p) for p in CORPUS]
    assert_same(audit_paths(paths, CONFIG), audit_paths_spark(paths, CONFIG, spark=spark))


@pytest.fixture(params=["where-read", "shuffled"])
def way(request, monkeypatch):
    """A capture set small enough for one task is audited where its files are read; the same sets made
    to go the shuffled way (segments to their flows' tasks, events to their producer groups), as a set
    too large for one task does. Checks afterwards that the run went the way it was meant to."""
    from ksniff.engine import spark_tasks as tasks

    made = []
    if request.param == "shuffled":
        from ksniff.engine import spark as engine

        monkeypatch.setattr(engine, "EVERY_SET_SHUFFLED", True)
        monkeypatch.setattr(engine, "LOG_FOLD_BYTES", 1)  # the partition logs in a fold per core
    else:
        audited = tasks.extract_audited
        monkeypatch.setattr(
            tasks, "extract_audited", lambda config, *clocks: made.append(config) or audited(config, *clocks)
        )
    yield request.param
    assert bool(made) == (request.param == "where-read")


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
def test_rotated_files_match_the_whole_capture(spark, tmp_path: Path, way: str) -> None:
    _rotated_match_the_whole(spark, tmp_path)


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
def test_rotated_files_match_when_every_flow_is_shuffled(spark, tmp_path: Path, monkeypatch) -> None:
    """The shuffled way when too many flows are spread over several files to broadcast their list: every
    flow's segments meet in its task, those seen in one file too."""
    from ksniff.engine import spark as engine

    monkeypatch.setattr(engine, "EVERY_SET_SHUFFLED", True)
    monkeypatch.setattr(engine, "SPREAD_FLOWS_MAX", 0)
    _rotated_match_the_whole(spark, tmp_path)


def _rotated_match_the_whole(spark, tmp_path: Path) -> None:
    from ksniff.engine.spark import audit_paths_spark

    whole = max(CORPUS, key=lambda p: p.stat().st_size)
    packets = audit_paths([str(whole)], CONFIG).capture.packets
    # Like tcpdump -C: the same capture cut into files mid-connection.
    subprocess.run(
        ["editcap", "-c", str(packets // 2 + 1), str(whole), str(tmp_path / "rotated.pcap")],
        check=True,
        capture_output=True,
    )
    parts = sorted(str(p) for p in tmp_path.iterdir())
    assert len(parts) == 2

    reference = comparable(audit_paths([str(whole)], CONFIG), inputs=False)
    assert comparable(audit_paths(parts, CONFIG), inputs=False) == reference
    split = audit_paths_spark(parts, CONFIG, spark=spark)
    assert comparable(split, inputs=False) == reference
    assert [i.path for i in split.inputs] == parts


def test_both_ends_of_open_connections_match_local(spark, tmp_path: Path, way: str) -> None:
    """A client's capture and a broker's of the same open connections, the broker's clock 2.5 s behind:
    each connection's segments come from both files on one time line, twice; the executors give the
    local engine's set, clocks, outcomes and findings, both ways."""
    from test_clock import _port_of, _servers, _tcp_flags

    from ksniff.engine.spark import audit_paths_spark

    capture = PCAPS / "txn_confluent_mock.pcap"
    client = shifted(capture, tmp_path / "client.pcap", 0, lambda n, f: not _tcp_flags(f) & 0x02)
    port = min(_servers(capture))
    behind = -2_500_000  # microseconds
    broker = shifted(
        capture, tmp_path / "broker.pcap", behind, lambda n, f: not _tcp_flags(f) & 0x02 and _port_of(f, port)
    )
    paths = [str(client), str(broker)]
    local = audit_paths(paths, CONFIG)
    assert len(local.capture_sets[0].clocks) == 2
    assert comparable(audit_paths_spark(paths, CONFIG, spark=spark)) == comparable(local)


@pytest.mark.parametrize("real", [True, False], ids=["real", "consumers"])
def test_both_ends_behind_an_address_translation_match_local(
    spark, tmp_path: Path, way: str, real: bool
) -> None:
    """The broker's capture on the far side of an address translation: the real one of the corpus, and
    consumers' reads with the broker's clock 2.5 s behind and the connections open at the edges. The
    executors read each connection's two views as one, as the local engine does (its set, clocks,
    translated connections, outcomes and findings), both ways."""
    from test_clock import _tcp_flags

    from ksniff.engine.spark import audit_paths_spark

    if real:
        client = PCAPS / "txn_confluent_tansu_nat_client.pcap"
        broker = PCAPS / "txn_confluent_tansu_nat_broker.pcap"
    else:
        capture = PCAPS / "lost_write_tansu.pcap"
        client = shifted(capture, tmp_path / "client.pcap", 0, lambda n, f: not _tcp_flags(f) & 0x02)
        broker = shifted(
            capture, tmp_path / "broker.pcap", -2_500_000, lambda n, f: not _tcp_flags(f) & 0x02, True
        )
    paths = [str(client), str(broker)]
    local = audit_paths(paths, CONFIG)
    assert local.capture_sets[0].renamed
    assert comparable(audit_paths_spark(paths, CONFIG, spark=spark)) == comparable(local)


def test_one_file_of_both_sides_of_a_translation_among_others_matches_local(
    spark, tmp_path: Path, way: str
) -> None:
    """The real translated pair as one file (`tcpdump -i any` on the translating host) beside another
    input: the planner finds both views inside the one file, and the executors read each connection once,
    as the local engine does, both ways. (A single input on the Spark engine is not scanned for this: see
    the README.)"""
    from pcap_edit import merged

    from ksniff.engine.spark import audit_paths_spark

    one = merged(
        [PCAPS / "txn_confluent_tansu_nat_client.pcap", PCAPS / "txn_confluent_tansu_nat_broker.pcap"],
        tmp_path / "any.pcap",
    )
    paths = [str(one), str(PCAPS / "consume_tansu.pcap")]
    local = audit_paths(paths, CONFIG)
    assert len(local.capture_sets[0].renamed) == 12 and local.decode.exchanges > 36
    assert comparable(audit_paths_spark(paths, CONFIG, spark=spark)) == comparable(local)


def test_damaged_captures_match_local(spark, tmp_path: Path, way: str) -> None:
    """Record batches that fail their CRC-32C (a bit flipped in a Produce request's batch, and in a Fetch
    answer's): the damage is a ConnectionLost of the batch's connection, which every group of the Spark
    audit sees, so what is not judged and what is unverified is the local engine's, both ways; and a
    damaged packet time, repaired alike, and a damaged IPv4 header, left out alike."""
    from pcap_edit import (
        BASE_SEQUENCE_LOW_BYTE,
        PRODUCER_ID_LOW_BYTE,
        damaged,
        frame_bit_flipped,
        retimed,
        without,
    )

    from ksniff.engine.spark import audit_paths_spark

    captures = [
        damaged(PCAPS / "idempotent_none_tansu.pcap", tmp_path / "produce.pcap", 0, BASE_SEQUENCE_LOW_BYTE),
        damaged(PCAPS / "ctp_confluent_tansu.pcap", tmp_path / "fetch.pcap", 1, PRODUCER_ID_LOW_BYTE),
        PCAPS / "damaged_batch_tansu.pcap",
    ]
    for capture in captures:
        local = audit_paths([str(capture)], CONFIG)
        assert [f.kind for f in local.findings].count("corrupt_batch") == 1
        assert_same(local, audit_paths_spark([str(capture)], CONFIG, spark=spark))
    # A packet time 97 days out of line, given its predecessor's by the walk the executors run too.
    retimed_capture = retimed(PCAPS / "ctp_confluent_tansu.pcap", tmp_path / "retimed.pcap", 243, 23)
    local = audit_paths([str(retimed_capture)], CONFIG)
    assert local.capture.damaged_times == 1
    assert_same(local, audit_paths_spark([str(retimed_capture)], CONFIG, spark=spark))
    # A packet whose IPv4 header fails its checksum (its destination address flipped): left out, a gap.
    flipped = frame_bit_flipped(PCAPS / "txn_confluent_tansu.pcap", tmp_path / "ip.pcap", 39, 14 + 19, 7)
    local = audit_paths([str(flipped)], CONFIG)
    assert local.capture.damaged_packets == 1 and local.capture.gaps == 1
    assert_same(local, audit_paths_spark([str(flipped)], CONFIG, spark=spark))
    # An AddPartitionsToTxn request the capture lost: its answer, unmatched, is a loss when it comes.
    lost = without(PCAPS / "txn_confluent_tansu.pcap", tmp_path / "lost.pcap", 38)
    local = audit_paths([str(lost)], CONFIG)
    assert local.decode.unmatched_responses == 1
    assert_same(local, audit_paths_spark([str(lost)], CONFIG, spark=spark))


def test_a_capture_that_goes_on_an_hour_later_matches_local(spark, tmp_path: Path) -> None:
    """A capture's first packets (its connections left open mid-transaction, bytes the capture lost)
    and its whole traffic again an hour later between other hosts, in one file: the sweep the later
    traffic starts closes the first part's connections as idle, every flow at once, and the replayed
    producer regresses its epoch. Spark decodes the flows in separate tasks and must give the local
    engine's findings, in its order."""
    from pcap_edit import again_later

    from ksniff.engine.spark import audit_paths_spark

    name = "txn_confluent_tansu_loss.pcap"
    path = str(again_later(PCAPS / name, tmp_path / name, 3600, first=100))
    local = audit_paths([path], CONFIG)
    kinds = {f.kind for f in local.findings}
    assert {"capture_gap", "epoch_regression", "producer_fenced"} <= kinds  # the comparison compares
    assert_same(local, audit_paths_spark([path], CONFIG, spark=spark))


def _spark_csv(folder: Path) -> list[list[str]]:
    """A Spark CSV output folder as one table: the header once, the part files' rows in order."""
    rows: list[list[str]] = []
    for part in sorted(folder.glob("part-*.csv")):
        with open(part, newline="", encoding="utf-8") as fh:
            lines = list(csv.reader(fh))
        if lines:
            rows += lines if not rows else lines[1:]
    return rows


def test_inputs_that_cannot_be_read_are_the_local_errors(spark, tmp_path: Path) -> None:
    from ksniff.engine.spark import audit_paths_spark

    (tmp_path / "notes.txt").write_text("not a capture\n")
    (tmp_path / "empty.pcap").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "readme.md").write_text("nothing here\n")
    good = str(CORPUS[0])
    for bad in ("notes.txt", "empty.pcap", "missing.pcap", "folder"):
        paths = [good, str(tmp_path / bad)]
        with pytest.raises(CaptureError) as local:
            audit_paths(paths, CONFIG)
        with pytest.raises(CaptureError) as distributed:
            audit_paths_spark(paths, CONFIG, spark=spark)
        assert str(distributed.value) == str(local.value)
        assert "\n" not in str(distributed.value)


def test_a_capture_written_to_between_the_stages_is_one_line(spark, tmp_path: Path, monkeypatch) -> None:
    """The shuffled way reads the payloads of files opened where they lie a second time, in its flows'
    tasks (spark_tasks.Payloads). A file changed after the first reading (a capture still being recorded)
    stops the run with one line naming it, as the user named it, instead of decoding other bytes."""
    from ksniff.engine import spark as engine
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.spark import audit_paths_spark

    if not engine_walk_compiled():
        pytest.skip("the compiled walk is not built")
    monkeypatch.setattr(engine, "EVERY_SET_SHUFFLED", True)
    capture = tmp_path / "recording.pcap"  # segments of MTU-sized payloads, which rows refer to
    shutil.copy(next(p for p in CORPUS if p.name == "txn_confluent_tansu_mtu1500.pcap"), capture)
    decode = tasks.decode

    def written_to_meanwhile(config, ends, files=None):
        assert files and [where for where, _named, _stamp in files.values()] == [str(capture)]
        with open(capture, "ab") as f:  # once stage 1 has read it: a packet more
            f.write(capture.read_bytes()[24:140])
        return decode(config, ends, files)

    monkeypatch.setattr(tasks, "decode", written_to_meanwhile)
    with pytest.raises(CaptureError) as changed:
        audit_paths_spark([f"file://{capture}"], CONFIG, spark=spark)
    assert str(changed.value).startswith(f"file://{capture}: changed while it was audited")
    assert "\n" not in str(changed.value)


def test_the_executors_run_the_drivers_compiled_modules(spark) -> None:
    """On a cluster ksniff reaches the executors as a zip of its source, from which nothing compiled can
    be imported; its compiled modules go beside it (ksniff.common.sources), and the executors run them,
    not the several times slower pure-Python code."""
    from ksniff.common.sources import shipped_files
    from ksniff.engine.spark_session import PACKAGE_DIR

    shipped = sorted(name.split(".cpython")[0] for _path, name in shipped_files(str(PACKAGE_DIR)))
    if not shipped:
        pytest.skip("no compiled module is built")

    def which(_rows):
        import importlib

        import ksniff

        for name in shipped:
            yield ksniff.__file__, name, importlib.import_module(name).__file__

    got = spark.sparkContext.parallelize([0], 1).mapPartitions(which).collect()
    assert all(".zip" in package for package, _name, _file in got)  # the shipped source, not this tree
    assert [name for _package, name, _file in got] == shipped
    assert all(not file.endswith(".py") for _package, _name, file in got)
    assert {"ksniff.capture._fastwalk", "ksniff.audit.fold", "ksniff.engine._pack"} <= set(shipped)


def engine_walk_compiled() -> bool:
    from ksniff.capture import compiled

    return compiled.fastwalk is not None


def _ksniff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "audit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


@pytest.mark.timeout(900)  # two applications of their own, each starting its JVM
def test_cli_on_the_cluster(standalone, spark, tmp_path: Path) -> None:
    """The command line as a user runs it: against the cluster, the same JSON and exit code as the local
    engine and the exports at a file:// URI; an unreadable capture as one line and exit 2 (on local[1]:
    the in-process test above meets it on the cluster, this one the command line's handling of it)."""
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x00" * 64)
    from spark_cluster import APP_CONF

    conf = [
        arg
        for key, value in [*APP_CONF, ("spark.pyspark.python", sys.executable)]
        for arg in ("--conf", f"{key}={value}")
    ]
    capture = PCAPS / "txn_confluent_tansu_loss.pcap"
    local = _ksniff(str(capture), "--json", str(tmp_path / "local.json"), "--no-color", cwd=tmp_path)
    remote = _ksniff(capture.as_uri(), str(bad), "--master", "local[1]", cwd=tmp_path)
    assert remote.returncode == 2, remote.stderr
    assert "Traceback" not in remote.stderr
    errors = [line for line in remote.stderr.splitlines() if line.startswith("ksniff: error:")]
    assert errors == [f"ksniff: error: {bad}: not a pcap or pcapng file"]

    out = tmp_path / "out"
    remote = _ksniff(
        capture.as_uri(),
        "--master",
        standalone.url,
        *conf,
        "--json",
        str(tmp_path / "spark.json"),
        "--parquet",
        out.as_uri(),
        "--no-color",
        cwd=tmp_path,
    )
    assert remote.returncode == local.returncode, remote.stderr
    docs = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("local", "spark")]
    for doc in docs:
        del doc["version"], doc["engine"], doc["inputs"]
        for s in doc["capture_sets"]:  # the input as the argument named it: a path, a URI
            del s["inputs"]
        for c in doc["clusters"]:
            del c["inputs"]
    assert docs[0]["findings"] and docs[0]["partitions"]
    assert docs[0] == docs[1]
    for table in ("findings", "partitions", "partition_log"):
        assert (out / f"{table}.parquet" / "_SUCCESS").exists()
    assert not (tmp_path / "file:").exists()


def test_local_engine_refuses_uri_outputs(tmp_path: Path) -> None:
    result = _ksniff(str(CORPUS[0]), "--parquet", "s3a://bucket/out", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "ksniff: error: s3a://bucket/out: a URI needs the Spark engine (--engine spark); the local engine "
        "reads and writes local paths"
    ]
    assert not any(tmp_path.iterdir())


@pytest.mark.timeout(300)
def test_an_export_spark_cannot_write_is_one_line_before_the_audit(tmp_path: Path) -> None:
    """`--parquet s3a://...` where Spark has no S3A file system (no hadoop-aws jars): the run says so in one
    line and exit 2 before it reads any input. Here the only input is a folder with no capture, which the
    audit would have stopped on: the export's error comes first."""
    folder = tmp_path / "no_captures"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a capture\n")
    result = _ksniff(str(folder), "--master", "local[1]", "--parquet", "s3a://bucket/out", "-q", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "ksniff: error: cannot write s3a://bucket/out: Spark has no org.apache.hadoop.fs.s3a.S3AFileSystem "
        "on its class path, the file system of s3a:// (add its jars: --conf spark.jars.packages=...)"
    )
    assert "Traceback" not in result.stderr


def test_per_broker_captures_with_shifted_clocks_match_local(
    spark, tmp_path: Path, way: str, monkeypatch
) -> None:
    """The executors read each capture of a host on its set's time line: per-broker captures of the mock
    cluster with clocks moved by seconds give the single capture's outcomes and findings, as locally.
    The shuffled way decodes each connection where its file was read: each is in one broker's file, and
    none is larger than a core's share, so no segment is shuffled."""
    from test_clock import _findings, _outcomes, per_broker

    from ksniff.engine import spark as engine
    from ksniff.engine.spark import audit_paths_spark, audit_spark

    plans = []
    decoded = engine._flows_decoded
    monkeypatch.setattr(
        engine,
        "_flows_decoded",
        lambda *args: [plans.append(_plan(p)) or p for p in decoded(*args)],
    )
    whole = audit_paths([str(PCAPS / "txn_confluent_mock.pcap")], CONFIG)
    made = sorted(per_broker(PCAPS / "txn_confluent_mock.pcap", tmp_path, [0.0, 2.5, -1.7]))
    split = audit_paths_spark(made, CONFIG, spark=spark)
    if way == "shuffled":
        (plan,) = plans  # one stage 2: every flow decoded at home
        assert plan.startswith("MapInArrow"), plan  # the decode
        assert "hashpartitioning" not in plan, plan
    else:
        assert not plans
    (cset,) = split.capture_sets
    assert [round(c.offset, 2) for c in cset.clocks if c.pairs] == [-2.5]
    assert _outcomes(split) == _outcomes(whole)
    assert _findings(split) == _findings(whole)
    # The set's transactions, findings (judged against its clocks) and producers tables: the local
    # engine's rows, whichever way the set went.
    local = audit_paths(made, CONFIG)
    run = audit_spark(spark, made, CONFIG)
    try:
        for name, expected in _output_tables(local).items():
            got = [r.asDict(recursive=True) for r in getattr(run, name).collect()]
            assert expected, name  # the comparison compares something
            assert sorted(map(_text, got)) == sorted(map(_text, expected)), name
        # The terminal report from the digests of the judged findings: the local one.
        assert run.summary.digest is not None and _report(run.summary) == _report(local)
    finally:
        run.close()


def _plan(df) -> str:
    """The physical plan Spark made for a DataFrame, as `explain` prints it."""
    return df._jdf.queryExecution().executedPlan().toString()


def _output_tables(result) -> dict[str, list[dict]]:
    from ksniff.report.tables import finding_row, transaction_row

    producers = []
    for p in result.producers:
        row = p.as_contract()
        row["capture_set"], row["cluster"] = (
            result.capture_sets[0].number,
            result.capture_sets[0].cluster_ids[0],
        )
        producers.append(row)
    return {
        "findings": [finding_row(f) for f in result.findings],
        "transactions": [transaction_row(t) for t in result.transactions],
        "producers": producers,
    }


def _text(row: dict) -> str:
    return json.dumps({k: (None if v != v else v) for k, v in row.items()}, sort_keys=True, default=str)


def test_inputs_on_another_file_system_are_planned_by_the_executors(spark, tmp_path: Path) -> None:
    """Captures on a file system the driver cannot open (a Hadoop view file system here, read through
    Spark's binaryFile source, as hdfs:// or s3a:// would be) are grouped into capture sets and put on one
    time line by tasks that read them: the same sets, clock offsets, outcomes and findings as the local
    engine on the same files, and the file that is not a capture named in the same warning."""
    from test_clock import _findings, _outcomes, per_broker, sets_seen

    from ksniff.engine.spark import audit_paths_spark

    folder = tmp_path / "caps"
    folder.mkdir()
    per_broker(PCAPS / "txn_confluent_mock.pcap", folder, [0.0, 2.5, -1.7])
    shutil.copy(PCAPS / "misuse_tansu.pcap", folder / "other_cluster.pcap")
    (folder / "notes.txt").write_text("not a capture\n")
    spark.sparkContext._jsc.hadoopConfiguration().set(
        "fs.viewfs.mounttable.ksniff.link./caps", folder.as_uri()
    )
    local = audit_paths([str(folder)], CONFIG)
    remote = audit_paths_spark(["viewfs://ksniff/caps"], CONFIG, spark=spark)

    assert len(local.capture_sets) == 2
    assert sets_seen(remote, "viewfs://ksniff/caps/") == sets_seen(local, str(folder) + "/")
    assert _outcomes(remote) == _outcomes(local)
    assert _findings(remote) == _findings(local)
    assert [w.replace("viewfs://ksniff/caps", "F") for w in remote.warnings if "not a capture" in w] == [
        w.replace(str(folder), "F") for w in local.warnings if "not a capture" in w
    ]


def test_a_set_is_audited_where_read_whatever_its_size_and_file_system(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture set is audited where it is read however large it is: files the executors open
    themselves (paths, file: URIs) are walked in the local engine's bounded memory, and files read
    through Spark's binaryFile source (a viewfs mount of the folders here) come to the task one per Arrow
    batch once they are larger than the run's bound on a batch's bytes (shrunk to one byte here), each
    written to the executor's disk before the next is read. Each gives the local engine's result."""
    from test_clock import _findings, _outcomes, per_broker

    from ksniff.engine import spark as spark_engine
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.spark import audit_paths_spark

    brokers, alone = tmp_path / "brokers", tmp_path / "alone"
    brokers.mkdir()
    alone.mkdir()
    per_broker(PCAPS / "txn_confluent_mock.pcap", brokers, [0.0, 2.5, -1.7])  # one set of three files
    shutil.copy(PCAPS / "txn_confluent_tansu_loss.pcap", alone / "broker.pcap")
    # Mount tables of their own: Hadoop keeps one file system object per table, made with the links the
    # table had when it was first used.
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("fs.viewfs.mounttable.brokers_set.link./caps", brokers.as_uri())
    hadoop.set("fs.viewfs.mounttable.one_file.link./caps", alone.as_uri())
    made = []
    audited = tasks.extract_audited
    batches = tmp_path / "batches"  # the rows of each Arrow batch the tasks were handed

    def recording(run, log=str(batches)):
        def counted(incoming):
            for batch in incoming:
                with open(log, "a") as fh:
                    fh.write(f"{batch.num_rows}\n")
                yield batch

        return lambda incoming: run(counted(incoming))

    monkeypatch.setattr(
        tasks,
        "extract_audited",
        lambda config, *clocks: made.append(config) or recording(audited(config, *clocks)),
    )
    monkeypatch.setattr(spark_engine, "BATCH_BYTES", 1)

    for folder, remote, files in (
        (brokers, "viewfs://brokers_set/caps", 3),
        (alone, "viewfs://one_file/caps", 1),
    ):
        local = audit_paths([str(folder)], CONFIG)
        assert len(local.capture_sets) == 1
        made.clear()
        assert_same(local, audit_paths_spark([str(folder)], CONFIG, spark=spark))
        assert made, f"{folder}: not audited where it was read"
        for there in (folder.as_uri(), remote):
            made.clear()  # inputs named by URI: the inputs and clock offsets name them so
            batches.unlink(missing_ok=True)
            far = audit_paths_spark([there], CONFIG, spark=spark)
            assert made, f"{there}: not audited where it was read"
            assert (_outcomes(far), _findings(far)) == (_outcomes(local), _findings(local))
            assert far.capture.packets == local.capture.packets > 0
            if there == remote:
                assert batches.read_text().split() == ["1"] * files  # the files' bytes one at a time


def test_a_set_audited_where_read_keeps_the_process_caps_as_locally(spark) -> None:
    """The caps that bound one process's memory (connections, out-of-order bytes, requests in flight and
    partial frames across all connections) act on a capture set audited where it is read as on the
    local engine's run of it, which audits each set by a pipeline of its own: the same counts and
    results, and no warning that they apply per flow (that is for a set that goes the shuffled way)."""
    from ksniff.engine.spark import audit_paths_spark

    capped = replace(
        CONFIG, max_connections=2, max_buffer_total=1024, max_in_flight_total=3, max_partial_total=4096
    )
    path = [str(PCAPS / "txn_confluent_tansu_loss.pcap")]
    local = audit_paths(path, capped)
    assert comparable(local) != comparable(audit_paths(path, CONFIG))  # the caps bind here
    distributed = audit_paths_spark(path, capped, spark=spark)
    assert_same(local, distributed)
    assert not [w for w in distributed.warnings if "each flow's task" in w]


def test_parquet_partitioned_by_date_and_cluster_for_a_lake(spark, tmp_path: Path) -> None:
    """--partition-by date,cluster: each table a Hive-partitioned folder whose rows are the local
    export's, split by the UTC day of their time and the cluster of their capture set; a later run
    replaces only the partitions it writes, so the folder collects runs of several clusters."""
    import datetime

    import pyarrow.dataset as ds

    from ksniff.engine.spark import audit_spark

    mock, tansu = PCAPS / "anomalies_mock.pcap", PCAPS / "txn_confluent_tansu.pcap"
    local = audit_paths([str(mock), str(tansu)], CONFIG)
    clusters = {s.cluster_ids[0] for s in local.capture_sets}
    assert len(clusters) == 2
    lake = tmp_path / "lake"
    run = audit_spark(spark, [str(mock), str(tansu)], CONFIG)
    try:
        run.write(parquet_dir=lake.as_uri(), partition_by=("date", "cluster"))
    finally:
        run.close()

    def table(name: str):
        return ds.dataset(lake / f"{name}.parquet", format="parquet", partitioning="hive").to_table()

    exchanges = table("exchanges").to_pylist()
    assert len(exchanges) == len(local.exchanges)
    assert {r["cluster"] for r in exchanges} == clusters
    for r in exchanges:
        assert r["date"] == r["ts"].astimezone(datetime.timezone.utc).strftime("%Y-%m-%d")
    by_cluster = {c: sum(1 for r in exchanges if r["cluster"] == c) for c in clusters}
    for s in local.capture_sets:  # each set's exchanges under its own cluster
        alone = audit_paths(list(s.paths), CONFIG)
        assert by_cluster[s.cluster_ids[0]] == len(alone.exchanges)
    findings = table("findings").to_pylist()
    assert sorted((r["cluster"], r["kind"], r["severity"]) for r in findings) == sorted(
        (f["cluster"], f["kind"], f["severity"]) for f in (_finding_rows(local))
    )
    # A run over one cluster's capture again replaces its partitions and leaves the other's.
    mock_cluster = next(s.cluster_ids[0] for s in local.capture_sets if str(mock) in s.paths)
    files = sorted((lake / "exchanges.parquet").rglob("*.parquet"))
    kept = [p for p in files if f"cluster={mock_cluster}" in str(p)]
    rewritten = [p for p in files if f"cluster={mock_cluster}" not in str(p)]
    assert kept and rewritten
    run = audit_spark(spark, [str(tansu)], CONFIG)
    try:
        run.write(parquet_dir=lake.as_uri(), partition_by=("date", "cluster"))
    finally:
        run.close()
    assert all(p.exists() for p in kept)  # the other cluster's partition is left as it was
    assert not any(p.exists() for p in rewritten)  # this cluster's is replaced (new part files)
    again = table("exchanges").to_pylist()
    assert len(again) == len(local.exchanges)
    assert {r["cluster"] for r in again} == clusters


def _finding_rows(result) -> list[dict]:
    from ksniff.report.tables import finding_row

    return [finding_row(f) for f in result.findings]


def _report(result) -> str:
    from rich.console import Console

    from ksniff.report.terminal import render_report

    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    render_report(console, result)
    return console.export_text().replace(f"engine {result.engine}", "engine -")


@pytest.mark.timeout(1800)
def test_the_terminal_report_is_the_local_one_from_a_digest(spark, way: str, monkeypatch) -> None:
    """A run for the terminal: the driver holds no finding or transaction, only the digest the tasks made
    of them (merged per set and across sets), and the report it renders is the local engine's, line for
    line, for the whole corpus as capture sets, filtered or not; the tables still hold every row. The
    shuffled way with no duration kept by any task: their spread is ranked on the executors."""
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.spark import _run

    if way == "shuffled":
        monkeypatch.setattr(tasks, "DURATIONS_KEPT", 0)
    from ksniff.engine.spark_session import Session
    from ksniff.report.filters import ResultFilter

    paths = [str(p) for p in CORPUS]
    local = audit_paths(paths, CONFIG)
    assert local.findings and local.transactions and len(local.capture_sets) > 1
    assert any(t.outcome == "open" for t in local.transactions)  # the open ones are listed too
    starts = sorted(t.start_ts for t in local.transactions)
    keep = ResultFilter(severity="warning", since=starts[len(starts) // 2])
    session = Session(spark=spark)
    for kept in (None, keep) if way == "where-read" else (None,):
        run = _run(session, paths, CONFIG, keep=kept)
        try:
            summary = run.summary
            assert summary.findings == [] and summary.transactions == []
            assert summary.digest is not None
            durations = summary.digest.transactions.durations
            assert (durations is None) == (way == "shuffled")  # else few: their spread from the digests
            expected, got = (local, summary) if kept is None else (kept.apply(local), kept.apply(summary))
            assert 0 < len(expected.findings) and 0 < len(expected.transactions)
            assert _report(got) == _report(expected)
            assert got.summary() == expected.summary()
            assert run.findings.count() == len(local.findings)
            assert run.transactions.count() == len(local.transactions)
        finally:
            run.close()


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("where", ["the driver", "the executors"])
def test_the_spread_of_durations_is_the_reports_wherever_it_is_ranked(spark, where: str) -> None:
    """The transactions' durations the tasks' digests did not keep are ranked from the transactions
    table: on the driver in one job up to the bound a merged digest holds (DURATIONS_MERGED), on the
    executors past it. Either way the count, p50, p95 and maximum are the report's own (nearest rank,
    ties and open transactions included)."""
    import random

    from ksniff.audit.digest import DURATIONS_MERGED
    from ksniff.engine.spark import _duration_spread
    from ksniff.report.transactions import spread

    rng = random.Random(7)
    rows = [(1.7e9 + rng.random() * 100, None) for _ in range(300)]  # open
    rows += [(s, s + rng.expovariate(20)) for s in (1.7e9 + rng.random() * 100 for _ in range(4000))]
    rows += [(1.7e9, 1.7e9 + 0.5)] * 40  # ties
    rng.shuffle(rows)
    count = len(rows) if where == "the driver" else DURATIONS_MERGED + 1
    table = spark.createDataFrame(rows, "start_ts double, end_ts double").repartition(5)
    assert _duration_spread(table, None, count) == spread(sorted(e - s for s, e in rows if e is not None))
    assert _duration_spread(table.where("end_ts is null"), None, count) == (0, 0.0, 0.0, 0.0)


def test_records_audited_where_read_unless_the_runs_budget_binds(spark, sample: Path, monkeypatch) -> None:
    """With --records each set is audited where it is read, on a decompression budget of its own, when
    the run's one budget (drawn set after set) would have treated every batch alike; when it would not
    (a run cap the sample's later sets run out of), the run is audited again the exact way. Both give the
    local engine's records, counters and warnings."""
    from ksniff.engine import spark as engine
    from ksniff.engine.spark import audit_paths_spark

    ways: list[bool] = []  # each pass: whether its sets were audited apart
    pipeline = engine._pipeline
    monkeypatch.setattr(engine, "_pipeline", lambda *a: ways.append(a[-1]) or pipeline(*a))
    paths = [str(sample / name) for name in SAMPLE]
    for config, expected in ((REQUEST_CAP, [True]), (LIMITED, [True, False])):
        ways.clear()
        local = audit_paths(paths, config)
        assert local.records and len(local.capture_sets) == len(SAMPLE)
        assert bool(local.decode.records_cut_by_run_cap) == (config is LIMITED)
        assert_same(local, audit_paths_spark(paths, config, spark=spark))
        assert ways == expected


def test_key_groups_are_given_the_context_of_their_connections(spark) -> None:
    """Every key group's fold is given each change of the cluster's transaction.version (through the
    driver, which collects only those changes), and only the losses and ends of the connections its
    keyed events are on and the transaction markers of the producer ids its events name (routed by
    Spark, none through the driver): a set of G groups and C connections costs the folds O(C), not
    O(G x C), and the driver a few rows."""
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.spark import _every_group, _routed_context, _txn_version_changes

    def row(n: int, kind: int, key, oconn: int = 0) -> dict:
        order = {c: 0.0 if tasks.EVENTS.field(c).type == "double" else 0 for c in tasks.ORDER_COLUMNS}
        order.update(rel=float(n), oconn=oconn)
        return {"cset": 0, "kind": kind, "key": key, **order, "lfold": 0, "blob": f"event {n}".encode()}

    context = [
        (1, tasks.CONTEXT_TXN_VERSION + "2", 7),
        (2, tasks.CONTEXT_CONN, 7),  # the end of a connection of keys a and b
        (3, tasks.CONTEXT_TXN_VERSION + "2", 8),  # tells what the fold knows already
        (4, tasks.CONTEXT_TXN_VERSION, 8),  # tells nothing
        (5, tasks.CONTEXT_MARKERS + "42,43", 9),  # markers of producer ids 42 (key d's) and 43
        (9, None, 9),  # what every group is given
        (6, tasks.CONTEXT_CONN, 8),  # a loss on key c's connection
        (7, tasks.CONTEXT_TXN_VERSION + "1", 8),
        (8, tasks.CONTEXT_CONN, 9),  # a connection of no keyed event
        (10, tasks.CONTEXT_MARKERS + "44", 9),  # of a producer id no group knows
        (11, tasks.CONTEXT_MARKERS + "42,45", 9),  # two producer ids of group d: d is given it once
    ]
    rows = [row(n, tasks.CONTEXT, key, oconn) for n, key, oconn in context]
    rows += [row(0, tasks.CONN_KEYS, k, conn) for conn, keys in ((7, "ab"), (8, "c")) for k in keys]
    rows.append(row(12, tasks.KEYED, "a", 7))  # a keyed event: not context
    events = spark.createDataFrame(rows, tasks.EVENTS_DDL)
    group_of = {"a": "a", "b": "a", "c": "c", "d": "d", "pid:42": "d", "pid:45": "d"}
    slot_of = {"a": 3, "c": 1, "d": 2}  # the fold task of each group (spark._placed)
    group_table = spark.createDataFrame(
        [(0, k, g, slot_of[g]) for k, g in group_of.items()], "cset int, key string, group string, slot long"
    )

    changes = _txn_version_changes(events).toArrow().to_pylist()
    assert sorted(r["blob"] for r in changes) == [b"event 1", b"event 7"]  # 3 repeats 1, 4 tells none
    collected = changes + [r for r in rows if r["kind"] == tasks.CONTEXT and r["key"] is None]
    assert [blob for _order, blob in _every_group(list(reversed(collected)))] == [
        b"event 1",
        b"event 7",
        b"event 9",
    ]
    routed = _routed_context(events, group_table).toArrow().to_pylist()
    given: dict[str, list[bytes]] = {}
    for r in sorted(routed, key=lambda r: r["rel"]):
        given.setdefault(r["group"], []).append(r["blob"])
    # Once per key of the group that brings it (keys a and b of group a's connection, producer ids 42
    # and 45 of group d), always with one order: read once by the fold.
    assert given == {
        "a": [b"event 2", b"event 2"],
        "c": [b"event 6"],
        "d": [b"event 5", b"event 11", b"event 11"],
    }
    for blob in (b"event 2", b"event 11"):
        assert len({tuple(r[c] for c in tasks.ORDER_COLUMNS) for r in routed if r["blob"] == blob}) == 1
    assert all(r["slot"] == slot_of[r["group"]] for r in routed)  # each to its group's fold task


def test_flows_and_groups_go_one_to_a_task_the_heaviest_first(spark) -> None:
    """The spread flows' decode and the key groups' folds go to tasks the run chooses, not where their
    hash falls: one to a task while there are as many tasks as items (no task left with nothing, which
    still costs a Python task, and no two large flows in one while another waits), the heaviest first
    into the least loaded when there are more items than tasks."""
    from pyspark.sql import functions as F

    from ksniff.engine.spark import _placed

    weights = [100, 90, 5, 5, 5, 1]
    for n in (3, 6):
        rows = list(enumerate(_placed(spark, weights, n)))
        placed = (
            spark.createDataFrame(rows, "item int, slot long")
            .repartition(n, "slot")
            .select("item", F.spark_partition_id().alias("task"))
            .collect()
        )
        tasks: dict[int, list[int]] = {}
        for r in placed:
            tasks.setdefault(r.task, []).append(weights[r.item])
        expected = [[w] for w in weights] if n == 6 else [[1, 5, 5, 5], [90], [100]]
        assert sorted(sorted(t) for t in tasks.values()) == sorted(expected)


def test_the_runs_queries_shuffle_into_partitions_sized_for_the_run(spark) -> None:
    """The run's own queries shuffle into as many partitions as the run needs, not Spark's default of
    200 (into each of which every writing task writes), and the session's setting is put back after the
    run; a number whoever runs ksniff chose (spark-submit's --conf, or the session's) is kept."""
    from ksniff.engine.spark import SHUFFLE_PARTITIONS, _shuffle_partitions

    assert not spark.sparkContext.getConf().contains(SHUFFLE_PARTITIONS)  # the test session's own default
    assert spark.conf.get(SHUFFLE_PARTITIONS) == "200"
    with _shuffle_partitions(spark, 3):
        assert spark.conf.get(SHUFFLE_PARTITIONS) == "3"
    assert spark.conf.get(SHUFFLE_PARTITIONS) == "200"
    spark.conf.set(SHUFFLE_PARTITIONS, "64")
    try:
        with _shuffle_partitions(spark, 3):
            assert spark.conf.get(SHUFFLE_PARTITIONS) == "64"
        assert spark.conf.get(SHUFFLE_PARTITIONS) == "64"
    finally:
        spark.conf.unset(SHUFFLE_PARTITIONS)


def test_the_inputs_are_listed_by_a_few_tasks_per_core(spark, monkeypatch) -> None:
    """Many inputs are listed by a few tasks per core, not one task per path (Spark's default, each
    costing the driver more than the path), and Arrow batches to the tasks are cut by bytes; after the
    run the session has its own settings again, and a setting whoever runs ksniff chose is kept."""
    from ksniff.engine import spark as engine

    seen: list[tuple] = []
    listing = engine._list_inputs

    def noted(session_spark, paths):
        seen.append(tuple(spark.conf.get(k, None) for k in (engine.LISTING_TASKS, engine.ARROW_BATCH_BYTES)))
        return listing(session_spark, paths)

    monkeypatch.setattr(engine, "_list_inputs", noted)
    cores = spark.sparkContext.defaultParallelism
    engine.audit_spark(spark, [str(PCAPS / SAMPLE[0])], CONFIG).close()
    assert seen == [(str(4 * cores), str(engine.BATCH_BYTES))]
    assert spark.conf.get(engine.LISTING_TASKS, None) is None
    assert spark.conf.get(engine.ARROW_BATCH_BYTES, None) is None
    spark.conf.set(engine.LISTING_TASKS, "3")
    try:
        engine.audit_spark(spark, [str(PCAPS / SAMPLE[0])], CONFIG).close()
        assert seen[-1][0] == "3" and spark.conf.get(engine.LISTING_TASKS) == "3"
    finally:
        spark.conf.unset(engine.LISTING_TASKS)


def test_the_exports_sort_into_the_runs_partitions(spark, tmp_path: Path, monkeypatch) -> None:
    """The exports' global sorts (into the local export's row order) shuffle into the run's own number of
    partitions, not Spark's default 200, each of which would be a part file; the session's setting is
    back afterwards."""
    from ksniff.engine import spark as engine

    seen: list[str] = []
    write = engine._write_csv

    def noted(run, folder, tables):
        seen.append(spark.conf.get(engine.SHUFFLE_PARTITIONS))
        return write(run, folder, tables)

    monkeypatch.setattr(engine, "_write_csv", noted)
    run = engine.audit_spark(spark, [str(PCAPS / SAMPLE[0])], CONFIG)
    try:
        run.write(csv_dir=str(tmp_path / "csv"))
    finally:
        run.close()
    assert run.partitions >= 1 and seen == [str(run.partitions)]
    assert spark.conf.get(engine.SHUFFLE_PARTITIONS) == "200"
    assert list((tmp_path / "csv" / "exchanges.csv").glob("part-*"))
