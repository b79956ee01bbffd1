"""The per-frame path in C (ksniff.decode._bodies.FrameLane, `connection.LANE`) against the connection's
Python methods, the reference: the same decode events (exchanges, their bodies, batches, times and
statuses; lost spans; ends) and the same decode counters, on every capture of the corpus read as the
engine reads it, on mutated and re-chunked corpus frames, and on chunks of several frames whose bytes
came at several times. Where the compiled module is not built these tests skip (CI fails instead)."""

from __future__ import annotations

from pathlib import Path

import pytest
from compiled_support import require_compiled
from corpus_decode import decoded
from decode_builders import (
    Stream,
    api_versions,
    api_versions_response,
    end_txn,
    end_txn_response,
    frame,
    init_producer_id,
    init_producer_id_response,
    produce_request,
    produce_response,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from robustness_support import fuzz_examples
from test_fuzz_decoder import MUTATION, connections, mutate

from ksniff.capture import read_files
from ksniff.capture.events import StreamChunk
from ksniff.config import EngineConfig
from ksniff.decode import Decoder, connection
from ksniff.decode.events import Exchange
from ksniff.engine.local import PIECES_FROM

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)


@pytest.fixture(scope="module")
def lane():
    require_compiled("ksniff.decode._bodies", "the compiled body reader")
    assert connection.LANE is not None, "the lane was not made although the body reader is built"
    return connection.LANE


class Counted:
    """The lane, counting the chunks of known connections it took and the ones it handed back."""

    def __init__(self, lane) -> None:
        self.lane, self.took, self.handed = lane, 0, 0

    def feed(self, decoder, event):
        out = self.lane.feed(decoder, event)
        if isinstance(event, StreamChunk) and event.conn in decoder._conns:
            if out is None:
                self.handed += 1
            else:
                self.took += 1
        return out


def _decoded(path: Path) -> list:
    """Decode events and counters of a capture read as the engine reads it (large chunks as pieces)."""
    return decoded(path, pieces=True)


def _both(monkeypatch, lane, decode):
    """`decode()` through the lane and through the Python methods alone."""
    monkeypatch.setattr(connection, "LANE", lane)
    ours = decode()
    monkeypatch.setattr(connection, "LANE", None)
    return ours, decode()


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_decode_events_identical(path, monkeypatch, lane):
    ours, python = _both(monkeypatch, lane, lambda: _decoded(path))
    assert ours == python


def test_the_lane_takes_nearly_every_chunk_of_the_corpus(monkeypatch, lane):
    """The comparison above is of the lane's work, not of the fallback's: it takes real traffic's chunks
    (one frame, or several whole frames), and hands back only those with a frame cut across chunks."""
    counted = Counted(lane)
    monkeypatch.setattr(connection, "LANE", counted)
    exchanges = 0
    for path in CORPUS:
        exchanges += sum(isinstance(e, Exchange) for e in _decoded(path)[0])
    assert exchanges > 2000
    assert counted.took > 5000
    assert counted.handed < counted.took / 20


def _chunked(requests: list, responses: list, per_chunk: int, step: float) -> list:
    """A connection's events: requests and answers in turn, `per_chunk` frames to a chunk, each chunk's
    time changing at each of its frames after the first (marks, as a reassembler gives merged segments)."""
    s = Stream()
    events = [s.opened(True)]
    # Gaps left out: each direction's bytes all there.
    requests = [f for f in requests if isinstance(f, bytes)]
    responses = [f for f in responses if isinstance(f, bytes)]
    pairs = max(len(requests), len(responses))
    for start in range(0, pairs, per_chunk):
        for items, from_src in ((requests, True), (responses, False)):
            group = items[start : start + per_chunk]
            if not group:
                continue
            offset = s.offsets[from_src]
            first = s.ts + step
            marks, at = [], offset
            for i, f in enumerate(group):
                if i:
                    marks.append((at, first + i * step))
                at += len(f)
            data = b"".join(group)
            s.offsets[from_src] = offset + len(data)
            s.ts = first + len(group) * step
            events.append(StreamChunk(s.conn, from_src, offset, data, first, s.ts, tuple(marks)))
    events.append(s.closed())
    return events


def _run(events: list, keep_records: bool) -> list:
    dec = Decoder(ports=(9092,), keep_records=keep_records)
    out = []
    for ev in events:
        out += dec.feed(ev)
    out += dec.finish()
    return [out, dec.stats.as_contract()]


@settings(
    max_examples=fuzz_examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.data(), st.lists(MUTATION, max_size=6), st.integers(1, 4), st.booleans())
def test_mutated_corpus_frames_identical(monkeypatch, lane, data, mutations, per_chunk, keep_records):
    """Real frames, mutated (sizes, bytes, truncations, duplicates, swaps), a few whole frames to a chunk:
    whatever the lane takes or hands back, the events and counters are the Python methods'."""
    requests, responses = data.draw(st.sampled_from(connections()))
    half = len(mutations) // 2
    requests, responses = mutate(requests, mutations[:half]), mutate(responses, mutations[half:])
    events = _chunked(requests, responses, per_chunk, 0.25)
    ours, python = _both(monkeypatch, lane, lambda: _run(events, keep_records))
    assert ours == python


def test_frames_of_one_chunk_keep_the_times_of_their_own_bytes(monkeypatch, lane):
    """Three requests and their three answers, each three in one chunk whose bytes came at three times:
    each exchange has the times of its own frames, through the lane as through the Python methods."""
    requests = [
        frame(api_versions(), 3, 1),
        frame(init_producer_id(), 4, 2),
        frame(init_producer_id(), 4, 3),
        frame(end_txn(), 3, 4),
    ]
    answers = [
        frame(api_versions_response(), 3, 1),
        frame(init_producer_id_response(), 4, 2),
        frame(init_producer_id_response(epoch=1), 4, 3),
        frame(end_txn_response(), 3, 4),
    ]
    # The first exchange alone (the decoder makes the connection at its first bytes), then three to a chunk.
    events = _chunked(requests[:1], answers[:1], 1, 0.5)[:-1]
    events += _chunked(requests[1:], answers[1:], 3, 0.5)[1:]
    for i, ev in enumerate(events[3:5], 3):  # after the first exchange's, on the same streams
        events[i] = StreamChunk(
            ev.conn,
            ev.from_src,
            ev.offset + len(events[i - 2].data),
            ev.data,
            ev.first_ts + 1,
            ev.last_ts + 1,
            tuple((at + len(events[i - 2].data), t + 1) for at, t in ev.marks),
        )
    counted = Counted(lane)
    ours, python = _both(monkeypatch, counted, lambda: _run(events, False))
    assert ours == python
    assert counted.took == 3 and counted.handed == 0
    exchanges = [e for e in ours[0] if isinstance(e, Exchange)][1:]
    assert [e.correlation_id for e in exchanges] == [2, 3, 4]
    assert all(e.status == "ok" and e.decode_error is None for e in exchanges)
    first = events[3].first_ts
    assert [e.request_ts for e in exchanges] == [first, first + 0.5, first + 1.0]
    assert [e.request_end_ts for e in exchanges] == [first, first + 0.5, first + 1.0]
    answered = events[4].first_ts
    assert [e.response_ts for e in exchanges] == [answered, answered + 0.5, answered + 1.0]


def test_two_decoders_fed_in_turn_count_each_its_own(monkeypatch, lane):
    """The lane is one object for every decoder of the process: two runs fed chunk by chunk in turn give
    each the events and counters it gives alone (nothing of one run's context is kept between chunks)."""
    monkeypatch.setattr(connection, "LANE", lane)
    paths = [PCAPS / "txn_confluent_tansu.pcap", PCAPS / "consume_tansu.pcap"]
    alone = [_decoded(p) for p in paths]
    runs, decoders, outs = [], [], []
    for p in paths:
        run = read_files([str(p)])
        run.reassembler.hand_pieces(PIECES_FROM)
        runs.append(iter(run))
        decoders.append(EngineConfig(keep_tables=False).decoder(run.drop, run.drop))
        outs.append([])
    live = [0, 1]
    while live:
        for i in list(live):
            event = next(runs[i], None)
            if event is None:
                live.remove(i)
                outs[i].extend(decoders[i].finish())
            else:
                outs[i].extend(decoders[i].feed(event))
    together = [[outs[i], decoders[i].stats.as_contract()] for i in range(2)]
    assert together == alone
    assert all(sum(isinstance(e, Exchange) for e in out[0]) > 20 for out in together)


def _conversation(requests: list, answers: list, max_in_flight: int) -> tuple:
    """The decode of one connection: an ApiVersions exchange (the decoder makes the connection at its
    first bytes), then `requests` in one chunk and `answers` in another, with and without the lane."""
    first = _chunked([frame(api_versions(), 3, 99)], [frame(api_versions_response(), 3, 99)], 1, 0.1)[:-1]
    rest = _chunked(requests, answers, len(requests), 0.1)[1:]
    gone = {True: len(first[1].data), False: len(first[2].data)}
    rest = [
        StreamChunk(
            e.conn,
            e.from_src,
            e.offset + gone[e.from_src],
            e.data,
            e.first_ts + 1,
            e.last_ts + 1,
            tuple((at + gone[e.from_src], t + 1) for at, t in e.marks),
        )
        if isinstance(e, StreamChunk)
        else e
        for e in rest
    ]
    events = first + rest

    def run() -> list:
        dec = Decoder(ports=(9092,), max_in_flight=max_in_flight)
        out = []
        for ev in events:
            out += dec.feed(ev)
        out += dec.finish()
        return [out, dec.stats.as_contract()]

    return run


def test_the_lanes_own_steps_for_what_the_corpus_does_not_show(monkeypatch, lane):
    """Requests the corpus never has, through the lane's own steps: a Produce with acks=0 (no answer comes:
    `no_response`), a correlation id used again before its answer (the first request unanswered), and
    more requests in flight than the cap (the oldest given up): the same events and counters."""
    requests = [
        frame(produce_request(acks=0), 9, 1),
        frame(end_txn(), 3, 2),
        frame(end_txn(), 3, 2),  # the same correlation id again
        frame(init_producer_id(), 4, 3),
        frame(init_producer_id(), 4, 4),
        frame(init_producer_id(), 4, 5),
    ]
    answers = [frame(init_producer_id_response(), 4, c) for c in (3, 4, 5)] + [
        frame(produce_response(), 9, 7)
    ]
    counted = Counted(lane)
    run = _conversation(requests, answers, max_in_flight=2)
    ours, python = _both(monkeypatch, counted, run)
    assert ours == python
    assert counted.took >= 2 and counted.handed == 0
    statuses = [(e.correlation_id, e.status) for e in ours[0] if isinstance(e, Exchange)]
    # 2 used again (the first unanswered); with two in flight at most, the second 2 and then 3 given up
    assert statuses == [
        (99, "ok"),
        (1, "no_response"),
        (2, "unanswered"),
        (2, "unanswered"),
        (3, "unanswered"),
        (4, "ok"),
        (5, "ok"),
    ]
    # the answers to 3 (given up) and to 7 (never asked) find nothing waiting
    assert ours[1]["in_flight_evicted"] == 2 and ours[1]["unmatched_responses"] == 2
