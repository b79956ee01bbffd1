"""What capture sets cost: the identification pass (ksniff.engine.sets.plan) against the audit itself.

    python bench/bench_sets.py CAPTURE [--parts 8] [--repeat 3]
    python bench/bench_sets.py --fleet 10x24,20x48,40x48,80x168 [--repeat 3]

Cuts CAPTURE into PARTS rotated files with editcap (as tcpdump -C would), then times, median of REPEAT:
the whole capture audited alone (one input: no identification pass), the identification pass over the
parts, and the audit of the parts (pass included). Prints seconds and the pass's share.

`--fleet BxH,...`: the planner's own work (ksniff.engine.sets.plan, given each file's scan, as the Spark
engine's driver is) for the hourly files of B brokers of one cluster over H hours, each file naming the
cluster and its B brokers and overlapping the next hour's: every file joins one set of B clock groups
per hour. Nothing is read; this is what grows with the number of files.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ksniff.engine.clock import Anchors  # noqa: E402
from ksniff.engine.local import EngineConfig, audit_paths  # noqa: E402
from ksniff.engine.sets import FileScan, plan  # noqa: E402

CONFIG = EngineConfig(keep_tables=False)


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def fleet_scans(brokers: int, hours: int) -> list[FileScan]:
    """The scans of a fleet's hourly files, as `sets.scan` gives them, with the cluster each names."""
    addresses = frozenset(f"10.{b >> 8}.{b & 255}.1:9092" for b in range(brokers))
    named = ({"prod": frozenset((b, 9092) for b in range(brokers))}, {"prod": addresses})
    out = []
    for h in range(hours):
        for b in range(brokers):
            start = 1.8e9 + h * 3600
            scan = FileScan(f"broker{b}-{h:04d}.pcap", first_ts=start, last_ts=start + 3599.9)
            scan.servers = {f"10.{b >> 8}.{b & 255}.1:9092"}
            scan.named = named
            out.append(scan)
    return out


def fleet(shapes: str, repeat: int) -> None:
    for shape in shapes.split(","):
        brokers, hours = (int(x) for x in shape.split("x"))
        scans = fleet_scans(brokers, hours)
        seconds, sets = timed(
            lambda s=scans: plan(
                [x.path for x in s], scans=s, anchors=lambda groups: [Anchors().seal() for _ in groups]
            ),
            repeat,
        )
        files = f"{brokers} brokers x {hours} hours = {len(scans):,} files"
        print(f"{files}: planned in {seconds:.2f} s, {len(sets)} set(s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fleet", help="BROKERSxHOURS,...: the planner alone over a fleet's files")
    args = parser.parse_args()
    if args.fleet:
        fleet(args.fleet, args.repeat)
        return
    if not args.capture:
        parser.error("a capture, or --fleet")
    whole = args.capture
    t_whole, result = timed(lambda: audit_paths([whole], CONFIG), args.repeat)
    packets = result.capture.packets
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            ["editcap", "-c", str(packets // args.parts + 1), whole, f"{tmp}/part.pcap"],
            check=True,
            capture_output=True,
        )
        parts = sorted(str(p) for p in Path(tmp).iterdir())
        t_plan, sets = timed(lambda: plan(parts), args.repeat)
        t_parts, split = timed(lambda: audit_paths(parts, CONFIG), args.repeat)
    size = Path(whole).stat().st_size / 1e6
    print(
        f"capture {Path(whole).name}: {size:.1f} MB, {packets:,} packets, {len(parts)} parts -> "
        f"{len(sets)} capture set(s)"
    )
    print(f"whole, one input (no identification pass): {t_whole:.2f} s")
    print(f"identification pass over the parts:         {t_plan:.2f} s")
    print(
        f"parts audited (pass included):              {t_parts:.2f} s "
        f"(pass {100 * t_plan / t_parts:.0f}% of it)"
    )
    same = (len(split.findings), len(split.transactions)) == (len(result.findings), len(result.transactions))
    print(f"same findings and transactions as the whole: {same}")


if __name__ == "__main__":
    main()
