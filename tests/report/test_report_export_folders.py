"""Where the exports go, as a user re-running ksniff sees it: a folder holds one run's tables (no stale
`records.csv` from an earlier `--records` run), and every output creates the folders it needs, or fails
with one line and exit 2 when it cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from contract_keys import TABLES as CONTRACT_TABLES

from ksniff.cli import main

CAPTURE = Path(__file__).parent.parent / "pcaps" / "txn_confluent_tansu.pcap"
TABLES = set(CONTRACT_TABLES)


def ksniff(*args) -> object:
    return CliRunner().invoke(
        main, ["audit", str(CAPTURE), "--exit-zero", "-q", "--no-color", *map(str, args)]
    )


def test_re_export_leaves_no_table_of_an_earlier_run(tmp_path):
    csv_dir, pq_dir = tmp_path / "csv", tmp_path / "pq"
    first = ksniff("--csv", csv_dir, "--parquet", pq_dir, "--records")
    assert first.exit_code == 0, first.output
    assert {p.stem for p in csv_dir.iterdir()} == TABLES | {"records"}
    assert {p.stem for p in pq_dir.iterdir()} == TABLES | {"records"}
    (csv_dir / "notes.txt").write_text("the reviewer's own file")
    second = ksniff("--csv", csv_dir, "--parquet", pq_dir)
    assert second.exit_code == 0, second.output
    assert sorted(p.name for p in csv_dir.iterdir()) == sorted([*(f"{t}.csv" for t in TABLES), "notes.txt"])
    assert sorted(p.name for p in pq_dir.iterdir()) == sorted(f"{t}.parquet" for t in TABLES)
    assert (csv_dir / "notes.txt").read_text() == "the reviewer's own file"


def test_every_output_creates_the_folders_it_needs(tmp_path):
    run = ksniff(
        "--json",
        tmp_path / "a" / "b" / "r.json",
        "--csv",
        tmp_path / "c" / "d",
        "--parquet",
        tmp_path / "e" / "f",
        "--html",
        tmp_path / "g" / "h" / "r.html",
    )
    assert run.exit_code == 0, run.output
    assert json.loads((tmp_path / "a" / "b" / "r.json").read_text())["findings"]
    assert "tx-A" in (tmp_path / "g" / "h" / "r.html").read_text()
    assert {p.stem for p in (tmp_path / "c" / "d").iterdir()} == TABLES
    assert {p.stem for p in (tmp_path / "e" / "f").iterdir()} == TABLES


@pytest.mark.parametrize(
    "option, below", [("--json", "r.json"), ("--csv", "out"), ("--parquet", "out"), ("--html", "r.html")]
)
def test_an_output_that_cannot_be_made_is_one_line_and_exit_two(tmp_path, option, below):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = ksniff(option, blocker / "sub" / below)
    assert run.exit_code == 2
    assert "Traceback" not in run.output
    errors = [line for line in run.output.splitlines() if line.startswith("ksniff: error:")]
    assert len(errors) == 1 and str(blocker) in errors[0]
