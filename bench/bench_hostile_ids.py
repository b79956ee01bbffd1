"""Rendering cost of attacker-sized identifiers: `ksniff audit` (and `-q`, `-P`) over captures whose
transactional id and topic are 1, 2 and 4 MiB of escape sequences and text, the client id 30 kB (issue
18 item 6: ids of these sizes took 13.5, 81 and 667 s when rendered whole).

    python bench/bench_hostile_ids.py [--sizes 1,2,4] [--repeat 3]

Prints, per size and mode, the median wall time of the whole command and its ratio to the smallest size.
The captures are real Kafka frames (tests/report/hostile.py), written to a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.report.hostile import NASTY, hostile_capture  # noqa: E402


def run(capture: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ksniff.cli",
            "audit",
            str(capture),
            "--txn-timeout",
            "1",
            "--exit-zero",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        env={"PYTHONPATH": str(REPO), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,2,4", help="id sizes in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        captures = {}
        for mib in sizes:
            filler = "x" * (mib << 20)
            path = Path(folder) / f"{mib}.pcap"
            # The client id sits in the request header, a 16-bit-length string: at most 32 KiB.
            captures[mib] = hostile_capture(
                path, NASTY + filler, "t" + NASTY + filler, "c" + NASTY + filler[:30_000]
            )
        print(f"{'id size':>8} {'mode':>10} {'median s':>9} {'vs smallest':>12}")
        for mode, extra in (("report", ()), ("-q", ("-q",)), ("-P 1000", ("-P", "1000"))):
            base = None
            for mib in sizes:
                median = statistics.median(run(captures[mib], *extra) for _ in range(args.repeat))
                base = base or median
                print(f"{mib:>6} MiB {mode:>10} {median:>9.2f} {median / base:>11.2f}x")


if __name__ == "__main__":
    main()
