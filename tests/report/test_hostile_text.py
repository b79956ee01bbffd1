"""Hostile text (issue 18, items 1, 6, 7 and 8): what an attacker's ids, topics, client ids and file names,
a capture's impossible timestamps and a failing stdout do to the outputs meant for people.

The captures are real Kafka frames (tests/report/hostile.py) carrying the attacker's strings; every test
runs the command a user runs and checks what reaches the terminal.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ksniff.report.terminal import render_report
from ksniff.report.text import SHOWN_CHARS, escape, shown, shown_message
from tests.report.hostile import NASTY, far_future_capture, hostile_capture
from tests.robustness.robustness_support import REPO, assert_one_line_error, cli, cli_process

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"

# Anything that can act on a terminal or hide text; a newline is the only control character a report may
# hold (its own line ends).
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]"
)

TXN_ID = "txn" + NASTY
TOPIC = "t" + NASTY
CLIENT_ID = "c" + NASTY


def assert_clean(text: str) -> None:
    raw = sorted({hex(ord(c)) for c in RAW.findall(text)})
    assert not raw, f"raw control characters reached people: {raw}"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    return hostile_capture(tmp_path_factory.mktemp("hostile") / "h.pcap", TXN_ID, TOPIC, CLIENT_ID)


@pytest.mark.parametrize(
    "raw, visible",
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("a\nb", "a\\nb"),
        ("\r", "\\r"),
        ("\t", "\\t"),
        ("\x00\x07\x7f", "\\x00\\x07\\x7f"),
        ("\x9b31m\x85", "\\x9b31m\\x85"),
        ("\u202egnp.exe", "\\u202egnp.exe"),
        ("\u2066\u2069", "\\u2066\\u2069"),
        ("\u200b\ufeff", "\\u200b\\ufeff"),
        ("\udcff", "\\udcff"),
        ("\U000e0041", "\\U000e0041"),
        ("orders-txn é ü 日本", "orders-txn é ü 日本"),
    ],
)
def test_escape_makes_every_control_visible(raw, visible):
    assert escape(raw) == visible


def test_long_values_are_cut_with_their_length():
    value = "\x1b" + "x" * 1_000_000
    text = shown(value)
    assert text.startswith("\\x1bxxx") and text.endswith("…(1,000,001 chars)")
    assert len(text) < SHOWN_CHARS + 40
    assert shown("short") == "short"


def test_a_message_quoting_a_long_id_cuts_the_id_and_keeps_the_rest():
    long_id = "\x1b]0;" + "y" * 500_000
    message = f"a newer instance took over {long_id!r}: producer id 7 epoch 0 -> producer id 7 epoch 1"
    text = shown_message(message, [long_id])
    assert text.endswith("producer id 7 epoch 0 -> producer id 7 epoch 1")
    assert "(500,004 chars)" in text and "\x1b" not in text


@pytest.mark.parametrize("args", [(), ("-q",), ("-v",), ("-P", TXN_ID), ("-P", "1000"), ("-P", "no\x1bsuch")])
def test_no_raw_control_character_reaches_the_report(hostile, args):
    r = cli("audit", hostile, "--txn-timeout", "1", *args)
    assert r.exit_code in (0, 1), r.output
    assert_clean(r.stdout)
    assert_clean(r.stderr)
    if args != ("-q",):
        assert "\\x1b[2J\\x1b[H" in r.stdout  # the id is there, visibly escaped
    assert not any(line.startswith("ksniff: warning:") for line in r.stdout.splitlines())


def test_the_json_keeps_the_exact_strings_and_the_report_on_stderr_is_escaped(hostile):
    r = cli("audit", hostile, "--json", "-")
    doc = json.loads(r.stdout)
    assert {p["transactional_id"] for p in doc["producers"]} == {TXN_ID}
    assert {f["transactional_id"] for f in doc["findings"]} == {TXN_ID}
    assert {c for p in doc["producers"] for c in p["client_ids"]} == {CLIENT_ID, CLIENT_ID + "-b"}
    assert {p for t in doc["transactions"] for p in t["partitions"]} == {TOPIC + "-0"}
    assert_clean(r.stderr)
    assert "\\x1b[2J" in r.stderr


def test_a_hostile_file_name_cannot_forge_a_warning_line(hostile, tmp_path):
    name = "cut\x1b]0;title\x07\nksniff: warning: all clear\u202e.pcap"
    cut = tmp_path / name
    cut.write_bytes(hostile.read_bytes()[:-7])  # cut mid-record: a warning that names the file
    r = cli("audit", tmp_path)
    assert_clean(r.stdout)
    assert_clean(r.stderr)
    warnings = [line for line in r.stderr.splitlines() if line.startswith("ksniff: warning:")]
    assert len(warnings) == 1 and "truncated" in warnings[0]
    assert "\\nksniff: warning: all clear" in warnings[0]
    assert "cut\\x1b]0;title\\x07" in re.sub(r"\s+", "", r.stdout)  # the Inputs line, folded at 80 columns


def test_an_error_naming_a_hostile_path_is_one_escaped_line(tmp_path):
    missing = tmp_path / "gone\x1b[2J\nksniff: error: forged.pcap"
    r = cli("audit", missing)
    assert_one_line_error(r.exit_code, r.stdout, r.stderr, "gone\\x1b[2J\\nksniff: error: forged")


def test_the_live_view_escapes_what_it_shows(hostile):
    from ksniff.capture import read_files
    from ksniff.engine.live import LiveView
    from ksniff.engine.local import EngineConfig, Pipeline

    run = read_files([str(hostile)])
    pipeline = Pipeline(EngineConfig())
    for event in run:
        pipeline.feed(event)
    pipeline.finish()
    assert pipeline.findings_so_far, "the story has findings to show"
    console = Console(record=True, width=200, color_system=None, file=io.StringIO())
    console.print(LiveView(run, pipeline, "eth0\x1b]0;x\x07"))
    text = console.export_text()
    assert_clean(text)
    assert "producer_fenced" in text and "\\x1b[2J" in text and "eth0\\x1b]0;x\\x07" in text


def _rendered(result, **kw) -> str:
    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    render_report(console, result, **kw)
    return console.export_text()


SMALL, LARGE = 1024 * 1024, 4 * 1024 * 1024  # bytes of id: 1 MiB took 20 s to render whole, 4 MiB far more


@pytest.fixture(scope="module")
def long_id_results(tmp_path_factory):
    import ksniff

    folder = tmp_path_factory.mktemp("long-ids")
    results = {}
    for size in (SMALL, LARGE):
        path = hostile_capture(folder / f"{size}.pcap", NASTY + "x" * size, TOPIC, CLIENT_ID)
        results[size] = ksniff.audit(str(path), txn_timeout_ms=1).result
        assert len(results[size].producers[0].transactional_id) == len(NASTY) + size  # kept whole
    return results


@pytest.mark.parametrize("kw", [{"producer": "1000"}, {"quiet": True}, {}])
def test_a_longer_id_does_not_make_a_longer_report(long_id_results, kw):
    """Ids of 1 MiB and 4 MiB: the terminal gets the same report, the id cut where people read it (the
    count of what was cut aside), so rendering reads each id once instead of laying it out; whole, the
    report grew with the id and its time quadratically (bench/bench_hostile_ids.py times it)."""
    small, large = (_rendered(long_id_results[size], **kw) for size in (SMALL, LARGE))
    assert len(small) < 64 * 1024
    assert abs(len(large) - len(small)) < 64, (len(small), len(large))
    assert_clean(large)


@pytest.mark.parametrize("start, tsresol", [(1e13, None), (9e18, 0x80)])
def test_timestamps_past_the_calendar_never_crash_an_output(tmp_path, start, tsresol):
    capture = far_future_capture(tmp_path / "future.pcapng", start, tsresol)
    r = cli_process(
        "audit",
        capture,
        "--csv",
        tmp_path / "csv",
        "--parquet",
        tmp_path / "pq",
        "--json",
        tmp_path / "out.json",
        "-P",
        "orders-txn",
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stderr == ""
    assert f"@{start:.6g}s" in r.stdout  # seconds, where no calendar time exists
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["capture"]["first_ts"] == pytest.approx(start)
    import pandas as pd

    csv = pd.read_csv(tmp_path / "csv" / "exchanges.csv")
    assert csv["ts"].iloc[0] == pytest.approx(start) and csv["ts_utc"].isna().all()
    parquet = pd.read_parquet(tmp_path / "pq" / "exchanges.parquet")
    assert len(parquet) == len(csv) and parquet["ts"].isna().all()


FINDINGS_CAPTURE = PCAPS / "anomalies_tansu.pcap"  # warnings: exit 1 unless --exit-zero
ENV = {"PYTHONPATH": str(REPO), "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize(
    "args, what", [(("--json", "-"), "the JSON document"), ((), "the report"), (("-q",), "the report")]
)
def test_a_full_stdout_is_one_line_and_exit_2(args, what):
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "ksniff.cli", "audit", str(FINDINGS_CAPTURE), *args, "--exit-zero"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
            timeout=120,
        )
    assert_one_line_error(r.returncode, "", r.stderr, f"cannot write {what} to standard output")
    assert "No space left on device" in r.stderr


@pytest.mark.parametrize(
    "args, code", [((), 1), (("--exit-zero",), 0), (("--json", "-"), 1), (("--json", "-", "--exit-zero"), 0)]
)
def test_a_closed_pipe_is_not_an_error(args, code):
    """`ksniff audit ... | head -1`: the reader goes away; the exit code is still the audit's."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ksniff.cli", "audit", str(FINDINGS_CAPTURE), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    proc.stdout.close()  # before ksniff writes anything: its first write meets a closed pipe
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == code, stderr
    if "--json" in args:  # the report went to stderr, whole
        assert "Traceback" not in stderr and "ksniff: error" not in stderr and "What to do" in stderr
    else:
        assert stderr == ""


def test_head_dash_1_in_a_real_shell():
    """The pipeline's status (pipefail) is ksniff's own: 0 with --exit-zero, 1 without."""
    for flag, code in (("--exit-zero", 0), ("", 1)):
        command = (
            f"set -o pipefail; {sys.executable} -m ksniff.cli audit {FINDINGS_CAPTURE} -v {flag} | head -1"
        )
        r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=ENV, timeout=120)
        assert r.returncode == code, r.stderr
        assert r.stdout.startswith("ksniff") and len(r.stdout.splitlines()) == 1
        assert r.stderr == ""
