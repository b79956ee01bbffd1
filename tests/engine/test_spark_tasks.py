"""The Spark engine's task functions, without Spark: segment order."""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow missing")

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


def _blocks(path: str, file: int = 0):
    """Stage 1's rows of one capture (pyarrow Table, SEGMENTS): its flows' blocks and its summary."""
    import pyarrow as pa

    from ksniff.engine import spark_tasks as tasks

    content = pa.nulls(1, pa.binary())
    listing = pa.RecordBatch.from_pydict(
        {"file": [file], "path": [path], "uri": [path], "folder": [False], "content": content}
    )
    return pa.Table.from_batches(list(tasks.extract(iter([listing]))), schema=tasks.SEGMENTS)


def _segments_of(table) -> list[tuple]:
    """Every segment of the blocks in `table`, as stage 2 reads them."""
    from ksniff.engine import spark_tasks as tasks

    return [s for b in table.column("block").to_pylist() if b is not None for s in tasks.loads(b)]


def _decoded_rows(table) -> list[dict]:
    """Stage 2's rows of one file's blocks, each flow decoded alone, as Spark's tasks decode them."""
    import itertools

    import pyarrow as pa

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks

    meta = tasks.loads(table.filter(pa_valid(table, "meta")).column("meta")[0].as_py())
    blocks = sorted(
        table.filter(pa_valid(table, "flow")).to_pylist(), key=lambda r: (r["flow"], r["pm"], r["idx"])
    )
    out = []
    for _flow, mine in itertools.groupby(blocks, key=lambda r: r["flow"]):
        batch = pa.RecordBatch.from_pylist(list(mine), schema=tasks.SEGMENTS)
        for rows in tasks.decode(EngineConfig(), {0: tasks.RunEnd(meta.max_ts)})(iter([batch])):
            out.extend(rows.to_pylist())
    return out


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize("cut", ["per flow", "all held"])
def test_segment_blocks_keep_the_merge_order(cut: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file's segments come out in blocks of one flow, each closed at its size or when the file's open
    blocks hold too much; however they are cut, they hold every segment once, in the file's order, and
    decode to the same rows."""
    from ksniff.engine import spark_tasks as tasks

    path = str(max(PCAPS.glob("*.pcap"), key=lambda p: p.stat().st_size))
    whole = _decoded_rows(_blocks(path))
    if cut == "per flow":
        monkeypatch.setattr(tasks, "BLOCK_SEGMENTS", 16)  # many blocks per flow
    else:
        monkeypatch.setattr(tasks, "BLOCKS_HELD", 8192)  # every open block closed every few segments
    table = _blocks(path)
    assert _decoded_rows(table) == whole
    blocks = table.filter(pa_valid(table, "flow")).to_pylist()
    segments = sorted(_segments_of(table), key=lambda s: s[2])
    assert [s[2] for s in segments] == list(range(len(segments)))  # every segment of the file once
    pm = [s[0] for s in segments]
    assert pm == sorted(pm)  # the running maximum never steps back
    assert len(blocks) > 2 * len({b["flow"] for b in blocks})
    for b in blocks:
        mine = tasks.loads(b["block"])
        assert 0 < len(mine) <= tasks.BLOCK_SEGMENTS
        assert (b["pm"], b["file"], b["idx"]) == mine[0][:3]  # a row's order is its first segment's
        assert [s[2] for s in mine] == sorted(s[2] for s in mine)
        for s in mine:  # each segment of the block is its flow's, either way
            a, z = s[4] + s[5].to_bytes(2, "big"), s[6] + s[7].to_bytes(2, "big")
            assert b["flow"] in (a + z, z + a)
    assert table.num_rows == len(blocks) + 1  # and the file's summary


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_blocks_of_several_files_are_merged_segment_by_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """One connection seen in two files (two captured hosts, or rotated files that overlap) is read by its
    flow's task in the merge's order of (pm, file, idx), its blocks interleaved segment by segment."""
    from ksniff.engine import spark_tasks as tasks

    monkeypatch.setattr(tasks, "BLOCK_SEGMENTS", 8)
    path = str(PCAPS / "txn_confluent_tansu_loss.pcap")
    rows = []
    for file in (0, 1):  # the same capture as two files: every segment's time in both
        table = _blocks(path, file)
        rows += table.filter(pa_valid(table, "flow")).to_pylist()
    rows.sort(key=lambda r: (r["pm"], r["file"], r["idx"]))
    everything = [(r["cset"], r["flow"], r["pm"], r["file"], r["idx"], r["block"]) for r in rows]
    out = list(tasks.merged(everything))
    assert out == sorted(s for r in rows for s in tasks.loads(r["block"]))
    assert {s[1] for s in out[:20]} == {0, 1}  # interleaved from the start


def pa_valid(table, column: str):
    import pyarrow as pa

    return pa.compute.is_valid(table.column(column))


def test_caps_of_one_process_say_they_apply_per_flow() -> None:
    # The run-wide caps bind one process's memory; Spark's flows are decoded in tasks of their own, so a
    # user who set them is told they apply to each flow's task instead of silently getting other counts.
    from dataclasses import replace

    from ksniff.config import EngineConfig
    from ksniff.engine.spark import _totals

    assert _totals([], [], EngineConfig())[2] == []
    warnings = _totals([], [], replace(EngineConfig(), max_in_flight_total=10, max_partial_total=4096))[2]
    assert warnings == [
        "--max-in-flight-total and --max-partial-total cap one process's memory: the Spark "
        "engine applies them to each flow's task, where they do not bind as in one process"
    ]


@pytest.mark.skipif(not (PCAPS / "txn_confluent_mock.pcap").exists(), reason="no corpus captures")
def test_findings_rows_are_judged_against_the_sets_clocks(tmp_path: Path) -> None:
    """The executors' findings rows mark a finding within the clocks' uncertainty as the local engine
    does: per-broker captures of the mock cluster, with clocks known (here, as if) only to within a
    second, give the zombie's write on a partition leader as an unverified warning in the `findings`
    table, row for row what ksniff.engine.clock.within_uncertainty makes of the whole run's findings."""
    import pickle
    from dataclasses import replace

    import pyarrow as pa
    from test_clock import per_broker

    from ksniff.audit.model import AuditOutput
    from ksniff.engine.clock import within_uncertainty
    from ksniff.engine.local import EngineConfig, audit_paths
    from ksniff.engine.spark_tasks import output_rows
    from ksniff.report.tables import finding_row

    made = per_broker(PCAPS / "txn_confluent_mock.pcap", tmp_path, [0.0, 2.5, -1.7])
    split = audit_paths(sorted(made), EngineConfig(keep_tables=False))
    (cset,) = split.capture_sets
    vague = tuple(replace(c, low=c.offset - 1.0, high=c.offset + 1.0) if c.pairs else c for c in cset.clocks)
    halves = [split.findings[::2], split.findings[1::2]]  # two groups' outputs, judged apart
    blobs = [pickle.dumps(AuditOutput((), (), tuple(h))) for h in halves]
    batch = pa.RecordBatch.from_pydict({"cset": [0, 0], "key": ["a", "b"], "blob": blobs})
    rows = [row for b in output_rows("findings", clocks={0: vague})(iter([batch])) for row in b.to_pylist()]
    expected = [finding_row(f) for h in halves for f in within_uncertainty(list(h), vague)]
    assert rows == [{k: r.get(k) for k in rows[0]} for r in expected]
    zombie = [r for r in rows if r["kind"] == "zombie_write_accepted"]
    assert {r["severity"] for r in zombie} == {"critical", "warning"}  # the coordinator's stay critical
    assert all("clock_uncertainty_s" in r["evidence"] for r in zombie if r["severity"] == "warning")


@pytest.mark.skipif(not (PCAPS / "txn_confluent_mock.pcap").exists(), reason="no corpus captures")
def test_a_set_audited_where_read_makes_its_own_output_tables(tmp_path: Path) -> None:
    """The task that audits a capture set where its files are read makes the set's transactions,
    findings and producers rows too, findings judged against the set's clocks as the driver judges the
    set's result; the driver only labels them with the set's number and cluster (`labelled_rows`)."""
    from dataclasses import replace

    import pyarrow as pa
    from test_clock import per_broker

    from ksniff.engine import sets
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.local import EngineConfig

    made = sorted(per_broker(PCAPS / "txn_confluent_mock.pcap", tmp_path, [0.0, 2.5, -1.7]))
    (cset,) = sets.plan(made)
    vague = tuple(replace(c, low=c.offset - 1.0, high=c.offset + 1.0) if c.pairs else c for c in cset.clocks)
    listing = pa.RecordBatch.from_pydict(
        {
            "file": list(range(len(made))),
            "path": made,
            "uri": made,
            "folder": [False] * len(made),
            "offset": [cset.offset_of(p) for p in made],
            "cset": pa.array([5] * len(made), pa.int32()),
            "content": pa.nulls(len(made), pa.binary()),
        }
    )
    audited = tasks.extract_audited(EngineConfig(keep_tables=True), {5: vague})
    rows = pa.Table.from_batches(list(audited(iter([listing]))), schema=tasks.EVENTS)
    result, _identity, digest = _audited(rows)
    stored = rows.filter(pa.compute.equal(rows.column("kind"), tasks.TABLE_ROWS))
    listed = rows.filter(pa.compute.equal(rows.column("kind"), tasks.AUDITED_LISTS)).to_batches()
    label = (3, "mockCluster")
    made_rows = {}
    for table in tasks.OUTPUT_TABLES:
        mine = stored.filter(pa.compute.equal(stored.column("key"), table)).to_batches()
        got = [r for b in tasks.labelled_rows(table, {5: label})(iter(mine)) for r in b.to_pylist()]
        expected = tasks.output_batch(table, [tasks.judged(result, vague)], [label]).to_pylist()
        assert got and got == expected, table
        assert {(r["capture_set"], r["cluster"]) for r in got} == {label}
        if table != "producers":  # a run that keeps no tables makes these two from the lists, if asked
            made = tasks.listed_rows(table, {5: label}, {5: vague})(iter(listed))
            assert [r for b in made for r in b.to_pylist()] == expected, table
        made_rows[table] = got
    zombie = [r for r in made_rows["findings"] if r["kind"] == "zombie_write_accepted"]
    assert {r["severity"] for r in zombie} == {"critical", "warning"}  # judged: the others' are unverified
    assert all("clock_uncertainty_s" in r["evidence"] for r in zombie if r["severity"] == "warning")
    # The digest the driver reads instead of the lists is of the judged findings.
    by_kind = {}
    for r in made_rows["findings"]:
        by_kind[r["kind"], r["severity"]] = by_kind.get((r["kind"], r["severity"]), 0) + 1
    assert digest.findings.counts() == by_kind
    assert digest.transactions.count == len(made_rows["transactions"])


def _audited(rows) -> tuple:
    """(result, identity, digest) of the one set `extract_audited` audited: what the driver always reads
    (AUDITED: the result without findings and transactions, and their digest) with the two lists it
    reads for a whole summary (AUDITED_LISTS)."""

    from ksniff.engine import spark_tasks as tasks

    of_kind = {}
    for r in rows.to_pylist():
        if r["kind"] in (tasks.AUDITED, tasks.AUDITED_LISTS):
            assert r["kind"] not in of_kind  # one set
            of_kind[r["kind"]] = tasks.loads(r["blob"])
    bare, identity, digest, _peak = of_kind[tasks.AUDITED]
    assert bare.findings == [] and bare.transactions == []
    findings, transactions = of_kind[tasks.AUDITED_LISTS]
    return replace(bare, findings=findings, transactions=transactions), identity, digest


@pytest.mark.skipif(not (PCAPS / "txn_confluent_tansu_loss.pcap").exists(), reason="no corpus captures")
def test_a_sweep_over_flows_decoded_by_different_tasks_orders_them_as_they_opened(tmp_path: Path) -> None:
    """Traffic an hour later closes the connections a capture's first packets left open at one idle
    sweep, in every flow at once. Each flow decoded by a task of its own (as Spark spreads them), the
    sweep's events never tie in the audit order (a tie once folded one connection's capture gap away as
    a duplicate of another's) and come in the order their connections opened, as the in-process sweep
    gives them."""
    import itertools

    import pyarrow as pa
    from pcap_edit import again_later

    from ksniff.capture import Reassembler
    from ksniff.config import EngineConfig
    from ksniff.decode.events import ConnectionEnded, ConnectionLost
    from ksniff.engine import spark_tasks as tasks

    capture = PCAPS / "txn_confluent_tansu_loss.pcap"
    path = str(again_later(capture, tmp_path / "twice.pcap", 3600, first=100))
    listing = pa.RecordBatch.from_pydict(
        {"file": [0], "path": [path], "uri": [path], "folder": [False], "content": pa.nulls(1, pa.binary())}
    )
    table = pa.Table.from_batches(list(tasks.extract(iter([listing]))), schema=tasks.SEGMENTS)
    segments = table.filter(pa.compute.is_valid(table.column("flow")))
    meta = tasks.loads(table.filter(pa.compute.is_valid(table.column("meta"))).column("meta")[0].as_py())
    config = EngineConfig()
    pms = sorted({s[0] for s in _segments_of(segments)})
    end = tasks.RunEnd(meta.max_ts)
    rows = sorted(segments.to_pylist(), key=lambda r: (r["flow"], r["pm"], r["file"], r["idx"]))
    events = []
    for _flow, mine in itertools.groupby(rows, key=lambda r: r["flow"]):  # one task per flow
        batch = pa.RecordBatch.from_pylist(list(mine), schema=tasks.SEGMENTS)
        for out in tasks.decode(config, {0: end})(iter([batch])):
            for r in out.to_pylist():
                if r["kind"] == tasks.CONTEXT:
                    events.append((tuple(r[c] for c in tasks.ORDER_COLUMNS), tasks.loads(r["blob"])))
    orders = [order for order, _event in events]
    assert len(set(orders)) == len(orders)
    later = min(ts for ts in pms if ts > meta.first_ts + 1800)  # the later traffic's first packet
    idle = [e for _o, e in events if isinstance(e, ConnectionEnded) and e.reason == "idle"]
    assert len(idle) == 4  # four connections the first part left open
    # Closed at one sweep time (a multiple of sweep_every), the first one past the idle timeout.
    every, timeout = Reassembler(config.limits).sweep_every, config.limits.idle_timeout
    (at,) = {e.ts for e in idle}
    assert at % every == 0 and 0 < at - max(ts for ts in pms if ts < later) - timeout <= every
    swept = [
        (o, e) for o, e in sorted(events) if isinstance(e, ConnectionLost | ConnectionEnded) and e.ts == at
    ]
    assert {e.conn for _o, e in swept} == {e.conn for e in idle}
    opened = [(o[tasks.ORDER_COLUMNS.index("opm")], e.conn) for o, e in swept]
    assert opened == sorted(opened)


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize(
    "name", ["txn_confluent_tansu_loss.pcap", "consume_tansu.pcap", "two_ports_tansu.pcap"]
)
def test_a_file_decoded_where_it_is_read_gives_what_its_flows_tasks_give(name: str) -> None:
    """A capture set of one file is decoded by the task that reads it (nothing shuffled): the rows are
    those its segments give when shuffled to their flows' tasks and decoded there, plus the file's
    summary, which the driver reads instead of stage 1's."""

    import pyarrow as pa

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks

    path = str(PCAPS / name)
    listing = pa.RecordBatch.from_pydict(
        {
            "file": [3],
            "path": [path],
            "uri": [path],
            "folder": [False],
            "content": pa.nulls(1, pa.binary()),
            "cset": pa.array([7], pa.int32()),
        }
    )
    config = EngineConfig(keep_tables=True)
    direct = pa.Table.from_batches(list(tasks.extract_decoded(config)(iter([listing]))), schema=tasks.EVENTS)

    table = pa.Table.from_batches(list(tasks.extract(iter([listing]))), schema=tasks.SEGMENTS)
    segments = table.filter(pa.compute.is_valid(table.column("flow")))
    meta = table.filter(pa.compute.is_valid(table.column("meta"))).column("meta")[0].as_py()
    end = tasks.RunEnd(tasks.loads(meta).max_ts)
    ordered = segments.take(
        pa.compute.sort_indices(segments, [(c, "ascending") for c in ("flow", "pm", "idx")])
    )
    shuffled = pa.Table.from_batches(
        list(tasks.decode(config, {7: end})(iter(ordered.to_batches()))), schema=tasks.EVENTS
    )

    rows = direct.to_pylist()
    assert rows[0]["kind"] == tasks.FILE_META and rows[0]["cset"] == 7 and rows[0]["blob"] == meta
    assert rows[1:] == shuffled.to_pylist()
    kinds = {r["kind"] for r in rows}
    assert kinds >= {tasks.TABLE, tasks.CONN, tasks.FLOW_STATS} and kinds & {tasks.KEYED, tasks.KEYED_LOG}


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize("name", ["txn_confluent_tansu_loss.pcap", "consume_tansu.pcap"])
def test_a_set_of_one_file_audited_where_it_is_read_is_the_local_result(name: str, tmp_path: Path) -> None:
    """A capture set of one file is audited by the task that reads it: its result is the local engine's
    for that file (named as the user named it), and its table rows are the local export's, in its order,
    each with its set in the row-order columns. A file that is not a capture is the local one-line error."""

    import pyarrow as pa

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.local import audit_paths
    from ksniff.result import stamp_set

    path = str(PCAPS / name)
    bad = tmp_path / "notes.pcap"
    bad.write_text("not a capture\n")
    listing = pa.RecordBatch.from_pydict(
        {
            "file": [3, 4],
            "path": ["s3a://bucket/" + name, str(bad)],
            "uri": [path, str(bad)],
            "folder": [False, False],
            "content": pa.nulls(2, pa.binary()),
            "cset": pa.array([7, 8], pa.int32()),
        }
    )
    config = EngineConfig(keep_tables=True)
    rows = pa.Table.from_batches(list(tasks.extract_audited(config)(iter([listing]))), schema=tasks.EVENTS)
    by_kind: dict[int, list[dict]] = {}
    for r in rows.to_pylist():
        by_kind.setdefault(r["kind"], []).append(r)
    assert set(by_kind) == {tasks.FILE_META, tasks.AUDITED, tasks.AUDITED_LISTS, tasks.TABLE_ROWS}
    ok, failed = (tasks.loads(r["blob"]) for r in by_kind[tasks.FILE_META])
    assert (ok.file, ok.error, failed.file) == (3, None, 4)
    with pytest.raises(Exception) as local_error:
        audit_paths([str(bad)], config)
    assert failed.error == str(local_error.value)

    result, identity, _digest = _audited(rows)
    local = audit_paths([path], config)
    assert [i.path for i in result.inputs] == ["s3a://bucket/" + name]
    result.inputs = local.inputs
    stamp_set(result, local.capture_sets[0], identity)  # labelled by the driver, once sets are numbered
    assert result.as_contract() == local.as_contract()
    assert identity.cluster_ids == [c["id"] for c in local.clusters]

    for table in ("exchanges", "batches"):
        stored = rows.filter(pa.compute.equal(rows.column("key"), table))
        made = pa.Table.from_batches(list(tasks.stored_rows(table, {7: "c"})(iter(stored.to_batches()))))
        got = made.to_pylist()
        assert {r["oset"] for r in got} == {7} and {r["_cluster"] for r in got} == {"c"}
        assert [r["n"] for r in got] == list(range(len(got)))
        public = [
            {k: v for k, v in r.items() if k in local_row}
            for r, local_row in zip(got, getattr(local, table), strict=True)
        ]
        assert public == getattr(local, table)


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_a_set_of_rotated_files_audited_where_it_is_read_is_the_local_result(tmp_path: Path) -> None:
    """A capture set of several files (a capture rotated mid-connection) is audited by one task, its
    files in the set's order: the local engine's result for those files as one set, each file's summary
    in its own row, the set's table rows in the local order."""

    import pyarrow as pa
    from pcap_edit import split

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.local import audit_paths
    from ksniff.result import stamp_set

    parts = [str(p) for p in split(PCAPS / "txn_confluent_tansu_loss.pcap", tmp_path, 3)]
    config = EngineConfig(keep_tables=True, capture_sets="merge")
    local = audit_paths(parts, config)
    assert local.capture.packets and [i.path for i in local.inputs] == parts
    listing = pa.RecordBatch.from_pydict(
        {
            "file": [5, 6, 7],
            "path": parts,
            "uri": parts,
            "folder": [False] * 3,
            "content": pa.nulls(3, pa.binary()),
            "offset": [0.0] * 3,
            "cset": pa.array([2] * 3, pa.int32()),
        }
    )
    rows = pa.Table.from_batches(list(tasks.extract_audited(config)(iter([listing]))), schema=tasks.EVENTS)
    metas = [tasks.loads(r["blob"]) for r in rows.to_pylist() if r["kind"] == tasks.FILE_META]
    assert [(m.file, m.path, m.packets) for m in metas] == [
        (5 + n, i.path, i.packets) for n, i in enumerate(local.inputs)
    ]
    result, identity, _digest = _audited(rows)
    stamp_set(result, local.capture_sets[0], identity)
    assert result.as_contract() == local.as_contract()
    stored = rows.filter(pa.compute.equal(rows.column("key"), "exchanges"))
    made = pa.Table.from_batches(
        list(tasks.stored_rows("exchanges", {})(iter(stored.to_batches())))
    ).to_pylist()
    assert [{k: r[k] for k in local.exchanges[0]} for r in made] == local.exchanges


def test_a_task_copies_captures_to_sparks_local_folders(tmp_path: Path, monkeypatch) -> None:
    """A capture a task writes to disk goes to Spark's first local folder for the executor
    (SPARK_LOCAL_DIRS, the disks set aside for Spark's spills, which Spark empties when the application
    ends; one that does not exist is passed over), not to the system's temporary folder, and is gone
    after."""
    from ksniff.engine import spark_tasks as tasks

    spill, other, system = tmp_path / "spill", tmp_path / "other", tmp_path / "tmp"
    for folder in (spill, other, system):
        folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system))
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'gone'},{spill},{other}")
    data = (PCAPS / "txn_confluent_tansu.pcap").read_bytes()
    with tasks.opened("hdfs://namenode/caps/x.pcap", lambda: data) as where:
        assert Path(where).parent == spill and Path(where).read_bytes() == data
    assert not any(any(f.iterdir()) for f in (spill, other, system))
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    with tasks.opened("hdfs://namenode/caps/x.pcap", lambda: data) as where:
        assert Path(where).parent == system


def test_a_set_read_by_spark_goes_to_disk_one_file_at_a_time(tmp_path: Path, monkeypatch) -> None:
    """A set's files read by Spark's binaryFile source (their bytes in the rows, one file per Arrow
    batch, in the order a shuffle left them) are each written to the task's disk before the next batch
    is read, so the task holds one file's bytes at a time however large the set; the set is then audited
    as the local engine audits it, its files in their places, named as the user named them, and the
    files on disk are gone once the set's rows are out."""
    import tempfile

    import pyarrow as pa
    from pcap_edit import split

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.local import audit_paths

    parts = [str(p) for p in split(PCAPS / "txn_confluent_tansu_loss.pcap", tmp_path, 3)]
    config = EngineConfig(capture_sets="merge")
    local = audit_paths(parts, config)
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    uris = [f"hdfs://namenode/caps/part{n}.pcap" for n in range(3)]
    on_disk = []  # the task's temporary files as each batch was asked for

    def batches():
        for n in (2, 0, 1):
            part = parts[n]
            on_disk.append(len(list(spool.glob("ksniff-*.cap"))))
            yield pa.RecordBatch.from_pydict(
                {
                    "file": [n],
                    "path": [uris[n]],
                    "uri": [uris[n]],
                    "folder": [False],
                    "content": pa.array([Path(part).read_bytes()], pa.binary()),
                    "offset": [0.0],
                    "cset": pa.array([0], pa.int32()),
                    "place": pa.array([n], pa.int32()),
                }
            )

    rows = pa.Table.from_batches(list(tasks.extract_audited(config)(batches())), schema=tasks.EVENTS)
    assert on_disk == [0, 1, 2]
    assert not list(spool.iterdir())
    result, _identity, _digest = _audited(rows)
    assert [i.path for i in result.inputs] == uris
    assert result.capture.packets == local.capture.packets > 0
    assert [t.outcome for t in result.transactions] == [t.outcome for t in local.transactions]
    assert sorted(f.kind for f in result.findings) == sorted(f.kind for f in local.findings)


def test_the_anchors_task_gathers_each_group_whatever_order_its_files_come_in(tmp_path: Path) -> None:
    """The rows of two groups of files (two hosts' captures, each rotated) reach the clock anchors task
    mixed, in the order a shuffle left them: it gathers each group's files and finds each group's
    anchors once, those the local planner finds reading the group."""
    from dataclasses import fields

    import pyarrow as pa
    from pcap_edit import split

    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.clock import anchors_of

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = [str(p) for p in split(PCAPS / "txn_confluent_mock.pcap", tmp_path / "a", 3)]
    b = [str(p) for p in split(PCAPS / "txn_confluent_tansu_loss.pcap", tmp_path / "b", 2)]
    came = [(4, 12, a[2]), (5, 21, b[1]), (4, 10, a[0]), (5, 20, b[0]), (4, 11, a[1])]
    listing = pa.RecordBatch.from_pydict(
        {
            "file": [f for _g, f, _p in came],
            "path": [p for _g, _f, p in came],
            "uri": [p for _g, _f, p in came],
            "folder": [False] * len(came),
            "grp": [g for g, _f, _p in came],
            "content": pa.nulls(len(came), pa.binary()),
        }
    )
    rows = list(tasks.anchors((9092,), True, None)(iter([listing])))
    assert [r.column("grp")[0].as_py() for r in rows] == [4, 5]
    for row, paths in zip(rows, (a, b), strict=True):
        found = tasks.loads(row.column("blob")[0].as_py())
        local = anchors_of(paths, (9092,), True, None)
        assert local.born and local.writes
        for f in fields(local):
            assert getattr(found, f.name) == getattr(local, f.name), f.name


def test_listed_files_go_to_the_first_argument_naming_them() -> None:
    """Spark lists the files of every argument at once; each goes back to the first argument that is the
    file itself or a folder above it (the local engine's order), found by its path and its folders' rather
    than by trying every argument: the same as trying them in order, on arguments that are files, folders,
    nested folders, the root, repeated, and files no argument names (a glob's)."""
    import random

    from ksniff.engine.spark import _by_argument, _norm

    rng = random.Random(7)
    files = [f"/caps/{d}/{s}/f{n}.pcap" for d in "ab" for s in ("x", "y", "x/z") for n in range(4)]
    files += ["/caps/top.pcap", "/other/g1.pcap"]
    listed = [{"path": "file:" + f, "length": len(f)} for f in files]
    choices = ["/caps", "/caps/a", "/caps/a/x", "/caps/b/x/z", "/caps/top.pcap", "/caps/a/x/f1.pcap", "/"]
    choices += ["file:///caps/b/", "/caps/a/x/z/f2.pcap"]

    def in_order(uris: list[str]):  # the walk over every argument, in order, for every file
        wanted = [_norm(u) for u in uris]
        by_arg, stray = [[] for _ in uris], []
        for row in listed:
            here = _norm(row["path"])
            for i, base in enumerate(wanted):
                if here == base:
                    by_arg[i].append(("", row["path"], row["length"], False))
                    break
                if here.startswith(base.rstrip("/") + "/"):
                    by_arg[i].append((here[len(base.rstrip("/")) + 1 :], row["path"], row["length"], True))
                    break
            else:
                stray.append((row["path"], row["path"], row["length"], False))
        return by_arg, stray

    for _ in range(200):
        uris = [rng.choice(choices) for _ in range(rng.randrange(1, 6))]
        assert _by_argument(uris, listed) == in_order(uris), uris
    by_arg, stray = _by_argument(["/caps/a/x/f1.pcap", "/caps/a"], listed)
    assert by_arg[0] == [("", "file:/caps/a/x/f1.pcap", len("/caps/a/x/f1.pcap"), False)]
    assert ("x/z/f0.pcap", "file:/caps/a/x/z/f0.pcap", len("/caps/a/x/z/f0.pcap"), True) in by_arg[1]
    assert ("file:/other/g1.pcap", "file:/other/g1.pcap", len("/other/g1.pcap"), False) in stray


ORDER_LIMITED = dict(max_frame=4096, max_in_flight=2, max_buffer_bytes=2048)


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize("limited", [False, True], ids=["defaults", "per-connection-limits"])
def test_each_flow_decoded_alone_and_sorted_is_the_local_audit_order(limited: bool, tmp_path: Path) -> None:
    """The audit order is a function of each connection's own segments and the capture's clock: every
    corpus capture's flows, each decoded by a task of its own (stage 2) and their events sorted on the
    order columns, give exactly the events the in-process engine hands its audit, in its order (with the
    per-connection limits small enough to cut frames, requests in flight and out-of-order bytes). Also
    captures cut mid-traffic and followed by other traffic an hour later: the idle sweep gives up the
    requests left in flight long after they were sent (released by the clock, not the window)."""
    import itertools
    from dataclasses import replace

    import pyarrow as pa
    from pcap_edit import again_later

    from ksniff.audit.partlog import topic_names, txn_id_pairs
    from ksniff.capture import read_files
    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.local import Pipeline

    config = EngineConfig(keep_tables=True)
    if limited:
        config = replace(config, **ORDER_LIMITED)

    class Recorded(Pipeline):
        def _audit(self, event) -> None:
            self.seen.append(event)
            super()._audit(event)

    loss = PCAPS / "txn_confluent_tansu_loss.pcap"
    cut = [again_later(loss, tmp_path / f"cut{n}.pcap", 3600, first=n) for n in (57, 103, 151)]
    compared = 0
    for capture in sorted(PCAPS.glob("*.pcap*")) + cut:
        path = str(capture)
        run = read_files([path], config.limits)
        pipeline = Recorded(config, on_not_kafka=run.drop, capture=run.reassembler, on_elsewhere=run.drop)
        pipeline.seen = []
        for event in run:
            pipeline.feed(event)
        pipeline.finish()
        local = pipeline.seen

        content = pa.nulls(1, pa.binary())
        listing = pa.RecordBatch.from_pydict(
            {"file": [0], "path": [path], "uri": [path], "folder": [False], "content": content}
        )
        table = pa.Table.from_batches(list(tasks.extract(iter([listing]))), schema=tasks.SEGMENTS)
        segments = table.filter(pa.compute.is_valid(table.column("flow")))
        summary = table.filter(pa.compute.is_valid(table.column("meta"))).column("meta")[0].as_py()
        meta = tasks.loads(summary)
        end = tasks.RunEnd(meta.max_ts)
        rows = sorted(segments.to_pylist(), key=lambda r: (r["flow"], r["pm"], r["file"], r["idx"]))
        found, openings = {}, []
        for _flow, mine in itertools.groupby(rows, key=lambda r: r["flow"]):  # one task per flow
            batch = pa.RecordBatch.from_pylist(list(mine), schema=tasks.SEGMENTS)
            for out in tasks.decode(config, {0: end})(iter([batch])):
                for r in out.to_pylist():
                    order = tuple(r[c] for c in tasks.ORDER_COLUMNS)
                    if r["kind"] == tasks.CONN:
                        openings.append(((r["ppm"], r["pfile"], r["pidx"]), tasks.loads(r["blob"])))
                    elif r["kind"] in (tasks.TABLE, tasks.CONTEXT, tasks.KEYED, tasks.KEYED_LOG, tasks.LOG):
                        event = tasks.loads(r["blob"])
                        if isinstance(event, tasks.TopicNames):  # the logs' part of a Metadata answer
                            assert event.pairs == topic_names(tasks.loads(found[order])), capture.name
                            continue
                        found[order] = r["blob"]  # an event is one row per key it touches: once here
        conns = {conn: n for n, (_at, conn) in enumerate(sorted(openings), start=1)}
        spread = [tasks.loads(found[order], conns) for order in sorted(found)]
        # What a transactional Produce tells the partition logs' other folds comes just before it.
        facts = [i for i, e in enumerate(spread) if isinstance(e, tasks.TxnIds)]
        assert all(spread[i + 1].api_name == "Produce" for i in facts), capture.name
        assert all(spread[i].pairs == txn_id_pairs(spread[i + 1]) for i in facts), capture.name
        spread = [e for e in spread if not isinstance(e, tasks.TxnIds)]
        # Which event, not all it holds: a Fetch answer's topic names come from Metadata answers of other
        # connections, which the flows' tasks do not see (the fold names them).
        assert [_which(e) for e in spread] == [_which(e) for e in local], capture.name
        compared += len(local)
    assert compared > 2_500  # every event of the 40-odd corpus captures


def _which(event) -> tuple:
    return (
        type(event).__name__,
        event.conn,
        getattr(event, "correlation_id", None),
        getattr(event, "api_key", None),
        getattr(event, "status", None),
        getattr(event, "request_ts", None) or getattr(event, "ts", None),
        getattr(event, "response_ts", None),
    )


def _stage2_rows(
    path: str, config, folds: int = 1, one_task: bool = False
) -> tuple[list[dict], dict[int, int], object]:
    """Stage 2's rows of one capture (each flow decoded by a task of its own, or with `one_task` every
    flow by one task; the partition logs' rows for `folds` folds), the local engine's connection numbers
    and the capture's RunEnd."""
    import itertools

    import pyarrow as pa

    from ksniff.engine import spark_tasks as tasks

    listing = pa.RecordBatch.from_pydict(
        {"file": [0], "path": [path], "uri": [path], "folder": [False], "content": pa.nulls(1, pa.binary())}
    )
    table = pa.Table.from_batches(list(tasks.extract(iter([listing]))), schema=tasks.SEGMENTS)
    segments = table.filter(pa.compute.is_valid(table.column("flow")))
    meta = tasks.loads(table.filter(pa.compute.is_valid(table.column("meta"))).column("meta")[0].as_py())
    rows = sorted(segments.to_pylist(), key=lambda r: (r["flow"], r["pm"], r["file"], r["idx"]))
    out: list[dict] = []
    for _flow, mine in itertools.groupby(rows, key=lambda r: None if one_task else r["flow"]):
        batch = pa.RecordBatch.from_pylist(list(mine), schema=tasks.SEGMENTS)
        for rows_out in tasks.decode(config, {0: tasks.RunEnd(meta.max_ts, folds=folds)})(iter([batch])):
            out.extend(rows_out.to_pylist())
    stats = [tasks.loads(r["blob"]) for r in out if r["kind"] == tasks.FLOW_STATS]
    last = max((s.last_event_ts for s in stats), default=None)
    openings = sorted(
        ((r["ppm"], r["pfile"], r["pidx"]), tasks.loads(r["blob"])) for r in out if r["kind"] == tasks.CONN
    )
    conns = {conn: n for n, (_at, conn) in enumerate(openings, start=1)}
    return out, conns, tasks.RunEnd(meta.max_ts, last, folds)


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_partition_logs_split_by_partition_are_the_whole_logs() -> None:
    """The Spark engine folds a capture set's partition logs in several tasks, fold k keeping the
    partitions whose index is k modulo n, given only its pieces of the Produce and Fetch exchanges (the
    rows' `lfold`) and what every fold reads: for every corpus capture, the folds together give the one
    fold's partitions (their logs, readers, producers) and findings, and the other findings of the
    CONTEXT_KEY group (capture gaps, unanswered requests, idempotence) once; every fold knows whose
    producer ids are whose, topic names and timeouts as the one fold does; and what the folds are given
    is the one fold's, not n copies of it."""
    from ksniff.audit import merge_outputs
    from ksniff.audit.partlog import LogState
    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks
    from ksniff.engine.spark import log_folds

    def events_of(rows: list[dict], conns: dict, k: int) -> Iterator:
        """Fold k's events: its rows and those every fold reads, in audit order, each once."""
        mine = [
            (tuple(r[c] for c in tasks.ORDER_COLUMNS), r["blob"])
            for r in rows
            if r["lfold"] in (k, tasks.EVERY_FOLD)
        ]
        return (e for _order, e in tasks._once(iter(mine), conns))

    config = EngineConfig(keep_tables=False)
    read = (tasks.CONTEXT, tasks.LOG, tasks.KEYED_LOG)
    split_somewhere = known = 0
    for capture in sorted(PCAPS.glob("*.pcap*")):
        whole = None
        for n in (1, 2, 3, 8):
            rows, conns, end = _stage2_rows(str(capture), config, n)
            rows = [r for r in rows if r["kind"] in read]
            rows.sort(key=lambda r: tuple(r[c] for c in tasks.ORDER_COLUMNS))
            parts = [tasks.context_output(config, end, events_of(rows, conns, k), (n, k)) for k in range(n)]
            merged = merge_outputs(parts)
            bulk = sum(len(r["blob"]) for r in rows if _produce_or_fetch(r["blob"]))
            if whole is None:
                whole, one = merged, bulk
                whole_logs = LogState()
                tasks.fold_logs(whole_logs, events_of(rows, conns, 0))
                continue
            assert merged.partitions == whole.partitions, (capture.name, n)
            assert merged.findings == whole.findings, (capture.name, n)
            split_somewhere += sum(1 for p in parts if p.partitions) > 1
            # Each Fetch and Produce is given to the folds in pieces, not whole to each.
            assert not any(r["lfold"] == tasks.EVERY_FOLD for r in rows if _produce_or_fetch(r["blob"]))
            assert bulk <= 2.5 * one, (capture.name, n, bulk, one)  # a piece repeats what pickle shared
            # Every fold knows what the one fold knows beyond partitions: whose producer ids are whose,
            # topic names by id, transaction timeouts (what each fold is told of the others' exchanges).
            for k in range(n):
                logs = LogState(split=(n, k))
                tasks.fold_logs(logs, events_of(rows, conns, k))
                for name in ("txn_ids", "names", "timeouts", "tv2_pids"):
                    assert getattr(logs, name) == getattr(whole_logs, name), (capture.name, n, k, name)
                    known += len(getattr(logs, name))
    assert split_somewhere > 10  # captures whose logs were spread over several folds
    assert known > 100
    mb = 1 << 20
    assert [log_folds(c, b) for c, b in ((1, 1 << 40), (8, 100 * mb), (8, 600 * mb), (200, 1 << 40))] == [
        1,
        1,
        2,
        64,
    ]


def _produce_or_fetch(blob: bytes) -> bool:
    from ksniff.engine import spark_tasks as tasks

    return getattr(tasks.loads(blob), "api_name", None) in ("Produce", "Fetch")


def test_what_every_fold_is_given_of_an_api_versions_answer() -> None:
    """Every connection opens with ApiVersions, a context event every key group's fold is given through
    the driver: it goes without the answer's list of API version ranges, which no fold reads, and with
    the finalized features (the cluster's transaction.version) and the exchange's own fields."""
    import pickle

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks

    rows, _conns, _end = _stage2_rows(str(PCAPS / "consume_tansu.pcap"), EngineConfig(keep_tables=True))
    whole = {}
    for r in rows:
        if r["kind"] == tasks.TABLE:
            whole[tuple(r[c] for c in tasks.ORDER_COLUMNS)] = tasks.loads(r["blob"])
    given = 0
    for r in rows:
        if r["kind"] != tasks.CONTEXT:
            continue
        event = tasks.loads(r["blob"])
        if getattr(event, "api_name", None) != "ApiVersions":
            continue
        table = whole[tuple(r[c] for c in tasks.ORDER_COLUMNS)]
        assert table.response.api_keys and event.response.api_keys == ()
        assert event.response.finalized_features == table.response.finalized_features
        assert (event.conn, event.request_ts, event.response_ts) == (
            table.conn,
            table.request_ts,
            table.response_ts,
        )
        assert len(r["blob"]) < len(pickle.dumps(table)) / 2
        given += 1
    assert given > 5


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_a_tasks_decoders_share_their_counters_not_their_topic_names() -> None:
    """A task's flows of one capture set are decoded by decoders that share one context's counters and
    caches (DecodeContext.sharing): for every corpus capture decoded by one task, the decode counters are
    the sum of each flow's decoded by a task of its own, and so is every other row; a flow's decoder
    learns topic names only from its own flow's Metadata answers, as a decoder of its own does."""
    from ksniff.common.counters import add_counters
    from ksniff.config import EngineConfig
    from ksniff.decode.events import DecodeStats
    from ksniff.engine import spark_tasks as tasks

    config = EngineConfig(keep_tables=True)
    compared = 0
    for capture in sorted(PCAPS.glob("*.pcap")):
        apart_rows, _conns, _end = _stage2_rows(str(capture), config)  # a task per flow
        one_task, _conns, _end = _stage2_rows(str(capture), config, one_task=True)
        (shared,) = [tasks.loads(r["blob"]).decode for r in one_task if r["kind"] == tasks.FLOW_STATS]
        apart = DecodeStats(by_api={})
        for r in apart_rows:
            if r["kind"] == tasks.FLOW_STATS:
                add_counters(apart, tasks.loads(r["blob"]).decode)
        assert shared == apart, capture.name
        events = (tasks.TABLE, tasks.KEYED, tasks.KEYED_LOG, tasks.CONTEXT, tasks.LOG)
        assert sorted((r["kind"], r["blob"]) for r in one_task if r["kind"] in events) == sorted(
            (r["kind"], r["blob"]) for r in apart_rows if r["kind"] in events
        ), capture.name
        compared += shared.exchanges
    assert compared > 2000
    a = config.decoder()
    b = config.decoder(shared=a.ctx)
    assert b.stats is a.stats and b.ctx.plans is a.ctx.plans and b.topic_names is not a.topic_names


def test_a_worker_walks_everything_again_every_few_tasks() -> None:
    """pyspark's daemon collects a Python worker whole after each task; a task leaves what it froze out of
    that walk, but every FULL_WALK_EVERY-th task of the worker leaves nothing frozen, so that a cycle
    that became garbage while frozen is collected and the worker does not grow run after run. Each task
    gets its function as Spark ships it (cloudpickle), with a copy of the globals it names: the count
    must be the worker's, not the copy's."""
    import gc

    import pyarrow as pa
    from pyspark import cloudpickle

    from ksniff.engine import spark_tasks as tasks

    def task(batches):
        yield from batches

    shipped = cloudpickle.dumps(tasks._rarely_collected(task))
    batch = pa.RecordBatch.from_pydict({"x": [1]})
    threshold = gc.get_threshold()
    left_frozen = []
    try:
        for _ in range(2 * tasks.FULL_WALK_EVERY):
            run = cloudpickle.loads(shipped)  # as each task of a worker gets it
            assert list(run(iter([batch]))) == [batch]
            assert gc.get_threshold() == threshold  # the collector's settings put back after each
            left_frozen.append(gc.get_freeze_count() > 0)
    finally:
        gc.unfreeze()
    assert left_frozen.count(False) == 2  # nothing frozen after every FULL_WALK_EVERY-th task
    assert left_frozen.count(True) == 2 * tasks.FULL_WALK_EVERY - 2


def _stage1(path: str, refer: bool, file: int = 0):
    """Stage 1's rows of one capture, its segments carrying their payloads or (`refer`) saying where they
    lie in the file (spark_tasks.extract_referring), and its FileMeta."""
    import pyarrow as pa

    from ksniff.engine import spark_tasks as tasks

    listing = pa.RecordBatch.from_pydict(
        {
            "file": [file],
            "path": [path],
            "uri": [path],
            "folder": [False],
            "content": pa.nulls(1, pa.binary()),
        }
    )
    read = tasks.extract_referring if refer else tasks.extract
    table = pa.Table.from_batches(list(read(iter([listing]))), schema=tasks.SEGMENTS)
    meta = tasks.loads(table.filter(pa_valid(table, "meta")).column("meta")[0].as_py())
    return table.filter(pa_valid(table, "flow")), meta


def _stage2(segments, meta, files=None) -> list[dict]:
    """Stage 2's rows of one capture's segment blocks, every flow decoded by one task."""
    import pyarrow as pa

    from ksniff.config import EngineConfig
    from ksniff.engine import spark_tasks as tasks

    order = pa.compute.sort_indices(segments, [(c, "ascending") for c in ("flow", "pm", "file", "idx")])
    run = tasks.decode(EngineConfig(keep_tables=True), {0: tasks.RunEnd(meta.max_ts)}, files)
    return [r for b in run(iter(segments.take(order).to_batches())) for r in b.to_pylist()]


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize(
    ("name", "every"),
    [
        ("txn_confluent_tansu_mtu1500.pcap", False),
        ("consume_tansu.pcap", False),
        ("txn_confluent_tansu_loss.pcap", True),
        ("txn_confluent_tansu_pcapng.pcapng", True),
        ("gzip", True),
    ],
)
def test_segments_that_say_where_their_payloads_lie_decode_as_those_that_carry_them(
    name: str, every: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shuffled way's segment rows of a file opened where it lies say where each payload of at least
    REFERRED_MIN bytes is in the file instead of carrying it (`every`: all of them), and stage 2 reads
    it there: the rows are a fraction of the capture's bytes and decode to exactly what the payloads
    carried give. A gzip capture's segments carry theirs (a payload is in the inflated bytes, not the
    file's), and so does every file when the compiled walk, which alone can say where a payload lies,
    is not there."""
    import gzip

    from ksniff.capture import compiled
    from ksniff.engine import spark_tasks as tasks

    if compiled.fastwalk is None:
        pytest.skip("the compiled walk is not built")
    if every:
        monkeypatch.setattr(tasks, "REFERRED_MIN", 0)
    if name == "gzip":
        path = tmp_path / "loss.pcap.gz"
        path.write_bytes(gzip.compress((PCAPS / "txn_confluent_tansu_loss.pcap").read_bytes()))
    else:
        path = PCAPS / name
    carried, meta = _stage1(str(path), refer=False)
    referring, rmeta = _stage1(str(path), refer=True)
    assert meta.stamp is None and replace(rmeta, stamp=None) == meta
    files = {0: (str(path), str(path), rmeta.stamp)} if rmeta.stamp else None
    expected = _stage2(carried, meta)
    assert expected and _stage2(referring, rmeta, files) == expected
    held = referring.column("block").nbytes
    if name == "gzip":
        assert rmeta.stamp is None and held == carried.column("block").nbytes
    else:
        assert rmeta.stamp == (path.stat().st_size, path.stat().st_mtime_ns)
        assert held < carried.column("block").nbytes
        payload = sum(len(s[11]) for s in _segments_of(carried) if isinstance(s[11], bytes))
        referred = [s[11][1] for s in _segments_of(referring) if isinstance(s[11], tuple)]
        kept = [len(s[11]) for s in _segments_of(referring) if isinstance(s[11], bytes)]
        assert referred and sum(referred) + sum(kept) == payload
        assert min(referred) >= tasks.REFERRED_MIN and all(n < tasks.REFERRED_MIN for n in kept)


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize(
    "name, offset, sizes",
    [
        ("txn_confluent_tansu_mtu1500.pcap", 0.0, False),
        ("txn_confluent_tansu_loss.pcap", 3600.25, True),
        ("txn_confluent_tansu_pcapng.pcapng", -7.5, False),
        ("consume_tansu.pcap", 0.0, True),
    ],
)
def test_stage_ones_blocks_are_made_in_c_as_in_python(
    name: str, offset: float, sizes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage 1 puts each segment into its flow's block in C (ksniff.engine._pack.into_blocks): the same
    rows, blocks and file summary as the reference loop, with the clock offset of a set of several
    hosts, payloads carried and referred to, and blocks closed by their segments, their bytes and the
    bytes all open blocks hold (`sizes`: bounds small enough that every rule closes blocks)."""
    from compiled_support import require_compiled

    from ksniff.capture.files import CaptureFile
    from ksniff.engine import spark_tasks as tasks

    fast = require_compiled("ksniff.engine._pack", "the compiled codec of the Spark engine").into_blocks
    if sizes:
        monkeypatch.setattr(tasks, "BLOCK_SEGMENTS", 7)
        monkeypatch.setattr(tasks, "BLOCK_PAYLOAD", 3000)
        monkeypatch.setattr(tasks, "BLOCKS_HELD", 20_000)
        monkeypatch.setattr(tasks, "BATCH_ROWS", 5)

    def stage1(into, refer: bool):
        monkeypatch.setattr(tasks, "_into_blocks", lambda: into)
        capture = CaptureFile(str(PCAPS / name))
        try:
            batches = list(tasks._extract_file(3, name, capture, offset, 2, refer))
        finally:
            capture.close()
        rows = [row for b in batches for row in b.to_pylist()]
        blocks = [tasks.loads(r["block"]) if r["block"] else tasks.loads(r["meta"]) for r in rows]
        return [b.num_rows for b in batches], rows, blocks

    for refer in (False, True):
        reference = stage1(tasks.into_blocks, refer)
        assert len(reference[0]) > (3 if sizes else 1)
        assert stage1(fast, refer) == reference


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize("name", ["txn_confluent_tansu_mtu1500.pcap", "txn_confluent_tansu_pcapng.pcapng"])
def test_stage_twos_lists_are_made_in_c_as_in_python(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage 2 finds the span of a block's payloads in the file, takes them out of the span it read and
    puts a flow's segments onto the reassembler's lists in C (ksniff.engine._pack.referred, with_views,
    into_lists): the same rows as the
    reference code and as payloads carried in the rows, with blocks of a few segments and every payload
    read where it lies."""
    from compiled_support import require_compiled

    from ksniff.engine import spark_tasks as tasks

    fast = require_compiled("ksniff.engine._pack", "the compiled codec of the Spark engine")
    monkeypatch.setattr(tasks, "REFERRED_MIN", 0)
    monkeypatch.setattr(tasks, "BLOCK_SEGMENTS", 5)
    monkeypatch.setattr(tasks, "LIST_SEGMENTS", 7)
    path = str(PCAPS / name)
    segments, meta = _stage1(path, refer=True)
    files = {0: (path, path, meta.stamp)}
    got = {}
    for which, (refs, views, lists) in {
        "reference": (tasks.referred, tasks.with_views, tasks.into_lists),
        "C": (fast.referred, fast.with_views, fast.into_lists),
    }.items():
        monkeypatch.setattr(tasks, "_referred", lambda r=refs: r)
        monkeypatch.setattr(tasks, "_with_views", lambda v=views: v)
        monkeypatch.setattr(tasks, "_into_lists", lambda f=lists: f)
        got[which] = _stage2(segments, meta, files)
    assert got["C"] == got["reference"] and len(got["C"]) > 10
    assert got["C"] == _stage2(*_stage1(path, refer=False))  # and what the payloads carried give


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_payloads_far_apart_are_read_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block's payloads are read with one read of their span when they lie close together, else each
    alone (a small flow's few segments among a large capture's): the same rows either way."""
    from ksniff.capture import compiled
    from ksniff.engine import spark_tasks as tasks

    if compiled.fastwalk is None:
        pytest.skip("the compiled walk is not built")
    monkeypatch.setattr(tasks, "REFERRED_MIN", 0)
    path = str(PCAPS / "txn_confluent_tansu_loss.pcap")
    referring, meta = _stage1(path, refer=True)
    files = {0: (path, path, meta.stamp)}
    together = _stage2(referring, meta, files)
    reads = []
    monkeypatch.setattr(tasks, "SPAN_BYTES", 0)
    monkeypatch.setattr(
        tasks.os, "pread", lambda fd, n, at, real=tasks.os.pread: reads.append(n) or real(fd, n, at)
    )
    assert _stage2(referring, meta, files) == together
    spans = len(reads)
    monkeypatch.setattr(tasks, "SPAN_BYTES", 1 << 30)
    reads.clear()
    assert _stage2(referring, meta, files) == together
    assert len(reads) < spans


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
def test_a_task_keeps_a_bounded_number_of_capture_files_open(tmp_path: Path, monkeypatch) -> None:
    """One connection over many rotated files: stage 2 reads its payloads from each of them, with at most
    FILES_OPEN descriptors open (a year of hourly files would pass a process's limit), opening a file
    again, checked again, when a later block needs it."""
    import os
    import shutil

    import pyarrow as pa

    from ksniff.capture import compiled
    from ksniff.engine import spark_tasks as tasks

    if compiled.fastwalk is None:
        pytest.skip("the compiled walk is not built")
    monkeypatch.setattr(tasks, "REFERRED_MIN", 0)
    monkeypatch.setattr(tasks, "FILES_OPEN", 2)
    tables, files = [], {}
    for n in range(5):  # the same capture as five files: each segment's time in all of them
        path = tmp_path / f"part{n}.pcap"
        shutil.copy(PCAPS / "txn_confluent_tansu_loss.pcap", path)
        table, meta = _stage1(str(path), refer=True, file=n)
        tables.append(table)
        files[n] = (str(path), str(path), meta.stamp)
    every = pa.concat_tables(tables)
    real_open, real_close = os.open, os.close
    held: set[int] = set()
    opens, most = [0], [0]

    def opening(path, *args):
        fd = real_open(path, *args)
        held.add(fd)
        opens[0] += 1
        most[0] = max(most[0], len(held))
        return fd

    def closing(fd):
        held.discard(fd)
        return real_close(fd)

    monkeypatch.setattr(tasks.os, "open", opening)
    monkeypatch.setattr(tasks.os, "close", closing)
    rows = _stage2(every, meta, files)
    assert rows and not any(r["kind"] == tasks.FILE_META for r in rows)
    assert most[0] == 2 and not held  # never more than FILES_OPEN, all closed at the task's end
    assert opens[0] > len(files)  # files opened again, once closed, when a later block needs them


@pytest.mark.skipif(not list(PCAPS.glob("*.pcap")), reason="no corpus captures")
@pytest.mark.parametrize("change", ["touched", "cut short", "gone"])
def test_a_capture_changed_before_its_payloads_are_read_is_its_error(
    change: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage 2 reads payloads from the file stage 1 walked; a file changed since (written to, cut, taken
    away: a capture still being recorded, a ring of files overwritten) gives no rows made of other bytes,
    but the file's FileMeta with a one-line error, which stops the run."""
    import os
    import shutil

    from ksniff.capture import compiled
    from ksniff.engine import spark_tasks as tasks

    if compiled.fastwalk is None:
        pytest.skip("the compiled walk is not built")
    monkeypatch.setattr(tasks, "REFERRED_MIN", 0)
    path = tmp_path / "loss.pcap"
    shutil.copy(PCAPS / "txn_confluent_tansu_loss.pcap", path)
    referring, meta = _stage1(str(path), refer=True)
    if change == "touched":
        os.utime(path, ns=(meta.stamp[1] + 10**9, meta.stamp[1] + 10**9))
    elif change == "cut short":
        os.truncate(path, meta.stamp[0] // 2)
    else:
        path.unlink()
    rows = _stage2(referring, meta, {0: (str(path), "as named.pcap", meta.stamp)})
    assert [r["kind"] for r in rows] == [tasks.FILE_META]  # the file is checked before anything is read
    error = tasks.loads(rows[0]["blob"])
    assert error.path == "as named.pcap" and error.error.startswith("as named.pcap: changed while")
    assert "\n" not in error.error
