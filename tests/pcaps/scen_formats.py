"""Scenario 6: the transactional story (confluent-kafka on tansu) in other capture formats and conditions.

pcapng, Linux cooked (SLL2), IPv6, 1500-byte segments between two network namespaces, a broker on a
non-standard port, and derived copies of a fresh capture with frames deleted (capture loss) or with
its first part cut (the capture starts mid-stream).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import clients
import scen_txn
from harness import (
    Ledger,
    log,
    records_in_produce_frames,
    run,
    tansu,
    tcpdump,
    tshark_view,
    write_expectations,
)
from registry import scenario

HERE = Path(__file__).resolve().parent
STORY_CLIENT = "confluent-kafka"
LAST_FRAME = 1_000_000  # editcap wants a closed range; any number past the last frame will do


def _story(out: Path, name: str, **where) -> tuple[Ledger, list[int]]:
    return scen_txn.record_story(out, name, STORY_CLIENT, clients.confluent_story, **where)


@contextlib.contextmanager
def _base_capture(port: int = 9092) -> Iterator[tuple[Path, Ledger, list[int]]]:
    """A fresh capture of the story in a temporary folder, to derive another capture from."""
    with tempfile.TemporaryDirectory(prefix="ksniff-pcaps-") as tmp:
        ledger, ports = _story(Path(tmp), "base", port=port)
        yield Path(tmp) / "base.pcap", ledger, ports


@scenario("txn_confluent_tansu_pcapng", "the story, converted to pcapng with editcap")
def pcapng(out: Path) -> None:
    name = "txn_confluent_tansu_pcapng"
    with _base_capture() as (base, ledger, ports):
        target = out / f"{name}.pcapng"
        run(["editcap", "-F", "pcapng", str(base), str(target)])
        ledger.scenario = name
        ledger.extra["format"] = "pcapng"
        ledger.note("Converted from a pcap of the same scenario with editcap -F pcapng.")
        write_expectations(ledger, target, ports)


@scenario("txn_confluent_tansu_sll2", "the story captured with tcpdump -i any (Linux cooked, SLL2)")
def sll2(out: Path) -> None:
    name = "txn_confluent_tansu_sll2"
    ledger, ports = _story(out, name, port=9092, iface="any")
    linktype = run(
        ["tshark", "-r", str(out / f"{name}.pcap"), "-c", "1", "-T", "fields", "-e", "frame.encap_type"]
    )
    log(f"{name}: link type code {linktype.strip()}")


@scenario("txn_confluent_tansu_ipv6", "the story with tansu listening on ::1")
def ipv6(out: Path) -> None:
    _story(out, "txn_confluent_tansu_ipv6", host="::1", port=9092)


@scenario("txn_confluent_tansu_port19093", "the story with tansu on the non-standard port 19093")
def port19093(out: Path) -> None:
    _story(out, "txn_confluent_tansu_port19093", port=19093)


@scenario("txn_confluent_tansu_loss", "the story with two frames deleted mid-transaction (capture loss)")
def loss(out: Path) -> None:
    name = "txn_confluent_tansu_loss"
    with _base_capture() as (base, ledger, ports):
        requests = tshark_view(base, ports).requests
        add_frames = [r["frame"] for r in requests if r["api"] == "AddPartitionsToTxn"]
        end_frames = [r["frame"] for r in requests if r["api"] == "EndTxn"]
        # The second transaction (the abort): lose its first Produce request and its EndTxn request.
        start, end = add_frames[1], end_frames[1]
        produce = next(r["frame"] for r in requests if r["api"] == "Produce" and start < r["frame"] < end)
        target = out / f"{name}.pcap"
        run(["editcap", "-F", "pcap", str(base), str(target), str(produce), str(end)])
        ledger.scenario = name
        lost_records = records_in_produce_frames(base, [produce])
        ledger.extra["records_acknowledged"] = ledger.records_produced
        ledger.records_produced -= lost_records
        ledger.transactions[scen_txn.TID]["abort"] -= 1
        ledger.txn(scen_txn.TID, "unknown")
        ledger.finding(
            "capture_gap", "info", transactional_id=None, producer_id=None, topic=None, partition=None
        )
        ledger.may_also_find.append({"kind": "sequence_gap", "max_severity": "warning"})
        ledger.may_also_find.append({"kind": "unanswered_request", "max_severity": "warning"})
        ledger.extra["deleted_frames"] = [produce, end]
        ledger.note(
            f"Derived from a capture of the same scenario by deleting frame {produce} (the first Produce "
            f"request of the aborted transaction) and frame {end} (its EndTxn request) with editcap. That "
            f"transaction's outcome is therefore unknown; its {lost_records} records in that request are "
            "missing from the capture though the broker acknowledged them: records_produced counts what "
            "the capture still shows, records_acknowledged what the broker acknowledged. Later batches on "
            "the same partitions seem to skip sequence numbers: that rests on lost bytes, so never "
            "critical. The gap itself is context (info); the producer_fenced warning keeps the capture "
            "unclean."
        )
        write_expectations(ledger, target, ports)


@scenario("txn_confluent_tansu_midstream", "the story with its first part cut: the capture starts mid-stream")
def midstream(out: Path) -> None:
    name = "txn_confluent_tansu_midstream"
    with _base_capture() as (base, ledger, ports):
        requests = tshark_view(base, ports).requests
        first_add = next(r["frame"] for r in requests if r["api"] == "AddPartitionsToTxn")
        keep_from = first_add + 1
        target = out / f"{name}.pcap"
        run(["editcap", "-F", "pcap", "-r", str(base), str(target), f"{keep_from}-{LAST_FRAME}"])
        ledger.scenario = name
        ledger.may_also_find.append({"kind": "capture_gap", "max_severity": "warning"})
        ledger.extra["first_frame_of_original"] = keep_from
        ledger.note(
            f"Derived from a capture of the same scenario by keeping frames {keep_from}- with editcap -r: "
            "no handshakes, no InitProducerId of the first instance, and the first transaction's "
            "AddPartitionsToTxn request is lost (its response is orphaned); that transaction's Produce and "
            "EndTxn(commit) are there, so its outcome is still commit."
        )
        write_expectations(ledger, target, ports)


# --------------------------------------------------------------------------- MTU 1500, two namespaces

NET = "10.231.0"
MTU_VALUE_SIZE = 3000  # records larger than a segment, so requests span several


@contextlib.contextmanager
def veth_pair() -> Iterator[tuple[str, str, str, str]]:
    """Two namespaces joined by a veth pair, MTU 1500, offloads off; yields (ns_b, dev_b, ns_c, dev_c)."""
    tag = f"{os.getpid() % 100000}"
    ns_b, ns_c, dev_b, dev_c = f"ksniff-b{tag}", f"ksniff-c{tag}", f"ksb{tag}", f"ksc{tag}"
    created = []
    try:
        for ns in (ns_b, ns_c):
            run(["ip", "netns", "add", ns])
            created.append(ns)
        run(["ip", "link", "add", dev_b, "netns", ns_b, "type", "veth", "peer", "name", dev_c, "netns", ns_c])
        for ns, dev, host in ((ns_b, dev_b, 1), (ns_c, dev_c, 2)):
            run(["ip", "-n", ns, "addr", "add", f"{NET}.{host}/24", "dev", dev])
            run(["ip", "-n", ns, "link", "set", dev, "mtu", "1500", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _offloads_off(ns, dev)
        yield ns_b, dev_b, ns_c, dev_c
    finally:
        for ns in created:
            subprocess.run(["ip", "netns", "delete", ns], check=False)


def _offloads_off(ns: str, dev: str) -> None:
    """No segmentation or checksum offload on `dev`: the capture holds the segments as they are on a wire."""
    offloads = ["tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off"]
    run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, *offloads])


def _told(ledger: Ledger, told: dict) -> None:
    """What the story's client said it did (its transactions' outcomes, the records it produced), into
    the ledger."""
    for tid, counts in told["transactions"].items():
        for outcome, n in counts.items():
            ledger.transactions[tid][outcome] += n
    ledger.records_produced = told["records_produced"]


def _client(ns: str, *args: str) -> str:
    cmd = ["ip", "netns", "exec", ns, sys.executable, str(HERE / "clients.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout


@scenario(
    "txn_confluent_tansu_mtu1500",
    "the story between two network namespaces over veth, MTU 1500, 3 KB records, offloads off",
    needs_netns=True,
)
def mtu1500(out: Path) -> None:
    name = "txn_confluent_tansu_mtu1500"
    capture = out / f"{name}.pcap"
    ledger = scen_txn.story_ledger(name, "tansu", STORY_CLIENT)
    port = 9092
    with veth_pair() as (ns_b, dev_b, ns_c, _):
        with tansu(f"{NET}.1", port, netns=ns_b) as bootstrap:
            _client(ns_c, "confluent", bootstrap, scen_txn.TOPIC, scen_txn.TID, "--create-only")
            with tcpdump(capture, [port], dev_b, netns=ns_b):
                told = json.loads(
                    _client(
                        ns_c,
                        "confluent",
                        bootstrap,
                        scen_txn.TOPIC,
                        scen_txn.TID,
                        "--value-size",
                        str(MTU_VALUE_SIZE),
                    )
                )
    _told(ledger, told)
    ledger.extra["mtu"] = 1500
    ledger.note(
        f"Broker at {NET}.1 in one namespace, client at {NET}.2 in another, joined by a veth pair "
        f"with MTU 1500 and offloads off; record values are {MTU_VALUE_SIZE} bytes, so requests and "
        "responses span several TCP segments. Captured on the broker's side of the pair."
    )
    scen_txn.settle_fence(ledger, capture, [port], told["zombie_error"])
    write_expectations(ledger, capture, [port])


# --------------------------------------------------------------------------- behind an address translation

NAT_CLIENT_NET, NAT_BROKER_NET = "10.232.1", "10.232.2"


@contextlib.contextmanager
def translated_path() -> Iterator[tuple[str, str, str, str]]:
    """A client's namespace and a broker's, joined through a third that translates addresses as a
    Kubernetes service or a load balancer does: the client reaches {NAT_CLIENT_NET}.1:9092, which the
    router sends on to the broker at {NAT_BROKER_NET}.2:9092 (DNAT) from its own address on the broker's
    side (masquerade). MTU 1500, offloads off. Yields (client ns, its device, broker ns, its device)."""
    tag = f"{os.getpid() % 100000}"
    ns_c, ns_r, ns_b = f"ksniff-nc{tag}", f"ksniff-nr{tag}", f"ksniff-nb{tag}"
    dev_c, dev_rc, dev_rb, dev_b = f"knc{tag}", f"knrc{tag}", f"knrb{tag}", f"knb{tag}"
    created = []
    try:
        for ns in (ns_c, ns_r, ns_b):
            run(["ip", "netns", "add", ns])
            created.append(ns)
        run(
            ["ip", "link", "add", dev_c, "netns", ns_c, "type", "veth", "peer", "name", dev_rc, "netns", ns_r]
        )
        run(
            ["ip", "link", "add", dev_b, "netns", ns_b, "type", "veth", "peer", "name", dev_rb, "netns", ns_r]
        )
        for ns, dev, address in (
            (ns_c, dev_c, f"{NAT_CLIENT_NET}.2/24"),
            (ns_r, dev_rc, f"{NAT_CLIENT_NET}.1/24"),
            (ns_r, dev_rb, f"{NAT_BROKER_NET}.1/24"),
            (ns_b, dev_b, f"{NAT_BROKER_NET}.2/24"),
        ):
            run(["ip", "-n", ns, "addr", "add", address, "dev", dev])
            run(["ip", "-n", ns, "link", "set", dev, "mtu", "1500", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _offloads_off(ns, dev)
        run(["ip", "-n", ns_b, "route", "add", "default", "via", f"{NAT_BROKER_NET}.1"])
        run(["ip", "-n", ns_c, "route", "add", "default", "via", f"{NAT_CLIENT_NET}.1"])
        run(["ip", "netns", "exec", ns_r, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        rules = (
            "table ip nat {\n"
            "  chain prerouting {\n"
            "    type nat hook prerouting priority dstnat;\n"
            f"    ip daddr {NAT_CLIENT_NET}.1 tcp dport 9092 dnat to {NAT_BROKER_NET}.2:9092\n"
            "  }\n"
            "  chain postrouting {\n"
            "    type nat hook postrouting priority srcnat;\n"
            f'    oifname "{dev_rb}" masquerade\n'
            "  }\n"
            "}\n"
        )
        subprocess.run(["ip", "netns", "exec", ns_r, "nft", "-f", "-"], input=rules, text=True, check=True)
        yield ns_c, dev_c, ns_b, dev_b
    finally:
        for ns in created:
            subprocess.run(["ip", "netns", "delete", ns], check=False)


@scenario(
    "txn_confluent_tansu_nat",
    "the story through an address translation, captured at the client and at the broker (two files)",
    needs_netns=True,
)
def behind_nat(out: Path) -> None:
    name = "txn_confluent_tansu_nat"
    at_client, at_broker = out / f"{name}_client.pcap", out / f"{name}_broker.pcap"
    ledger = scen_txn.story_ledger(name, "tansu", STORY_CLIENT)
    port = 9092
    with translated_path() as (ns_c, dev_c, ns_b, dev_b):
        advertised = f"{NAT_CLIENT_NET}.1:{port}"  # the service's address: every connection is translated
        with tansu(f"{NAT_BROKER_NET}.2", port, netns=ns_b, advertised=advertised) as bootstrap:
            _client(ns_c, "confluent", bootstrap, scen_txn.TOPIC, scen_txn.TID, "--create-only")
            with tcpdump(at_broker, [port], dev_b, netns=ns_b), tcpdump(at_client, [port], dev_c, netns=ns_c):
                told = json.loads(_client(ns_c, "confluent", bootstrap, scen_txn.TOPIC, scen_txn.TID))
    _told(ledger, told)
    ledger.note(
        f"Client at {NAT_CLIENT_NET}.2 and broker at {NAT_BROKER_NET}.2 in two namespaces, joined through a "
        f"third that translates: the broker advertises {advertised}, which the router sends on to it "
        f"(nftables DNAT) from {NAT_BROKER_NET}.1 (masquerade). Captured at both ends at once: "
        f"{at_client.name} at the client, {at_broker.name} at the broker, the same connections under other "
        "addresses and the same TCP sequence numbers. Each file alone holds the whole story."
    )
    scen_txn.settle_fence(ledger, at_client, [port], told["zombie_error"])
    write_expectations(ledger, at_client, [port])
    write_expectations(ledger, at_broker, [port])
