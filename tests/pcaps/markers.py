"""WriteTxnMarkers that contradict the EndTxn the coordinator accepted: a capture no broker here makes.

WriteTxnMarkers is what a transaction coordinator sends to each partition leader once a transaction ends;
Tansu and librdkafka's mock write their markers inside the broker, so it never crosses a wire here. This
script builds it from Kafka's protocol facts (kafka-python's own WriteTxnMarkersRequest and Response, v1)
into a real capture: it takes consume_tansu.pcap, finds the first EndTxn(commit) that tansu accepted, and
adds, after that answer and before the producer's next AddPartitionsToTxn, one connection from a second
broker's address to tansu's port carrying WriteTxnMarkers for the same producer id and epoch and the
partitions the transaction added, with transaction_result false (ABORT), answered without error by the
leader. The capture is then moved days
later and in sequence space (`rewrite.relocate`), so that it stands as a capture of its own beside
consume_tansu. The expectations are consume_tansu's, plus what the added exchange makes true:
`markers_disagree`, critical (the leader accepted the contradicting markers).

    python tests/pcaps/markers.py [--out DIR]     writes markers_tansu.pcap and its expectations
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scapy.all import IP, TCP, Ether, rdpcap, wrpcap

HERE = Path(__file__).resolve().parent
SOURCE = "consume_tansu"
NAME = "markers_tansu"
SENDER = ("127.0.0.2", 41999)  # the coordinator's end: a second broker's address
CLIENT_ID = "broker-1-txn-marker-sender"
NTH = 5  # moved as rewrite.py's fifth capture would be: days later, elsewhere in sequence space


def first_commit(capture: Path):
    """(EndTxn exchange, the partitions its transaction added, when the producer's next AddPartitionsToTxn
    was sent) of the first EndTxn(commit) accepted."""
    sys.path.insert(0, str(HERE.parent.parent))
    from ksniff.capture import read_files
    from ksniff.decode import Decoder
    from ksniff.decode.events import Exchange

    run = read_files([str(capture)])
    dec = Decoder(on_not_kafka=run.drop)
    events = [e for ev in run for e in dec.feed(ev)] + dec.finish()
    added: dict[tuple[int, int], set[tuple[str, int]]] = {}
    for e in events:
        if not isinstance(e, Exchange) or e.request is None:
            continue
        if e.api_name == "AddPartitionsToTxn":
            r = e.request
            key = (r.v3_and_below_producer_id, r.v3_and_below_producer_epoch)
            named = {(t.name, p) for t in r.v3_and_below_topics for p in t.partitions}
            added.setdefault(key, set()).update(named)
    for i, e in enumerate(events):
        if not isinstance(e, Exchange) or e.api_name != "EndTxn" or e.request is None:
            continue
        if e.request.committed and e.response is not None and not e.response.error_code:
            key = (e.request.producer_id, e.request.producer_epoch)
            later = [
                x.request_ts
                for x in events[i:]
                if isinstance(x, Exchange)
                and x.api_name == "AddPartitionsToTxn"
                and x.request_ts > e.response_ts
            ]
            return e, sorted(added[key]), min(later, default=e.response_ts + 0.01)
    raise RuntimeError("no accepted EndTxn(commit) in the capture")


def frames(pid: int, epoch: int, partitions: list[tuple[str, int]]) -> tuple[bytes, bytes]:
    """WriteTxnMarkers v1 request (ABORT) and its answer (no error), framed with their headers."""
    from kafka.protocol.producer import WriteTxnMarkersRequest as Req
    from kafka.protocol.producer import WriteTxnMarkersResponse as Resp

    topics: dict[str, list[int]] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(p)
    request = Req(
        markers=[
            Req.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=False,
                coordinator_epoch=0,
                topics=[
                    Req.WritableTxnMarker.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()
                ],
            )
        ]
    )
    request.API_VERSION = 1
    request.with_header(correlation_id=1, client_id=CLIENT_ID)
    R = Resp.WritableTxnMarkerResult
    T = R.WritableTxnMarkerTopicResult
    response = Resp(
        markers=[
            R(
                producer_id=pid,
                topics=[
                    T(
                        name=t,
                        partitions=[
                            T.WritableTxnMarkerPartitionResult(partition_index=p, error_code=0) for p in ps
                        ],
                    )
                    for t, ps in topics.items()
                ],
            )
        ]
    )
    response.API_VERSION = 1
    response.with_header(correlation_id=1)
    return bytes(request.encode(header=True, framed=True)), bytes(response.encode(header=True, framed=True))


def connection(
    template, leader: tuple[str, int], start: float, step: float, request: bytes, response: bytes
) -> list:
    """A whole TCP connection from SENDER to `leader`, a packet every `step` seconds from `start`:
    handshake, request, answer, close."""
    (cip, cport), (sip, sport) = SENDER, leader
    link = Ether(src=template[Ether].src, dst=template[Ether].dst) if Ether in template else None
    cs, ss = 1_000_000, 2_000_000
    steps = [  # (from the sender?, flags, payload)
        (True, "S", b""),
        (False, "SA", b""),
        (True, "A", b""),
        (True, "PA", request),
        (False, "PA", response),
        (True, "FA", b""),
        (False, "FA", b""),
        (True, "A", b""),
    ]
    out = []
    seq = {True: cs, False: ss}
    for i, (mine, flags, payload) in enumerate(steps):
        ip = IP(src=cip, dst=sip) if mine else IP(src=sip, dst=cip)
        tcp = TCP(
            sport=cport if mine else sport,
            dport=sport if mine else cport,
            flags=flags,
            seq=seq[mine],
            ack=0 if flags == "S" else seq[not mine],
        )
        pkt = (link.copy() / ip / tcp / payload) if link is not None else (ip / tcp / payload)
        pkt = pkt.__class__(bytes(pkt))  # lengths and checksums computed now
        pkt.time = start + i * step
        out.append(pkt)
        seq[mine] += len(payload) + (1 if "S" in flags or "F" in flags else 0)
    return out


def build(out: Path) -> None:
    from rewrite import RELOCATE_SECONDS, RELOCATE_SEQ, relocate

    capture = HERE / f"{SOURCE}.pcap"
    end, partitions, next_add = first_commit(capture)
    pid, epoch = end.request.producer_id, end.request.producer_epoch
    host, port = end.broker.rsplit(":", 1)
    request, response = frames(pid, epoch, partitions)
    packets = list(rdpcap(str(capture)))
    # Where Kafka's coordinator writes them: after answering EndTxn, before the producer's next transaction
    # can add a partition (until the markers are written it answers CONCURRENT_TRANSACTIONS).
    window = next_add - end.response_ts
    added = connection(
        packets[0], (host, int(port)), end.response_ts + window / 10, window / 12, request, response
    )
    packets = sorted(packets + added, key=lambda p: float(p.time))
    relocate(packets, NTH * RELOCATE_SECONDS, NTH * RELOCATE_SEQ)  # beside rewrite.py's captures 1 and 2
    out.mkdir(parents=True, exist_ok=True)
    wrpcap(str(out / f"{NAME}.pcap"), packets)
    expect = json.loads((HERE / f"{SOURCE}.expect.json").read_text())
    expect["capture"] = f"{NAME}.pcap"
    expect["scenario"] = NAME
    tid = end.request.transactional_id
    expect["findings"] = [
        *expect.get("findings", []),
        {"kind": "markers_disagree", "severity": "critical", "transactional_id": tid, "producer_id": pid},
    ]
    expect["requests_by_api"]["WriteTxnMarkers"] = 1
    expect["api_versions"]["WriteTxnMarkers"] = [1]
    expect["notes"] = (
        f"Built by tests/pcaps/markers.py from {SOURCE}.pcap: a WriteTxnMarkers v1 (made from Kafka's "
        f"protocol facts with kafka-python's classes, since no broker here sends it) from {SENDER[0]} to "
        f"{end.broker}, after tansu accepted EndTxn(commit) of {tid!r} (producer id {pid} epoch {epoch}) "
        "and before the producer's next AddPartitionsToTxn, writes ABORT "
        f"markers on {', '.join(f'{t}-{p}' for t, p in partitions)} and is answered without error: the "
        "markers contradict the accepted commit (markers_disagree, critical). The rest is as in "
        f"{SOURCE}: " + expect["notes"]
    )
    (out / f"{NAME}.expect.json").write_text(json.dumps(expect, indent=2) + "\n")
    print(f"wrote {NAME}.pcap ({len(added)} packets added) and {NAME}.expect.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE)
    build(parser.parse_args(argv).out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
