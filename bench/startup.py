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

    python bench/startup.py [--repeat 9] [--capture bench/out/bulk.pcap] [--callgrind] [--tree DIR]...

With several `--tree`, each command runs in each checkout in turn (before and after a change).
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
    ap.add_argument(
        "--tree", type=Path, action="append", help="a checkout whose ksniff is measured (repeat: alternating)"
    )
    ap.add_argument("--top", type=int, default=20, help="modules listed by own import time")
    args = ap.parse_args()
    trees = [t.resolve() for t in args.tree or [ROOT]]
    py = sys.executable
    for tree in trees:  # bytecode compiled first, or runs would count compiling (PYTHONDONTWRITEBYTECODE)
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
        # One run of each first, that may write bytecode: a user's ksniff that has run once has kept the
        # code it generates (ksniff.common.codegen, beside its modules' bytecode).
        written = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for tree in trees:
            for cmd in commands.values():
                subprocess.run(cmd, cwd=tree, env=dict(written, PYTHONPATH=str(tree)), capture_output=True)
        times = collections.defaultdict(list)  # (tree, command): CPU seconds
        own = {tree: collections.defaultdict(list) for tree in trees}
        loads = []
        for _ in range(args.repeat):
            for label, cmd in commands.items():
                for tree in trees:
                    times[tree, label].append(cpu(cmd, tree))
            for tree in trees:
                for module, us in import_times(commands["empty audit"], tree).items():
                    own[tree][module].append(us)
            loads.append(os.getloadavg()[0])
        counts = {}
        if args.callgrind:
            for label in ("interpreter", "imports (import ksniff.cli)", "empty audit"):
                for tree in trees:
                    counts[tree, label] = instructions(commands[label], tree, tmp)
    print(
        f"CPU seconds (user + system), median of {args.repeat}, alternating; "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    for label in commands:
        for tree in trees:
            values = times[tree, label]
            count = f"  {counts[tree, label] / 1e6:8,.0f} M instructions" if (tree, label) in counts else ""
            where = f"  {tree.name}" if len(trees) > 1 else ""
            print(f"  {label:<32} {statistics.median(values):6.3f}  (min {min(values):.3f}){count}{where}")
    for tree in trees:
        print_imports(own[tree], args.top, tree.name if len(trees) > 1 else "")


def print_imports(own: dict[str, list[int]], top: int, tree: str) -> None:
    total = sum(statistics.median(v) for v in own.values()) / 1000
    where = f" ({tree})" if tree else ""
    print(f"\nimports, empty audit{where}: {len(own)} modules, {total:.0f} ms own import time (medians)")
    print("  by package (ksniff by room):")
    by_package = collections.Counter()
    for module, values in own.items():
        first = module.split(".")[0]
        key = ".".join(module.split(".")[:2]) if first == "ksniff" else first
        by_package[key] += statistics.median(values)
    for key, us in by_package.most_common(top):
        print(f"    {key:<36} {us / 1000:6.1f} ms")
    print("  modules, own time:")
    ranked = sorted(own.items(), key=lambda kv: -statistics.median(kv[1]))
    for module, values in ranked[:top]:
        print(f"    {module:<36} {statistics.median(values) / 1000:6.1f} ms")


if __name__ == "__main__":
    main()
