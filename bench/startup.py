"""Start-up: the fixed cost every `ksniff audit` pays before its first packet, apart from the work.

Alternating, N repetitions, the median CPU time (user + system) of each child:

    interpreter   python -c pass (the interpreter, site, the installed packages' .pth files)
    imports       python -c "import ksniff.cli" (what every command line loads)
    empty audit   ksniff audit EMPTY --json OUT --quiet, EMPTY a pcap file with no packet: the whole fixed
                  cost of a run (imports, options, engine and decoder set-up, the report of nothing)
    audit         ksniff audit CAPTURE --json OUT --quiet, for each capture named

then the modules whose own import time is largest in that empty audit (`python -X importtime`, median
per module over the repetitions). With `--callgrind` the first three are also counted in instructions
(valgrind), which the machine's load does not move.

    python bench/startup.py [--repeat 9] [--capture bench/out/bulk.pcap] [--callgrind] [--tree DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMPTY_PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)  # header only, Ethernet


def cpu(cmd: list[str], tree: Path) -> float:
    """User + system CPU seconds of one child."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed: {err.strip()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def import_times(cmd: list[str], tree: Path) -> dict[str, int]:
    """Each module's own import time in microseconds, from `python -X importtime`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    own = {}
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|( *)(\S+)", line)
        if found:
            own[found.group(3)] = int(found.group(1))
    return own


def instructions(cmd: list[str], tree: Path, tmp: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = f"--callgrind-out-file={tmp / 'callgrind.out'}"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", out, *cmd], cwd=tree, env=env, capture_output=True, text=True
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        sys.exit(f"valgrind gave no count for {' '.join(cmd)}:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--capture", type=Path, action="append", default=[], help="also time a whole audit of it")
    ap.add_argument("--callgrind", action="store_true", help="count instructions too (valgrind)")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose ksniff is measured")
    ap.add_argument("--top", type=int, default=20, help="modules listed by own import time")
    args = ap.parse_args()
    tree = args.tree.resolve()
    py = sys.executable
    # Bytecode compiled first, or every run would count compiling every module (PYTHONDONTWRITEBYTECODE).
    subprocess.run([py, "-m", "compileall", "-q", "ksniff"], cwd=tree, check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        empty = tmp / "empty.pcap"
        empty.write_bytes(EMPTY_PCAP)
        out = str(tmp / "out.json")

        def audit(capture: Path) -> list[str]:
            return [py, "-m", "ksniff.cli", "audit", str(capture.resolve()), "--json", out, "--quiet"]

        commands = {
            "interpreter": [py, "-c", "pass"],
            "imports (import ksniff.cli)": [py, "-c", "import ksniff.cli"],
            "empty audit": audit(empty),
        }
        for capture in args.capture:
            commands[f"audit {capture.name}"] = audit(capture)
        times = collections.defaultdict(list)
        own = collections.defaultdict(list)
        for _ in range(args.repeat):
            for label, cmd in commands.items():
                times[label].append(cpu(cmd, tree))
            for module, us in import_times(commands["empty audit"], tree).items():
                own[module].append(us)
        counts = {}
        if args.callgrind:
            for label in ("interpreter", "imports (import ksniff.cli)", "empty audit"):
                counts[label] = instructions(commands[label], tree, tmp)
    load = os.getloadavg()[0]
    print(f"CPU seconds (user + system), median of {args.repeat}, alternating; load average {load:.1f}")
    for label, values in times.items():
        count = f"  {counts[label] / 1e6:8,.0f} M instructions" if label in counts else ""
        print(f"  {label:<32} {statistics.median(values):6.3f}  (min {min(values):.3f}){count}")
    total = sum(statistics.median(v) for v in own.values()) / 1000
    print(f"\nimports of the empty audit: {len(own)} modules, {total:.0f} ms of own import time (medians)")
    by_package = collections.Counter()
    for module, values in own.items():
        top = module.split(".")[0]
        key = ".".join(module.split(".")[:2]) if top == "ksniff" else top
        by_package[key] += statistics.median(values)
    print("  by package (ksniff by room):")
    for key, us in by_package.most_common(args.top):
        print(f"    {key:<36} {us / 1000:6.1f} ms")
    print("  modules, own time:")
    ranked = sorted(own.items(), key=lambda kv: -statistics.median(kv[1]))
    for module, values in ranked[: args.top]:
        print(f"    {module:<36} {statistics.median(values) / 1000:6.1f} ms")


if __name__ == "__main__":
    main()
