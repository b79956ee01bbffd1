"""Captures of one cluster taken on each broker's host, with clocks that disagree by seconds: made from a
real capture of a three-broker mock cluster (split by broker port, each part's clock shifted), they must
audit as one capture set of one cluster of three brokers, with each clock's true offset inside the bounds
reported for it (a few milliseconds wide) and the same outcomes and warning and critical findings as the
single capture of it all."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from pcap_edit import merged, shifted
from scapy.all import TCP, rdpcap, wrpcap

from ksniff.engine.clock import widest, within_uncertainty
from ksniff.engine.local import EngineConfig, audit_paths

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
CONFIG = EngineConfig(keep_tables=False)


def per_broker(capture: Path, out: Path, shifts: list[float]) -> dict[str, float]:
    """One file per broker port (the port connections were opened to), the n-th with its clock moved by
    shifts[n] seconds; returns each file's shift."""
    packets = rdpcap(str(capture))
    ports = sorted({p[TCP].dport for p in packets if TCP in p and p[TCP].flags & 0x12 == 0x02})
    assert len(ports) == len(shifts) == 3
    made = {}
    for port, shift in zip(ports, shifts, strict=True):
        part = [p for p in packets if TCP in p and port in (p[TCP].sport, p[TCP].dport)]
        for p in part:
            p.time += shift
        path = out / f"broker{port}.pcap"
        wrpcap(str(path), part)
        made[str(path)] = shift
    return made


def _findings(result) -> Counter:
    return Counter(
        (f.kind, f.severity, f.transactional_id, f.producer_id)
        for f in result.findings
        if f.severity != "info"
    )


def sets_seen(result, prefix: str) -> list:
    """Each capture set's files (less `prefix`: a folder as one engine named it), clusters and clock
    offsets (rounded), for comparing two engines' plans of the same folder."""
    return [
        (
            [p.removeprefix(prefix) for p in s.paths],
            s.cluster_ids,
            [(tuple(p.removeprefix(prefix) for p in c.paths), round(c.offset, 4)) for c in s.clocks],
        )
        for s in result.capture_sets
    ]


def _outcomes(result) -> Counter:
    return Counter(
        (t.transactional_id, t.producer_id, t.producer_epoch, t.outcome) for t in result.transactions
    )


@pytest.mark.parametrize("capture", ["txn_confluent_mock.pcap", "txn_aiokafka_mock.pcap"])
@pytest.mark.parametrize("shifts", [[0.0, 2.5, -1.7], [-3.2, 0.0, 1.1]], ids=["seconds", "reference_moved"])
def test_per_broker_captures_with_shifted_clocks(tmp_path, capture, shifts):
    whole = audit_paths([str(PCAPS / capture)], CONFIG)
    made = per_broker(PCAPS / capture, tmp_path, shifts)
    split = audit_paths(sorted(made), CONFIG)

    assert len(split.capture_sets) == 1
    (cset,) = split.capture_sets
    assert len(split.clusters) == 1 and len(split.clusters[0]["brokers"]) == 3
    reference = next(c for c in cset.clocks if c.reference)
    aligned = [c for c in cset.clocks if c.pairs]
    assert aligned, "no capture was ordered against the reference"
    for c in aligned:
        (path,) = c.paths
        truth = made[reference.paths[0]] - made[path]  # what undoes this file's shift, against the reference
        assert c.low - 1e-6 <= truth <= c.high + 1e-6, (path, c, truth)
        assert c.uncertainty is not None and c.uncertainty < 5e-3
    assert _outcomes(split) == _outcomes(whole)
    assert _findings(split) == _findings(whole)


def test_unaligned_per_broker_captures_invent_findings(tmp_path):
    """What the alignment is for: merged as recorded (--merge skips it), the same files give findings the
    single capture does not have."""
    whole = audit_paths([str(PCAPS / "txn_confluent_mock.pcap")], CONFIG)
    made = per_broker(PCAPS / "txn_confluent_mock.pcap", tmp_path, [0.0, 2.5, -1.7])
    merged = audit_paths(sorted(made), EngineConfig(keep_tables=False, capture_sets="merge"))
    assert _findings(merged) != _findings(whole) or _outcomes(merged) != _outcomes(whole)


def _tcp_flags(frame: bytes) -> int:
    return frame[14 + (frame[14] & 15) * 4 + 13]


def _port_of(frame: bytes, port: int) -> bool:
    at = 14 + (frame[14] & 15) * 4
    return port in (int.from_bytes(frame[at : at + 2], "big"), int.from_bytes(frame[at + 2 : at + 4], "big"))


@pytest.mark.parametrize(
    "name,skew",
    [
        ("txn_confluent_mock.pcap", 2.5),
        ("txn_confluent_mock.pcap", -2.5),
        ("txn_confluent_mock.pcap", 0.0004),
        ("anomalies_tansu.pcap", 0.0004),  # warnings that must not become unverified
        ("lost_write_tansu.pcap", -1.2),  # critical findings of consumers' reads
    ],
)
def test_both_ends_of_open_connections_each_on_its_own_clock(tmp_path, name, skew):
    """A client's capture and a broker's capture of the same connections, both started after the clients
    connected (the connections open at the files' edges, as Kafka's long-lived ones are): one capture set,
    as the connections say, but two clocks, put on one time line like two brokers' captures. The broker's
    clock `skew` seconds off the client's: the same outcomes and findings as the client's capture alone.
    (Taken for one clock, as a rotated capture's files are, a broker clock 2.5 s behind made a fourth,
    invented critical zombie write.)"""
    capture = PCAPS / name
    opened = 0x02  # SYN: the capture starts after every connection opened
    client = shifted(capture, tmp_path / "client.pcap", 0, lambda n, f: not _tcp_flags(f) & opened)
    alone = audit_paths([str(client)], CONFIG)
    port = min(_servers(capture))
    broker = shifted(
        capture,
        tmp_path / "broker.pcap",
        round(skew * 1e6),
        lambda n, f: not _tcp_flags(f) & opened and _port_of(f, port),
    )
    both = audit_paths([str(client), str(broker)], CONFIG)

    (cset,) = both.capture_sets
    assert any("seen at two capture points" in why for why in cset.reasons), cset.reasons
    assert len(cset.clocks) == 2
    moved = next(c for c in cset.clocks if not c.reference)
    truth = skew if moved.paths == (str(client),) else -skew
    assert moved.pairs and moved.low - 1e-6 <= truth <= moved.high + 1e-6, (moved, truth)
    assert moved.high - moved.low < 1e-4  # bounded by the times both saw the same bytes at
    assert _outcomes(both) == _outcomes(alone)
    assert _findings(both) == _findings(alone) and _findings(alone)
    assert both.decode.exchanges == alone.decode.exchanges


@pytest.mark.parametrize(
    ("name", "skew", "middle"),
    [
        ("txn_confluent_mock.pcap", 2.5, False),  # clocks apart by more than the capture lasted
        ("txn_confluent_mock.pcap", 0.0004, False),
        ("anomalies_tansu.pcap", -0.3, False),
        ("lost_write_tansu.pcap", 1.2, False),  # consumers' reads, and their critical findings
        ("ctp_confluent_tansu.pcap", 0.0004, False),
        # The broker's capture is the middle third of the client's, its clock behind: merged unaligned, its
        # copies came first and each connection began there (a third of the exchanges lost).
        ("txn_confluent_mock.pcap", -0.7, True),
        ("consume_tansu.pcap", -0.7, True),  # consumers only: no anchor of the protocol's at all
    ],
)
def test_both_ends_behind_an_address_translation_are_one_connection(tmp_path, name, skew, middle):
    """A client's capture beside a broker's, the broker's host on the far side of an address translation
    (a Kubernetes service, a load balancer): the same connections under other addresses, with TCP's
    sequence numbers as they were. One capture set of two clocks, the broker's put on the client's time
    line by the times both saw the same bytes at (to within microseconds), and each connection read
    once: the outcomes, findings and exchanges of the client's capture alone, and the connections named
    as the client's capture names them. (Read as other connections, every exchange counted twice, and with
    the clocks apart by more than the capture lasted the two were two capture sets each reporting it all.)"""
    capture = PCAPS / name
    opened = 0x02
    packets = len(rdpcap(str(capture)))
    client = shifted(capture, tmp_path / "client.pcap", 0, lambda n, f: not _tcp_flags(f) & opened)
    broker = shifted(
        capture,
        tmp_path / "broker.pcap",
        round(skew * 1e6),
        lambda n, f: not _tcp_flags(f) & opened and (not middle or packets // 3 <= n < 2 * packets // 3),
        True,
    )
    alone = audit_paths([str(client)], CONFIG)
    both = audit_paths([str(client), str(broker)], CONFIG)

    (cset,) = both.capture_sets
    assert any("behind an address translation" in why for why in cset.reasons), cset.reasons
    assert len(cset.clocks) == 2
    moved = next(c for c in cset.clocks if not c.reference)
    truth = -skew if moved.paths == (str(broker),) else skew
    assert moved.low - 1e-6 <= truth <= moved.high + 1e-6 and moved.high - moved.low < 1e-4, (moved, truth)
    assert cset.renamed and all(nat_of(key) == to for key, to in cset.renamed)
    assert _outcomes(both) == _outcomes(alone)
    assert _findings(both) == _findings(alone)
    assert both.decode.exchanges == alone.decode.exchanges
    assert both.as_contract()["producers"] == alone.as_contract()["producers"]
    shown = both.as_contract()["capture_sets"][0]["translated_connections"]
    assert len(shown) == len(cset.renamed) // 2
    assert all(row["seen_as"].startswith("127.128.") or ".128." in row["seen_as"] for row in shown)


@pytest.mark.parametrize("translated", [False, True, "ports"], ids=["same_addresses", "translated", "ports"])
@pytest.mark.parametrize("name", ["txn_confluent_mock.pcap", "lost_write_tansu.pcap", "anomalies_tansu.pcap"])
def test_whole_connections_seen_at_two_points(tmp_path, name, translated):
    """Both capture points saw every connection open and close (a short test run captured on the client's
    host and on the broker's, the broker's copy 0.4 ms later), under the same 4-tuples or behind an
    address translation (of the addresses, or of the ports too): the files join by the connections'
    bytes as two points, each on its own clock, bounded to within microseconds by the times both saw the
    same bytes at, and each connection is read once: the client's capture's outcomes, findings (none
    unverified), exchanges and span, and the report says which connections were translated. (Behind a
    translation they counted twice; under the same 4-tuples they were taken for one clock, or aligned by
    the protocol's order to within milliseconds, which left warnings unverified.)"""
    capture = PCAPS / name
    client = shifted(capture, tmp_path / "client.pcap", 0)
    broker = shifted(capture, tmp_path / "broker.pcap", 400, translated=translated)
    alone = audit_paths([str(client)], CONFIG)
    both = audit_paths([str(client), str(broker)], CONFIG)

    (cset,) = both.capture_sets
    assert any("seen at two capture points" in why for why in cset.reasons), cset.reasons
    assert bool(cset.renamed) == bool(translated)
    moved = next(c for c in cset.clocks if not c.reference)
    truth = -0.0004 if moved.paths == (str(broker),) else 0.0004
    assert moved.low - 1e-6 <= truth <= moved.high + 1e-6 and moved.high - moved.low < 1e-4, (moved, truth)
    assert _outcomes(both) == _outcomes(alone)
    assert _findings(both) == _findings(alone)
    assert not any(f.evidence.get("unverified") for f in both.findings)
    assert both.decode.exchanges == alone.decode.exchanges
    # The capture's span is the set's, on the reference's time line: the client's, give or take the copy's
    assert abs(both.capture.first_ts - alone.capture.first_ts) < 1e-3
    assert abs(both.capture.last_ts - alone.capture.last_ts) < 1e-3
    shown = _header_text(both)
    assert ("Translated" in shown) == bool(translated)
    assert "seen twice, behind an address translation, each read once" in shown or not translated


def _header_text(result) -> str:
    """The terminal report's header of `result`, as text."""
    from rich.console import Console

    from ksniff.report.summary import header

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(header(result))
    return console.export_text()


@pytest.mark.parametrize("name", ["txn_confluent_mock.pcap", "txn_aiokafka_mock.pcap"])
def test_the_protocols_order_holds_for_a_capture_begun_later(tmp_path, name):
    """The anchors of a capture of the middle third of another's time (a broker's capture begun later and
    ended sooner): the protocol's order alone must still hold the true offset. A capture begun in the
    middle of a producer epoch sees a later transaction's AddPartitionsToTxn first, which no first write
    need follow: taken as the epoch's first, it bounded the offset 4.7 ms past the truth (confluent-kafka),
    and 0.8 ms (aiokafka)."""
    from ksniff.engine.clock import anchors_of, bounds

    capture = PCAPS / name
    packets = len(rdpcap(str(capture)))
    client = shifted(capture, tmp_path / "client.pcap", 0)
    broker = shifted(
        capture, tmp_path / "broker.pcap", 700_000, lambda n, f: packets // 3 <= n < 2 * packets // 3
    )
    a, b = (anchors_of([str(p)], (9092,), True, None) for p in (client, broker))
    low, high, pairs = bounds(a, b)
    assert low - 1e-6 <= -0.7 <= high + 1e-6, (low, high, pairs)
    # aiokafka's capture still orders the two by events of an epoch both saw begin; confluent-kafka's by
    # none (each epoch the middle third holds began before it), and the segments' own times do that
    assert pairs or "confluent" in name


def test_a_real_capture_at_both_ends_of_an_address_translation():
    """txn_confluent_tansu_nat: confluent-kafka and Tansu in two network namespaces joined through a third
    that translates (nftables DNAT to the broker, masquerade from the router), captured at the client and
    at the broker at once. The two files are one capture set whose six connections are read once, as the
    client's file names them, on one clock (the same host's: an offset of zero, bounded by the segments to
    within microseconds), with the client's capture's outcomes, findings and exchanges, whichever file
    comes first. (Before: 72 exchanges for 36, and each warning twice.)"""
    client = PCAPS / "txn_confluent_tansu_nat_client.pcap"
    broker = PCAPS / "txn_confluent_tansu_nat_broker.pcap"
    alone = audit_paths([str(client)], CONFIG)
    both = audit_paths([str(client), str(broker)], CONFIG)

    (cset,) = both.capture_sets
    assert any("behind an address translation" in why for why in cset.reasons), cset.reasons
    _read_as_the_client_alone(both, alone)
    moved = next(c for c in cset.clocks if not c.reference)
    assert moved.low <= 0.0 <= moved.high and moved.high - moved.low < 1e-4, moved
    # Given the other way round, the client's view is still the one kept: it names the address the broker
    # advertises, so each connection maps to the broker's node
    reverse = audit_paths([str(broker), str(client)], CONFIG)
    assert reverse.capture_sets[0].renamed == cset.renamed
    (cluster,) = reverse.as_contract()["clusters"]
    assert cluster["connections"] == [
        {"broker": "10.232.1.1:9092", "node_id": cluster["brokers"][0]["node_id"]}
    ]


def _read_as_the_client_alone(both, alone) -> None:
    """The real translated pair read with each of its six connections once, as the client's side names
    them: the client's capture's outcomes, findings and exchanges."""
    shown = both.as_contract()["capture_sets"][0]["translated_connections"]
    assert len(shown) == 6
    assert all(
        r["seen_as"].startswith("10.232.2.1:") and r["read_as"].startswith("10.232.1.2:") for r in shown
    )
    assert _outcomes(both) == _outcomes(alone) and _outcomes(alone)
    assert _findings(both) == _findings(alone) and _findings(alone)
    assert both.decode.exchanges == alone.decode.exchanges == 36


def test_one_capture_of_both_sides_of_an_address_translation(tmp_path):
    """The same real pair as one file (`tcpdump -i any` on the translating host sees each packet on its
    way in and again on its way out): one input, whose six connections are each read once, as the client's
    side names them, with the client's capture's outcomes, findings and exchanges, in the JSON, the report
    and the streamed tables alike. (Before: 72 exchanges for 36, each warning twice.)"""
    from ksniff.report.stream import TableExport

    client = PCAPS / "txn_confluent_tansu_nat_client.pcap"
    one = merged([client, PCAPS / "txn_confluent_tansu_nat_broker.pcap"], tmp_path / "any.pcap")
    alone = audit_paths([str(client)], CONFIG)
    with TableExport(csv_dir=str(tmp_path / "csv")) as export:
        both = audit_paths([str(one)], CONFIG, tables=export)
        export.finish(both)

    (cset,) = both.capture_sets
    assert any("any.pcap carries 6 TCP connections twice" in why for why in cset.reasons), cset.reasons
    _read_as_the_client_alone(both, alone)
    assert both.capture.kafka_connections == 6
    rows = (tmp_path / "csv" / "exchanges.csv").read_text().splitlines()
    assert len(rows) == 1 + 36  # the rows the first reading streamed were forgotten
    assert "Translated" in _header_text(both)


def test_one_capture_of_both_sides_among_other_inputs(tmp_path):
    """The same file beside other inputs: the planner, which scans every input, finds both views of each
    connection inside the one file; its set reads each once, and the other input is a set of its own."""
    client = PCAPS / "txn_confluent_tansu_nat_client.pcap"
    one = merged([client, PCAPS / "txn_confluent_tansu_nat_broker.pcap"], tmp_path / "any.pcap")
    other = PCAPS / "consume_tansu.pcap"
    result = audit_paths([str(one), str(other)], CONFIG)
    first, second = result.capture_sets
    assert first.paths == (str(one),) and second.paths == (str(other),)
    assert len(first.renamed) == 12 and not second.renamed  # both directions of six connections
    assert result.decode.exchanges == 36 + audit_paths([str(other)], CONFIG).decode.exchanges


@pytest.mark.parametrize("translated", [True, "ports"], ids=["translated", "ports"])
@pytest.mark.parametrize("opened", [True, False], ids=["opened", "open_at_the_edges"])
@pytest.mark.parametrize("name", ["txn_confluent_mock.pcap", "anomalies_tansu.pcap", "consume_tansu.pcap"])
def test_one_file_with_every_packet_seen_again_translated(tmp_path, name, opened, translated):
    """One file holding each packet twice, as a host that translates (of the addresses, or of the ports
    too) forwards it, with the connections' handshakes or without them (a capture begun after the
    clients connected): read once, as the capture alone."""

    def kept(_n: int, frame: bytes) -> bool:
        return opened or not _tcp_flags(frame) & 0x03  # no SYN nor FIN

    servers = _servers(PCAPS / name)

    def to_broker(_n: int, frame: bytes) -> bool:
        at = 14 + (frame[14] & 15) * 4
        return int.from_bytes(frame[at + 2 : at + 4], "big") in servers

    capture = shifted(PCAPS / name, tmp_path / "capture.pcap", 0, keep=kept)
    # The host forwards each segment to the broker from the side captured first to the translated side,
    # a microsecond later, and each to the client the other way (a microsecond: answers on loopback come
    # within tens of them, and the broker's side must see a request before its answer).
    out = shifted(capture, tmp_path / "out.pcap", 5, keep=to_broker, translated=translated)
    back = shifted(
        capture, tmp_path / "back.pcap", -5, keep=lambda n, f: not to_broker(n, f), translated=translated
    )
    alone = audit_paths([str(capture)], CONFIG)
    both = audit_paths([str(merged([capture, out, back], tmp_path / "any.pcap"))], CONFIG)

    (cset,) = both.capture_sets
    assert cset.renamed and any("twice, behind an address translation" in why for why in cset.reasons)
    assert both.decode.exchanges == alone.decode.exchanges > 0
    assert _outcomes(both) == _outcomes(alone)
    assert _findings(both) == _findings(alone)
    assert both.capture.kafka_connections == alone.capture.kafka_connections


@pytest.mark.parametrize("later", [0.000030, 5.0], ids=["30us", "5s"])
def test_a_copy_under_other_addresses_later_in_both_directions_is_another_connection(tmp_path, later):
    """The same bytes under other addresses, later in both directions (a capture replayed under other
    addresses, as `tcpreplay --unique-ip` does; a stack that numbers its connections alike): not one
    connection passing a host, so both are read, whatever the delay."""
    capture = PCAPS / "txn_confluent_mock.pcap"
    copy = shifted(capture, tmp_path / "copy.pcap", round(later * 1e6), translated=True)
    alone = audit_paths([str(capture)], CONFIG)
    both = audit_paths([str(merged([capture, copy], tmp_path / "one.pcap"))], CONFIG)
    assert not both.capture_sets[0].renamed
    assert both.capture.connections == 2 * alone.capture.connections


def test_connections_numbered_alike_are_not_read_as_one(tmp_path):
    """Two connections whose stacks number their bytes alike (the same initial sequence numbers: test
    captures do) open with the same first segment under other 4-tuples; what they carry next differs, so
    the capture's bytes say they are two, and each is read."""
    from capture_builders import Flow, write_ip_packets

    a = Flow(("10.0.0.1", 40000))
    b = Flow(("10.0.0.3", 40000))
    packets = []
    for flow in (a, b):
        packets += flow.handshake()
    packets += [a.send(True, b"\x00" * 40 + b"first"), b.send(True, b"\x00" * 40 + b"other")]
    path = tmp_path / "alike.pcap"
    write_ip_packets(path, packets)
    from ksniff.capture import read_files

    run = read_files([str(path)])
    list(run)
    assert run.reassembler.alike == 2  # b's SYN and SYN-ACK: the same as a's, under other 4-tuples
    result = audit_paths([str(path)], CONFIG)
    assert not result.capture_sets[0].renamed
    assert result.capture.connections == 2


def nat_of(key: tuple) -> tuple:
    """A 4-tuple as `pcap_edit.nat` made it, back as it was (the second octet of each address flipped)."""
    src, sport, dst, dport = key
    return (bytes([src[0], src[1] ^ 0x80, *src[2:]]), sport, bytes([dst[0], dst[1] ^ 0x80, *dst[2:]]), dport)


def test_brokers_given_the_same_workload_are_not_one_connection(tmp_path):
    """Two brokers on two ports given the same workload (two_ports_tansu): each broker's connections in a
    file of its own, at the same time. They are asked and answered alike, but their sequence numbers are
    their own: no connection is taken for another's view behind an address translation, and all 120
    records are there."""
    capture = PCAPS / "two_ports_tansu.pcap"
    ports = sorted(_servers(capture))
    assert len(ports) == 2
    files = [
        str(shifted(capture, tmp_path / f"broker{port}.pcap", 0, lambda n, f, port=port: _port_of(f, port)))
        for port in ports
    ]
    split = audit_paths(files, CONFIG)
    whole = audit_paths([str(capture)], CONFIG)
    assert all(not c.renamed for c in split.capture_sets)
    assert not any("address translation" in why for c in split.capture_sets for why in c.reasons)
    assert split.decode.exchanges == whole.decode.exchanges
    assert sum(p.records for p in split.producers) == sum(p.records for p in whole.producers) == 120


def _servers(capture: Path) -> set[int]:
    """The ports connections of `capture` were opened to (its brokers')."""
    from scapy.all import rdpcap

    return {p[TCP].dport for p in rdpcap(str(capture)) if TCP in p and p[TCP].flags & 0x12 == 0x02}


def test_widest_interval_left():
    assert widest(-1.0, 1.0, []) == (-1.0, 1.0)
    assert widest(-1.0, 1.0, [(-0.5, 0.5)]) == (-1.0, -0.5)  # none holds 0: the widest (ties: the first)
    assert widest(1.0, 4.0, [(1.5, 2.0)]) == (2.0, 4.0)
    assert widest(-1.0, 1.0, [(0.2, 0.3)]) == (-1.0, 0.2)  # the one that keeps the clocks as they are


def test_findings_within_the_clocks_uncertainty_are_unverified(tmp_path):
    """Had the clocks been known only to within a second, a finding on one broker's capture that rests on
    what another broker's capture shows less than a second away is unverified, never critical: the zombie's
    write to a partition leader (judged against the takeover on the coordinator) drops to a warning, while
    the zombie's AddPartitionsToTxn and EndTxn, on the coordinator's own clock, stay critical."""
    made = per_broker(PCAPS / "txn_confluent_mock.pcap", tmp_path, [0.0, 2.5, -1.7])
    split = audit_paths(sorted(made), CONFIG)
    (cset,) = split.capture_sets
    assert all("clock_uncertainty_s" not in f.evidence for f in split.findings)  # the real bounds: 0.07 ms
    vague = [replace(c, low=c.offset - 1.0, high=c.offset + 1.0) if c.pairs else c for c in cset.clocks]
    judged = within_uncertainty(split.findings, vague)
    coordinator = next(c for c in vague if c.pairs and not c.reference).servers
    pairs = zip(split.findings, judged, strict=True)
    zombie = [(f, g) for f, g in pairs if f.kind == "zombie_write_accepted"]
    assert zombie and any(f.evidence["broker"] in coordinator for f, _ in zombie)
    assert any(f.evidence["broker"] not in coordinator for f, _ in zombie)
    for before, after in zombie:
        assert before.severity == "critical"
        if before.evidence["broker"] in coordinator:
            assert after is before
        else:
            assert after.severity == "warning" and after.evidence["unverified"] is True
            assert after.evidence["clock_uncertainty_s"] >= 1.0


def test_anchors_of_rotated_files_the_same_through_the_hot_loop(tmp_path, monkeypatch):
    """The anchors of one host's files (a capture rotated into three), read through the compiled walk's
    merged lists and the hot loop, are those of the Python loop over the merge one segment at a time."""
    from dataclasses import fields

    from ksniff.capture import compiled
    from ksniff.engine.clock import anchors_of

    hot = compiled.fastwalk
    if hot is None or not hasattr(hot, "inorder"):
        pytest.skip("the compiled capture walk with its hot loop is not built here")
    packets = rdpcap(str(PCAPS / "txn_confluent_mock.pcap"))
    third = len(packets) // 3
    paths = []
    for n, part in enumerate((packets[:third], packets[third : 2 * third], packets[2 * third :])):
        paths.append(str(tmp_path / f"rotated{n}.pcap"))
        wrpcap(paths[-1], part)

    def anchors():
        a = anchors_of(paths, (9092,), True, None)
        return {f.name: getattr(a, f.name) for f in fields(a)}

    fast = anchors()
    monkeypatch.setattr(compiled, "fastwalk", None)
    assert fast == anchors()
    assert fast["born"] and fast["ends"] and fast["writes"]


def _full_decode_anchors(path: Path):
    """The anchors of one capture fed from the audit's own decode: every API, every body."""
    from ksniff.capture.run import read_files
    from ksniff.decode import Decoder
    from ksniff.decode.events import Exchange
    from ksniff.engine.clock import _APIS, Anchors

    anchors = Anchors()
    run = read_files([str(path)])
    decoder = Decoder(ports=(9092,), auto_detect=True, on_not_kafka=run.drop)
    for event in run:
        for ex in decoder.feed(event):
            if ex.__class__ is Exchange and ex.api_name in _APIS:
                anchors.feed(ex)
    for ex in decoder.finish():
        if ex.__class__ is Exchange and ex.api_name in _APIS:
            anchors.feed(ex)
    return anchors.seal()


def test_the_anchors_pass_finds_what_the_whole_decode_finds():
    """The anchors pass decodes only the APIs it reads and passes every other request over with its
    answer; on every corpus capture (joined mid-stream, lossy, pipelined, IPv6, other ports included)
    it finds exactly the anchors that the audit's decode of everything gives."""
    from dataclasses import fields

    from ksniff.engine.clock import anchors_of

    captures = sorted(PCAPS.glob("*.pcap*"))
    with_anchors = 0
    for path in captures:
        fast = anchors_of([str(path)], (9092,), True, None)
        full = _full_decode_anchors(path)
        for f in fields(fast):
            assert getattr(fast, f.name) == getattr(full, f.name), (path.name, f.name)
        with_anchors += bool(fast.born and fast.writes and fast.ends)
    assert len(captures) > 40 and with_anchors > 10
