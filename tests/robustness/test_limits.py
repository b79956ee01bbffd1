"""Every memory limit can be set, and when traffic hits it the run says so: a warning line on stderr and
a count in the JSON document's `capture` or `decode` block. Nothing a limit cuts is silent."""

from __future__ import annotations

import json

import pytest
from capture_builders import Flow, ethernet, pcap_bytes
from decode_builders import end_txn, end_txn_response, frame, init_producer_id, init_producer_id_response
from robustness_support import assert_no_traceback, check_document, cli


def write(path, packets) -> str:
    path.write_bytes(pcap_bytes([(1000 + i * 1e-3, ethernet(p)) for i, p in enumerate(packets)]))
    return str(path)


def audit(capture: str, tmp_path, *options: str, env: dict | None = None) -> tuple[dict, list[str]]:
    out = tmp_path / "out.json"
    r = cli("audit", capture, "--json", out, "--no-color", "-q", "--exit-zero", *options, env=env)
    assert r.exit_code == 0, r.output
    assert_no_traceback(r.stdout, r.stderr)
    doc = json.loads(out.read_text())
    check_document(doc)
    return doc, [line for line in r.stderr.splitlines() if line.startswith("ksniff: warning: ")]


def conversation(client_port: int = 40000) -> list[bytes]:
    """A whole Kafka connection: InitProducerId and EndTxn, answered."""
    flow = Flow(client=("10.0.0.1", client_port))
    packets = flow.handshake()
    for cid, (request, response) in enumerate(
        [(init_producer_id(4), init_producer_id_response(4)), (end_txn(3), end_txn_response(3))]
    ):
        packets.append(flow.send(True, frame(request, request.API_VERSION, cid)))
        packets.append(flow.send(False, frame(response, response.API_VERSION, cid)))
    return packets + flow.close()


def test_defaults_hit_nothing(tmp_path):
    doc, warnings = audit(write(tmp_path / "c.pcap", conversation()), tmp_path)
    assert warnings == []
    assert doc["decode"]["exchanges"] == 2
    for block, key in [
        ("capture", "evicted_connections"),
        ("capture", "forced_gaps"),
        ("decode", "oversized_frames"),
        ("decode", "in_flight_evicted"),
    ]:
        assert doc[block][key] == 0


def test_connection_limit(tmp_path):
    # Three connections open at once (interleaved), two tracked at most.
    flows = [Flow(client=("10.0.0.1", 40000 + i)) for i in range(3)]
    packets = [p for f in flows for p in f.handshake()]
    packets += [f.send(True, frame(init_producer_id(4), 4, 1)) for f in flows]
    capture = write(tmp_path / "c.pcap", packets)
    doc, warnings = audit(capture, tmp_path, "--max-connections", "2")
    assert doc["capture"]["evicted_connections"] >= 1
    assert any("connection limit (2) reached" in w for w in warnings), warnings
    doc, warnings = audit(capture, tmp_path)
    assert doc["capture"]["evicted_connections"] == 0 and warnings == []


def held_back(flow: Flow, segments: int, size: int = 500) -> list[bytes]:
    """A request whose first segment the capture lost; the rest wait out of order (no ACK covers the
    hole, so the reassembler cannot know it was lost)."""
    data = frame(init_producer_id(4, transactional_id="t" * (segments * size)), 4, 1)
    seq = flow.seq[True]
    packets = [
        flow.raw(True, seq + off, payload=data[off : off + size], ack=flow.seq[False])
        for off in range(size, len(data), size)
    ]
    flow.seq[True] = seq + len(data)
    return packets


def test_out_of_order_buffer_limit_per_direction(tmp_path):
    flow = Flow()
    capture = write(tmp_path / "c.pcap", flow.handshake() + held_back(flow, 10))
    doc, warnings = audit(capture, tmp_path, "--max-buffer-bytes", "1500")
    assert doc["capture"]["forced_gaps"] >= 1
    assert doc["capture"]["gaps"] >= 1  # what the cap gave up is a gap, never silence
    assert any("out-of-order buffer limits reached" in w for w in warnings), warnings
    doc, warnings = audit(capture, tmp_path)  # the default holds it all until the end
    assert doc["capture"]["forced_gaps"] == 0 and warnings == []


def test_out_of_order_buffer_limit_in_total(tmp_path):
    a, b = Flow(client=("10.0.0.1", 40000)), Flow(client=("10.0.0.1", 40001))
    packets = a.handshake() + b.handshake() + held_back(a, 4) + held_back(b, 4)
    capture = write(tmp_path / "c.pcap", packets)
    doc, warnings = audit(capture, tmp_path, "--max-buffer-total", "2500")
    assert doc["capture"]["forced_gaps"] >= 1
    assert any("out-of-order buffer limits reached" in w for w in warnings), warnings


def test_frame_size_limit(tmp_path):
    flow = Flow()
    big = frame(init_producer_id(4, transactional_id="t" * 3000), 4, 1)
    packets = flow.handshake() + [flow.send(True, big[i : i + 1000]) for i in range(0, len(big), 1000)]
    packets.append(flow.send(False, frame(init_producer_id_response(4), 4, 1)))
    capture = write(tmp_path / "c.pcap", packets + flow.close())
    doc, warnings = audit(capture, tmp_path, "--max-frame-bytes", "1000")
    assert doc["decode"]["oversized_frames"] == 1
    assert doc["decode"]["exchanges"] == 0
    assert any("frame size limit (1000 bytes) reached: 1 frames skipped" in w for w in warnings), warnings
    doc, warnings = audit(capture, tmp_path)
    assert doc["decode"]["exchanges"] == 1 and doc["decode"]["oversized_frames"] == 0


@pytest.mark.parametrize("how", ["option", "env"])
def test_in_flight_limit(tmp_path, how):
    flow = Flow()
    packets = flow.handshake() + [flow.send(True, frame(end_txn(3), 3, cid)) for cid in range(5)]
    capture = write(tmp_path / "c.pcap", packets + flow.close())
    if how == "option":
        doc, warnings = audit(capture, tmp_path, "--max-in-flight", "2")
    else:
        doc, warnings = audit(capture, tmp_path, env={"KSNIFF_MAX_IN_FLIGHT": "2"})
    assert doc["decode"]["in_flight_evicted"] == 3
    assert doc["decode"]["unmatched_requests"] == 5  # three given up early, two when the connection closed
    assert any("in-flight request limit (2 per connection) reached: 3 requests" in w for w in warnings), (
        warnings
    )


def test_a_bad_limit_is_a_usage_error():
    r = cli("audit", "x.pcap", "--max-connections", "0")
    assert r.exit_code == 2 and "Invalid value for '--max-connections'" in r.stderr
    assert "Traceback" not in r.stderr
