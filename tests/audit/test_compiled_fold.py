"""The audit's modules compiled from their own Python source (setup.py's COMPILED_SOURCES) against that
source, the reference: every capture of the corpus audited in a process that imports the compiled
modules and in one that imports the source (KSNIFF_PURE_PYTHON=1) gives the same JSON document and the
same tables, row for row. And the source is what runs where the compiled module is older than it.

Where the project is built without a C compiler the compiled modules are missing and these tests skip;
in CI (`CI` set) they must have been built, so there they fail instead."""

from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from compiled_support import require_compiled

from ksniff.common.sources import SourceFinder

ROOT = Path(__file__).resolve().parents[2]
PCAPS = ROOT / "tests" / "pcaps"
CORPUS = sorted(str(p) for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))


def compiled_sources() -> list[str]:
    """setup.py's list of the modules compiled from their source (read from the file, not run)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "COMPILED_SOURCES":
            return [f"ksniff.audit.{name}" for name in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no COMPILED_SOURCES")


MODULES = compiled_sources()

# Run in a new process: the modules it imports, then every corpus capture's document and tables.
AUDIT_ALL = """
import json, sys
import importlib
from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths
from ksniff.report.tables import frames
out = {"files": {m: importlib.import_module(m).__file__ for m in sys.argv[2:]}, "runs": {}}
for path in json.loads(sys.argv[1]):
    result = audit_paths([path], EngineConfig())
    tables = {name: t.to_json(orient="split", date_format="iso") for name, t in frames(result).items()}
    out["runs"][path] = [json.dumps(result.as_contract(), sort_keys=True), tables]
print(json.dumps(out))
"""


def audited(pure: bool) -> dict:
    env = {**os.environ, "KSNIFF_PURE_PYTHON": "1" if pure else ""}
    done = subprocess.run(
        [sys.executable, "-c", AUDIT_ALL, json.dumps(CORPUS), *MODULES],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def both() -> tuple[dict, dict]:
    for name in MODULES:
        require_compiled(name, f"{name} compiled from its source")
    return audited(pure=False), audited(pure=True)


def test_the_compiled_modules_run_and_the_source_runs_without_them(both):
    compiled, pure = both
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    assert len(MODULES) >= 10 and "ksniff.audit.partlog" in MODULES
    assert all(f.endswith(suffixes) for f in compiled["files"].values()), compiled["files"]
    assert all(f.endswith(".py") for f in pure["files"].values()), pure["files"]


def test_every_corpus_capture_gives_the_same_document_and_tables(both):
    compiled, pure = both
    assert sorted(compiled["runs"]) == sorted(pure["runs"]) == CORPUS
    findings = 0
    for path in CORPUS:
        (doc_c, tables_c), (doc_p, tables_p) = compiled["runs"][path], pure["runs"][path]
        assert doc_c == doc_p, Path(path).name
        assert tables_c == tables_p, Path(path).name
        findings += len(json.loads(doc_c)["findings"])
    assert findings > 100  # the corpus's anomalies were audited, not only clean runs


def test_a_source_changed_after_the_build_is_imported_as_source(tmp_path):
    folder = tmp_path / "room"
    folder.mkdir()
    source = folder / "mod.py"
    built = folder / f"mod{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    source.write_text("X = 1\n")
    built.write_bytes(b"")  # only its name and time are looked at
    old, new = time.time() - 100, time.time()
    os.utime(source, (old, old))
    os.utime(built, (new, new))
    finder = SourceFinder(pure=False)
    assert finder.find_spec("ksniff.room.mod", [str(folder)]) is None  # the usual import: the compiled one
    assert SourceFinder(pure=True).find_spec("ksniff.room.mod", [str(folder)]).origin == str(source)
    os.utime(source, (new + 10, new + 10))  # edited after the build
    assert SourceFinder(pure=False).find_spec("ksniff.room.mod", [str(folder)]).origin == str(source)
    assert SourceFinder(pure=False).find_spec("ksniff.room.other", [str(folder)]) is None
    assert SourceFinder(pure=False).find_spec("elsewhere.mod", [str(folder)]) is None
