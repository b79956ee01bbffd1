"""The responder's command line (issue 15) on real captures: `-P` alone, filters that apply to the report
and the exports alike, a verdict scripts can read (clean, findings, unverified; `--strict` exits 3), a
wrong port that says where Kafka was, storms folded in the JSON, `--html`, and `--help` in reading order."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.robustness.robustness_support import assert_one_line_error, cli

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
TXN = PCAPS / "txn_confluent_tansu.pcap"
ANOMALIES = PCAPS / "anomalies_tansu.pcap"
OTHER_PORT = PCAPS / "txn_confluent_tansu_port19093.pcap"  # its broker listens on 19093


def document(*args) -> dict:
    r = cli("audit", *args, "--json", "-", "--exit-zero")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_producer_alone_prints_its_timeline_not_the_report():
    alone = cli("audit", TXN, "-P", "tx-A", "--exit-zero").stdout
    assert alone.startswith("Producer tx-A") and "Producers ──" not in alone and "Inputs" not in alone
    assert "EndTxn abort" in alone and alone.rstrip().endswith("Verdict: findings (0 critical, 2 warning)")
    whole = cli("audit", TXN, "-P", "tx-A", "--report", "--exit-zero").stdout
    assert "Inputs" in whole and "Producers ──" in whole and "Producer tx-A ──" in whole


def test_report_without_producer_is_a_usage_error():
    r = cli("audit", TXN, "--report")
    assert_one_line_error(r.exit_code, r.stdout, r.stderr, "--report goes with --producer")


def test_severity_and_kind_filter_the_json_and_the_csv_alike(tmp_path):
    whole = document(ANOMALIES)
    assert {f["severity"] for f in whole["findings"]} == {"warning", "info"}
    doc = document(
        ANOMALIES, "--severity", "warning", "--kind", "producer_fenced,epoch_regression", "--csv", tmp_path
    )
    kept = [(f["kind"], f["severity"]) for f in doc["findings"]]
    assert kept and set(kept) <= {("producer_fenced", "warning"), ("epoch_regression", "warning")}
    assert len(kept) == sum(
        1
        for f in whole["findings"]
        if f["severity"] == "warning" and f["kind"] in ("producer_fenced", "epoch_regression")
    )
    assert doc["filters"] == {"severity": "warning", "kinds": ["epoch_regression", "producer_fenced"]}
    with open(tmp_path / "findings.csv", newline="") as fh:
        assert [(r["kind"], r["severity"]) for r in csv.DictReader(fh)] == kept


def test_a_transactional_id_and_a_time_window_filter_everything(tmp_path):
    whole = document(ANOMALIES)
    zombie = [t for t in whole["transactions"] if t["transactional_id"] == "tx-zombie"]
    since, until = zombie[0]["start_ts"], zombie[-1]["end_ts"]
    doc = document(
        ANOMALIES, "-t", "tx-zombie", "--since", f"{since}", "--until", f"{until}", "--csv", tmp_path
    )
    assert {p["transactional_id"] for p in doc["producers"]} == {"tx-zombie"}
    assert [t["start_ts"] for t in doc["transactions"]] == [t["start_ts"] for t in zombie]
    assert doc["findings"] and all(
        f["transactional_id"] == "tx-zombie" and since <= f["ts"] <= until for f in doc["findings"]
    )
    with open(tmp_path / "exchanges.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(
        r["transactional_id"] == "tx-zombie" and since <= float(r["ts"]) <= until for r in rows
    )


def test_since_takes_iso_8601_and_a_bad_time_is_one_line():
    whole = document(ANOMALIES)
    hang = next(f for f in whole["findings"] if f["kind"] == "hanging_transaction")
    doc = document(ANOMALIES, "--since", "2026-11-21T08:03:09Z")  # the capture's last seconds
    assert [f["kind"] for f in doc["findings"]] == ["hanging_transaction"] and hang["ts"] >= 1795248189
    r = cli("audit", ANOMALIES, "--since", "yesterday")
    assert_one_line_error(r.exit_code, r.stdout, r.stderr, "not a time: 'yesterday'")


def test_a_wrong_port_is_not_an_all_clear():
    r = cli("audit", OTHER_PORT, "-p", "9092")
    assert r.exit_code == 0  # as before, for the scripts that read 0/1/2
    warning = next(line for line in r.stderr.splitlines() if line.startswith("ksniff: warning:"))
    assert "no Kafka traffic on port 9092" in warning and "run again with -p 19093" in warning
    assert "Kafka was seen on port 19093 (6 connections, 6.5 kB)" in warning
    assert "Verdict: unverified: no Kafka traffic was decoded: nothing was audited" in r.stdout
    strict = cli("audit", OTHER_PORT, "-p", "9092", "--strict", "--json", "-")
    assert strict.exit_code == 3
    summary = json.loads(strict.stdout)["summary"]
    assert summary["verdict"] == "unverified" and summary["unverified_because"]
    right = cli("audit", OTHER_PORT, "-p", "19093", "--strict")
    assert right.exit_code == 1 and "ksniff: warning" not in right.stderr  # its findings, as on 9092


def test_kafka_on_a_port_not_named_is_said_even_when_the_named_one_had_some():
    """two_ports_tansu: two brokers on two ports, 60 records each. Named one port, the run audits that
    one's traffic, says the other port's connections look like Kafka (how many, their bytes as tshark
    counts them) and which -p to run; the JSON lists it in capture.kafka_elsewhere; the verdict is not
    clean. Both ports named, or auto-detection: clean, nothing said."""
    two = PCAPS / "two_ports_tansu.pcap"
    ports = json.loads((PCAPS / "two_ports_tansu.expect.json").read_text())["broker_ports"]
    first, second = ports["first"], ports["second"]
    r = cli("audit", two, "-p", str(first))
    assert r.exit_code == 0  # no finding: the exit code scripts read stays as it was
    warnings = [line for line in r.stderr.splitlines() if line.startswith("ksniff: warning:")]
    assert len(warnings) == 1, r.stderr
    assert f"port {second} (2 connections, 3.2 kB)" in warnings[0]
    assert f"run again with -p {first},{second}" in warnings[0]
    assert "4 connections (2 Kafka)" in r.stdout and "Verdict: unverified" in r.stdout
    doc = document(two, "-p", str(first))
    # Both directions' TCP payload of the second broker's two connections (tshark: tcp.len summed).
    assert doc["capture"]["kafka_elsewhere"] == [{"port": second, "connections": 2, "bytes": 3200}]
    assert sum(p["records"] for p in doc["producers"]) == 60  # only the named port was audited
    assert doc["summary"]["verdict"] == "unverified"
    assert any(f"({second}) looked like Kafka" in why for why in doc["summary"]["unverified_because"])
    assert cli("audit", two, "-p", str(first), "--strict").exit_code == 3
    for args in (("-p", f"{first},{second}"), ()):
        both = document(two, *args)
        assert both["capture"]["kafka_elsewhere"] == [] and both["summary"]["verdict"] == "clean"
        assert sum(p["records"] for p in both["producers"]) == 120
        assert "ksniff: warning" not in cli("audit", two, *args).stderr


def test_a_named_port_with_no_kafka_anywhere_says_nothing_was_audited(tmp_path):
    """Only HTTP in the capture: no Kafka on the port named, nothing that looks like Kafka elsewhere."""
    from tests.capture.capture_builders import Flow, ethernet, pcap_bytes

    web = Flow(client=("10.0.0.1", 40001), server=("10.0.0.2", 8080))
    exchange = [
        web.send(True, b"GET / HTTP/1.1\r\nHost: shop\r\n\r\n"),
        web.send(False, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    ]
    packets = web.handshake() + exchange + web.close()
    path = tmp_path / "web.pcap"
    path.write_bytes(pcap_bytes([(1_700_000_000.0 + i * 0.01, ethernet(p)) for i, p in enumerate(packets)]))
    r = cli("audit", path, "-p", "9092")
    assert (
        "ksniff: warning: no Kafka traffic on port 9092, nor on any other port: nothing was audited"
        in r.stderr
    )
    doc = document(path, "-p", "9092")
    assert doc["capture"]["kafka_elsewhere"] == [] and doc["summary"]["verdict"] == "unverified"


def test_kafka_elsewhere_is_the_same_on_the_spark_engine():
    pytest.importorskip("pyspark")
    two = PCAPS / "two_ports_tansu.pcap"
    first = json.loads((PCAPS / "two_ports_tansu.expect.json").read_text())["broker_ports"]["first"]
    local = document(two, "-p", str(first))["capture"]["kafka_elsewhere"]
    spark = document(two, "-p", str(first), "--engine", "spark")
    assert local and spark["capture"]["kafka_elsewhere"] == local


@pytest.mark.parametrize(
    "capture, verdict",
    [
        ("idempotent_none_tansu.pcap", "clean"),
        ("anomalies_tansu.pcap", "findings"),
        ("txn_confluent_tansu_loss.pcap", "findings"),
    ],
)
def test_the_json_summary_tells_clean_from_findings_and_says_what_was_not_seen(capture, verdict):
    summary = document(PCAPS / capture)["summary"]
    assert summary["verdict"] == verdict
    if "loss" in capture:
        assert any("the capture lost" in reason for reason in summary["unverified_because"])
    else:
        assert summary["unverified_because"] == []
    strict = cli("audit", PCAPS / capture, "--strict")
    assert strict.exit_code == {"clean": 0, "findings": 1}[verdict]


def test_the_json_keeps_every_finding_and_folds_the_repeats_with_their_times():
    doc = document(ANOMALIES)
    groups = doc["finding_groups"]
    assert sum(g["count"] for g in groups) == len(doc["findings"])
    for g in groups:
        assert g["times"] == sorted(g["times"]) and len(g["times"]) == g["count"]
        assert (g["first_ts"], g["last_ts"]) == (g["times"][0], g["times"][-1])
    assert doc["summary"]["findings"] == {"critical": 0, "warning": 9, "info": 1}
    assert doc["summary"]["findings_by_kind"]["producer_fenced"] == {"warning": 2, "info": 1}


def test_html_from_the_command_line(tmp_path):
    out = tmp_path / "sub" / "incident.html"
    r = cli("audit", TXN, "--html", out, "--exit-zero")
    assert r.exit_code == 0, r.output
    assert '<h3 class="id">tx-A</h3>' in out.read_text(encoding="utf-8")


def test_help_lists_outputs_and_filters_before_the_limits_and_ends_with_examples():
    text = cli("audit", "--help").stdout
    order = [text.index(title) for title in ("Outputs:", "Filters", "The run:", "Limits")]
    assert order == sorted(order)
    assert text.index("--html") < text.index("--severity") < text.index("--max-connections")
    assert text.rstrip().splitlines()[-1].strip().startswith("ksniff audit")
    assert "Examples:" in text.split("Limits")[1]


def test_the_report_says_which_apis_were_not_decoded_and_why():
    capture = PCAPS / "ctp_confluent_tansu.pcap"  # librdkafka asks for telemetry, whose bodies ksniff skips
    dec = document(capture)["decode"]
    not_decoded = {name: c["not_decoded"] for name, c in dec["by_api"].items() if c["not_decoded"]}
    assert not_decoded == {"GetTelemetrySubscriptions": {"skipped_api": 12}}
    assert dec["undecoded_bodies"] == 12
    text = " ".join(cli("audit", capture, "--exit-zero").stdout.split())
    why = "12 bodies not decoded: GetTelemetrySubscriptions 12 (not read: nothing there for the audit)"
    assert why in text


def test_the_spark_engines_report_and_exit_code_are_the_local_ones():
    """Without --json the Spark engine's driver receives the digest of the findings and transactions, not
    the lists: the report it prints, filtered or not, and the exit code are the local engine's."""
    pytest.importorskip("pyspark")
    mock = PCAPS / "anomalies_mock.pcap"  # critical findings; ended, slowest and open transactions
    for args in ((), ("--severity", "warning", "--master", "local[1]")):
        local = cli("audit", TXN, mock, *args[:2])
        spark = cli("audit", TXN, mock, *args, "--engine", "spark")
        assert spark.exit_code == local.exit_code == 1, spark.stderr
        assert "Slowest" in local.stdout and "CRITICAL" in local.stdout and "Open at the end" in local.stdout
        assert spark.stdout.replace("engine spark", "engine local") == local.stdout
