"""`ksniff live` started as a user starts it, for the tests that capture on loopback."""

from __future__ import annotations

import os
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
