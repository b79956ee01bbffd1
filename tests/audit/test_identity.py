"""Identity and fencing: instances of a transactional id, zombies, epoch regressions."""

from __future__ import annotations

from conftest import APP2, Wire

from ksniff.audit.codes import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED

T = "orders-txn"
STALE_REJECTED = ("epoch_regression", "warning")
STALE_ACCEPTED = ("epoch_regression", "critical")


def takeover(wire: Wire, new_pid: int = 7, new_epoch: int = 1):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.end_txn(T, 7, 0)
    return wire.init(T, new_pid, new_epoch, conn=2, client=APP2, client_id="app-2")


def test_a_newer_instance_taking_over_is_context(wire: Wire):
    got = takeover(wire)
    assert wire.kinds(got) == [("producer_fenced", "info")]
    f = got[0]
    # The finding names the fenced instance; the evidence its successor.
    assert (f.transactional_id, f.producer_id, f.producer_epoch) == (T, 7, 0)
    assert (f.evidence["new_producer_id"], f.evidence["new_epoch"]) == (7, 1)
    assert f.evidence["previous_client"] == "10.0.0.11:50001"
    assert f.evidence["self_bump"] is False
    row = wire.finish().producers[0]
    assert row.epochs == (0, 1) and row.client_ids == ("app", "app-2")


def test_the_zombie_rejected_is_a_warning(wire: Wire):
    takeover(wire)
    got = wire.add_partitions(T, 7, 0, [("orders", 0)], err=PRODUCER_FENCED)
    # A stale epoch of the same producer id is also an epoch regression (docs/contract.md).
    assert wire.kinds(got) == [STALE_REJECTED, ("producer_fenced", "warning")]
    assert got[1].evidence["broker_error"] == "PRODUCER_FENCED"
    assert got[1].evidence["current_epoch"] == 1
    got = wire.end_txn(T, 7, 0, err=INVALID_PRODUCER_EPOCH)
    assert wire.kinds(got) == [STALE_REJECTED, ("producer_fenced", "warning")]
    assert [t.outcome for t in wire.finish().transactions] == ["commit"]


def test_the_zombie_accepted_is_critical(wire: Wire):
    takeover(wire)
    got = wire.add_partitions(T, 7, 0, [("orders", 1)])
    assert wire.kinds(got) == [STALE_ACCEPTED, ("zombie_write_accepted", "critical")]
    got = wire.produce(T, 7, 0, [("orders", 1, 0, 2, 0, 50), ("orders", 2, 0, 2, 0, 60)])
    assert wire.kinds(got) == [STALE_ACCEPTED] + [("zombie_write_accepted", "critical")] * 2
    assert [(f.topic, f.partition) for f in got[1:]] == [("orders", 1), ("orders", 2)]
    got = wire.end_txn(T, 7, 0)
    assert wire.kinds(got) == [STALE_ACCEPTED, ("zombie_write_accepted", "critical")]
    # The broker committed the zombie's transaction: it counts, under the zombie's epoch.
    out = wire.finish()
    assert [(t.outcome, t.producer_epoch, t.partitions) for t in out.transactions] == [
        ("commit", 0, ("orders-0",)),
        ("commit", 0, ("orders-1", "orders-2")),
    ]


def test_a_new_producer_id_supersedes_the_old_one(wire: Wire):
    takeover(wire, new_pid=8, new_epoch=0)
    got = wire.produce(T, 7, 0, [("orders", 0, 5, 1, 0, 120)])
    assert wire.kinds(got) == [("zombie_write_accepted", "critical")]


def test_one_fenced_finding_per_rejected_request(wire: Wire):
    takeover(wire)
    got = wire.produce(
        T, 7, 0, [("orders", 1, 0, 2, PRODUCER_FENCED, None), ("orders", 2, 0, 2, PRODUCER_FENCED, None)]
    )
    assert wire.kinds(got) == [STALE_REJECTED, ("producer_fenced", "warning")]


def test_the_broker_fencing_an_instance_we_never_saw_replaced(wire: Wire):
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    got = wire.produce(T, 7, 0, [("orders", 0, 0, 2, INVALID_PRODUCER_EPOCH, None)])
    assert wire.kinds(got) == [("producer_fenced", "warning")]
    # Once the broker said so, that instance is fenced: a later acceptance is a zombie write.
    got = wire.produce(T, 7, 0, [("orders", 1, 0, 2, 0, 9)])
    assert wire.kinds(got) == [("zombie_write_accepted", "critical")]


def test_self_bump_is_reported_as_such(wire: Wire):
    wire.init(T, 7, 0)
    got = wire.init(T, 7, 1, req_pid=7, req_epoch=0)
    assert wire.kinds(got) == [("producer_fenced", "info")]
    assert got[0].evidence["self_bump"] is True


def test_the_broker_handing_out_a_lower_epoch(wire: Wire):
    wire.init(T, 7, 5)
    got = wire.init(T, 7, 3)
    assert wire.kinds(got) == [("epoch_regression", "critical")]


def test_idempotent_epoch_regression(wire: Wire):
    wire.init(None, 9, 0)
    wire.produce(None, 9, 0, [("events", 0, 0, 5, 0, 0)])
    wire.produce(None, 9, 1, [("events", 0, 0, 5, 0, 5)])  # a client-side bump (KIP-360)
    got = wire.produce(None, 9, 0, [("events", 0, 5, 5, 0, 10)])
    assert wire.kinds(got) == [("epoch_regression", "critical")]
    assert got[0].evidence["highest_epoch"] == 1
    got = wire.produce(None, 9, 0, [("events", 0, 5, 5, INVALID_PRODUCER_EPOCH, None)])
    assert wire.kinds(got) == [("epoch_regression", "warning")]
    assert wire.finish().producers[0].epochs == (0, 1)


def test_an_unseen_newer_instance_is_adopted(wire: Wire):
    """The capture missed an InitProducerId: the accepted newer epoch becomes current, the older one a
    zombie from then on."""
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    assert wire.add_partitions(T, 7, 2, [("orders", 0)]) == []
    got = wire.produce(T, 7, 0, [("orders", 0, 5, 5, PRODUCER_FENCED, None)])
    assert wire.kinds(got) == [STALE_REJECTED, ("producer_fenced", "warning")]
    assert [t.outcome for t in wire.finish().transactions] == ["unknown", "open"]


def test_a_zombie_transaction_left_open_is_judged_like_any_other(wire: Wire):
    takeover(wire)
    wire.add_partitions(T, 7, 0, [("orders", 1)])
    wire.produce(T, 7, 0, [("orders", 1, 0, 2, 0, 50)])
    out = wire.finish(after=120)
    assert [(t.outcome, t.producer_epoch) for t in out.transactions] == [("commit", 0), ("open", 0)]
    assert [(f.kind, f.severity) for f in out.findings if f.kind == "hanging_transaction"] == [
        ("hanging_transaction", "warning")
    ]
