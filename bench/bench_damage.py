"""What damaged bytes make the audit say: one random bit flipped at a time in a real capture, each copy
audited as a user runs it (`ksniff audit COPY --json`), the verdicts and findings counted.

    python bench/bench_damage.py [--captures idempotent_none_tansu,ctp_confluent_tansu] [--flips 150]
        [--seed 1]

Prints, per capture, how many flips gave each verdict, and where in the packet the flipped bit was (pcap
record header, link, IP or TCP header, TCP payload); then the flips whose findings are of their own making:
warning or critical findings of a kind, or at a severity, that the undamaged capture does not have. A
capture whose audit is `clean` is the fairest test: every such finding is invented. The same seed flips the
same bits, so two trees can be compared on one list of flips (run it in each).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

PCAPS = Path(__file__).resolve().parents[1] / "tests" / "pcaps"


def audit(capture: Path, out: Path) -> dict:
    run = [sys.executable, "-m", "ksniff.cli", "audit", str(capture), "--json", str(out), "-q", "--exit-zero"]
    done = subprocess.run(run, capture_output=True, text=True)
    if done.returncode != 0 or "Traceback" in done.stderr:
        return {"error": (done.returncode, done.stderr.strip().splitlines()[-1:])}
    return json.loads(out.read_text())


def serious(doc: dict) -> set[tuple[str, str]]:
    return {(f["kind"], f["severity"]) for f in doc.get("findings", ()) if f["severity"] != "info"}


def layer(data: bytes, at: int) -> str:
    """Where byte `at` of a classic little-endian pcap (Ethernet, IPv4) lies."""
    pos = 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        if at < pos + 16 + caplen:
            if at < pos + 16:
                return "pcap record header"
            frame = at - pos - 16
            if frame < 14:
                return "link header"
            ihl = (data[pos + 30] & 15) * 4
            if frame < 14 + ihl:
                return "IP header"
            if frame < 14 + ihl + (data[pos + 30 + ihl + 12] >> 4) * 4:
                return "TCP header"
            return "TCP payload"
        pos += 16 + caplen
    return "after the last record"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", default="idempotent_none_tansu,ctp_confluent_tansu")
    parser.add_argument("--flips", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ksniff-damage-") as tmp:
        for name in args.captures.split(","):
            source = PCAPS / f"{name}.pcap"
            data = source.read_bytes()
            whole = audit(source, Path(tmp) / "whole.json")
            expected = serious(whole)
            verdicts: collections.Counter = collections.Counter()
            invented = []
            rng = random.Random(args.seed)
            for _ in range(args.flips):
                at, bit = rng.randrange(24, len(data)), rng.randrange(8)
                copy = bytearray(data)
                copy[at] ^= 1 << bit
                path = Path(tmp) / "flipped.pcap"
                path.write_bytes(bytes(copy))
                doc = audit(path, Path(tmp) / "flipped.json")
                verdict = "error" if "error" in doc else doc["summary"]["verdict"]
                verdicts[verdict, layer(data, at)] += 1
                new = serious(doc) - expected if "error" not in doc else set()
                if new:
                    invented.append((at, bit, verdict, sorted(new)))
            head = f"undamaged verdict {whole['summary']['verdict']}; {args.flips} flips, seed {args.seed}"
            print(f"{name}: {head}")
            for (verdict, where), n in sorted(verdicts.items()):
                print(f"  {n:4d}  {verdict:<10}  {where}")
            print(f"  flips with findings of their own making: {len(invented)}")
            for at, bit, verdict, new in invented:
                print(f"    byte {at} bit {bit} ({layer(data, at)}): {verdict}, {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
