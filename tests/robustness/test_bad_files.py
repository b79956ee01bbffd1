"""Bad inputs through the CLI: what cannot be read at all exits 2 with one line on stderr; what can be
read in part gives a partial result (exit 0/1) with the damage reported on stderr and in the document.
Never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
import tempfile

import pytest
from robustness_support import (
    PCAPS,
    assert_no_traceback,
    assert_one_line_error,
    check_document,
    cli,
    cli_process,
)

STORY = PCAPS / "txn_confluent_tansu.pcap"


def one_line_error(path, mentions: str) -> None:
    r = cli("audit", path, "--no-color")
    assert_one_line_error(r.exit_code, r.stdout, r.stderr, mentions)
    assert str(path) in r.stderr


@pytest.mark.parametrize(
    "name, content, mentions",
    [
        ("empty.pcap", b"", "empty file"),
        ("random.pcap", bytes(range(256)) * 20, "not a pcap or pcapng file"),
        ("notes.pcap", b"This is a text file, not a capture.\n" * 10, "not a pcap or pcapng file"),
        ("wrong-magic.pcap", b"\xde\xad\xbe\xef" + STORY.read_bytes()[4:], "not a pcap or pcapng file"),
        ("short-header.pcap", STORY.read_bytes()[:10], "truncated pcap header"),
        (
            "bad-link.pcap",
            STORY.read_bytes()[:20] + struct.pack("<I", 147) + STORY.read_bytes()[24:],
            "unsupported link type 147",
        ),
        ("bad-pcapng.pcapng", b"\x0a\x0d\x0d\x0a" + b"\0" * 20, "pcapng"),
        ("tiny.pcap.gz", gzip.compress(STORY.read_bytes())[:15], "not a pcap or pcapng file"),
    ],
)
def test_unreadable_content_exits_2_with_one_line(tmp_path, name, content, mentions):
    path = tmp_path / name
    path.write_bytes(content)
    one_line_error(path, mentions)


def test_missing_file(tmp_path):
    one_line_error(tmp_path / "nowhere.pcap", "no such file or folder")


def test_broken_symlink(tmp_path):
    (tmp_path / "link.pcap").symlink_to(tmp_path / "gone.pcap")
    one_line_error(tmp_path / "link.pcap", "No such file or directory")


def test_folder_without_captures(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing to see")
    (tmp_path / "sub").mkdir()
    one_line_error(tmp_path, "no pcap or pcapng files in this folder")


def test_a_folder_named_like_a_capture(tmp_path):
    (tmp_path / "capture.pcap").mkdir()
    one_line_error(tmp_path / "capture.pcap", "no pcap or pcapng files in this folder")


def test_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.pcap")
    one_line_error(tmp_path / "pipe.pcap", "not a regular file")


def test_fifo_inside_a_folder_is_skipped(tmp_path):
    os.mkfifo(tmp_path / "pipe.pcap")
    shutil.copy(STORY, tmp_path / "story.pcap")
    r = cli("audit", tmp_path, "--json", "-", "--no-color")
    assert r.exit_code == 1, r.stderr  # the story's fencing is a warning finding
    assert [i["path"] for i in json.loads(r.stdout)["inputs"]] == [str(tmp_path / "story.pcap")]


def test_one_missing_input_among_good_ones_stops_the_run(tmp_path):
    """A typo in one path must not give a result that silently covers less than asked."""
    r = cli("audit", STORY, tmp_path / "typo.pcap", "--json", "-")
    assert_one_line_error(r.exit_code, r.stdout, r.stderr, "typo.pcap")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to switch users")
def test_unreadable_file_as_an_unprivileged_user():
    with tempfile.TemporaryDirectory() as tmp:  # /tmp itself, so the unprivileged user can reach it
        os.chmod(tmp, 0o755)
        path = os.path.join(tmp, "secret.pcap")
        shutil.copy(STORY, path)
        os.chmod(path, 0)
        r = cli_process("audit", path, user="65534")
    assert_one_line_error(r.returncode, r.stdout, r.stderr, "Permission denied")


# -- partial results ---------------------------------------------------------------------------------


def partial(path, *extra: str) -> tuple[int, dict, list[str]]:
    """Exit code, JSON document and stderr lines (only diagnostics: the report goes to stdout)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        r = cli("audit", path, "--json", out, "--no-color", *extra)
        assert r.exit_code in (0, 1), r.output
        assert_no_traceback(r.stdout, r.stderr)
        with open(out) as f:
            doc = json.load(f)
    check_document(doc)
    return r.exit_code, doc, r.stderr.splitlines()


def test_header_only_capture_is_an_empty_result(tmp_path):
    path = tmp_path / "header-only.pcap"
    path.write_bytes(STORY.read_bytes()[:24])
    code, doc, stderr = partial(path)
    assert code == 0 and stderr == []
    assert doc["inputs"][0]["packets"] == 0 and doc["findings"] == []


@pytest.mark.parametrize("compress", [False, True])
def test_cut_mid_record_gives_a_partial_result_with_a_warning(tmp_path, compress):
    data = STORY.read_bytes()
    cut = data[: len(data) // 2 + 7]  # in the middle of a record
    path = tmp_path / ("cut.pcap.gz" if compress else "cut.pcap")
    path.write_bytes(gzip.compress(cut) if compress else cut)
    code, doc, stderr = partial(path)
    assert any(line.startswith(f"ksniff: warning: {path}: truncated at byte") for line in stderr), stderr
    whole = partial(STORY)[1]
    assert 0 < doc["capture"]["packets"] < whole["capture"]["packets"]
    assert doc["decode"]["requests"] > 0  # what was there was decoded


@pytest.mark.skipif(not shutil.which("editcap"), reason="needs editcap")
def test_snaplen_cut_packets(tmp_path):
    """`editcap -s 100`: every frame keeps 100 bytes. The run completes and says what is missing."""
    path = tmp_path / "snap100.pcap"
    subprocess.run(["editcap", "-F", "pcap", "-s", "100", str(STORY), str(path)], check=True)
    code, doc, stderr = partial(path, "--exit-zero")
    assert any("packets cut short by the capture's snapshot length" in line for line in stderr), stderr
    assert doc["capture"]["truncated_packets"] > 0
    assert doc["capture"]["gaps"] > 0 and doc["capture"]["gap_bytes"] > 0
    kinds = {f["kind"] for f in doc["findings"]}
    assert "capture_gap" in kinds
    assert all(f["severity"] != "critical" for f in doc["findings"])  # nothing rests on lost bytes
    # The terminal report's header says it too.
    r = cli("audit", path, "--no-color", "--exit-zero")
    assert "truncated packets" in r.stdout


def test_corrupt_record_length_keeps_what_came_before(tmp_path):
    data = bytearray(STORY.read_bytes())
    data[24 + 8 : 24 + 12] = struct.pack("<I", 0x7FFFFFF0)  # the first record claims ~2 GB
    path = tmp_path / "corrupt.pcap"
    path.write_bytes(bytes(data))
    code, doc, stderr = partial(path)
    assert any("corrupt record at byte 24" in line for line in stderr), stderr
    assert doc["capture"]["packets"] == 0


def test_partial_results_reach_every_export(tmp_path):
    data = STORY.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: len(data) * 2 // 3])
    r = cli(
        "audit",
        path,
        "--json",
        tmp_path / "o.json",
        "--csv",
        tmp_path / "csv",
        "--parquet",
        tmp_path / "pq",
        "--no-color",
        "--exit-zero",
    )
    assert r.exit_code == 0, r.output
    check_document(json.loads((tmp_path / "o.json").read_text()))
    for table in ("exchanges", "batches", "transactions", "findings"):
        assert (tmp_path / "csv" / f"{table}.csv").exists()
        assert (tmp_path / "pq" / f"{table}.parquet").exists()


def test_bad_files_in_a_real_process(tmp_path):
    """What a shell script sees: exit status and stderr, with Python's own error handling in play."""
    (tmp_path / "empty.pcap").write_bytes(b"")
    r = cli_process("audit", tmp_path / "empty.pcap")
    assert_one_line_error(r.returncode, r.stdout, r.stderr, "empty file")
    r = cli_process("audit", tmp_path / "missing.pcap", "--json", "-")
    assert_one_line_error(r.returncode, r.stdout, r.stderr, "no such file or folder")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(STORY.read_bytes()[:9000])
    r = cli_process("audit", cut, "--json", "-", "--exit-zero")
    assert r.returncode == 0 and "Traceback" not in r.stderr
    check_document(json.loads(r.stdout))
    assert "truncated at byte" in r.stderr
