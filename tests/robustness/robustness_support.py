"""Shared helpers of the robustness tests: the corpus, running the CLI, and the frames inside captures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner, Result
from contract_keys import CAPTURE_KEYS, DECODE_KEYS, TOP_KEYS

from ksniff.capture import read_files
from ksniff.capture.events import ConnectionOpened, StreamChunk
from ksniff.cli import main
from ksniff.decode.frames import FrameSplitter

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
REPO = PCAPS.parents[1]


def fuzz_examples(default: int) -> int:
    """Example counts for CI; KSNIFF_FUZZ_EXAMPLES raises them for a long local run."""
    return int(os.environ.get("KSNIFF_FUZZ_EXAMPLES", default))


def corpus() -> list[Path]:
    """Captures with an expectations file beside them (the ones a scenario finished writing)."""
    out = []
    for expect in sorted(PCAPS.glob("*.expect.json")):
        stem = expect.name[: -len(".expect.json")]
        out += [p for p in PCAPS.glob(stem + ".pcap*") if p.stat().st_size > 24]
    return out


def expectations(capture: Path) -> dict:
    stem = capture.name.split(".pcap")[0]
    return json.loads((PCAPS / f"{stem}.expect.json").read_text())


def cli(*args: str, env: dict | None = None) -> Result:
    """The CLI in-process; `stdout` and `stderr` stay apart as a terminal would show them."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=True)


def cli_process(
    *args: str, timeout: float = 120, user: str | None = None, **kw
) -> subprocess.CompletedProcess:
    """The CLI in a real interpreter (what a shell script sees), optionally as an unprivileged user."""
    cmd = [sys.executable, "-m", "ksniff.cli", *map(str, args)]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def cli_peak_mib(*args: str, timeout: float = 300) -> tuple[int, float, str]:
    """Exit code, peak resident memory (VmHWM, MiB) and stderr of the CLI in a fresh process.

    VmHWM, not ru_maxrss: Linux carries the forked parent's (pytest's) high-water mark across exec into
    ru_maxrss, so that would measure the test runner; VmHWM belongs to this process's own memory."""
    code = (
        "import re, sys\nfrom ksniff.cli import main\ntry:\n    main([*sys.argv[1:]])\n"
        "except SystemExit as e:\n"
        "    hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
        "    print('PEAK', e.code, hwm, file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    m = re.search(r"PEAK (\d+) (\d+)", proc.stderr)
    assert m, proc.stderr
    return int(m.group(1)), int(m.group(2)) / 1024, proc.stderr


def assert_no_traceback(stdout: str, stderr: str) -> None:
    assert "Traceback" not in stdout + stderr, stderr
    assert "Error:" not in stderr.replace("ksniff: error:", ""), stderr


def assert_one_line_error(code: int, stdout: str, stderr: str, mentions: str) -> None:
    """Exit 2 with exactly one line on stderr, naming what went wrong."""
    assert code == 2, (code, stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("ksniff: error: "), stderr
    assert mentions in lines[0], stderr
    assert_no_traceback(stdout, stderr)


def check_document(doc: dict) -> None:
    """Every key docs/contract.md promises is present, even on a partial result."""
    assert TOP_KEYS <= doc.keys()
    assert CAPTURE_KEYS <= doc["capture"].keys()
    assert DECODE_KEYS <= doc["decode"].keys()
    for key in ("inputs", "producers", "transactions", "findings"):
        assert isinstance(doc[key], list)


@dataclass(frozen=True)
class Direction:
    """The Kafka frames of one direction of one connection, size prefix included."""

    to_broker: bool
    frames: list[bytes]


def kafka_frames(capture: Path) -> list[Direction]:
    """Frames of every Kafka connection of a corpus capture, through the capture room and the framing."""
    ports = set(expectations(capture)["kafka_ports"])
    streams: dict[tuple[int, bool], bytearray] = defaultdict(bytearray)
    client_is_src: dict[int, bool] = {}
    for event in read_files([str(capture)]):
        if isinstance(event, ConnectionOpened):
            if event.dst.port in ports or event.src.port in ports:
                client_is_src[event.conn] = event.dst.port in ports
        elif isinstance(event, StreamChunk) and event.conn in client_is_src:
            streams[(event.conn, event.from_src)] += event.data
    out = []
    for (conn, from_src), data in streams.items():
        splitter = FrameSplitter(min_size=4)
        frames = [
            bytes(data[f.offset : f.offset + 4 + len(f.payload)])
            for f in splitter.feed(bytes(data), 0.0, 0.0)
        ]
        out.append(Direction(from_src == client_is_src[conn], frames))
    return out
