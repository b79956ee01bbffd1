"""The fold's steps in C (ksniff.audit._steps) against their Python functions, the references.

The partition logs' placing of acknowledged batches (`partlog._on_produce`): every corpus capture audits
to the same document and tables with either; fed the corpus's exchanges directly, the two leave the same
logs, transactional writes and findings, whole or split by partition as the Spark engine splits them,
and with the logs' cap at three batches; and the C function places every Produce exchange of the corpus
itself. A producer seen (`identity.see_producer`): the same audits, and the C function takes every call.
Where the compiled module is not built these tests skip (CI fails instead)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from compiled_support import require_compiled
from corpus_decode import decoded

from ksniff.audit import fold, identity, partlog, produce, transactions
from ksniff.audit.keys import producer_keys
from ksniff.audit.state import AuditState
from ksniff.config import EngineConfig
from ksniff.decode.events import Exchange
from ksniff.engine.local import audit_paths
from ksniff.report.tables import frames

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)


@pytest.fixture(scope="module")
def placing():
    require_compiled("ksniff.audit._steps", "the fold's steps in C")
    assert partlog._on_produce is not partlog._on_produce_python, "the placing in C was not taken up"
    return partlog._on_produce


def _audited(path: Path) -> tuple:
    result = audit_paths([str(path)], EngineConfig())
    tables = {name: t.to_json(orient="split", date_format="iso") for name, t in frames(result).items()}
    return json.dumps(result.as_contract(), sort_keys=True), tables


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_audits_identical(path, monkeypatch, placing):
    ours = _audited(path)
    monkeypatch.setattr(partlog, "_on_produce", partlog._on_produce_python)
    assert ours == _audited(path)


def _exchanges(path: Path) -> list[Exchange]:
    events = decoded(path, pieces=True)[0]
    return sorted((e for e in events if isinstance(e, Exchange)), key=lambda e: e.request_ts)


def _placed(exchanges: list[Exchange], on_produce, split) -> tuple:
    st = partlog.LogState(split=split)
    ctx = partlog.Context({})
    out: list = []
    for ex in exchanges:
        if ex.api_name == "Produce" and ex.request is not None:
            on_produce(st, ex, out, ctx)
        else:
            partlog.on_exchange(st, ex, out, ctx)
    return st.logs, st.txn_writes, st.txn_ids, out


PRODUCING = [p for p in CORPUS if any(e.api_name == "Produce" for e in _exchanges(p))]


@pytest.mark.parametrize("split", [None, (2, 0), (2, 1)])
@pytest.mark.parametrize("path", PRODUCING, ids=lambda p: p.name)
def test_the_same_logs_whole_and_split(path, split, placing):
    exchanges = _exchanges(path)
    ours = _placed(exchanges, placing, split)
    assert ours == _placed(exchanges, partlog._on_produce_python, split)


@pytest.mark.parametrize("path", PRODUCING, ids=lambda p: p.name)
def test_the_same_logs_past_their_cap(path, monkeypatch, placing):
    """Three batches a partition at most (the cap read as the Python function reads it, at each
    exchange): the oldest forgotten as the Python function forgets them."""
    monkeypatch.setattr(partlog, "MAX_BATCHES", 3)
    exchanges = _exchanges(path)
    ours = _placed(exchanges, placing, None)
    assert ours == _placed(exchanges, partlog._on_produce_python, None)
    logs = ours[0].values()
    assert all(len(lg.at) <= 3 for lg in logs)
    if any(lg.acked_batches > 3 for lg in logs):  # more placed than kept: the oldest were forgotten
        assert any(lg.forgotten for lg in logs)


def test_the_cap_is_reached_in_the_corpus(placing):
    """The test above forgets batches for some captures (not only compares logs under their cap)."""
    assert any(
        lg.acked_batches > 3
        for path in PRODUCING
        for lg in _placed(_exchanges(path), partlog._on_produce_python, None)[0].values()
    )


def _handed_back(make, reference, feed) -> tuple[int, list]:
    """The corpus's Produce exchanges fed (`feed(exchanges, step)`) to the C step `make(python)` makes,
    its Python fallback `reference` wrapped to note each exchange it is handed: how many Produce
    exchanges there were, and those the C step handed to Python."""
    handed: list = []

    def python(*args):
        handed.append(args[1])
        return reference(*args)

    step = make(python)
    produced = 0
    for path in PRODUCING:
        exchanges = _exchanges(path)
        produced += sum(e.api_name == "Produce" and e.request is not None for e in exchanges)
        feed(exchanges, step)
    return produced, handed


def test_every_produce_exchange_of_the_corpus_is_placed_in_c(placing):
    placed, handed = _handed_back(
        partlog._compiled_on_produce,
        partlog._on_produce_python,
        lambda exchanges, step: _placed(exchanges, step, None),
    )
    assert placed > 200
    assert handed == []


@pytest.fixture(scope="module")
def seeing():
    require_compiled("ksniff.audit._steps", "the fold's steps in C")
    assert identity.see_producer is not identity.see_producer_python, "see_producer in C was not taken up"
    assert transactions.see_producer is identity.see_producer
    return identity.see_producer


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_audits_identical_seeing_producers_in_python(path, monkeypatch, seeing):
    ours = _audited(path)
    monkeypatch.setattr(identity, "see_producer", identity.see_producer_python)
    monkeypatch.setattr(transactions, "see_producer", identity.see_producer_python)
    assert ours == _audited(path)


def test_every_producer_seen_in_the_corpus_is_seen_in_c(monkeypatch, seeing):
    handed: list = []

    def python(*args):
        handed.append(args)
        return identity.see_producer_python(*args)

    counted = identity._compiled_see_producer(python)
    calls = []

    def seen(*args):
        calls.append(args)
        return counted(*args)

    monkeypatch.setattr(identity, "see_producer", seen)
    monkeypatch.setattr(transactions, "see_producer", seen)
    for path in PRODUCING:
        _audited(path)
    assert len(calls) > 200
    assert handed == []


def _orders(exchanges: list[Exchange]) -> dict[str, list[Exchange]]:
    """The corpus's exchanges in orders real traffic seldom shows, to reach the placing's rare steps: the
    Produce exchanges in reverse (an offset acknowledged before an earlier one: `bisect.insort`), every
    Fetch first (a batch returned before its acknowledgement: `_lost` and the acknowledgement set on the
    placed batch), and every third batch damaged (its CRC-32C not matching: not placed)."""
    produce = [e for e in exchanges if e.api_name == "Produce"]
    rest = [e for e in exchanges if e.api_name != "Produce"]
    fetches = [e for e in exchanges if e.api_name == "Fetch"]
    damaged = []
    for i, ex in enumerate(exchanges):
        if ex.api_name == "Produce" and ex.batches:
            batches = tuple(
                dataclasses.replace(b, header=dataclasses.replace(b.header, crc_ok=False))
                if (i + j) % 3 == 0
                else b
                for j, b in enumerate(ex.batches)
            )
            ex = dataclasses.replace(ex, batches=batches)
        damaged.append(ex)
    return {
        "produce reversed": rest + produce[::-1],
        "fetches first": fetches + [e for e in exchanges if e.api_name != "Fetch"],
        "batches damaged": damaged,
    }


@pytest.mark.parametrize("order", ["produce reversed", "fetches first", "batches damaged"])
@pytest.mark.parametrize("path", PRODUCING, ids=lambda p: p.name)
def test_the_same_logs_in_rare_orders(path, order, placing):
    exchanges = _orders(_exchanges(path))[order]
    assert _placed(exchanges, placing, None) == _placed(exchanges, partlog._on_produce_python, None)


@pytest.fixture(scope="module")
def producing():
    require_compiled("ksniff.audit._steps", "the fold's steps in C")
    assert produce.on_produce is not produce.on_produce_python, "on_produce in C was not taken up"
    assert fold.HANDLERS["Produce"] is produce.on_produce
    return produce.on_produce


def _judging_in_python(monkeypatch) -> None:
    monkeypatch.setattr(produce, "on_produce", produce.on_produce_python)
    monkeypatch.setitem(fold.HANDLERS, "Produce", produce.on_produce_python)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_audits_identical_judging_produce_in_python(path, monkeypatch, producing):
    ours = _audited(path)
    _judging_in_python(monkeypatch)
    assert ours == _audited(path)


def _folded(exchanges: list[Exchange], on_produce, monkeypatch, key: str | None = None) -> tuple:
    """What the fold knows and reports after `exchanges`, each Produce judged by `on_produce`: the
    producers, transactional ids, transactions, sequences, findings, and the finished output."""
    monkeypatch.setitem(fold.HANDLERS, "Produce", on_produce)
    state = AuditState.initial(key=key)
    out = [f for ex in exchanges for f in fold.feed(state, ex)]
    known = (state.producers, state.txn_ids, state.transactions, state.sequences)
    return (*known, out, fold.finish(state, exchanges[-1].request_ts if exchanges else None))


def _judged_orders(exchanges: list[Exchange]) -> dict[str, list[Exchange]]:
    """The corpus's exchanges as they came, and in orders and states that reach the judging's rare
    steps: the placing's rare orders (`_orders`: the Produce exchanges reversed, so sequences and epochs
    go back, with gaps, duplicates, batches out of order, epoch regressions and zombies; every third batch
    damaged), every third Produce left unanswered (its batches waiting for an answer, which a later batch
    may cover), every Produce sent twice on its connection (the broker's answer to the second the same),
    every Produce sent with acks=0, and every Produce as Produce v12 (transaction.version 2, where a
    transactional write needs no registration: the corpus's clients send v7-v11)."""
    unanswered, twice, fire, tv2 = [], [], [], []
    for i, ex in enumerate(exchanges):
        if ex.api_name != "Produce" or not ex.batches:
            unanswered.append(ex), twice.append(ex), fire.append(ex), tv2.append(ex)
            continue
        tv2.append(dataclasses.replace(ex, api_version=12))
        lost = tuple(dataclasses.replace(b, error_code=None, base_offset=None) for b in ex.batches)
        unanswered.append(
            dataclasses.replace(ex, response=None, response_ts=None, status="unanswered", batches=lost)
            if i % 3 == 0
            else ex
        )
        twice += [ex, dataclasses.replace(ex, correlation_id=ex.correlation_id + 1_000_000)]
        quiet = tuple(dataclasses.replace(b, acks=0, error_code=None, base_offset=None) for b in ex.batches)
        fire.append(dataclasses.replace(ex, response=None, status="no_response", batches=quiet))
    return {
        "as captured": exchanges,
        **_orders(exchanges),
        "unanswered": unanswered,
        "sent twice": twice,
        "acks=0": fire,
        "produce v12": tv2,
    }


JUDGED_ORDERS = [
    "as captured",
    "produce reversed",
    "fetches first",
    "batches damaged",
    "unanswered",
    "sent twice",
    "acks=0",
    "produce v12",
]


@pytest.mark.parametrize("order", JUDGED_ORDERS)
@pytest.mark.parametrize("path", PRODUCING, ids=lambda p: p.name)
def test_the_same_judgement_in_every_order(path, order, monkeypatch, producing):
    exchanges = _judged_orders(_exchanges(path))[order]
    ours = _folded(exchanges, producing, monkeypatch)
    assert ours == _folded(exchanges, produce.on_produce_python, monkeypatch)


def _produce_keys(path: Path) -> list[str]:
    return sorted({k for ex in _exchanges(path) if ex.api_name == "Produce" for k in producer_keys(ex) if k})


KEYED = [p for p in PRODUCING if _produce_keys(p)]


@pytest.mark.parametrize("path", KEYED, ids=lambda p: p.name)
def test_the_same_judgement_by_producer_key(path, monkeypatch, producing):
    """Each producer key's own fold, as the Spark engine folds them: a batch of a producer id the fold
    does not own is passed over (an idempotent producer's, `state.owns`) the same way."""
    exchanges = _exchanges(path)
    for key in _produce_keys(path):
        ours = _folded(exchanges, producing, monkeypatch, key)
        assert ours == _folded(exchanges, produce.on_produce_python, monkeypatch, key), key


def test_idempotent_producers_are_folded_by_key():
    """The test above folds idempotent producers by their producer id's key, not only transactional ids."""
    assert any(k.startswith("pid:") for p in KEYED for k in _produce_keys(p))


def test_the_rare_steps_are_reached(monkeypatch, producing):
    """The orders above reach what the C function hands to the Python functions: sequences out of order
    (gaps, duplicates), unanswered batches, epoch regressions and zombies, and findings of each."""
    kinds: set = set()
    for path in PRODUCING:
        for order in JUDGED_ORDERS:
            out = _folded(_judged_orders(_exchanges(path))[order], producing, monkeypatch)[4]
            kinds |= {f.kind for f in out}
    assert {"sequence_gap", "sequence_duplicate", "epoch_regression"} <= kinds, kinds
    assert kinds & {"zombie_write_accepted", "producer_fenced"}, kinds


def test_every_produce_exchange_of_the_corpus_is_judged_in_c(monkeypatch, producing):
    judged, handed = _handed_back(
        produce._compiled_on_produce,
        produce.on_produce_python,
        lambda exchanges, step: _folded(exchanges, step, monkeypatch),
    )
    assert judged > 200
    assert handed == []
