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
