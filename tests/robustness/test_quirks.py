"""Real-world quirks are still requests: a frame whose header and API key/version are valid is the request
it says it is even when its body carries bytes the schema does not define (librdkafka's ApiVersions v0
with four bytes after the client id). It is decoded, the leftover is counted, and neither the exchange
nor the resynchronisation of a stream read from its middle is lost."""

from __future__ import annotations

import json
import struct

import pytest
from capture_builders import Flow, ethernet, pcap_bytes
from decode_builders import (
    api_versions_response,
    end_txn,
    end_txn_response,
    frame,
    init_producer_id,
    init_producer_id_response,
)
from robustness_support import assert_no_traceback, cli


def api_versions_v0_with_trailer(correlation_id: int) -> bytes:
    """ApiVersions v0 (an empty body) with four bytes after the client id, as librdkafka sent it."""
    client = b"rdkafka"
    payload = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client + b"\0\0\0\0"
    return struct.pack(">i", len(payload)) + payload


def conversation(flow: Flow, cid: int = 1) -> list[bytes]:
    pairs = [
        (api_versions_v0_with_trailer(cid), frame(api_versions_response(0), 0, cid)),
        (frame(init_producer_id(4), 4, cid + 1), frame(init_producer_id_response(4), 4, cid + 1)),
        (frame(end_txn(3), 3, cid + 2), frame(end_txn_response(3), 3, cid + 2)),
    ]
    packets = []
    for request, response in pairs:
        packets += [flow.send(True, request), flow.send(False, response)]
    return packets


def audit(tmp_path, packets) -> dict:
    path = tmp_path / "quirk.pcap"
    path.write_bytes(pcap_bytes([(1000 + i * 1e-3, ethernet(p)) for i, p in enumerate(packets)]))
    out = tmp_path / "out.json"
    r = cli("audit", path, "--json", out, "-q", "--exit-zero")
    assert r.exit_code == 0, r.output
    assert_no_traceback(r.stdout, r.stderr)
    return json.loads(out.read_text())


@pytest.mark.parametrize("start", ["handshake", "mid_stream"])
def test_request_with_bytes_left_over_is_still_the_request(tmp_path, start):
    flow = Flow()
    packets = (flow.handshake() if start == "handshake" else []) + conversation(flow)
    doc = audit(tmp_path, packets)
    dec = doc["decode"]
    assert dec["requests"] == 3 and dec["exchanges"] == 3, dec
    assert dec["by_api"]["ApiVersions"]["exchanges"] == 1
    assert dec["errors"] == 0
    assert dec["bodies_with_leftover"] == 1 and dec["leftover_bytes"] == 4


def test_resynchronisation_after_a_gap_lands_on_the_quirky_request(tmp_path):
    flow = Flow()
    packets = flow.handshake() + conversation(flow)
    flow.send(True, frame(end_txn(3), 3, 4))  # never captured: the client's stream has a hole
    packets.append(flow.send(False, frame(end_txn_response(3), 3, 4)))
    packets += conversation(flow, cid=5)
    doc = audit(tmp_path, packets)
    dec = doc["decode"]
    # Three exchanges before the hole, three after it; the one whose request was lost is not invented.
    assert dec["by_api"]["ApiVersions"]["exchanges"] == 2, dec
    assert dec["exchanges"] == 6
    assert doc["capture"]["gaps"] == 1


@pytest.mark.parametrize("after", [4, 5, 7])
def test_answer_with_bytes_left_over_then_a_few_bytes_of_the_next(tmp_path, after):
    """Read from its middle, a broker's segment holds an answer with bytes its schema lacks and then only
    the first 4-7 bytes of the next answer (the rest comes after the client's next request):
    resynchronisation judges the next frame by its size, the 4 bytes it can count on, and lands on every
    answer without a traceback."""
    flow = Flow()
    body = struct.pack(">ih", 0, 0) + b"\0\0"  # EndTxn v1's answer (throttle, error) and two bytes more
    answer = struct.pack(">ii", 4 + len(body), 1) + body
    second = frame(end_txn_response(1), 1, 2)
    packets = [
        flow.send(True, frame(end_txn(1), 1, 1) + frame(end_txn(1), 1, 2)),
        flow.send(False, answer + second[:after]),
        flow.send(True, frame(end_txn(1), 1, 3)),
        flow.send(False, second[after:] + frame(end_txn_response(1), 1, 3)),
    ]
    doc = audit(tmp_path, packets)
    dec = doc["decode"]
    assert dec["by_api"]["EndTxn"]["exchanges"] == 3, dec
    assert dec["exchanges"] == 3 and dec["errors"] == 0
    assert dec["bodies_with_leftover"] == 1 and dec["leftover_bytes"] == 2
