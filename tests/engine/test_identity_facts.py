"""A capture set's cluster identity from the naming answers' facts (ksniff.decode.identity.fact_of), as
the Spark engine's tasks ship them: each distinct fact at the first and the last place a task saw it,
whatever the answers themselves weigh (a Metadata answer lists every topic and partition)."""

from __future__ import annotations

import importlib.util
import pickle
import random
from pathlib import Path

import pytest

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CAPTURES = sorted(PCAPS.glob("*.pcap"))


def _exchanges(path: Path) -> list:
    """Every exchange of one capture, in the order the decoder gave them."""
    from ksniff.capture import read_files
    from ksniff.config import EngineConfig
    from ksniff.decode.events import Exchange

    config = EngineConfig()
    run = read_files([str(path)], config.limits)
    decoder = config.decoder(run.drop, run.drop)
    out = []
    for event in run:
        out.extend(e for e in decoder.feed(event) if e.__class__ is Exchange)
    out.extend(e for e in decoder.finish() if e.__class__ is Exchange)
    return out


def _shipped(facts: list[tuple], tasks_n: int, seed: int) -> tuple[list[dict], int]:
    """The driver's IDENTITY rows of `facts` (the n-th taught at place n) decoded by `tasks_n` tasks, each
    given a random share of them in a shuffled order, as a task's flows come one after another."""
    from ksniff.engine import spark_tasks as tasks

    rng = random.Random(seed)
    shares: list[list[tuple[int, tuple]]] = [[] for _ in range(tasks_n)]
    for n, fact in enumerate(facts):
        shares[rng.randrange(tasks_n)].append((n, fact))
    rows = []
    for share in shares:
        rng.shuffle(share)
        seen = tasks._Seen()
        for n, fact in share:
            seen.learnt(fact, (float(n), 0.0, 0, 0.0, 0, 0, 0.0, 0, 0))
        out = tasks._Rows()
        seen.add_rows(out)
        rows.extend(r for r in out.take().to_pylist() if r["kind"] == tasks.IDENTITY)
    return rows, len(facts)


@pytest.mark.skipif(not CAPTURES, reason="no corpus captures")
@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow missing")
def test_the_facts_teach_what_the_answers_teach() -> None:
    """On every corpus capture: the facts learnt in order give the clusters the answers give, and so do
    the rows of tasks that each kept a fact's first and last place only."""
    from ksniff.decode.identity import IDENTITY_APIS, Identity, fact_of
    from ksniff.engine.spark import _identity

    named = coordinated = shrunk = 0
    for path in CAPTURES:
        exchanges = _exchanges(path)
        whole = Identity()
        for ex in exchanges:
            whole.feed(ex)
        facts = [
            fact
            for ex in exchanges
            if ex.api_name in IDENTITY_APIS and ex.response is not None and (fact := fact_of(ex)) is not None
        ]
        learnt = Identity()
        for ex in exchanges:
            learnt.saw_broker(ex.broker)
        for fact in facts:
            learnt.learn(fact)
        assert learnt.clusters() == whole.clusters(), path.name
        for seed, tasks_n in ((1, 1), (2, 3)):
            rows, n = _shipped(facts, tasks_n, seed)
            brokers = [{"blob": pickle.dumps(tuple(ex.broker for ex in exchanges))}]
            assert _identity(brokers, rows).clusters() == whole.clusters(), (path.name, tasks_n)
            shrunk += n - len(rows)
        named += sum(1 for f in facts if f[0] == "named")
        coordinated += sum(1 for f in facts if f[0] == "coordinators")
    assert named and coordinated  # the corpus has both kinds of answers
    assert shrunk > 0  # repeated answers were shipped fewer times than they came


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow missing")
def test_the_last_answer_wins_across_tasks() -> None:
    """A broker listed at one host, then another, then the first again (by answers of two tasks): the
    last answer's host is the broker's; a coordinator that moved and moved back likewise."""
    from ksniff.decode.identity import COORDINATORS, NAMED, Identity
    from ksniff.engine.spark import _identity

    at_a = (NAMED, "10.0.0.1:9092", "c1", ((1, "host-a", 9092),))
    at_b = (NAMED, "10.0.0.1:9092", "c1", ((1, "host-b", 9092),))
    to_1 = (COORDINATORS, "10.0.0.1:9092", "transaction", (("tx", 1),))
    to_2 = (COORDINATORS, "10.0.0.1:9092", "transaction", (("tx", 2),))
    facts = [at_a, to_1, at_b, to_2, at_a, to_1, at_b, at_a, to_1]
    whole = Identity()
    for fact in facts:
        whole.learn(fact)
    (cluster,) = whole.clusters()
    assert [b.host for b in cluster.brokers] == ["host-a"] and cluster.coordinators == (
        ("transaction", "tx", 1),
    )
    for seed in range(20):
        rows, _n = _shipped(facts, 2, seed)
        assert _identity([], rows).clusters() == whole.clusters(), seed


def test_a_coordinator_named_before_its_cluster_is_the_clusters() -> None:
    """A FindCoordinator answer that comes before any answer names its broker's cluster (a client asking
    for its coordinator first) is listed under the cluster the capture names that broker in, not apart
    as a cluster without an id."""
    from ksniff.decode.identity import COORDINATORS, NAMED, Identity

    identity = Identity()
    identity.saw_broker("10.0.0.1:9092")
    identity.learn((COORDINATORS, "10.0.0.1:9092", "transaction", (("orders-txn", 1),)))
    identity.learn((NAMED, "10.0.0.1:9092", "prod-eu", ((1, "10.0.0.1", 9092),)))
    (cluster,) = identity.clusters()
    assert cluster.cluster_id == "prod-eu"
    assert cluster.coordinators == (("transaction", "orders-txn", 1),)
