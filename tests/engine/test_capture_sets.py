"""Capture sets: a folder of unrelated captures audits to exactly the sum of its files audited one by one,
rotated files of one capture stay one set, and --merge / --separate override the grouping."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from ksniff.engine.local import EngineConfig, audit_paths
from ksniff.engine.sets import plan

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CORPUS = sorted(str(p) for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)
CONFIG = EngineConfig(keep_tables=False)

pytestmark = pytest.mark.skipif(len(CORPUS) < 2, reason="no corpus captures")


def _rows(items) -> Counter:
    """Findings, transactions, producers or partition logs as a multiset, without the set label (it
    differs by run)."""
    out = Counter()
    for item in items:
        row = item.as_contract()
        row.pop("capture_set")
        out[json.dumps(row, sort_keys=True)] += 1
    return out


# The two ends of one capture behind an address translation: the one pair of the corpus that belongs
# together, its connections read once as the client's end names them (the address the broker advertises),
# each exchange at the time its first copy was seen.
ENDS = ("txn_confluent_tansu_nat_client.pcap", "txn_confluent_tansu_nat_broker.pcap")


def _kinds(item) -> str:
    """A finding, transaction, producer or partition log without its set label and its times."""
    row = item.as_contract()
    row.pop("capture_set")
    return json.dumps(
        {k: v for k, v in row.items() if not k.endswith("ts") and k != "evidence"}, sort_keys=True
    )


def test_a_folder_audits_to_the_sum_of_its_files() -> None:
    whole = audit_paths([str(PCAPS)], CONFIG)
    alone = [audit_paths([p], CONFIG) for p in CORPUS if not p.endswith(ENDS)]
    client_end = audit_paths([str(PCAPS / ENDS[0])], CONFIG)
    ends = audit_paths([str(PCAPS / e) for e in ENDS], CONFIG)
    assert len(whole.capture_sets) == len(CORPUS) - 1  # nothing else in the corpus belongs together
    (joined,) = [s.number for s in whole.capture_sets if len(s.paths) == 2]
    for table in ("findings", "transactions", "producers", "partitions"):
        expected = sum((_rows(getattr(r, table)) for r in (*alone, ends)), Counter())
        assert _rows(getattr(whole, table)) == expected, table
        # the pair as the client's end alone, but for the times: each exchange's first sighting
        theirs = [_kinds(x) for x in getattr(client_end, table)]
        assert sorted(_kinds(x) for x in getattr(whole, table) if x.capture_set == joined) == sorted(theirs)
    severities = Counter(f.severity for f in whole.findings)
    assert severities["critical"] == sum(1 for r in alone for f in r.findings if f.severity == "critical")
    assert whole.capture.packets == sum(r.capture.packets for r in (*alone, ends))
    assert whole.decode.exchanges == sum(r.decode.exchanges for r in alone) + client_end.decode.exchanges
    # Unrelated captures never share a partition log: a topic-partition several files wrote keeps one log
    # per set, each with only its own set's batches.
    sets_of = Counter((p.topic, p.partition) for p in whole.partitions)
    assert [p for p in whole.partitions if p.capture_set is None] == []
    assert max(sets_of.values()) > 1
    assert len({(p.topic, p.partition, p.capture_set) for p in whole.partitions}) == len(whole.partitions)
    # Every set says why it stands alone; clusters are listed per set with their brokers.
    assert all(s.reasons for s in whole.capture_sets)
    tansu = [c for c in whole.clusters if c["id"] == "tansu_cluster"]
    assert len({c["capture_set"] for c in tansu}) > 1 and all(c["brokers"] for c in tansu)


def test_merge_puts_everything_in_one_producer_id_space() -> None:
    merged = audit_paths(CORPUS, EngineConfig(keep_tables=False, capture_sets="merge"))
    assert len(merged.capture_sets) == 1
    # Unrelated brokers handed out the same producer ids: merged, they look like one producer's anomalies.
    split = audit_paths(CORPUS, CONFIG)
    critical = Counter(f.severity for f in merged.findings)["critical"]
    assert critical > Counter(f.severity for f in split.findings)["critical"]


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
def test_rotated_files_are_one_set(tmp_path: Path) -> None:
    whole = str(PCAPS / "txn_confluent_tansu_mtu1500.pcap")
    packets = audit_paths([whole], CONFIG).capture.packets
    subprocess.run(
        ["editcap", "-c", str(packets // 2 + 1), whole, str(tmp_path / "rotated.pcap")],
        check=True,
        capture_output=True,
    )
    parts = sorted(str(p) for p in tmp_path.iterdir())
    assert len(parts) == 2
    (only,) = plan(parts)
    assert only.paths == tuple(parts)
    assert any("same TCP connection" in why for why in only.reasons)
    # One capture cut in two: one clock, not two capture points to put on one time line.
    assert not any("two capture points" in why for why in only.reasons)
    assert only.clocks == ()
    reference = audit_paths([whole], CONFIG)
    rotated = audit_paths(parts, CONFIG)
    for table in ("findings", "transactions", "producers", "partitions"):
        assert _rows(getattr(rotated, table)) == _rows(getattr(reference, table)), table
    separate = plan(parts, "separate")
    assert [s.paths for s in separate] == [(parts[0],), (parts[1],)]


def test_rotated_files_join_among_unrelated_ones(tmp_path: Path) -> None:
    if shutil.which("editcap") is None:
        pytest.skip("editcap (Wireshark) is not installed")
    whole = str(PCAPS / "anomalies_tansu.pcap")
    subprocess.run(
        ["editcap", "-c", "30", whole, str(tmp_path / "rot.pcap")], check=True, capture_output=True
    )
    parts = sorted(str(p) for p in tmp_path.iterdir())
    assert len(parts) > 2
    other = str(PCAPS / "txn_confluent_tansu.pcap")
    sets = plan([*parts, other])
    assert [s.paths for s in sets] == [tuple(parts), (other,)]


def test_captures_apart_in_time_are_not_identified_before_their_audit(monkeypatch) -> None:
    """Captures taken days apart cannot be one cluster's at once: they are planned without the
    identification pass, say so, and still name their clusters (learnt by their audits); captures taken
    minutes apart are identified as before."""
    import ksniff.engine.sets as sets

    apart = [str(PCAPS / f"{name}_write_tansu.pcap") for name in ("lost", "duplicate")]
    near = [str(PCAPS / name) for name in ("hanging_tansu.pcap", "hanging_mock.pcap")]
    identified: list[str] = []
    real = sets.identify
    monkeypatch.setattr(sets, "identify", lambda sc, *a, **k: (identified.append(sc.path), real(sc, *a, **k)))
    result = audit_paths(apart, CONFIG)
    assert identified == []
    assert [s.reasons for s in result.capture_sets] == [
        ("no other input ran at the same time (within 300 s), nor shares a TCP connection",)
    ] * 2
    for cset, path in zip(result.capture_sets, apart, strict=True):
        alone = audit_paths([path], CONFIG)
        assert cset.cluster_ids == ("tansu_cluster",) == alone.capture_sets[0].cluster_ids
    assert _rows(result.findings) == sum((_rows(audit_paths([p], CONFIG).findings) for p in apart), Counter())

    result = audit_paths(near, CONFIG)
    assert sorted(identified) == sorted(near)
    assert all("shares its cluster" in s.reasons[0] for s in result.capture_sets)


def _fleet(seed: int):
    """Scans of files from a few brokers of two clusters over some hours, with hours missing, clocks a
    little off, files naming nothing (connections opened to listed brokers, or to nobody listed) and a
    file without packets: what the planner's indexes must not lose a pair of."""
    import random

    from ksniff.engine.sets import FileScan

    rng = random.Random(seed)
    scans = []
    for cluster, brokers in (("east", 4), ("west", 3)):
        addresses = {b: f"10.{len(cluster)}.{b}.1:9092" for b in range(brokers)}
        named = (
            {cluster: frozenset((b, 9092) for b in range(brokers))},
            {cluster: frozenset(addresses.values())},
        )
        for hour in range(12):
            if rng.random() < 0.25:
                continue  # a gap: nothing joins across it
            for b in range(brokers):
                start = 1.8e9 + hour * 3600 + rng.uniform(-200, 200)
                scan = FileScan(f"{cluster}-{b}-{hour:02d}.pcap", first_ts=start, last_ts=start + 3000)
                scan.servers = {addresses[b]} if rng.random() < 0.8 else {f"192.0.2.{b}:9092"}
                scan.named = named if rng.random() < 0.7 else ({}, {})
                scans.append(scan)
    scans.append(FileScan("empty.pcap", named=({}, {})))
    rng.shuffle(scans)
    return scans


@pytest.mark.parametrize("seed", range(6))
def test_the_planners_indexes_find_every_join_a_walk_over_all_pairs_finds(monkeypatch, seed: int) -> None:
    """The planner looks for joins by cluster only among files that share an id and ran near in time,
    and for a file that names none among the files listing its brokers: the same sets, in the same
    order, with the same reasons and clocks, as looking at every pair."""
    from ksniff.engine import sets
    from ksniff.engine.clock import Anchors

    def plan_of(scans):
        paths = [s.path for s in scans]
        return sets.plan(paths, scans=scans, anchors=lambda groups: [Anchors().seal() for _ in groups])

    indexed = plan_of(_fleet(seed))
    assert 3 <= len(indexed) < 60  # files joined, and not all into one

    def every_pair(keyed, scans):
        files = [i for i, _keys in keyed]
        return {i: {j for j in files if j > i} for i in files}

    class EveryNamed(dict):
        def get(self, _address, default=None):
            return self.named

    def listing(named, scans):
        out = EveryNamed()
        out.named = list(named)
        return out

    monkeypatch.setattr(sets, "_near_pairs", every_pair)
    monkeypatch.setattr(sets, "_listing", listing)
    assert plan_of(_fleet(seed)) == indexed


def _chains(seed: int):
    """Scans of rotated captures taken at once on several brokers: each chain of files carries one
    connection from file to file; in each, the first file that names the cluster is somewhere (or
    nowhere), and later files name a broker every chain's later files name (which would join the chains,
    and which the planner must not take);
    the scans as `sets.scan` gives them, what `sets.identify` finds in each file, and each chain's files
    with the clusters it names."""
    import random

    from ksniff.engine.sets import FileScan

    rng = random.Random(seed)
    scans, found, chains = [], {}, []
    for c, length in enumerate(rng.sample(range(1, 14), 6)):
        naming = rng.choice([*range(length), None])
        chains.append(
            (tuple(f"broker{c}-{k:02d}.pcap" for k in range(length)), ("prod",) if naming is not None else ())
        )
        for k in range(length):
            path = f"broker{c}-{k:02d}.pcap"
            start = 1.8e9 + k * 60 + rng.uniform(-5, 5)
            scan = FileScan(path, first_ts=start, last_ts=start + 59)
            scan.directions = {
                (bytes([10, 0, 0, c]), 40000 + c, bytes([10, 1, 0, c]), 9092): [7, 0, 100 * k, 0, 2, None]
            }
            scan.servers = {f"10.1.0.{c}:9092"}
            scans.append(scan)
            if naming is not None and k == naming:
                found[path] = ({"prod": frozenset({(c, 9092)})}, {"prod": frozenset(scan.servers)})
            elif naming is not None and k > naming:  # brokers every chain's later files list
                found[path] = ({"prod": frozenset({(99, 9092)})}, {"prod": frozenset({"10.9.9.9:9092"})})
            else:
                found[path] = ({}, {})
    rng.shuffle(scans)
    return scans, found, chains


@pytest.mark.parametrize("seed", range(8))
def test_files_identified_elsewhere_in_rounds_give_the_sets_identified_here(seed: int) -> None:
    """The Spark engine asks its executors for the clusters the files' heads name, several files at a
    time (the first of each chain of rotated files, then the next two, four, ...): the sets, reasons and
    clusters are those of identifying them here one after the other, in a few rounds."""
    from ksniff.engine import sets
    from ksniff.engine.clock import Anchors

    def anchors(groups):
        return [Anchors().seal() for _ in groups]

    scans, found, chains = _chains(seed)
    for scan in scans:
        scan.named = found[scan.path]
    here = sets.plan([s.path for s in scans], scans=scans, anchors=anchors)
    # each chain a set of its own: the first naming file's broker is its own, and files named nothing
    # connect only to their own chain's broker
    assert sorted((tuple(sorted(c.paths)), c.cluster_ids) for c in here) == sorted(chains)

    scans, found, _chains_again = _chains(seed)
    rounds: list[list[str]] = []

    def identities(paths):
        rounds.append(paths)
        return [found[p] for p in paths]

    elsewhere = sets.plan([s.path for s in scans], scans=scans, anchors=anchors, identities=identities)
    assert elsewhere == here
    assert any(c.cluster_ids for c in here) and 1 <= len(rounds) <= 4  # 13 files at most: 1 + 2 + 4 + 8
    asked = [p for r in rounds for p in r]
    assert len(asked) == len(set(asked))
    assert sorted(rounds[0]) == sorted(f for f in found if f.endswith("-00.pcap"))


def _anchors(seed: int, groups: int):
    """Anchors of `groups` hosts' captures sharing some producers: each producer born at one host (when
    that was captured) and writing at others; a transactional one's partitions added at the first and
    written at the others."""
    import random

    from ksniff.engine.clock import Anchors

    rng = random.Random(seed)
    out = [Anchors() for _ in range(groups)]
    for pid in range(40):
        home, t = rng.randrange(groups), 1000.0 + pid
        if rng.random() < 0.5:  # else its InitProducerId came before the captures: its partitions link
            out[home].born[pid] = t
            out[home].boundaries.append((t, f"tx-{pid}", pid))
        transactional = rng.random() < 0.5
        for g in rng.sample(range(groups), rng.randrange(0, 3)):
            out[g].first_use[pid] = t + rng.uniform(-0.5, 2.0)
            if transactional:
                key = (pid, 0, "t", g)
                out[home].first_added[key] = t + 0.1
                out[g].first_write[key] = t + rng.uniform(-0.3, 1.0)
    return [a.seal() for a in out]


@pytest.mark.parametrize("seed", range(6))
def test_clock_alignment_bounds_only_the_pairs_that_share_a_producer(monkeypatch, seed: int) -> None:
    """Clock alignment bounds two hosts' clocks from events of one producer (or partition of one) seen
    by both: looking only at the pairs that share one gives the clocks that looking at every pair does."""
    from ksniff.engine import clock

    groups = [(f"host{g}.pcap",) for g in range(14)]
    indexed = clock.align(groups, _anchors(seed, 14))
    assert indexed is not None and sum(1 for c in indexed if c.pairs) >= 3  # something was aligned
    monkeypatch.setattr(
        clock, "_sharing", lambda anchors: [(i, j) for i in range(14) for j in range(i + 1, 14)]
    )
    assert clock.align(groups, _anchors(seed, 14)) == indexed


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
def test_a_set_of_more_files_than_the_process_may_open_at_once(tmp_path: Path) -> None:
    """A capture rotated into hundreds of files (a week of a broker's hourly files, in little) is one set
    audited by a process allowed 100 open files: each file is open only while the merge is inside it.
    The result is the whole capture's."""
    import resource
    import sys

    whole = str(PCAPS / "markers_tansu.pcap")
    parts = tmp_path / "parts"
    parts.mkdir()
    subprocess.run(["editcap", "-c", "3", whole, str(parts / "hour.pcap")], check=True, capture_output=True)
    assert len(list(parts.iterdir())) > 300

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    out = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "ksniff.cli", "audit", str(parts), "--json", str(out), "-q"],
        capture_output=True,
        text=True,
        preexec_fn=few_files,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(out.read_text())
    assert len(doc["capture_sets"]) == 1
    reference = audit_paths([whole], CONFIG).as_contract()
    for table in ("findings", "transactions", "producers"):
        got = Counter(json.dumps({**r, "capture_set": None}, sort_keys=True) for r in doc[table])
        expected = Counter(json.dumps({**r, "capture_set": None}, sort_keys=True) for r in reference[table])
        assert got == expected, table


def test_the_compiled_scan_finds_what_the_reference_finds(monkeypatch) -> None:
    """The planner's scan of a file (its time span, the TCP directions open at its edges with their
    samples of bytes and times, the servers connections were opened to) in C over the compiled walk's
    batches (`_fastwalk.scan_batch`) and in the Python reference (`scan_segments`), on every corpus
    capture and with the direction and server caps binding."""
    from compiled_walk import fastwalk

    from ksniff.capture import compiled, packets
    from ksniff.engine import sets

    walk = fastwalk()
    assert walk.TCP_FLAGS == (packets.FIN, packets.SYN, packets.RST, packets.ACK)
    assert walk.SAMPLING == (sets.SAMPLE_LEVEL, sets.SAMPLES, sets.SAMPLE_BYTES, sets.CLOSED_SAMPLES)

    def scanned(path: str, with_c: bool) -> tuple:
        monkeypatch.setattr(compiled, "fastwalk", walk if with_c else None)
        s = sets.scan(path)
        return (s.first_ts, s.last_ts, s.directions, s.directions_dropped, s.servers, s.closed)

    kept, levels = 0, set()
    for path in CORPUS:
        found = scanned(path, True)
        assert found == scanned(path, False), path
        kept += len(found[2])
        levels |= {r[4] for r in found[2].values() if r[5]}
        assert all(0 < len(r[5]) <= sets.CLOSED_SAMPLES * sets.SAMPLE_SIZE for r in found[5].values())
    assert kept  # some capture has connections open at its edges
    assert len(levels) > 1  # directions sampled at the first step and at coarser ones
    monkeypatch.setattr(sets, "MAX_DIRECTIONS", 3)
    monkeypatch.setattr(sets, "MAX_SERVERS", 1)
    monkeypatch.setattr(sets, "MAX_HELD", 2)
    capped = [scanned(path, True) for path in CORPUS]
    assert capped == [scanned(path, False) for path in CORPUS]
    assert any(c[3] for c in capped) and all(len(c[4]) <= 1 for c in capped)
    held = [r[5] for c in capped for r in c[2].values() if r[5]]
    assert held and all(len(h) <= sets.CLOSED_SAMPLES * sets.SAMPLE_SIZE for h in held)
