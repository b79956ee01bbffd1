"""Capture loss: copies of a corpus capture with frames deleted inside its transactions, or its first part
cut, made with editcap at test time (frames chosen from tshark's reading of the original).

The original story has no critical finding, so any critical finding in a damaged copy would rest on the
lost bytes, which the contract forbids. Decoding must resume after each gap, and a transaction whose end
was lost is `unknown`, never `hanging`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from decode_builders import Stream, end_txn, end_txn_response, frame, init_producer_id, run
from harness import tshark_fields
from robustness_support import PCAPS, check_document, cli, expectations

from ksniff.decode import Decoder
from ksniff.decode.events import ConnectionLost, Exchange

pytestmark = pytest.mark.skipif(
    not (shutil.which("tshark") and shutil.which("editcap")), reason="needs tshark and editcap"
)

STORY = PCAPS / "txn_confluent_tansu.pcap"
PRODUCE, ADD_PARTITIONS, END_TXN = 0, 24, 26


def requests_by_api(capture: Path) -> dict[int, list[int]]:
    """Frame numbers of the requests of each API key, as tshark reads the capture."""
    port = expectations(capture)["kafka_ports"][0]
    rows = tshark_fields(capture, [port], f"kafka && tcp.dstport=={port}", "frame.number", "kafka.api_key")
    found: dict[int, list[int]] = {}
    for number, keys in rows:
        for key in keys.split(","):
            if key:
                found.setdefault(int(key), []).append(int(number))
    return found


def audit(path: Path, tmp_path: Path) -> dict:
    out = tmp_path / "out.json"
    r = cli("audit", path, "--json", out, "--no-color", "-q", "--exit-zero")
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    check_document(doc)
    return doc


def derive(tmp_path: Path, name: str, frames: str, keep: bool = False) -> Path:
    """A copy of the story without the frames (`editcap -d` style), or with only them (`keep`)."""
    target = tmp_path / name
    subprocess.run(
        ["editcap", "-F", "pcap", *(["-r"] if keep else []), str(STORY), str(target), frames], check=True
    )
    return target


def outcomes(doc: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in doc["transactions"]:
        if t["transactional_id"] == "tx-A":
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    return counts


def requests_of(doc: dict, api: str) -> int:
    return doc["decode"]["by_api"][api]["requests"]


def check_nothing_rests_on_lost_bytes(doc: dict) -> None:
    assert doc["capture"]["gaps"] > 0
    kinds = [f["kind"] for f in doc["findings"]]
    assert "capture_gap" in kinds
    for f in doc["findings"]:
        if f["evidence"].get("unverified"):
            assert f["severity"] != "critical", f
    assert [f for f in doc["findings"] if f["severity"] == "critical"] == []


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> dict:
    doc = audit(STORY, tmp_path_factory.mktemp("original"))
    assert doc["capture"]["gaps"] == 0
    assert outcomes(doc) == {k: v for k, v in expectations(STORY)["transactions"]["tx-A"].items() if v}
    assert not [f for f in doc["findings"] if f["severity"] == "critical"]
    return doc


def test_lost_end_txn_makes_the_transaction_unknown(tmp_path, original):
    end = requests_by_api(STORY)[END_TXN]
    damaged = derive(tmp_path, "lost-end.pcap", str(end[1]))  # the second transaction's EndTxn request
    doc = audit(damaged, tmp_path)
    check_nothing_rests_on_lost_bytes(doc)
    assert not [f for f in doc["findings"] if f["kind"] == "hanging_transaction"]
    before, after = outcomes(original), outcomes(doc)
    assert after.get("unknown", 0) == 1, after
    assert sum(after.values()) == sum(before.values())
    # Decoding resumed: the EndTxn requests after the gap were read and answered.
    assert requests_of(doc, "EndTxn") == requests_of(original, "EndTxn") - 1
    assert after.get("commit", 0) == before.get("commit", 0)


def test_lost_produce_is_never_a_critical_sequence_finding(tmp_path, original):
    adds, ends = requests_by_api(STORY)[ADD_PARTITIONS], requests_by_api(STORY)[END_TXN]
    produce = [n for n in requests_by_api(STORY)[PRODUCE] if adds[1] < n < ends[1]]
    damaged = derive(tmp_path, "lost-produce.pcap", str(produce[0]))
    doc = audit(damaged, tmp_path)
    check_nothing_rests_on_lost_bytes(doc)
    assert requests_of(doc, "Produce") == requests_of(original, "Produce") - 1
    assert sum(outcomes(doc).values()) == sum(outcomes(original).values())


def test_lost_frames_across_transactions(tmp_path, original):
    """A range of frames from inside the second transaction into the third."""
    adds, ends = requests_by_api(STORY)[ADD_PARTITIONS], requests_by_api(STORY)[END_TXN]
    damaged = derive(tmp_path, "lost-range.pcap", f"{adds[1] + 1}-{adds[2] + 1}")
    doc = audit(damaged, tmp_path)
    check_nothing_rests_on_lost_bytes(doc)
    assert not [f for f in doc["findings"] if f["kind"] == "hanging_transaction"]
    assert doc["decode"]["exchanges"] > 0
    # What came after the gap was decoded: the last EndTxn request is in the damaged capture.
    assert doc["decode"]["by_api"]["EndTxn"]["requests"] >= 1
    assert ends[-1] > adds[2] + 1


def test_capture_starting_mid_transaction(tmp_path, original):
    adds = requests_by_api(STORY)[ADD_PARTITIONS]
    start = adds[1] + 1  # after the second transaction's AddPartitionsToTxn request
    damaged = derive(tmp_path, "mid-stream.pcap", f"{start}-1000000", keep=True)
    doc = audit(damaged, tmp_path)
    assert doc["decode"]["exchanges"] > 0
    assert "EndTxn" in doc["decode"]["by_api"]
    assert [f for f in doc["findings"] if f["severity"] == "critical"] == []
    assert not [f for f in doc["findings"] if f["kind"] == "hanging_transaction"]
    # The fencing at the story's end is still seen from the bytes after the cut.
    assert "producer_fenced" in {f["kind"] for f in doc["findings"]}


def test_gap_before_a_ported_connections_first_bytes():
    """The capture lost the start of a connection whose handshake it saw: decoding resynchronises on the
    next whole frame and marks what follows unverified, instead of reading lost context as a size."""
    s = Stream()
    dec = Decoder()
    lost = frame(init_producer_id(4), 4, 1)
    events = [
        s.opened(handshake=True),
        s.gap(len(lost) + 3),
        s.send(b"tail" + frame(end_txn(3), 3, 2)),
        s.send(frame(end_txn_response(3), 3, 2), from_src=False),
    ]
    out = run(dec, events) + dec.finish()
    assert [type(e) for e in out if isinstance(e, ConnectionLost)] == [ConnectionLost]
    (ex,) = [e for e in out if isinstance(e, Exchange)]
    assert (ex.api_name, ex.status, ex.unverified) == ("EndTxn", "ok", True)
    assert dec.stats.errors == 0 and dec.stats.oversized_frames == 0
