"""Where an audit's time goes, per room: a sampling profile (py-spy) of `ksniff audit FILE --json OUT`,
each sample given to the room of its innermost ksniff frame.

Rooms: start-up (imports, generating the decoders), capture walk (pcap/pcapng records, link/IP/TCP
headers), reassembly, frame split, body decode (headers, generated decoders, record batches), engine
(reordering, the pipeline's own loop), audit fold, report (JSON and the text report), other.

    pip install py-spy    # not a dependency of ksniff: a tool for this script only
    python bench/profile_rooms.py bench/out/txn.pcap [--rate 1000] [--repeat 3]

Prints the share of samples per room (median over the repetitions). Set KSNIFF_PURE_PYTHON=1 to profile
the pure-Python capture walk. Times are bench_audit.py's: py-spy's sampling slows the child down.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (room, file prefixes): the first room whose prefix the innermost ksniff frame's file starts with.
ROOMS = [
    (
        "capture walk",
        (
            "ksniff/capture/pcap.py",
            "ksniff/capture/pcapng.py",
            "ksniff/capture/packets.py",
            "ksniff/capture/source.py",
            "ksniff/capture/files.py",
            "ksniff/capture/run.py",
            "ksniff/capture/_fastwalk",
        ),
    ),
    ("reassembly", ("ksniff/capture/",)),
    ("frame split", ("ksniff/decode/frames.py",)),
    ("body decode", ("ksniff/decode/", "<ksniff ")),
    ("audit fold", ("ksniff/audit/",)),
    ("engine", ("ksniff/engine/",)),
    ("report", ("ksniff/report/", "ksniff/result.py", "json/")),
]
ORDER = ["start-up", *(r for r, _ in ROOMS), "other"]


def room_of(stack: str) -> str:
    frames = stack.split(";")
    if any("importlib._bootstrap" in f or "<frozen importlib" in f for f in frames):
        return "start-up"
    for frame in reversed(frames):
        # "function (path:line)"; the path is relative to the working directory or a site folder
        where = frame[frame.rfind("(") + 1 :].rstrip(")")
        for room, prefixes in ROOMS:
            if any(p in where or frame.startswith(p) or p in frame for p in prefixes):
                return room
    return "other"


def one_run(path: Path, rate: int, tmp: Path) -> dict[str, float]:
    raw = tmp / "profile.raw"
    cmd = [
        "py-spy",
        "record",
        "-r",
        str(rate),
        "-f",
        "raw",
        "-o",
        str(raw),
        "--",
        sys.executable,
        "-m",
        "ksniff.cli",
        "audit",
        str(path),
        "--json",
        str(tmp / "out.json"),
        "--quiet",
    ]
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        counts[room_of(stack)] += int(n)
    total = sum(counts.values()) or 1
    return {room: counts[room] / total for room in ORDER}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--rate", type=int, default=1000, help="samples per second")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if shutil.which("py-spy") is None:
        sys.exit("py-spy not found (pip install py-spy)")
    shares: dict[str, list[float]] = {room: [] for room in ORDER}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            share = one_run(args.capture.resolve(), args.rate, Path(tmp))
            for room in ORDER:
                shares[room].append(share[room])
    print(f"{args.capture.name}: share of samples per room, median of {args.repeat} runs")
    for room in ORDER:
        s = statistics.median(shares[room])
        print(f"  {room:<14} {100 * s:5.1f} %")


if __name__ == "__main__":
    main()
