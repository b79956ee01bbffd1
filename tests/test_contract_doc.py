"""docs/contract.md is the contract the code is held to: every option of both commands, every key of the
JSON document (and of its blocks), every finding kind and every table column is written there. A name
added to the code and not to the contract fails here, with the names to add."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ksniff.audit.model import FindingKind
from ksniff.cli import main
from ksniff.report.tables import SCHEMAS

CONTRACT = (Path(__file__).resolve().parent.parent / "docs" / "contract.md").read_text(encoding="utf-8")
PCAPS = Path(__file__).resolve().parent / "pcaps"


def _code(text: str) -> list[str]:
    """The contract's code: fenced blocks and `spans` (which may wrap lines)."""
    fenced = re.findall(r"```(.*?)```", text, flags=re.S)
    return fenced + re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


CODE = _code(CONTRACT)


def documented(name: str) -> bool:
    """`name` appears, as a whole name, in the contract's code."""
    pattern = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
    return any(pattern.search(span) for span in CODE)


@pytest.mark.parametrize("command", ["audit", "live"])
def test_every_option_is_in_the_contract(command: str) -> None:
    options = [
        opt
        for param in main.commands[command].params
        for opt in getattr(param, "opts", ())
        if opt.startswith("--") and opt != "--help"
    ]
    assert len(options) > 20
    assert [o for o in options if not documented(o)] == []


def test_every_finding_kind_and_column_is_in_the_contract() -> None:
    names = [k.value for k in FindingKind] + [col for schema in SCHEMAS.values() for col in schema]
    assert [n for n in names if not documented(n)] == []
    assert not documented("transaction") and not documented("--max")  # whole names only


def test_every_json_key_is_in_the_contract(tmp_path: Path) -> None:
    """Keys of a real run's document, two levels deep (by_api's names and evidence are data, not keys)."""
    import json

    from ksniff.engine.local import audit_paths

    doc = audit_paths([str(PCAPS / "txn_confluent_tansu.pcap")]).as_contract()
    keys = set(doc)
    for value in doc.values():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                keys |= set(item)
    assert {"summary", "verdict", "engine", "warnings"} <= keys  # a real document of today's shape
    assert json.dumps(doc)
    assert sorted(k for k in keys if not documented(k)) == []
