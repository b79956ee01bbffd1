"""Real captures from tests/pcaps through the capture room and the Decoder, checked against the
expectations beside each and, field by field, against tshark for the versions tshark decodes."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from corpus_decode import decode
from harness import as_list, field_values, has_field, tshark_packets

from ksniff.decode.events import Exchange, RecordBatchHeader
from ksniff.decode.values import Struct

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
EXPECTATIONS = sorted(PCAPS.glob("*.expect.json"))


def _cases():
    for exp in EXPECTATIONS:
        doc = json.loads(exp.read_text())
        path = PCAPS / doc["capture"]
        if path.exists():
            yield pytest.param(path, doc, id=path.name)


CASES = list(_cases())


@pytest.mark.parametrize("path, expect", CASES)
def test_corpus_against_expectations(path, expect):
    dec, exchanges = decode(path, expect["kafka_ports"])
    by_api = dec.stats.as_contract()["by_api"]
    assert {name: c["requests"] for name, c in by_api.items()} == expect["requests_by_api"]
    assert {name: c["versions"] for name, c in by_api.items()} == expect["api_versions"]
    # tshark's exchange counts are a floor: it pairs only what it decodes
    for name, n in expect["exchanges_by_api"].items():
        assert by_api[name]["exchanges"] >= n, name
    assert dec.stats.errors == 0
    assert not [e for e in exchanges if e.decode_error not in (None, "skipped_api")]
    produced = sum(b.header.records_count for e in exchanges for b in e.batches if not b.header.control)
    assert produced >= expect["records_produced"]
    assert all(b.header.crc_ok for e in exchanges for b in e.batches)


# -- differential against tshark -------------------------------------------------------------------------


def tshark_pdus(path: Path, ports: list[int]) -> list[dict]:
    pdus = []
    for packet in tshark_packets(path, ports):
        layers = packet["_source"]["layers"]
        malformed = "_ws.malformed" in layers
        tcp = as_list(layers["tcp"])[0]
        for pdu in as_list(layers.get("kafka", [])):
            if "kafka.api_key" not in pdu:
                continue
            is_request = "kafka.request_key" in pdu
            pdus.append(
                {
                    "request": is_request,
                    "client_port": int(tcp["tcp.srcport"] if is_request else tcp["tcp.dstport"]),
                    "api_key": int(pdu["kafka.api_key"]),
                    "api_version": int(pdu["kafka.api_version"]) if "kafka.api_version" in pdu else None,
                    "correlation_id": int(pdu["kafka.correlation_id"]),
                    "decoded": not (malformed or has_field(pdu, "kafka.unsupported_api_version")),
                    # tshark shows a null string as "[ Null ]"
                    "transactional_id": sorted(
                        set(field_values(pdu, "kafka.transactional_id")) - {"[ Null ]", ""}
                    ),
                    "producer_id": sorted({int(v) for v in field_values(pdu, "kafka.producer_id")}),
                    "producer_epoch": sorted({int(v) for v in field_values(pdu, "kafka.producer_epoch")}),
                    "base_sequence": sorted({int(v) for v in field_values(pdu, "kafka.batch_base_sequence")}),
                    "errors": sorted({int(v) for v in field_values(pdu, "kafka.error")}),
                }
            )
    return pdus


def walk(value, field: str, out: list) -> list:
    """Values of a kind of field anywhere in a body (`producer_id`, `v3_and_below_producer_id`, ...),
    record batch headers included."""
    if isinstance(value, Struct):
        for name, v in zip(value._fields, value, strict=True):
            if (name == field or name.endswith("_" + field)) and not isinstance(v, tuple | Struct):
                out.append(v)
            else:
                walk(v, field, out)
    elif isinstance(value, RecordBatchHeader):
        if hasattr(value, field):
            out.append(getattr(value, field))
    elif isinstance(value, tuple):
        for v in value:
            walk(v, field, out)
    return out


def ours(exchanges: list[Exchange]) -> dict:
    """Our view of each PDU, keyed like tshark's (client port, correlation id, request?)."""
    view = {}
    for e in exchanges:
        port = int(e.client.rsplit(":", 1)[1])
        req = e.request
        view[(port, e.correlation_id, True)] = {
            "api_key": e.api_key,
            "api_version": e.api_version,
            "transactional_id": sorted({v for v in walk(req, "transactional_id", []) if v}),
            "producer_id": sorted(set(walk(req, "producer_id", []))),
            "producer_epoch": sorted(set(walk(req, "producer_epoch", []))),
            "base_sequence": sorted(set(walk(req, "base_sequence", []))),
        }
        if e.status == "ok":
            view[(port, e.correlation_id, False)] = {
                "api_key": e.api_key,
                "errors": sorted(set(walk(e.response, "error_code", []))),
            }
    return view


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
@pytest.mark.parametrize("path, expect", CASES)
def test_against_tshark(path, expect):
    dec, exchanges = decode(path, expect["kafka_ports"])
    mine = ours(exchanges)
    compared: Counter[str] = Counter()
    differences: dict[str, list] = defaultdict(list)
    for pdu in tshark_pdus(path, expect["kafka_ports"]):
        key = (pdu["client_port"], pdu["correlation_id"], pdu["request"])
        assert key in mine, f"tshark saw {key} (api {pdu['api_key']}), we did not"
        got = mine[key]
        assert got["api_key"] == pdu["api_key"], key
        if pdu["request"]:
            assert got["api_version"] == pdu["api_version"], key
        compared["api_key, api_version, correlation_id"] += 1
        if not pdu["decoded"]:
            continue
        fields = (
            ("transactional_id", "producer_id", "producer_epoch", "base_sequence")
            if pdu["request"]
            else ("errors",)
        )
        for f in fields:
            theirs = pdu[f]
            if not theirs:
                continue  # tshark does not dissect every field of every version
            compared[f] += 1
            # tshark dissects a subset of the fields: every value it found must be one of ours
            if not set(theirs) <= set(got[f]):
                differences[f].append((key, theirs, got[f]))
    assert not differences, dict(differences)
    assert compared["api_key, api_version, correlation_id"] > 0
