"""What the plain-socket scenarios (kafka-python's protocol classes, `raw.py`) share: one broker to
record against, a connection started as a client starts one, and the transactional steps recorded in
the ledger with the broker's answers."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import clients
from harness import Ledger, error_name, mock_cluster, scenario_ledger, tansu, tcpdump, write_expectations
from raw import RawConnection, record_batch
from registry import on_tansu_and_mock

RAW_CLIENT = "kafka-python protocol classes over a plain socket"
BROKER_NAMES = {"tansu": "tansu", "mock": "librdkafka-mock"}
KEEPER_NOTE = "The mock cluster's keeper client may also appear on the broker port."


@contextlib.contextmanager
def against(broker: str, topics: dict[str, int]) -> Iterator[tuple[str, int]]:
    """(host, port) of one broker ("tansu" or "mock") with `topics` created."""
    if broker == "tansu":
        with tansu() as bootstrap:
            clients.create_topics(bootstrap, topics)
            host, port = bootstrap.rsplit(":", 1)
            yield host, int(port)
    else:
        with mock_cluster(1) as cluster:
            # The mock creates a topic when a client first asks for it (its CreateTopics times out).
            ((host, port),) = cluster.brokers.values()
            yield host, port


def record_raw(
    out: Path,
    name: str,
    broker: str,
    traffic: Callable[[str, int, Ledger], None],
    notes: str | Callable[[str], str],
    topics: dict[str, int],
    keeper_note: bool = True,
) -> None:
    """Records `traffic(host, port, ledger)` against one broker as NAME.pcap and its expectations;
    `notes` are the ledger's first note (or make it from the broker's name)."""
    note = notes(broker) if callable(notes) else notes
    capture, ledger = scenario_ledger(out, name, BROKER_NAMES[broker], RAW_CLIENT, note)
    with against(broker, topics) as (host, port):
        with tcpdump(capture, [port]):
            traffic(host, port, ledger)
    if broker == "mock" and keeper_note:
        ledger.note(KEEPER_NOTE)
    write_expectations(ledger, capture, [port])


def raw_scenarios(
    stem: str,
    traffic: Callable[[str, int, Ledger], None],
    notes: str | Callable[[str], str],
    topics: dict[str, int],
    *,
    tansu: str,
    mock: str,
    keeper_note: bool = True,
) -> None:
    """STEM_tansu and STEM_mock: `traffic` recorded by record_raw against each broker."""
    record = functools.partial(
        record_raw, traffic=traffic, notes=notes, topics=topics, keeper_note=keeper_note
    )
    on_tansu_and_mock(stem, record, tansu=tansu, mock=mock)


@contextlib.contextmanager
def session(host: str, port: int, client_id: str, topic: str) -> Iterator[RawConnection]:
    """A connection that asked ApiVersions and Metadata for `topic` first, as clients do."""
    with RawConnection(host, port, client_id) as conn:
        conn.api_versions()
        conn.metadata([topic])
        yield conn


def first_error(codes: list[int]) -> int:
    return next((c for c in codes if c), 0)


def begin(
    conn: RawConnection, tid: str, ledger: Ledger, what: str, timeout_ms: int = 60000
) -> tuple[int, int, int]:
    """FindCoordinator and InitProducerId for `tid`, the answer recorded as `what`: (error, pid, epoch)."""
    conn.find_coordinator(tid)
    return init_producer(conn, tid, ledger, what, timeout_ms)


def init_producer(
    conn: RawConnection, tid: str, ledger: Ledger, what: str, timeout_ms: int = 60000
) -> tuple[int, int, int]:
    """InitProducerId for `tid` (a takeover when the id has an instance), the answer recorded as `what`."""
    err, pid, epoch = conn.init_producer_id(tid, timeout_ms=timeout_ms)
    ledger.answer(what, "InitProducerId", err, producer_id=pid, epoch=epoch)
    return err, pid, epoch


def add_and_write(
    conn: RawConnection,
    tid: str,
    pid: int,
    epoch: int,
    ledger: Ledger,
    topic: str,
    value: str,
    what: tuple[str, str],
) -> None:
    """AddPartitionsToTxn for `topic`-0, then two transactional records there from sequence 0; `what`
    names the two answers. The scenario stops if the write is rejected."""
    added = conn.add_partitions(tid, pid, epoch, topic, [0])
    ledger.answer(what[0], "AddPartitionsToTxn", first_error(added))
    err, offset = conn.produce(topic, 0, record_batch(pid, epoch, 0, 2, True, value), transactional_id=tid)
    ledger.answer(what[1], "Produce", err, base_offset=offset)
    if err:
        raise RuntimeError(f"{tid}: the write was rejected: {error_name(err)}")
    ledger.records_produced += 2
