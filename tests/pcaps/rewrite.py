"""Anomalies no broker here produces, made by editing one Fetch answer of a real capture.

Takes a real capture of consumers (consume_tansu.pcap), finds the Fetch answer a given consumer got for a
partition, edits one record batch header in it (its producer id, or its base sequence), recomputes the
batch's CRC-32C (but for damaged_batch_tansu, whose CRC is left as damage leaves it) and the packet's IP
and TCP checksums, and writes the result with an expectations file that
states what the edit makes true. The edits keep every length, so frame sizes and TCP sequence numbers stay
right; an edit that changed a length would have to fix the Kafka frame size, the records field's length
and every later sequence and acknowledgement number of the connection, which `shift_stream` does.

A rewritten capture is otherwise a copy of the real one's connections, and ksniff rightly audits copies of
one connection as one capture set; so that each stands as a capture of its own (the corpus holds only
unrelated captures), `relocate` moves its times whole days later and every TCP sequence and
acknowledgement number by a constant, different for each rewritten capture (the connections' own spacing
unchanged).

    python tests/pcaps/rewrite.py [--out DIR]     writes lost_write_tansu.pcap, duplicate_write_tansu.pcap and
                                                  damaged_batch_tansu.pcap (the first's edit, CRC not fixed)
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import crc32c
from scapy.all import IP, TCP, rdpcap, wrpcap

HERE = Path(__file__).resolve().parent
SOURCE = "consume_tansu"
CONSUMER = "corpus-ru-confluent"  # read_uncommitted: the edit is the only thing wrong with what it reads
TOPIC, PARTITION, OFFSET = "reads", 0, 6  # txn 3's batch on partition 0: producer 1, sequences 4-5
BATCH = struct.Struct(">qiibIhiqqqhii")
CRC_AT, CRC_FROM, PID_AT, SEQ_AT = 17, 21, 43, 53


def fetch_answer_packet(capture: Path, client_id: str) -> tuple[int, int]:
    """(packet index, client port) of the first Fetch answer to `client_id` holding the batch at OFFSET."""
    sys.path.insert(0, str(HERE.parent.parent))
    from ksniff.capture import read_files
    from ksniff.decode import Decoder
    from ksniff.decode.events import Exchange

    run = read_files([str(capture)])
    dec = Decoder(on_not_kafka=run.drop)
    events = [e for ev in run for e in dec.feed(ev)] + dec.finish()
    for e in events:
        if not isinstance(e, Exchange) or e.client_id != client_id:
            continue
        for part in e.fetched:
            if (part.topic, part.partition) == (TOPIC, PARTITION) and any(
                b.base_offset == OFFSET for b in part.batches
            ):
                port = int(e.client.rsplit(":", 1)[1])
                return _packet_at(capture, port, part.response_ts), port
    raise RuntimeError(f"no Fetch answer to {client_id} holds {TOPIC}-{PARTITION} offset {OFFSET}")


def _packet_at(capture: Path, port: int, ts: float) -> int:
    for i, pkt in enumerate(rdpcap(str(capture))):
        if TCP in pkt and pkt[TCP].dport == port and abs(float(pkt.time) - ts) < 1e-6:
            return i
    raise RuntimeError("the answer's last packet is not in the capture")


def edit_batch(
    payload: bytearray, producer_id: int | None = None, base_sequence: int | None = None, crc: bool = True
) -> dict:
    """Edit the batch at OFFSET of producer 1 in a TCP payload; returns what it was and what it is.
    `crc` False: the batch's CRC-32C is left as it was, as damage leaves it (the TCP checksum is still
    recomputed: a capture file damaged after the checksums were checked, or a capture path that damaged
    the bytes it copied)."""
    at = _find_batch(payload)
    was = BATCH.unpack_from(payload, at)
    if producer_id is not None:
        struct.pack_into(">q", payload, at + PID_AT, producer_id)
    if base_sequence is not None:
        struct.pack_into(">i", payload, at + SEQ_AT, base_sequence)
    end = at + 12 + was[1]
    if crc:
        struct.pack_into(">I", payload, at + CRC_AT, crc32c.crc32c(bytes(payload[at + CRC_FROM : end])))
    now = BATCH.unpack_from(payload, at)
    return {
        "offset": OFFSET,
        "producer_id": [was[9], now[9]],
        "base_sequence": [was[11], now[11]],
        "crc": [was[4], now[4]],
    }


def _find_batch(payload: bytearray) -> int:
    needle = struct.pack(">q", OFFSET)
    at = payload.find(needle)
    while at >= 0:
        if at + BATCH.size <= len(payload):
            fields = BATCH.unpack_from(payload, at)
            if fields[3] == 2 and fields[9] == 1 and at + 12 + fields[1] <= len(payload):
                return at
        at = payload.find(needle, at + 1)
    raise RuntimeError("batch not found whole in one packet")


def shift_stream(packets, index: int, delta: int) -> None:
    """After a payload of packet `index` grew by `delta` bytes: later sequence numbers of its direction,
    and acknowledgement numbers of the other, move by `delta` (unused by the same-length edits here)."""
    ref = packets[index]
    src, dst = (ref[IP].src, ref[TCP].sport), (ref[IP].dst, ref[TCP].dport)
    for pkt in packets[index + 1 :]:
        if TCP not in pkt:
            continue
        here = (pkt[IP].src, pkt[TCP].sport), (pkt[IP].dst, pkt[TCP].dport)
        if here == (src, dst):
            pkt[TCP].seq = (pkt[TCP].seq + delta) % 2**32
        elif here == (dst, src):
            pkt[TCP].ack = (pkt[TCP].ack + delta) % 2**32


# How far `relocate` moves the n-th rewritten capture from its source: n days, n times this in TCP
# sequence space.
RELOCATE_SECONDS = 86_400
RELOCATE_SEQ = 0x2000_0000


def relocate(packets, seconds: int, seq: int) -> None:
    """Every packet `seconds` later, every TCP sequence (and acknowledgement) number `seq` further."""
    for pkt in packets:
        pkt.time = pkt.time + seconds
        if TCP not in pkt:
            continue
        pkt[TCP].seq = (pkt[TCP].seq + seq) % 2**32
        if pkt[TCP].flags.A:
            pkt[TCP].ack = (pkt[TCP].ack + seq) % 2**32
        del pkt[TCP].chksum


def rewrite(out: Path, name: str, nth: int, expect_extra: dict, **edit) -> None:
    capture = HERE / f"{SOURCE}.pcap"
    index, port = fetch_answer_packet(capture, CONSUMER)
    packets = rdpcap(str(capture))
    pkt = packets[index]
    payload = bytearray(bytes(pkt[TCP].payload))
    change = edit_batch(payload, **edit)
    pkt[TCP].remove_payload()
    pkt[TCP].add_payload(bytes(payload))
    del pkt[IP].chksum, pkt[TCP].chksum, pkt[IP].len  # recomputed on write
    moved = {"seconds": nth * RELOCATE_SECONDS, "tcp_sequence": nth * RELOCATE_SEQ}
    relocate(packets, moved["seconds"], moved["tcp_sequence"])
    wrpcap(str(out / f"{name}.pcap"), packets)
    doc = json.loads((HERE / f"{SOURCE}.expect.json").read_text())
    doc.pop("delivered", None)
    doc.update(
        capture=f"{name}.pcap",
        scenario=name,
        rewritten_from=f"{SOURCE}.pcap",
        edit={
            "packet": index + 1,
            "consumer": CONSUMER,
            "client_port": port,
            "topic": TOPIC,
            "partition": PARTITION,
            **change,
        },
        relocated=moved,
    )
    doc["findings"] = doc["findings"] + expect_extra["findings"]
    doc["notes"] = expect_extra["notes"] + " The rest is as in " + SOURCE + ": " + doc["notes"]
    (out / f"{name}.expect.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {name}.pcap (packet {index + 1}: {change})")


def _critical(kind: str) -> dict:
    """A critical finding about producer id 1 (tx-reads-tansu) on the rewritten partition."""
    where = {"transactional_id": "tx-reads-tansu", "producer_id": 1, "topic": TOPIC, "partition": PARTITION}
    return {"kind": kind, "severity": "critical", **where}


LOST = {
    "findings": [_critical("lost_write")],
    "notes": f"Rewritten: in the Fetch answer {CONSUMER} got for {TOPIC}-{PARTITION}, the batch at offset "
    f"{OFFSET} (acknowledged to producer id 1, sequences 4-5) now names producer id 77 (CRC "
    f"recomputed): the acknowledged write is not what the log holds at {OFFSET}, and the consumer "
    "read past it: a lost_write.",
}
DUPLICATE = {
    "findings": [_critical("duplicate_write"), _critical("lost_write")],
    "notes": f"Rewritten: in the Fetch answer {CONSUMER} got for {TOPIC}-{PARTITION}, the batch at "
    f"offset {OFFSET} (producer id 1, sequences 4-5) now starts at sequence 0 (CRC recomputed): "
    "producer id 1 epoch 0 sequences 0-1 are at offsets 0 and 6 (duplicate_write), and the "
    f"batch acknowledged at {OFFSET} is no longer there (lost_write).",
}


DAMAGED = {
    "findings": [{"kind": "corrupt_batch", "severity": "info", "topic": TOPIC, "partition": PARTITION}],
    "notes": f"Damaged: in the Fetch answer {CONSUMER} got for {TOPIC}-{PARTITION}, the batch at offset "
    f"{OFFSET} names producer id 77, as lost_write_tansu's does, but its CRC-32C is the original's (not "
    "recomputed): the bytes are damaged, not what the broker sent. Not a lost_write: the batch fails its "
    "CRC (corrupt_batch), nothing in it is judged, and the verdict is unverified on that ground.",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    rewrite(args.out, "lost_write_tansu", 1, LOST, producer_id=77)
    rewrite(args.out, "duplicate_write_tansu", 2, DUPLICATE, base_sequence=0)
    rewrite(args.out, "damaged_batch_tansu", 3, DAMAGED, producer_id=77, crc=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
