"""Engine benchmark: the same growing multi-capture set through the local engine, Spark on `local[*]`, and a
real Spark standalone cluster (master and workers started from pyspark's spark-class on loopback) with 1
and 2 workers.

The set at scale N is N copies of the corpus captures (tests/pcaps, classic pcap over Ethernet), copy k
of capture c with each IPv4 address rewritten to one of its own (10.c.k.n) and shifted k hours later,
so each copy's connections are its own; each file holds 16 consecutive copies of one capture (like
rotated files) and the files of different captures overlap in time, as from several capture points.

Per engine and scale: wall time, CPU seconds per captured MB (every process of the run: ksniff, the
driver JVM, the workers' executors and their Python workers, children reaped included), the bytes Spark
shuffled (its REST API), and the driver's peak memory (the Python process and the driver JVM). Each Spark
target keeps one session for all scales, as a long-lived cluster would; its start-up is printed apart.
Run by hand (the cluster targets need Java; every process started here is stopped at the end):

    python bench/bench_engines.py [--scales 16,64,256] [--targets local,local[*],cluster1,cluster2] [--check]
        [--conf KEY=VALUE ...]

`--check` also compares each Spark result with the local one (the JSON document without its version).
`--report` runs each audit as `ksniff audit` without --json does: the terminal report rendered (to
nowhere), Spark's driver receiving the digest of the findings and transactions (ksniff.audit.digest)
instead of every one; `--check` then compares the report's text. `--records` runs `ksniff audit --records
--parquet DIR` (implies `--report`): every table written, the records table with them, its decompression
budget drawn set after set; the Parquet files are removed after each run. `--shuffled` sends every
capture set of the Spark targets the shuffled way (segments to their flows' tasks, events to their
producer groups' tasks), as sets too large for one task go: what scaling out costs per MB.
`--captures A,B,...` runs the given captures instead of the corpus copies, once, as one run (its "copies"
column reads 0), e.g. the large ones `bench/gen_captures.py` records.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ksniff.capture.packets import header_sum  # noqa: E402
from ksniff.config import EngineConfig  # noqa: E402
from ksniff.engine.local import audit_paths  # noqa: E402

PCAPS = Path(__file__).resolve().parent.parent / "tests" / "pcaps"
_RECORD = struct.Struct("<IIII")


def corpus() -> list[bytes]:
    """The corpus captures this benchmark can rewrite: little-endian pcap, Ethernet."""
    out = []
    for path in sorted(PCAPS.glob("*.pcap")):
        data = path.read_bytes()
        if len(data) > 24 and data[:4] == b"\xd4\xc3\xb2\xa1" and struct.unpack_from("<I", data, 20)[0] == 1:
            out.append(data)
    return out


def rewrite(data: bytes, copy: int, shift: int = 0, capture: int = 0) -> bytes:
    """Capture number `capture`'s records with IPv4 addresses moved to copy `copy`'s own and timestamps
    `shift` seconds later; without the file header. Each distinct address of the capture gets one new
    address, 10.c.x.n (c = capture, x = copy % 256, n = 40 * (copy // 256) + its rank among the capture's
    addresses + 1), in both directions: a connection stays one connection (on loopback, where both ends
    have one address, both ends keep one), and no two captures or copies share an address. (Before, copy
    k of every capture had the same addresses: captures the planner joined as several hosts of one
    cluster then mixed unrelated connections on one address and port, inventing gaps and findings.)"""
    buf = bytearray(data)
    assert capture < 256 and copy < 256 * 6, (capture, copy)
    prefix = bytes((10, capture, copy & 255))
    base = 40 * (copy >> 8)
    frames = []
    pos = 24
    while pos + 16 <= len(buf):
        sec, frac, caplen, wire = _RECORD.unpack_from(buf, pos)
        _RECORD.pack_into(buf, pos, sec + shift, frac, caplen, wire)
        frame = pos + 16
        if caplen >= 34 and buf[frame + 12 : frame + 14] == b"\x08\x00":
            frames.append(frame)
        pos = frame + caplen
    seen = sorted({bytes(buf[f + at : f + at + 4]) for f in frames for at in (26, 30)})
    assert len(seen) < 40, len(seen)
    new = {address: prefix + bytes((base + n + 1,)) for n, address in enumerate(seen)}
    for frame in frames:
        for at in (26, 30):
            buf[frame + at : frame + at + 4] = new[bytes(buf[frame + at : frame + at + 4])]
        if buf[frame + 24 : frame + 26] != b"\0\0":  # the header checksum, made right again
            ihl = (buf[frame + 14] & 15) * 4
            buf[frame + 24 : frame + 26] = header_sum(buf, frame + 14, ihl).to_bytes(2, "big")
    return bytes(buf[24:])


def build(folder: Path, scale: int, captures: list[bytes], per_file: int) -> list[str]:
    """`scale` copies of each corpus capture; a file holds `per_file` copies one after the other in time
    (like a long capture rotated with tcpdump -C), and copies of different captures overlap in time."""
    paths = []
    for n, data in enumerate(captures):
        for first in range(0, scale, per_file):
            path = folder / f"s{scale}_{n:02d}_{first:05d}.pcap"
            with open(path, "wb") as f:
                f.write(data[:24])
                for copy in range(first, min(scale, first + per_file)):
                    f.write(rewrite(data, copy, shift=copy * 3600, capture=n))
            paths.append(str(path))
    return paths


def timed(fn, *args, **kw):
    start = time.perf_counter()
    result = fn(*args, **kw)
    return time.perf_counter() - start, result


def report_text(result) -> str:
    """The terminal report of `result`, as text, its engine's name left out."""
    import io

    from rich.console import Console

    from ksniff.report.terminal import render_report

    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    render_report(console, result)
    return console.export_text().replace(f"engine {result.engine}", "engine -")


def comparable(result) -> dict:
    doc = result.as_contract()
    doc.pop("version")
    doc.pop("engine", None)
    doc.pop("inputs", None)
    return doc


_TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree_cpu(roots: list[int]) -> tuple[float, float]:
    """CPU seconds of the processes under `roots` (theirs and their reaped children's): all of them, and
    the JVMs' (driver, master, workers, executors) among them."""
    kids, total, jvm, todo, seen = _children(), 0, 0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
            ticks = sum(int(x) for x in rest.split()[11:15])  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
        total += ticks
        if head.endswith("(java"):
            jvm += ticks
        todo.extend(kids.get(pid, []))
    return total / _TICK, jvm / _TICK


def driver_jvm_peak_mib() -> float | None:
    for pid in _children().get(os.getpid(), []):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"java" not in f.read().split(b"\0")[0]:
                    continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            continue
    return None


def shuffle_bytes(spark) -> int | None:
    """Bytes written to shuffles by every stage of the application so far (Spark's REST API on the
    driver's UI, asked on loopback); None when it does not answer."""
    from urllib.parse import urlsplit

    port = urlsplit(spark.sparkContext.uiWebUrl).port
    app = spark.sparkContext.applicationId
    url = f"http://127.0.0.1:{port}/api/v1/applications/{app}/stages?status=complete"
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return sum(s.get("shuffleWriteBytes", 0) for s in json.load(r))
    except OSError:
        return None


def start_target(target: str, extra: list[tuple[str, str]] = ()):
    """(session, cluster or None, process ids whose CPU counts) for a Spark target; `extra`: more Spark
    properties (`--conf`)."""
    from ksniff.engine.spark_session import Session

    conf = [
        ("spark.ui.enabled", "true"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.driver.host", "127.0.0.1"),
        ("spark.driver.bindAddress", "127.0.0.1"),
        ("spark.pyspark.python", sys.executable),
    ]
    cluster = None
    if target.startswith("cluster"):
        sys.path.insert(0, str(PCAPS.parent / "engine"))
        from spark_cluster import StandaloneCluster

        workers = int(target[len("cluster") :] or 1)
        cores = max(1, (os.cpu_count() or 2) // workers)
        cluster = StandaloneCluster(workers=workers, cores=cores, memory="2g").start()
        master = cluster.url
    else:
        master = target
    session = Session(master, conf=[*conf, *extra])
    session.start()
    roots = [os.getpid()] + ([p.pid for p in cluster.procs] if cluster else [])
    return session, cluster, roots


def run_target(
    target: str,
    folder: Path,
    scales: list[int],
    extra: list[tuple[str, str]] = (),
    report: bool = False,
    records: bool = False,
    shuffled: bool = False,
) -> None:
    """One target over every scale, in a process of its own (so the peaks are its own)."""
    import shutil

    if shuffled:
        from ksniff.engine import spark

        spark.EVERY_SET_SHUFFLED = True  # no set is audited where it is read

    from ksniff.engine.spark import audit_paths_spark, audit_spark
    from ksniff.report.stream import write_tables

    out = folder / "parquet"

    def local_report(paths, config):
        result = audit_paths(paths, config)
        if records:
            write_tables(result, parquet_dir=str(out))
            shutil.rmtree(out)
        return report_text(result)

    def spark_report(paths, config, spark):
        run = audit_spark(spark, paths, config)
        try:
            if records:
                run.write(parquet_dir=out.as_uri())
                shutil.rmtree(out)
            return report_text(run.summary)
        finally:
            run.close()

    config = EngineConfig(keep_tables=records, keep_records=records)
    session = cluster = None
    try:
        if target != "local":
            startup, (session, cluster, roots) = timed(start_target, target, extra)
            print(f"{target:>9} session start-up {startup:.1f} s", flush=True)
        for scale in scales:
            paths = sorted(str(p) for p in folder.glob(f"s{scale}_*.pcap"))
            size = sum(os.path.getsize(p) for p in paths) / 1e6
            if target == "local":
                cpu0 = time.process_time()
                how = local_report if report or records else audit_paths
                wall, result = timed(how, paths, config)
                cpu, shuffled, jvm, jvm_cpu = time.process_time() - cpu0, 0, None, 0.0
            else:
                (cpu0, jvm0), shuffled0 = tree_cpu(roots), shuffle_bytes(session.spark)
                how = spark_report if report or records else audit_paths_spark
                wall, result = timed(how, paths, config, spark=session.spark)
                cpu1, jvm1 = tree_cpu(roots)
                cpu, jvm_cpu = cpu1 - cpu0, jvm1 - jvm0
                after = shuffle_bytes(session.spark)
                shuffled = None if after is None or shuffled0 is None else after - shuffled0
                jvm = driver_jvm_peak_mib()
            py = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            kept = result if report or records else comparable(result)
            (folder / f"result_{target}_{scale}.json").write_text(json.dumps(kept, default=str))
            memory = f"{py:.0f}/{jvm:.0f}" if jvm else f"{py:.0f}/-"
            print(
                f"{target:>9} {scale:>6} {len(paths):>5} {size:>6.1f} {wall:>7.1f} {cpu / size:>8.4f} "
                f"{jvm_cpu / size:>8.4f} {'?' if shuffled is None else f'{shuffled / 1e6:.1f}':>10} "
                f"{memory:>19}",
                flush=True,
            )
    finally:
        if session is not None:
            session.stop()
        if cluster is not None:
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    import subprocess

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scales", default="16,64,256", help="copies of the corpus per run")
    parser.add_argument(
        "--targets",
        default="local,local[*],cluster1,cluster2",
        help="local, a Spark master (local[*], local[2]), cluster1 / cluster2 (standalone)",
    )
    parser.add_argument("--per-file", type=int, default=16, help="copies per capture file")
    parser.add_argument("--check", action="store_true", help="compare each Spark result with the local one")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark property")
    parser.add_argument("--report", action="store_true", help="the terminal report's run (see above)")
    parser.add_argument("--records", action="store_true", help="audit with --records")
    parser.add_argument("--shuffled", action="store_true", help="every set the shuffled way on Spark")
    parser.add_argument("--captures", help="capture files (comma-separated) instead of the corpus copies")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    scales = [0] if args.captures else [int(s) for s in args.scales.split(",")]
    extra = [tuple(c.split("=", 1)) for c in args.conf]
    if args.only:
        run_target(args.only, Path(args.dir), scales, extra, args.report, args.records, args.shuffled)
        return 0

    print(
        f"cpus {os.cpu_count()}; CPU: seconds per captured MB, all processes of the run (JVM: the JVMs' "
        "part of it); driver: peak MiB of ksniff's process / the driver JVM"
    )
    print(
        f"{'target':>9} {'copies':>6} {'files':>5} {'MB':>6} {'wall s':>7} {'CPU s/MB':>8} {'JVM s/MB':>8} "
        f"{'shuffle MB':>10} {'driver MiB (py/jvm)':>19}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="ksniff-bench-") as tmp:
        if args.captures:  # scale 0: the given files, linked under the names a scale's files have
            for n, path in enumerate(args.captures.split(",")):
                os.symlink(os.path.abspath(path), Path(tmp) / f"s0_{n:02d}_{Path(path).name}")
        else:
            captures = corpus()
            for scale in scales:
                build(Path(tmp), scale, captures, args.per_file)
        targets = args.targets.split(",")
        for target in targets:
            subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    *(a for c in args.conf for a in ("--conf", c)),
                    "--only",
                    target,
                    "--dir",
                    tmp,
                    "--scales",
                    ",".join(map(str, scales)),
                    *(["--report"] if args.report else []),
                    *(["--records"] if args.records else []),
                    *(["--shuffled"] if args.shuffled else []),
                ],
                check=False,
            )
        if args.check:
            for target in targets:
                for scale in scales:
                    mine = Path(tmp) / f"result_{target}_{scale}.json"
                    local = Path(tmp) / f"result_local_{scale}.json"
                    if target != "local" and mine.exists() and local.exists():
                        same = json.loads(mine.read_text()) == json.loads(local.read_text())
                        print(f"{target:>9} {scale:>6} same result as local: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
