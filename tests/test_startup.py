"""What a plain `ksniff audit FILE --json OUT` loads: only what the local audit and its report use.

Every module loaded is start-up time each run pays before its first packet (most of a run over a
capture of a hundred megabytes: bench/README.md, "Start-up"). The Spark engine, the table exports, the
HTML page, the progress bar and the codecs of compressed batches are loaded by the runs that use them;
these tests hold that by the modules a run leaves loaded, not by timing it."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ksniff.decode import crc

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "tests" / "pcaps" / "txn_confluent_tansu.pcap"

# Run in a child: the CLI as a user runs it, then the names of the modules it left loaded.
CHILD = """
import json, sys
from ksniff.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

NOT_FOR_A_PLAIN_AUDIT = (
    "pandas",
    "pyarrow",
    "pyspark",
    "ksniff.engine.spark",
    "ksniff.engine.spark_session",
    "ksniff.report.stream",
    "ksniff.report.html",
    "ksniff.report.progress",
    "rich.progress",
    "zstandard",
    "cramjam",
    "secrets",
    "socket",
)


def loaded(*args: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    doc = json.loads(done.stdout.splitlines()[-1])
    assert doc["code"] in (0, 1), done.stderr
    return set(doc["modules"])


def test_a_plain_audit_loads_no_engine_or_export_it_does_not_use(tmp_path):
    modules = loaded("audit", str(CAPTURE), "--json", str(tmp_path / "out.json"), "--quiet")
    assert "ksniff.engine.local" in modules
    # Without the compiled CRC-32C (no compiler where ksniff was installed), the crc32c package's own
    # version lookup loads importlib.metadata, and with it socket: the fallback's cost, not an import of
    # ours.
    unused = [m for m in NOT_FOR_A_PLAIN_AUDIT if crc.ENGINE == "compiled" or m != "socket"]
    assert sorted(m for m in unused if m in modules) == []


def test_the_compiled_crc_spares_the_package_metadata(tmp_path):
    """The crc32c package reads its own version through importlib.metadata when imported; the compiled
    CRC-32C, where it is built, spares every run that (tests/decode/test_crc.py holds the two equal)."""
    modules = loaded("audit", str(CAPTURE), "--json", str(tmp_path / "out.json"), "--quiet")
    assert "ksniff.decode.crc" in modules
    if crc.ENGINE == "compiled":
        assert "importlib.metadata" not in modules and "crc32c" not in modules
    else:
        assert "crc32c" in modules


EXPORTS = [("--csv", "ksniff.report.stream"), ("--html", "ksniff.report.html")]


@pytest.mark.parametrize(("option", "module"), EXPORTS)
def test_an_export_loads_its_writer(tmp_path, option, module):
    target = tmp_path / ("tables" if option == "--csv" else "page.html")
    assert module in loaded("audit", str(CAPTURE), option, str(target), "--quiet")
    assert target.exists()


def test_the_dataclasses_of_a_plain_audit_have_docstrings(tmp_path):
    """A dataclass defined without a docstring gets one made from `inspect.signature` of the class while
    the module loads (the tokenizer among it): ~0.4 ms a class, twenty-three of them were 5-9 ms of
    every run."""
    import dataclasses
    import importlib

    modules = loaded("audit", str(CAPTURE), "--json", str(tmp_path / "out.json"), "--quiet")
    made = []
    for name in sorted(m for m in modules if m == "ksniff" or m.startswith("ksniff.")):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == name:
                if (value.__doc__ or "").startswith(f"{value.__name__}("):
                    made.append(f"{name}.{value.__name__}")
    assert made == []


# In the child: an object whose finalizer runs only in the interpreter's own teardown.
TEARDOWN = (
    "import atexit, sys\n"
    "class _Teardown:\n"
    "    def __del__(self):\n"
    "        sys.stderr.write('torn down\\n')\n"
    "_mark = _Teardown()\n"
    "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
)


def _program(tmp_path, before_run: str = "") -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out.json"
    child = (
        TEARDOWN
        + "import ksniff.run\n"
        + "from ksniff.cli import program\n"
        + before_run
        + f"sys.argv = ['ksniff', 'audit', {str(CAPTURE)!r}, '--json', {str(out)!r}]\n"
        + "program()\n"
        + "print('not reached')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    return done, out


def test_the_program_ends_with_the_audits_code_its_output_and_exit_handlers(tmp_path):
    """`ksniff` (ksniff.cli.program) ends the process without the interpreter's teardown: the report
    and the JSON document are whole, exit handlers have run, the exit code is the audit's."""
    done, out = _program(tmp_path)
    assert done.returncode == 1, done.stderr  # the capture has findings
    assert done.stdout.rstrip().splitlines()[-1].startswith("Verdict: findings")
    assert "not reached" not in done.stdout and "handler ran" in done.stderr
    assert json.loads(out.read_text())["summary"]["verdict"] == "findings"
    if os.path.isdir("/proc/self/fd"):
        assert "torn down" not in done.stderr  # the quick end


def test_a_writer_left_open_gets_the_normal_end(tmp_path):
    """A file the run opened for writing and did not close still has its buffer flushed: the quick end
    is not taken."""
    left = tmp_path / "left.txt"
    leave_open = (
        "_run = ksniff.run.run_audit\n"
        "def _leaving(*args, **kwargs):\n"
        f"    globals()['_open'] = open({str(left)!r}, 'w')\n"
        "    _open.write('buffered, never flushed by the run')\n"
        "    return _run(*args, **kwargs)\n"
        "ksniff.run.run_audit = _leaving\n"
    )
    done, out = _program(tmp_path, leave_open)
    assert done.returncode == 1, done.stderr
    assert left.read_text() == "buffered, never flushed by the run"
    assert "torn down" in done.stderr and "handler ran" in done.stderr


def test_the_capture_files_page_worker_does_not_keep_the_quick_end_away(tmp_path):
    """A capture of several windows starts the page worker thread (ksniff.capture.readahead, with the
    compiled walk built); the program still ends the quick way. Any other thread still running does
    not get it."""
    pytest.importorskip("ksniff.capture._fastwalk")
    small_windows = (
        "import atexit, ksniff.capture.source as source, ksniff.capture.readahead as pages\n"
        "source.WINDOW = 4096\n"
        "atexit.register(lambda: print('page threads', pages.threads(), file=sys.stderr))\n"
    )
    done, out = _program(tmp_path, small_windows)
    assert done.returncode == 1, done.stderr
    assert "page threads 1" in done.stderr  # the worker ran
    if os.path.isdir("/proc/self/fd"):
        assert "torn down" not in done.stderr  # the quick end
    another = (
        small_windows
        + "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    done, out = _program(tmp_path, another)
    assert done.returncode == 1, done.stderr
    assert "torn down" in done.stderr and json.loads(out.read_text())["summary"]["verdict"] == "findings"


def test_a_quiet_audit_with_nothing_to_show_loads_no_table(tmp_path):
    """--quiet with no finding prints one line and the verdict: rich's tables (and the fractions and
    decimals of their column widths) and the other parts of the report are loaded by the reports that
    show them."""
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))  # header only, Ethernet
    modules = loaded("audit", str(empty), "--json", str(tmp_path / "out.json"), "--quiet")
    assert "ksniff.report.terminal" in modules
    shown_elsewhere = ("rich.table", "fractions", "ksniff.report.producers", "ksniff.report.timeline")
    assert [m for m in shown_elsewhere if m in modules] == []
    assert "rich.table" in loaded("audit", str(CAPTURE), "--json", str(tmp_path / "out.json"), "--quiet")
