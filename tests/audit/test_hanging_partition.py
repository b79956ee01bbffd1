"""hanging_partition on real captures: tansu never ends an abandoned transaction, and its Fetch answers hold
the last stable offset below the high watermark for four times the transaction's timeout."""

from __future__ import annotations

from pathlib import Path

from scapy.all import TCP, rdpcap, wrpcap

from ksniff.engine.local import EngineConfig, audit_paths

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"


def kinds(result) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in result.findings:
        out.setdefault(f.kind, []).append(f)
    return out


def test_held_partition_names_the_transaction_that_holds_it():
    found = kinds(audit_paths([str(PCAPS / "hanging_tansu.pcap")], EngineConfig(keep_tables=False)))
    (f,) = found["hanging_partition"]
    assert (f.severity, f.topic, f.partition, f.transactional_id) == ("warning", "stuck", 0, "tx-stuck")
    e = f.evidence
    assert (e["last_stable_offset"], e["high_watermark"], e["timeout_ms"], e["timeout_from"]) == (
        0,
        4,
        1000,
        "InitProducerId",
    )
    assert e["held_until_ts"] - e["held_since_ts"] > 3.0 and e["fetch_answers"] > 10
    assert e["read_committed_readers"] == ["corpus-stuck-reader"]


def test_the_leaders_answers_alone_show_it(tmp_path):
    """Without the producer's connection (a capture of the consumers only), the held offset is still seen:
    against --txn-timeout, since the producer's own timeout is not in the capture."""
    packets = rdpcap(str(PCAPS / "hanging_tansu.pcap"))
    producer = next(p[TCP].sport for p in packets if TCP in p and p[TCP].flags & 0x12 == 0x02)
    consumers = tmp_path / "consumers.pcap"
    wrpcap(str(consumers), [p for p in packets if TCP in p and producer not in (p[TCP].sport, p[TCP].dport)])
    short = kinds(audit_paths([str(consumers)], EngineConfig(keep_tables=False, txn_timeout_ms=1000)))
    (f,) = short["hanging_partition"]
    assert f.evidence["timeout_from"] == "--txn-timeout" and f.producer_id is None
    assert "hanging_transaction" not in short  # the coordinator's side is not in this capture
    default = kinds(audit_paths([str(consumers)], EngineConfig(keep_tables=False)))
    assert "hanging_partition" not in default  # held 4 s: under the 60 s default, nothing to say


def test_a_broker_that_does_not_hold_the_offset_gives_an_uncommitted_read_instead():
    found = kinds(audit_paths([str(PCAPS / "hanging_mock.pcap")], EngineConfig(keep_tables=False)))
    assert "hanging_partition" not in found
    assert [f.severity for f in found["uncommitted_read"]] == ["warning"]
