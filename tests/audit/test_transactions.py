"""Transactions per transactional id: begin, registrations, end, outcomes, and the illegal transitions."""

from __future__ import annotations

from conftest import APP2, Wire

from ksniff.audit.codes import CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE
from ksniff.audit.txn import ALLOWED, ILLEGAL, Trigger, TxnState

T = "orders-txn"


def committed(
    wire: Wire, pid: int = 7, epoch: int = 0, seq: int = 0, commit: bool = True, parts=(("orders", 0),)
) -> None:
    """A transaction writing 5 records to each partition, the first starting at `seq`, others at 0."""
    wire.add_partitions(T, pid, epoch, list(parts))
    wire.produce(
        T, pid, epoch, [(t, p, seq if i == 0 else 0, 5, 0, 100 + seq) for i, (t, p) in enumerate(parts)]
    )
    wire.end_txn(T, pid, epoch, commit=commit)


def outcomes(output) -> list[str]:
    return [t.outcome for t in output.transactions]


def test_every_transition_is_allowed_or_named_as_a_finding():
    for state in TxnState:
        assert state.entered_by, f"{state} says which request enters it"
        for trigger in Trigger:
            assert trigger in ALLOWED[state] or trigger in ILLEGAL, (state, trigger)


def test_commit_abort_commit_is_clean_and_counted(wire: Wire):
    wire.init(T, 7, 0)
    committed(wire, seq=0)
    committed(wire, seq=5, commit=False)
    committed(wire, seq=10, parts=(("orders", 0), ("orders", 1)))
    out = wire.finish()
    assert wire.findings == []
    assert outcomes(out) == ["commit", "abort", "commit"]
    third = out.transactions[2]
    assert third.partitions == ("orders-0", "orders-1")
    assert third.records == 10 and third.producer_id == 7 and third.end_ts is not None
    (row,) = out.producers
    assert (row.transactional_id, row.producer_id, row.epochs) == (T, 7, (0,))
    assert (row.batches, row.records, row.commit, row.abort, row.open, row.unknown) == (4, 20, 2, 1, 0, 0)
    assert row.clients == ("10.0.0.11:50001",) and row.client_ids == ("app",)


def test_rejected_end_txn_does_not_end_the_transaction(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.end_txn(T, 7, 0, err=CONCURRENT_TRANSACTIONS)
    assert outcomes(wire.finish()) == ["open"]
    wire.end_txn(T, 7, 0)
    wire.end_txn(T, 7, 0)  # a retry of the same end: answered NONE, nothing new
    assert outcomes(wire.finish()) == ["commit"]
    assert wire.findings == []


def test_offsets_in_a_transaction_record_the_group(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("out", 0)])
    wire.produce(T, 7, 0, [("out", 0, 0, 1, 0, 5)])
    wire.add_offsets(T, 7, 0, "ctp-group")
    wire.txn_offset_commit(T, 7, 0, "ctp-group", {("in", 0): 42})
    wire.end_txn(T, 7, 0)
    (txn,) = wire.finish().transactions
    assert txn.groups == ("ctp-group",) and txn.outcome == "commit"
    assert wire.findings == []


def test_txn_offset_commit_for_a_group_not_added(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_offsets(T, 7, 0, "g1")
    got = wire.txn_offset_commit(T, 7, 0, "g2", {("in", 0): 42})
    assert wire.kinds(got) == [("txn_offset_commit_unregistered_group", "critical")]
    assert got[0].group == "g2" and got[0].evidence["groups_added"] == ["g1"]
    got = wire.txn_offset_commit(T, 7, 0, "g3", {("in", 0): 42}, err=INVALID_TXN_STATE)
    assert wire.kinds(got) == [("txn_offset_commit_unregistered_group", "warning")]


def test_txn_offset_commit_outside_a_transaction(wire: Wire):
    wire.init(T, 7, 0)
    got = wire.txn_offset_commit(T, 7, 0, "g", {("in", 0): 1})
    assert wire.kinds(got) == [("txn_offset_commit_unregistered_group", "critical")]


def test_txn_offset_commit_v5_needs_no_add_offsets(wire: Wire):
    wire.init(T, 7, 0, version=5)
    assert wire.txn_offset_commit(T, 7, 0, "g", {("in", 0): 1}, version=5) == []
    assert wire.finish().transactions[0].groups == ("g",)


def test_write_to_a_partition_not_registered(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    got = wire.produce(T, 7, 0, [("orders", 1, 0, 3, 0, 9)])
    assert wire.kinds(got) == [("write_to_unregistered_partition", "critical")]
    assert (got[0].topic, got[0].partition) == ("orders", 1)
    got = wire.produce(T, 7, 0, [("orders", 2, 0, 3, INVALID_TXN_STATE, None)])
    assert wire.kinds(got) == [("write_to_unregistered_partition", "warning")]


def test_unregistered_write_after_capture_loss_is_info(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.lost()
    got = wire.produce(T, 7, 0, [("orders", 1, 0, 3, 0, 9)], unverified=True)
    assert wire.kinds(got) == [("write_to_unregistered_partition", "info")]
    assert got[0].evidence["unverified"] is True


def test_transactional_write_outside_a_transaction(wire: Wire):
    wire.init(T, 7, 0)
    committed(wire)
    got = wire.produce(T, 7, 0, [("orders", 0, 5, 1, 0, 200)])
    assert wire.kinds(got) == [("write_outside_transaction", "critical")]
    got = wire.produce(T, 7, 0, [("orders", 0, 6, 1, INVALID_TXN_STATE, None)])
    assert wire.kinds(got) == [("write_outside_transaction", "warning")]


def test_transaction_version_2_begins_with_the_first_write(wire: Wire):
    wire.init(T, 7, 0, version=5)
    assert wire.produce(T, 7, 0, [("orders", 0, 0, 2, 0, 10)], version=12) == []
    # EndTxn v5 answers with the bumped epoch; the next transaction uses it and restarts sequences.
    assert wire.end_txn(T, 7, 0, version=5, new_pid=7, new_epoch=1) == []
    assert wire.produce(T, 7, 1, [("orders", 0, 0, 2, 0, 12)], version=12) == []
    assert wire.end_txn(T, 7, 1, commit=False, version=5, new_pid=7, new_epoch=2) == []
    out = wire.finish()
    assert outcomes(out) == ["commit", "abort"]
    assert [t.producer_epoch for t in out.transactions] == [0, 1]
    assert out.producers[0].epochs == (0, 1, 2)
    # A late write with an epoch the coordinator bumped past is a zombie's.
    got = wire.produce(T, 7, 1, [("orders", 0, 2, 1, 47, None)], version=12)
    assert wire.kinds(got) == [("epoch_regression", "warning"), ("producer_fenced", "warning")]


def test_end_txn_without_a_transaction(wire: Wire):
    wire.init(T, 7, 0)
    got = wire.end_txn(T, 7, 0, err=INVALID_TXN_STATE)
    assert wire.kinds(got) == [("end_txn_without_transaction", "warning")]
    committed(wire)
    got = wire.end_txn(T, 7, 0, commit=False)  # abort after the commit was accepted
    assert wire.kinds(got) == [("end_txn_without_transaction", "warning")]
    assert outcomes(wire.finish()) == ["commit"]


def test_abort_of_nothing_is_legal_under_transaction_version_2(wire: Wire):
    wire.init(T, 7, 0, version=5)
    assert wire.end_txn(T, 7, 0, commit=False, version=5, new_pid=7, new_epoch=1) == []
    assert wire.finish().transactions == ()


def test_capture_starting_mid_transaction(wire: Wire):
    wire.produce(T, 7, 3, [("orders", 0, 40, 5, 0, 1000)])
    wire.end_txn(T, 7, 3)
    wire.end_txn("other", 8, 0)  # another transactional id's end alone: still a transaction seen
    out = wire.finish()
    assert wire.findings == []
    assert outcomes(out) == ["commit", "commit"]
    assert out.transactions[0].records == 5


def sources(out) -> list[tuple[str, str | None]]:
    return [(t.outcome, t.outcome_source) for t in out.transactions]


def test_a_takeover_aborts_the_open_transaction_and_markers_confirm_it(wire: Wire):
    """KIP-98: an accepted InitProducerId for a transactional id with a transaction open makes the
    coordinator abort it."""
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.init(T, 7, 1, client=APP2, conn=2, timeout_ms=1000)
    out = wire.finish(after=120)
    assert sources(out) == [("abort", "takeover")]
    assert not [f for f in out.findings if f.kind == "hanging_transaction"]
    wire.markers(7, 1, False, [("orders", 0)])
    assert sources(wire.finish()) == [("abort", "markers")]


def test_a_broker_that_lets_the_superseded_instance_commit_gives_one_committed_transaction(wire: Wire):
    """librdkafka's mock: the takeover gets a new producer id, the old instance's open transaction stays
    open and its later EndTxn(commit) is accepted. One transaction, committed; the zombie's writes are
    critical."""
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.init(T, 8, 0, client=APP2, conn=2)
    got = wire.produce(T, 7, 0, [("orders", 0, 5, 5, 0, 105)])
    assert ("zombie_write_accepted", "critical") in wire.kinds(got)
    got = wire.end_txn(T, 7, 0)
    assert ("zombie_write_accepted", "critical") in wire.kinds(got)
    out = wire.finish()
    assert sources(out) == [("commit", "end_txn")]
    assert out.transactions[0].records == 10


def test_a_takeover_then_the_old_instance_starting_again_ends_the_aborted_one(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.init(T, 8, 0, client=APP2, conn=2)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 5, 5, 0, 105)])
    wire.end_txn(T, 7, 0)
    assert sources(wire.finish()) == [("abort", "takeover"), ("commit", "end_txn")]


def test_adding_the_same_partitions_again_means_a_new_transaction(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    # The EndTxn was not captured (another coordinator connection); the next transaction begins.
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 5, 5, 0, 105)])
    wire.end_txn(T, 7, 0)
    assert outcomes(wire.finish()) == ["unknown", "commit"]
    assert wire.findings == []


def test_unanswered_end_txn_gives_its_intent_from_the_request_alone(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.end_txn(T, 7, 0, err=None)
    assert sources(wire.finish()) == [("commit", "request")]


def test_unanswered_end_txn_then_the_next_transaction_proves_it_ended(wire: Wire):
    """The coordinator refuses a new transaction while the previous one is still completing: the same
    producer id and epoch beginning another means the EndTxn went through as asked."""
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    sent = wire.ts
    wire.end_txn(T, 7, 0, commit=False, err=None)
    wire.add_partitions(T, 7, 0, [("orders", 1)])
    wire.produce(T, 7, 0, [("orders", 1, 0, 5, 0, 100)])
    wire.end_txn(T, 7, 0)
    out = wire.finish()
    assert sources(out) == [("abort", "next_transaction"), ("commit", "end_txn")]
    assert out.transactions[0].end_ts >= sent and out.transactions[0].records == 5
    assert wire.findings == []


def test_markers_without_end_txn_end_the_transaction(wire: Wire):
    wire.init(T, 7, 0, timeout_ms=1000)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.tick(2)
    wire.markers(7, 1, False, [("orders", 0)])  # the coordinator aborted it on timeout, bumping the epoch
    out = wire.finish(after=60)
    assert outcomes(out) == ["abort"]
    assert not [f for f in out.findings if f.kind == "hanging_transaction"]
    got = wire.end_txn(T, 7, 0, err=47)
    assert wire.kinds(got) == [("producer_fenced", "warning")]


def test_hanging_transaction_uses_the_producers_timeout(wire: Wire):
    wire.init(T, 7, 0, timeout_ms=10_000)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    assert outcomes(wire.finish(after=5)) == ["open"]
    assert not wire.finish(after=5).findings
    out = wire.finish(after=11)
    (hanging,) = out.findings
    assert (hanging.kind, hanging.severity, hanging.topic, hanging.partition) == (
        "hanging_transaction",
        "warning",
        "orders",
        0,
    )
    assert hanging.evidence["timeout_ms"] == 10_000
    assert outcomes(out) == ["open"]
    assert out.producers[0].open == 1


def test_hanging_transaction_falls_back_to_the_configured_timeout():
    wire = Wire(timeout_ms=2000)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    (hanging,) = wire.finish(after=3).findings
    assert hanging.evidence["timeout_from"] == "--txn-timeout"


def test_no_hanging_without_data(wire: Wire):
    wire.init(T, 7, 0, timeout_ms=1000)
    wire.add_offsets(T, 7, 0, "g")
    out = wire.finish(after=100)
    assert out.findings == () and outcomes(out) == ["open"]


def test_hanging_after_capture_loss_is_unknown_and_info(wire: Wire):
    wire.init(T, 7, 0, timeout_ms=1000)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.lost()
    out = wire.finish(after=5)
    assert outcomes(out) == ["unknown"]
    hanging = [f for f in out.findings if f.kind == "hanging_transaction"]
    assert [(f.severity, f.evidence["unverified"]) for f in hanging] == [("info", True)]


def test_add_partitions_batch_from_a_broker(wire: Wire):
    """v4+ batches name several transactions; verify-only entries add nothing."""
    wire.init("a", 1, 0)
    wire.init("b", 2, 0)
    wire.send(
        "AddPartitionsToTxn",
        4,
        {
            "transactions": [
                {
                    "transactional_id": "a",
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "verify_only": False,
                    "topics": [{"name": "t", "partitions": [0]}],
                },
                {
                    "transactional_id": "b",
                    "producer_id": 2,
                    "producer_epoch": 0,
                    "verify_only": True,
                    "topics": [{"name": "t", "partitions": [1]}],
                },
            ]
        },
        {
            "error_code": 0,
            "results_by_transaction": [
                {
                    "transactional_id": "a",
                    "topic_results": [
                        {
                            "name": "t",
                            "results_by_partition": [{"partition_index": 0, "partition_error_code": 0}],
                        }
                    ],
                },
                {
                    "transactional_id": "b",
                    "topic_results": [
                        {
                            "name": "t",
                            "results_by_partition": [{"partition_index": 1, "partition_error_code": 0}],
                        }
                    ],
                },
            ],
        },
    )
    out = wire.finish()
    assert [(t.transactional_id, t.partitions) for t in out.transactions] == [("a", ("t-0",))]


# WriteTxnMarkers is inter-broker traffic that no broker available here produces (Tansu and librdkafka's
# mock keep markers internal): these exchanges are built from Kafka's protocol facts (WriteTxnMarkers v1,
# coordinator to partition leader), as the corpus README says.


def test_markers_that_contradict_the_accepted_end_txn_are_critical(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.end_txn(T, 7, 0, commit=True)
    got = wire.markers(7, 0, False, [("orders", 0)])
    assert wire.kinds(got) == [("markers_disagree", "critical")]
    assert got[0].evidence["end_txn_result"] == "commit" and got[0].evidence["marker_result"] == "abort"
    # The outcome is what the client was told; the finding says the rest.
    assert sources(wire.finish()) == [("commit", "end_txn")]


def test_markers_that_agree_are_quiet(wire: Wire):
    wire.init(T, 7, 0)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.end_txn(T, 7, 0, commit=True)
    assert wire.markers(7, 0, True, [("orders", 0)]) == []


def test_a_commit_accepted_after_the_timeout_is_reported(wire: Wire):
    wire.init(T, 7, 0, timeout_ms=1000)
    wire.add_partitions(T, 7, 0, [("orders", 0)])
    wire.produce(T, 7, 0, [("orders", 0, 0, 5, 0, 100)])
    wire.tick(3)
    got = wire.end_txn(T, 7, 0)
    assert wire.kinds(got) == [("transaction_ended_after_timeout", "warning")]
    assert got[0].evidence["timeout_ms"] == 1000 and got[0].evidence["took_ms"] > 1000
    wire.add_partitions(T, 7, 0, [("orders", 1)])
    wire.produce(T, 7, 0, [("orders", 1, 0, 5, 0, 100)])
    assert wire.end_txn(T, 7, 0) == []  # in time
