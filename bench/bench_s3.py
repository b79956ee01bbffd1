"""Captures in an S3 bucket through the Spark engine: the tasks copying each object to their disk
(ksniff.engine.objectstore), against the same files read by Spark's binaryFile source (a Hadoop view
file system over the folder, as hdfs:// or an s3a:// with the hadoop-aws jars would be read) and
opened by the tasks as local paths.

The bucket is moto's S3 server on loopback, in a process of its own (its CPU is shown apart: a real S3
endpoint is another machine). Each way runs `--repeat` times, alternating, in one Spark session
(`--master`, default local[2]; `--driver-memory`, default 4g: the binaryFile way needs it); each run is
`ksniff audit` without --json (the audit and the report's text, which must be the same every way),
after one round that warms the session up. CPU counts ksniff's process and its children (the driver
JVM, the executors' Python workers), moto's excluded.

    pip install 'moto[server]'    # in the test extras
    python bench/bench_s3.py [--captures bulk] [--repeat 3] [--master local[2]] [--ways path,binaryFile,s3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_engines import driver_jvm_peak_mib, report_text, tree_cpu  # noqa: E402

BUCKET = "bench"
KEYS = {
    "access.key": "ksniff-bench",
    "secret.key": "not-a-secret",
    "endpoint.region": "us-east-1",
    "path.style.access": "true",  # the bucket in the path: no host name per bucket on loopback
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("moto's S3 server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captures", default="bulk", help="comma-separated, from bench/out (gen_captures.py)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--ways", default="path,binaryFile,s3", help="comma-separated: path, binaryFile, s3")
    ap.add_argument(
        "--driver-memory", default="4g", help="the binaryFile way holds each capture whole, several times"
    )
    args = ap.parse_args()
    files = [HERE / "out" / f"{name}.pcap" for name in args.captures.split(",")]
    for f in files:
        if not f.exists():
            sys.exit(f"{f} not found: python bench/gen_captures.py --out bench/out {f.stem}")

    from pyarrow import fs

    from ksniff.config import EngineConfig
    from ksniff.engine.spark import audit_spark
    from ksniff.engine.spark_session import Session

    port = free_port()
    moto = start_moto(port)
    work = Path(tempfile.mkdtemp(prefix="ksniff-bench-s3-"))
    session = None
    try:
        folder = work / "caps"
        folder.mkdir()
        for f in files:
            os.symlink(f, folder / f.name)
        s3 = fs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{port}",
            scheme="http",
            region="us-east-1",
            access_key=KEYS["access.key"],
            secret_key=KEYS["secret.key"],
            allow_bucket_creation=True,
        )
        s3.create_dir(BUCKET)
        for f in files:
            with s3.open_output_stream(f"{BUCKET}/caps/{f.name}") as out, open(f, "rb") as src:
                shutil.copyfileobj(src, out, 8 << 20)
        size = sum(f.stat().st_size for f in files) / 1e6
        conf = [
            ("spark.ui.showConsoleProgress", "false"),
            ("spark.pyspark.python", sys.executable),
            ("spark.driver.memory", args.driver_memory),
            ("spark.hadoop.fs.s3a.endpoint", f"http://127.0.0.1:{port}"),
            *((f"spark.hadoop.fs.s3a.{k}", v) for k, v in KEYS.items()),
            ("spark.hadoop.fs.viewfs.mounttable.bench.link./caps", folder.as_uri()),
        ]
        session = Session(args.master, conf=conf)
        session.start()
        every = {"path": str(folder), "binaryFile": "viewfs://bench/caps", "s3": f"s3a://{BUCKET}/caps"}
        ways = {way: every[way] for way in args.ways.split(",")}
        config = EngineConfig()
        got: dict[str, list[tuple[float, float, float, float]]] = {way: [] for way in ways}
        texts: dict[str, str] = {}
        for n in range(args.repeat + 1):  # the first round warms the session up, not counted
            for way, uri in ways.items():
                (cpu0, jvm0), moto0 = tree_cpu([os.getpid()]), tree_cpu([moto.pid])[0]
                t0 = time.perf_counter()
                run = audit_spark(session.spark, [uri], config)
                try:
                    text = report_text(run.summary)
                finally:
                    run.close()
                wall = time.perf_counter() - t0
                (cpu1, jvm1), moto1 = tree_cpu([os.getpid()]), tree_cpu([moto.pid])[0]
                if n:
                    got[way].append((wall, cpu1 - cpu0 - (moto1 - moto0), jvm1 - jvm0, moto1 - moto0))
                # The input's name, and the report's padding after it, differ by way.
                texts.setdefault(
                    way, "\n".join(line.rstrip() for line in text.replace(uri, "INPUT").splitlines())
                )
        same = len(set(texts.values())) == 1
        print(
            f"{len(files)} file(s), {size:.1f} MB, {args.master}, driver memory {args.driver_memory},"
            f" median of {args.repeat}"
            f" (load {os.getloadavg()[0]:.1f})"
        )
        print(f"{'way':<18} {'wall s':>7} {'CPU s':>7} {'JVM s':>7} {'CPU s/MB':>9} {'S3 server s':>12}")
        for way, runs in got.items():
            wall, cpu, jvm, server = (statistics.median(r[i] for r in runs) for i in range(4))
            print(f"{way:<18} {wall:>7.2f} {cpu:>7.2f} {jvm:>7.2f} {cpu / size:>9.4f} {server:>12.2f}")
        peak = driver_jvm_peak_mib()
        print(f"driver JVM peak {peak:.0f} MiB" if peak else "driver JVM peak: -")
        print("reports: the same every way" if same else "reports DIFFER between the ways")
        if not same:
            import difflib

            base = next(iter(texts.values()))
            for way, text in texts.items():
                sys.stdout.writelines(
                    difflib.unified_diff(base.splitlines(True), text.splitlines(True), "path", way, n=0)
                )
            sys.exit(1)
    finally:
        if session is not None:
            session.stop()
        moto.kill()
        moto.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
