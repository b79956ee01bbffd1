"""What capture sets cost: the identification pass (ksniff.engine.sets.plan) against the audit itself.

    python bench/bench_sets.py CAPTURE [--parts 8] [--repeat 3]

Cuts CAPTURE into PARTS rotated files with editcap (as tcpdump -C would), then times, median of REPEAT:
the whole capture audited alone (one input: no identification pass), the identification pass over the
parts, and the audit of the parts (pass included). Prints seconds and the pass's share.
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

from ksniff.engine.local import EngineConfig, audit_paths  # noqa: E402
from ksniff.engine.sets import plan  # noqa: E402

CONFIG = EngineConfig(keep_tables=False)


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
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
