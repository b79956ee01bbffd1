"""`ksniff live` started as a user starts it, for the tests that capture on loopback."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start_live(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen:
    """`ksniff live lo --port PORT` writing live.json and live.pcap into tmp_path, once its capture socket
    is open (the first line on stderr says so)."""
    cmd = [
        sys.executable,
        "-m",
        "ksniff.cli",
        "live",
        "lo",
        "--port",
        str(port),
        "--no-color",
        "--json",
        str(tmp_path / "live.json"),
        "--write",
        str(tmp_path / "live.pcap"),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    ready = proc.stderr.readline()  # printed once the capture socket is open
    assert ready.startswith("ksniff: capturing on lo"), ready + proc.stderr.read()
    return proc


def replay_copy(pcap: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of a corpus capture recorded between 10.231.0.1 and .2, moved to a /24 of 10.0.0.0/8 of its
    own (tcprewrite), and that network: what a test replays onto loopback is then told apart from what
    other tests and benchmarks replay there at the same time."""
    net = f"10.{random.randrange(1, 255)}.{random.randrange(0, 256)}.0/24"
    if net.startswith("10.231."):
        net = "10.232.0.0/24"
    out = tmp_path / f"replay-{pcap.name}"
    subprocess.run(
        ["tcprewrite", f"--pnat=10.231.0.0/24:{net}", "--fixcsum", "-i", str(pcap), "-o", str(out)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return out, net
