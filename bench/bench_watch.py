"""What looking at other ports costs with --port: capture + decode of a capture whose Kafka is all on a
port the run was not told, with the watch (the first bytes of each such connection looked at, their bytes
counted) and without it (each connection dropped at its opening, as before), and the same capture read
on its own port for scale.

    python bench/bench_watch.py [--path CAPTURE] [--kafka-port 9092] [--other-port 9093] [--repeat 3]

Default capture: bench/out/bulk.pcap (bench/gen_captures.py bulk). Prints seconds per run (best of
--repeat) and what the watch counted (ports, connections, bytes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ksniff.capture import read_files
from ksniff.decode import Decoder

BENCH = Path(__file__).resolve().parent


def decode(path: str, ports: tuple[int, ...], watch: bool) -> tuple[float, dict]:
    start = time.perf_counter()
    run = read_files([path])
    decoder = Decoder(
        ports=ports, auto_detect=False, on_not_kafka=run.drop, on_elsewhere=run.drop, watch_elsewhere=watch
    )
    for event in run:
        decoder.feed(event)
    decoder.finish()
    seconds = time.perf_counter() - start
    seen = {
        port: (c.connections, c.bytes + run.stats.kafka_elsewhere_bytes.get(port, 0))
        for port, c in decoder.stats.kafka_elsewhere.items()
    }
    return seconds, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=str(BENCH / "out" / "bulk.pcap"))
    parser.add_argument("--kafka-port", type=int, default=9092)
    parser.add_argument("--other-port", type=int, default=9093, help="the port named instead (no Kafka)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not os.path.exists(args.path):
        sys.exit(f"{args.path}: missing (python bench/gen_captures.py bulk)")
    size_mb = os.path.getsize(args.path) / 1e6
    runs = {
        "-p other, watch off (before)": ((args.other_port,), False),
        "-p other, watch on": ((args.other_port,), True),
        "-p kafka port (decoded)": ((args.kafka_port,), True),
    }
    best: dict[str, float] = {}
    seen: dict[str, dict] = {}
    for _ in range(args.repeat):  # alternate so cache and frequency effects hit all alike
        for name, (ports, watch) in runs.items():
            t, counted = decode(args.path, ports, watch)
            best[name] = min(best.get(name, t), t)
            seen[name] = counted
    print(f"{args.path}: {size_mb:,.0f} MB, best of {args.repeat}")
    for name in runs:
        print(
            f"  {name:32} {best[name]:7.2f} s  {size_mb / best[name]:7.1f} MB/s  kafka_elsewhere {seen[name]}"
        )
    off, on = best["-p other, watch off (before)"], best["-p other, watch on"]
    print(f"  watch overhead: {on - off:+.2f} s ({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main()
