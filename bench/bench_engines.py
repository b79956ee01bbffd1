"""Engine benchmark: the same multi-capture set through the in-process and the Spark engine, growing.

The set at scale N is N copies of the corpus captures (tests/pcaps, classic pcap over Ethernet), copy k
with every IPv4 address rewritten to 10.x.y.1 / 10.x.y.2 (x.y = k) and shifted k hours later, so each
copy's connections are its own; each file holds 16 consecutive copies of one capture (like rotated files)
and the files of different captures overlap in time, as from several capture points. Prints wall
times per engine and scale, and the first scale where Spark wins (the crossover). Run by hand:

    python bench/bench_engines.py [--scales 1,8,32,128] [--master local[*]] [--check]

`--check` also compares the two results (the JSON document without its version).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

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


def rewrite(data: bytes, copy: int, shift: int = 0) -> bytes:
    """The capture's records with IPv4 addresses moved to copy `copy`'s own (lower address .1, the other
    .2) and timestamps `shift` seconds later; without the file header."""
    buf = bytearray(data)
    prefix = bytes((10, (copy >> 8) & 255, copy & 255))
    pos = 24
    while pos + 16 <= len(buf):
        sec, frac, caplen, wire = _RECORD.unpack_from(buf, pos)
        _RECORD.pack_into(buf, pos, sec + shift, frac, caplen, wire)
        frame = pos + 16
        if caplen >= 34 and buf[frame + 12:frame + 14] == b"\x08\x00":
            src, dst = bytes(buf[frame + 26:frame + 30]), bytes(buf[frame + 30:frame + 34])
            low = min(src, dst)
            buf[frame + 26:frame + 30] = prefix + (b"\x01" if src == low else b"\x02")
            buf[frame + 30:frame + 34] = prefix + (b"\x01" if dst == low and src != dst else b"\x02")
        pos = frame + caplen
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
                    f.write(rewrite(data, copy, shift=copy * 3600))
            paths.append(str(path))
    return paths


def timed(fn, *args, **kw):
    start = time.perf_counter()
    result = fn(*args, **kw)
    return time.perf_counter() - start, result


def comparable(result) -> dict:
    doc = result.as_contract()
    doc.pop("version")
    doc.pop("engine", None)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="16,64,256,1024", help="copies of the corpus per run")
    parser.add_argument("--master", default="local[*]", help="Spark master")
    parser.add_argument("--per-file", type=int, default=16, help="copies per capture file")
    parser.add_argument("--check", action="store_true", help="compare the two engines' results")
    args = parser.parse_args(argv)

    from ksniff.engine.spark import audit_paths_spark
    from ksniff.engine.spark_session import Session

    captures = corpus()
    config = EngineConfig()
    # One session for every run, as a long-lived cluster would be; its start-up is reported apart.
    session = Session(args.master, shuffle=max(2, os.cpu_count() or 2))
    startup, spark = timed(session.start)
    print(f"cpus {os.cpu_count()}, master {args.master}, Spark session start-up {startup:.1f} s")
    print(f"{'copies':>6} {'files':>6} {'MB':>7} {'packets':>9} {'local s':>8} {'spark s':>8}  same")
    crossover = None
    try:
        with tempfile.TemporaryDirectory(prefix="ksniff-bench-") as tmp:
            for scale in (int(s) for s in args.scales.split(",")):
                paths = build(Path(tmp), scale, captures, args.per_file)
                size = sum(os.path.getsize(p) for p in paths) / 1e6
                t_local, local = timed(audit_paths, paths, config)
                t_spark, distributed = timed(audit_paths_spark, paths, config, master=args.master,
                                             spark=spark)
                same = "yes" if not args.check else ("yes" if comparable(local) == comparable(distributed)
                                                      else "NO")
                print(f"{scale:>6} {len(paths):>6} {size:>7.1f} {local.capture.packets:>9,} {t_local:>8.1f} "
                      f"{t_spark:>8.1f}  {same if args.check else '-'}", flush=True)
                if crossover is None and t_spark < t_local:
                    crossover = (scale, size, local.capture.packets)
                for p in paths:
                    os.remove(p)
    finally:
        session.stop()
    if crossover:
        print(f"crossover: Spark is faster from {crossover[0]} copies ({crossover[1]:.1f} MB, "
              f"{crossover[2]:,} packets)")
    else:
        print("crossover: not reached at these sizes; the in-process engine is faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
