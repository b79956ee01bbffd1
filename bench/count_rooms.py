"""Instructions per room of an audit, counted by valgrind (callgrind): the same on a loaded machine.

Wall and CPU times on the shared 2-core machine move by 10-30% between runs; instruction counts do not
(they leave out cache misses and the kernel, so they are a guide to the Python work, not a time). Each
stage runs in its own process under `valgrind --tool=callgrind`, and a room is the difference between
two stages:

    start-up   the interpreter and the imports of the stages below
    capture    + reading the capture: pcap walk, reassembly, stream chunks (all events into a list)
    decode     + the decoder over those events (frames, headers, bodies, exchanges)
    fold       + the audit fold over the decoded events in time order
    whole      ksniff audit FILE --json OUT -q, as a user runs it; less `ksniff --help` and the three
               rooms above, the rest: the engine's loop and reordering, the result, the report

    python bench/count_rooms.py bench/out/txn.pcap --packets 20000   # valgrind runs ~50x slower

`--packets N` cuts the capture to its first N packets first (editcap), so a run takes about a minute.
With `--tree DIR` the ksniff of another checkout is counted (e.g. a worktree of an earlier commit).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One stage of the audit, run in-process up to `upto` (capture | decode | fold).
STAGE = """
import sys
from ksniff.audit import Auditor
from ksniff.capture import read_files
from ksniff.config import EngineConfig
from ksniff.engine.local import PIECES_FROM, event_ts, fewer_collections

path, upto = sys.argv[1], sys.argv[2]
config = EngineConfig(keep_tables=False)
if upto == "start":
    sys.exit()
with fewer_collections():
    run = read_files([path])
    run.reassembler.hand_pieces(PIECES_FROM)  # as the engine does
    events = list(run)
    if upto != "capture":
        decoder = config.decoder(run.drop, run.drop)
        decoded = []
        for event in events:
            decoded.extend(decoder.feed(event))
        decoded.extend(decoder.finish())
        if upto == "fold":
            decoded.sort(key=event_ts)
            auditor = Auditor(config.audit_config())
            for event in decoded:
                auditor.feed(event)
            auditor.finish(None)
"""


def instructions(args: list[str], tree: Path, tmp: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp / 'callgrind.out'}", *args]
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        sys.exit(f"valgrind gave no count for {' '.join(args)}:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def packets_in(capture: Path) -> int:
    if shutil.which("capinfos") is None:
        return 0
    done = subprocess.run(["capinfos", "-M", "-c", str(capture)], capture_output=True, text=True, check=False)
    found = re.search(r"Number of packets:\s*(\d+)", done.stdout)
    return int(found.group(1)) if found else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--packets", type=int, help="count only the capture's first N packets (editcap)")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose ksniff is counted")
    args = ap.parse_args()
    for tool in ("valgrind", *(["editcap"] if args.packets else [])):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found")
    tree = args.tree.resolve()
    py = sys.executable
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        capture = args.capture.resolve()
        if args.packets:
            cut = tmp / f"first{args.packets}.pcap"
            subprocess.run(["editcap", "-r", str(capture), str(cut), f"1-{args.packets}"], check=True)
            capture = cut
        # Bytecode compiled first: otherwise the first stage would count compiling every module.
        subprocess.run([py, "-m", "compileall", "-q", "ksniff"], cwd=tree, check=True, capture_output=True)
        stage = tmp / "stage.py"
        stage.write_text(STAGE)
        counts = {"help": instructions([py, "-m", "ksniff.cli", "--help"], tree, tmp)}
        for upto in ("start", "capture", "decode", "fold"):
            counts[upto] = instructions([py, str(stage), str(capture), upto], tree, tmp)
        out = tmp / "out.json"
        whole = [py, "-m", "ksniff.cli", "audit", str(capture), "--json", str(out), "-q"]
        counts["whole"] = instructions(whole, tree, tmp)
        packets = packets_in(capture)
    rooms = {
        "start-up": counts["start"],
        "capture": counts["capture"] - counts["start"],
        "decode": counts["decode"] - counts["capture"],
        "fold": counts["fold"] - counts["decode"],
    }
    rooms["rest (engine, result, report)"] = (
        counts["whole"] - counts["help"] - sum(n for room, n in rooms.items() if room != "start-up")
    )
    print(f"{capture.name}: instructions (millions) per room{f', {packets:,} packets' if packets else ''}")
    for room, n in rooms.items():
        per = f"  {n / packets / 1000:8.1f} k per packet" if packets and room != "start-up" else ""
        print(f"  {room:<30} {n / 1e6:10,.0f}{per}")
    print(f"  {'whole audit (ksniff audit)':<30} {counts['whole'] / 1e6:10,.0f}")


if __name__ == "__main__":
    main()
