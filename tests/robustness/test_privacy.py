"""Privacy: record keys, values and headers leave ksniff only with `--records`; SASL credentials never do,
and are not even kept in memory.

The corpus story writes keys `k<txn>-<i>` and values `value <txn>-<i>` (tests/pcaps/clients.py); the SASL
capture is built here with kafka-python's encoders and a known password. Every output is searched:
terminal (stdout and stderr, verbose), JSON, every CSV file and every Parquet cell.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
from capture_builders import Flow, ethernet, pcap_bytes
from decode_builders import frame
from kafka.protocol.old.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from kafka.protocol.old.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from robustness_support import PCAPS, cli

from ksniff.capture import read_files
from ksniff.decode import Decoder
from ksniff.decode.events import Exchange

STORY = PCAPS / "txn_confluent_tansu.pcap"
RECORD_KEYS = [f"k{txn}-{i}".encode() for txn in range(3) for i in range(4)]
RECORD_VALUES = [f"value {txn}-{i}".encode() for txn in range(3) for i in range(4)]


def every_output(capture: Path, tmp_path: Path, *extra: str) -> dict[str, bytes]:
    """Everything a run writes: terminal text, the JSON document, each CSV file, each Parquet cell."""
    r = cli(
        "audit",
        capture,
        "--json",
        tmp_path / "out.json",
        "--csv",
        tmp_path / "csv",
        "--parquet",
        tmp_path / "pq",
        "--verbose",
        "--no-color",
        "--exit-zero",
        *extra,
    )
    assert r.exit_code == 0, r.output
    outputs = {"terminal": (r.stdout + r.stderr).encode(), "json": (tmp_path / "out.json").read_bytes()}
    for path in sorted((tmp_path / "csv").glob("*.csv")):
        outputs[f"csv/{path.name}"] = path.read_bytes()
    for path in sorted((tmp_path / "pq").glob("*.parquet")):
        df = pd.read_parquet(path)
        outputs[f"parquet/{path.name}"] = df.to_csv(index=False).encode()
    r = cli("audit", capture, "--json", "-", "--no-color", "--exit-zero", *extra)  # JSON on stdout
    outputs["json stdout"] = (r.stdout + r.stderr).encode()
    r = cli("audit", capture, "--producer", "tx-A", "--no-color", "--exit-zero", *extra)  # a timeline
    outputs["timeline"] = r.stdout.encode()
    return outputs


def leaks(outputs: dict[str, bytes], secrets: list[bytes]) -> list[tuple[str, bytes]]:
    """(output, secret) pairs where the secret appears as is or in base64."""
    found = []
    for name, data in outputs.items():
        for secret in secrets:
            if secret in data or base64.b64encode(secret).rstrip(b"=") in data:
                found.append((name, secret))
    return found


def test_the_story_carries_the_values_searched_for():
    data = STORY.read_bytes()
    assert all(v in data for v in RECORD_VALUES[:8]) and all(k in data for k in RECORD_KEYS[:8])


def test_records_are_not_exported_by_default(tmp_path):
    outputs = every_output(STORY, tmp_path)
    assert not (tmp_path / "csv" / "records.csv").exists()
    assert not (tmp_path / "pq" / "records.parquet").exists()
    assert leaks(outputs, RECORD_KEYS + RECORD_VALUES) == []


def test_records_are_exported_when_asked(tmp_path):
    every_output(STORY, tmp_path, "--records")
    for df in (
        pd.read_csv(tmp_path / "csv" / "records.csv", dtype=str, keep_default_na=False),
        pd.read_parquet(tmp_path / "pq" / "records.parquet"),
    ):
        keys = {base64.b64decode(k) for k in df["key"]}
        values = {base64.b64decode(v).rstrip(b" .") for v in df["value"]}  # values may be padded
        assert set(RECORD_KEYS[:8]) <= keys  # the first two transactions, whatever the third became
        assert set(RECORD_VALUES[:8]) <= values
        assert df["topic"].eq("txn-out").all()
        assert df["offset"].notna().any()
        assert list(df["ts"]) == sorted(df["ts"])
    # Still never in the JSON document or on the terminal: only the records table holds them.
    doc = (tmp_path / "out.json").read_bytes()
    assert not [v for v in RECORD_VALUES if v in doc]


# -- SASL ----------------------------------------------------------------------------------------------

PASSWORD = b"hunter2-correct-horse"
SCRAM_PROOF = b"p=dHJvdWJhZG91ci1wcm9vZi1zZWNyZXQ="
SCRAM_SIGNATURE = b"v=c2VydmVyLXNpZ25hdHVyZS1zZWNyZXQ="
SECRETS = [PASSWORD, SCRAM_PROOF[2:], SCRAM_SIGNATURE[2:], b"fyko+d2lbbFgONRv9qkxdawL"]


def sasl_capture(path: Path) -> None:
    """Three connections to 9092: SASL/PLAIN, SASL/SCRAM-SHA-256 (v1 handshake and SaslAuthenticate
    v0 and v1), and a v0 handshake followed by a raw PLAIN token outside Kafka framing."""
    packets = []

    def exchange(flow, request, response, cid):
        packets.append(flow.send(True, frame(request, request.API_VERSION, cid)))
        packets.append(flow.send(False, frame(response, response.API_VERSION, cid)))

    plain = Flow(client=("10.0.0.1", 40001))
    packets += plain.handshake()
    exchange(plain, SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse[1](0, ["PLAIN"]), 1)
    exchange(
        plain,
        SaslAuthenticateRequest[1](auth_bytes=b"\0alice\0" + PASSWORD),
        SaslAuthenticateResponse[1](0, None, b"", 3600000),
        2,
    )

    scram = Flow(client=("10.0.0.1", 40002))
    packets += scram.handshake()
    exchange(
        scram,
        SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"),
        SaslHandshakeResponse[1](0, ["SCRAM-SHA-256"]),
        1,
    )
    nonce = b"fyko+d2lbbFgONRv9qkxdawL"
    exchange(
        scram,
        SaslAuthenticateRequest[0](auth_bytes=b"n,,n=alice,r=" + nonce),
        SaslAuthenticateResponse[0](0, None, b"r=" + nonce + b"3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"),
        2,
    )
    exchange(
        scram,
        SaslAuthenticateRequest[1](auth_bytes=b"c=biws,r=" + nonce + b"," + SCRAM_PROOF),
        SaslAuthenticateResponse[1](0, None, SCRAM_SIGNATURE, 3600000),
        3,
    )

    legacy = Flow(client=("10.0.0.1", 40003))
    packets += legacy.handshake()
    exchange(legacy, SaslHandshakeRequest[0](mechanism="PLAIN"), SaslHandshakeResponse[0](0, ["PLAIN"]), 1)
    token = b"\0alice\0" + PASSWORD
    packets.append(legacy.send(True, len(token).to_bytes(4, "big") + token))
    packets.append(legacy.send(False, b"\0\0\0\0"))  # the broker's empty answer
    for flow in (plain, scram, legacy):
        packets += flow.close()
    path.write_bytes(pcap_bytes([(1000 + i * 1e-3, ethernet(p)) for i, p in enumerate(packets)]))


@pytest.fixture
def sasl_pcap(tmp_path) -> Path:
    path = tmp_path / "sasl.pcap"
    sasl_capture(path)
    assert all(s in path.read_bytes() for s in SECRETS)  # the capture does carry them
    return path


def test_sasl_credentials_appear_in_no_output(sasl_pcap, tmp_path):
    for extra in ((), ("--records",)):
        outputs = every_output(sasl_pcap, tmp_path, *extra)
        assert leaks(outputs, SECRETS) == []
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["decode"]["by_api"]["SaslAuthenticate"]["exchanges"] == 3  # decoded, just not kept


def _values(obj, seen: set[int]):
    """Every bytes-like and str value reachable from a decoded object."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, bytes | bytearray | memoryview):
        yield bytes(obj)
    elif isinstance(obj, str):
        yield obj.encode()
    elif isinstance(obj, tuple | list):
        for v in obj:
            yield from _values(v, seen)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _values(getattr(obj, f.name), seen)


def test_sasl_credentials_are_not_kept_in_exchanges(sasl_pcap):
    dec = Decoder(keep_records=True)
    events = []
    for event in read_files([str(sasl_pcap)]):
        events += dec.feed(event)
    events += dec.finish()
    sasl = [e for e in events if isinstance(e, Exchange) and e.api_name == "SaslAuthenticate"]
    assert len(sasl) == 3 and all(e.request is not None and e.response is not None for e in sasl)
    everything = b"\n".join(v for e in events for v in _values(e, set()))
    assert [s for s in SECRETS if s in everything] == []
    assert all(isinstance(e.request.auth_bytes, int) for e in sasl)  # the length stands in for the bytes
