"""Rebuild the capture corpus: real clients against real brokers, captured with tcpdump.

    python tests/pcaps/generate.py [SCENARIO...]   record the named scenarios (all by default)
    python tests/pcaps/generate.py --list          list the scenarios
    python tests/pcaps/generate.py --out DIR ...   write somewhere else than tests/pcaps

Needs root (tcpdump, network namespaces), tcpdump, tshark and editcap. Each scenario writes
NAME.pcap (or .pcapng) and NAME.expect.json; tests/pcaps/README.md describes them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scen_anomalies  # noqa: E402,F401  (registers scenarios)
import scen_bulk  # noqa: E402,F401
import scen_consume  # noqa: E402,F401
import scen_ctp  # noqa: E402,F401
import scen_formats  # noqa: E402,F401
import scen_hanging  # noqa: E402,F401
import scen_java  # noqa: E402,F401
import scen_kafkajs  # noqa: E402,F401
import scen_misuse  # noqa: E402,F401
import scen_outcomes  # noqa: E402,F401
import scen_positions  # noqa: E402,F401
import scen_sarama  # noqa: E402,F401
import scen_torn  # noqa: E402,F401
import scen_txn  # noqa: E402,F401
from harness import log, require_capture_tools  # noqa: E402
from registry import SCENARIOS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument(
        "--out", type=Path, default=HERE, help="folder for the captures (default: tests/pcaps)"
    )
    args = parser.parse_args(argv)

    if args.list:
        for s in SCENARIOS.values():
            print(f"{s.name:32} {s.summary}")
        return 0
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)} (see --list)")
    require_capture_tools()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.scenarios or list(SCENARIOS):
        started = time.monotonic()
        log(f"== {name}")
        for attempt in (1, 2):  # a second go for the rare capture that missed a segment
            try:
                SCENARIOS[name].record(args.out)
                break
            except Exception as exc:  # report every scenario, then fail
                log(f"!! {name} failed (attempt {attempt}): {type(exc).__name__}: {exc}")
        else:
            failed.append(name)
        log(f"== {name} done in {time.monotonic() - started:.1f}s")
    if failed:
        log(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
