"""A process that ends without the interpreter's teardown keeps its last run's state to the end instead of
taking it apart (ksniff.common.ending); any other process keeps nothing and restores the collector."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from ksniff.common import ending
from ksniff.engine.local import GC_FIRST_THRESHOLD, audit_paths, fewer_collections

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "pcaps" / "txn_confluent_tansu.pcap"


class _State:
    """A stand-in for a run's state: something a weak reference can watch."""


@pytest.fixture
def armed(monkeypatch):
    monkeypatch.setattr(ending, "_kept", None)
    ending.arm()
    yield
    gc.unfreeze()


def test_an_unarmed_process_keeps_nothing(monkeypatch):
    monkeypatch.setattr(ending, "_kept", None)
    state = _State()
    alive = weakref.ref(state)
    ending.keep(state)
    del state
    assert alive() is None and not ending.armed()


def test_an_armed_process_keeps_only_the_latest_run(armed):
    first, second = _State(), _State()
    first_alive, second_alive = weakref.ref(first), weakref.ref(second)
    ending.keep(first)
    del first
    assert first_alive() is not None
    ending.keep(second)  # a later capture set: the earlier one's state goes as before
    del second
    assert first_alive() is None and second_alive() is not None
    assert gc.get_freeze_count() > 0  # and out of the collector's walks


def test_the_collector_is_restored_after_a_run_unless_armed(monkeypatch):
    monkeypatch.setattr(ending, "_kept", None)
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] == GC_FIRST_THRESHOLD
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_nested_runs_put_the_collector_back_once_the_outermost_ends(monkeypatch):
    """A Spark task around the audits of its capture sets: each audit freezes what the ones before it left,
    and only the task's end puts the collector back, with what was frozen left so when asked."""
    monkeypatch.setattr(ending, "_kept", None)
    before = gc.get_threshold()
    try:
        for keep_frozen in (False, True):
            with fewer_collections(keep_frozen=keep_frozen):
                with fewer_collections():
                    pass
                assert gc.get_threshold()[0] == GC_FIRST_THRESHOLD and gc.get_freeze_count() > 0
                with fewer_collections():
                    pass
                assert gc.get_threshold()[0] == GC_FIRST_THRESHOLD and gc.get_freeze_count() > 0
            assert gc.get_threshold() == before
            assert (gc.get_freeze_count() > 0) == keep_frozen
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def test_the_collector_keeps_the_runs_settings_in_an_armed_process(armed):
    before = gc.get_threshold()
    try:
        with fewer_collections():
            pass
        assert gc.get_threshold()[0] == GC_FIRST_THRESHOLD  # for the report of the run, to the end
    finally:
        gc.set_threshold(*before)


def test_an_armed_audit_gives_the_same_result(armed):
    before = gc.get_threshold()
    try:
        kept = audit_paths([str(CAPTURE)]).as_contract()
    finally:
        gc.set_threshold(*before)
        ending._kept = None
    gc.unfreeze()
    assert kept == audit_paths([str(CAPTURE)]).as_contract()


def test_the_program_writes_the_same_document_as_main(tmp_path):
    """`ksniff` (armed, quick end) and `main` called by a program (neither) write the same JSON."""
    docs = []
    for call in ("from ksniff.cli import program; program()", "from ksniff.cli import main; main()"):
        out = tmp_path / f"{len(docs)}.json"
        argv = ["ksniff", "audit", str(CAPTURE), "--json", str(out), "-q"]
        child = f"import sys; sys.argv = {argv!r}\n{call}"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run(
            [sys.executable, "-c", child], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 1, done.stderr  # the capture has findings
        docs.append(json.loads(out.read_text()))
    assert docs[0] == docs[1]
