"""Where the reassembler cuts a connection's bytes into chunks depends on that connection's own segments and
the capture's clock only, never on other connections' traffic in between (ksniff.capture.chunks): the
property that lets an engine reassemble each connection in its own task and still put every decode event
where the in-process engine puts it (ksniff.engine.spark_tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksniff.capture import CaptureLimits, iter_segments
from ksniff.capture.events import ConnectionOpened, StreamChunk, StreamGap
from ksniff.capture.reassembly import Reassembler

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))


def _flow(src: bytes, sport: int, dst: bytes, dport: int) -> tuple:
    a, b = (src, sport), (dst, dport)
    return (a, b) if a <= b else (b, a)


def _pieces(events) -> dict[tuple, list]:
    """Each connection's chunks and gaps (by its endpoints, in order): what the decoder is given."""
    names, out = {}, {}
    for e in events:
        if isinstance(e, ConnectionOpened):
            names[e.conn] = tuple(sorted((str(e.src), str(e.dst))))
        elif isinstance(e, StreamChunk):
            out.setdefault(names[e.conn], []).append(
                ("chunk", e.from_src, e.offset, e.data, e.first_ts, e.last_ts, e.marks)
            )
        elif isinstance(e, StreamGap):  # its time is when it was declared: at the end, the capture's
            out.setdefault(names[e.conn], []).append(("gap", e.from_src, e.offset, e.length))
    return out


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_each_connection_is_cut_into_the_same_chunks_with_or_without_the_others(path):
    segments = list(iter_segments(str(path)))
    limits = CaptureLimits()
    flows: dict[tuple, list] = {}
    for s in segments:
        flows.setdefault(_flow(s[1], s[2], s[3], s[4]), []).append(s)
    if len(flows) < 2:
        pytest.skip("one connection only")
    whole = _pieces(Reassembler(limits).events(iter(segments)))
    alone: dict[tuple, list] = {}
    for own in flows.values():
        alone.update(_pieces(Reassembler(limits).events(iter(own))))
    assert whole == alone
    assert sum(len(v) for v in whole.values()) > len(whole)  # connections of several chunks each


def test_chunks_waiting_for_a_clock_that_does_not_move_stay_bounded(tmp_path, monkeypatch):
    """Timestamps all equal (a hostile or broken capture): no chunk cell ever ends, so without a bound
    every connection would hold a chunk of up to max_chunk_bytes. At MAX_PENDING chunks being merged,
    all of them leave; every byte still arrives, in order."""
    from capture_builders import LINKS, Flow, pcap_bytes, streams

    from ksniff.capture import chunks
    from ksniff.capture.events import StreamChunk

    monkeypatch.setattr(chunks, "MAX_PENDING", 4)
    flows = [Flow(client=("10.0.1.1", 41000 + i)) for i in range(10)]
    packets = [p for f in flows for p in f.handshake()]
    for round_ in range(3):
        packets += [f.send(True, bytes([65 + round_]) * 100) for f in flows]
    linktype, frame = LINKS["EN10MB"]
    path = tmp_path / "frozen.pcap"
    path.write_bytes(pcap_bytes([(1000.0, frame(p)) for p in packets], linktype))
    r = Reassembler(CaptureLimits())
    seen, most = [], 0
    for event in r.events(iter(iter_segments(str(path)))):
        seen.append(event)
        most = max(most, len(r._merger.pending))
    assert most <= 4
    assert sum(isinstance(e, StreamChunk) for e in seen) > len(flows)  # cut by the bound, not only the end
    data = streams(seen)
    assert [data[(n, True)] for n in range(1, 11)] == [b"A" * 100 + b"B" * 100 + b"C" * 100] * 10
