"""Reassembly rules, each with a crafted segment sequence written to a real pcap file."""

from __future__ import annotations

import math

import pytest
from capture_builders import Flow, run_file, streams, write_ip_packets

from ksniff.capture import CaptureLimits
from ksniff.capture.events import ConnectionClosed, ConnectionOpened, StreamChunk, StreamGap


def read(tmp_path, packets, limits=None, step=0.001, link="EN10MB"):
    path = tmp_path / "t.pcap"
    write_ip_packets(path, packets, link=link, step=step)
    return run_file(path, limits)


def kinds(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_in_order_with_handshake_and_fin(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send(True, b"hello "), f.send(True, b"world"), f.send(False, b"ok")] + f.close()
    events, run = read(tmp_path, pkts)
    assert isinstance(events[0], ConnectionOpened) and events[0].handshake_seen
    assert str(events[0].src) == "10.0.0.1:40000" and str(events[0].dst) == "10.0.0.2:9092"
    assert streams(events) == {(1, True): b"hello world", (1, False): b"ok"}
    assert kinds(events, ConnectionClosed)[-1].reason == "fin"
    assert run.stats.connections == 1 and run.stats.gaps == 0 and run.stats.packets == len(pkts)


def test_chunk_timestamps_are_first_and_last_byte(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send(True, b"a" * 10), f.send(True, b"b" * 10), f.send(False, b"c")]
    events, _ = read(tmp_path, pkts, step=0.002)
    chunk = kinds(events, StreamChunk)[0]
    assert chunk.data == b"a" * 10 + b"b" * 10
    assert (chunk.first_ts, chunk.last_ts) == (1000.006, 1000.008)


def test_a_chunk_leaves_at_the_end_of_its_cell_and_no_other_connection_cuts_it(tmp_path):
    """A direction's bytes merge into one chunk until its own connection does something else or the
    capture's clock passes the end of the chunk cell (CHUNK_CELL) the chunk started in: another
    connection's traffic in between does not cut it, and a pause longer than a cell does."""
    from capture_builders import LINKS, pcap_bytes

    from ksniff.capture.reassembly import CHUNK_CELL

    a, b = Flow(), Flow(client=("10.0.0.3", 40001))
    linktype, frame = LINKS["EN10MB"]
    t0 = 1000.0  # a cell boundary
    step = CHUNK_CELL / 16
    timed = [(t0 + i * step, p) for i, p in enumerate(a.handshake() + b.handshake())]
    n = len(timed)
    # a, b, a interleaved within one cell; then a again after the cell ended.
    timed += [
        (t0 + n * step, a.send(True, b"one ")),
        (t0 + (n + 1) * step, b.send(True, b"other")),
        (t0 + (n + 2) * step, a.send(True, b"two ")),
        (t0 + 2 * CHUNK_CELL + step, a.send(True, b"three")),
    ]
    path = tmp_path / "cells.pcap"
    path.write_bytes(pcap_bytes([(t, frame(p)) for t, p in timed], linktype))
    events, _run = run_file(path)
    chunks = [(e.conn, e.data) for e in kinds(events, StreamChunk)]
    assert chunks == [(1, b"one two "), (2, b"other"), (1, b"three")]


def test_out_of_order_is_buffered_and_delivered_in_order(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, b, c = f.send(True, b"AAA"), f.send(True, b"BBB"), f.send(True, b"CCC")
    events, run = read(tmp_path, hs + [a, c, b])
    assert streams(events)[(1, True)] == b"AAABBBCCC"
    assert run.stats.gaps == 0


def test_retransmission_same_bytes_is_ignored(tmp_path):
    f = Flow()
    hs = f.handshake()
    a = f.send(True, b"hello")
    b = f.send(True, b"world")
    events, run = read(tmp_path, hs + [a, a, b, b, a])
    assert streams(events)[(1, True)] == b"helloworld"
    assert run.stats.overlaps_differing == 0


# Overlapping segments (sequence number, payload) of the client's stream, whose data starts at 1000, in
# arrival order; the bytes first received win, and each overlap that disagrees with them is counted.
OVERLAPS = {
    # bytes 6..9 already came as "ghi"
    "first_received_wins": ([(1000, b"abcdef"), (1003, b"defghi"), (1006, b"XXXjkl")], b"abcdefghijkl"),
    # "gh" buffered first wins over "ZZ"
    "between_buffered_segments": ([(1004, b"efgh"), (1006, b"ZZij"), (1000, b"abcd")], b"abcdefghij"),
    # the in-order segment does not overwrite the buffered "ef"
    "in_order_does_not_overwrite_buffered": ([(1004, b"efgh"), (1000, b"abcdXXgh")], b"abcdefgh"),
}


@pytest.mark.parametrize("segments,stream", OVERLAPS.values(), ids=OVERLAPS.keys())
def test_overlap_keeps_first_received_bytes_and_counts_differences(tmp_path, segments, stream):
    f = Flow(isn_c=999)
    hs = f.handshake()
    events, run = read(tmp_path, hs + [f.raw(True, seq, payload=payload) for seq, payload in segments])
    assert streams(events)[(1, True)] == stream
    assert run.stats.overlaps_differing == 1


def test_sequence_wrap_around(tmp_path):
    f = Flow(isn_c=0xFFFFFFF0)
    pkts = f.handshake() + [f.send(True, b"x" * 10), f.send(True, b"y" * 10), f.send(True, b"z" * 10)]
    assert f.seq[True] < 100  # the sequence number did wrap
    reordered = pkts[:3] + [pkts[3], pkts[5], pkts[4]]
    events, run = read(tmp_path, reordered)
    assert streams(events)[(1, True)] == b"x" * 10 + b"y" * 10 + b"z" * 10
    assert run.stats.gaps == 0


def test_lost_segment_is_a_gap_at_end_of_capture(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, _lost, c = f.send(True, b"AAA"), f.send(True, b"BBBB"), f.send(True, b"CC")
    events, run = read(tmp_path, hs + [a, c])
    assert streams(events)[(1, True)] == b"AAA<gap 4>CC"
    gap = kinds(events, StreamGap)[0]
    assert (gap.offset, gap.length) == (3, 4)
    assert run.stats.gaps == 1 and run.stats.gap_bytes == 4
    assert kinds(events, ConnectionClosed)[0].reason == "end_of_capture"


def test_gap_reported_as_soon_as_the_peer_acks_past_it(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, _lost, c = f.send(True, b"AAA"), f.send(True, b"BBBB"), f.send(True, b"CC")
    ack = f.send(False, b"")  # the server acknowledges everything, including the bytes we never saw
    d = f.send(True, b"DD")
    events, _ = read(tmp_path, hs + [a, ack, c, d])
    gap_at = next(i for i, e in enumerate(events) if isinstance(e, StreamGap))
    closed_at = next(i for i, e in enumerate(events) if isinstance(e, ConnectionClosed))
    assert gap_at < closed_at  # not held until the end of the capture
    assert streams(events)[(1, True)] == b"AAA<gap 4>CCDD"


def test_peer_ack_past_a_hole_releases_the_request_before_the_response(tmp_path):
    # A request lost from the capture, the next request buffered behind the hole, then the broker's
    # response to the lost one, whose ACK covers both requests: the gap and the buffered request must
    # come out before that response, or the decoder sees an answer before its question.
    f = Flow()
    hs = f.handshake()
    first, _lost, buffered = f.send(True, b"REQ1"), f.send(True, b"REQ2"), f.send(True, b"REQ3")
    response = f.send(False, b"RESP2")  # its ACK covers REQ2 and REQ3
    events, _ = read(tmp_path, hs + [first, buffered, response])
    order = [
        (e.from_src, e.data) if isinstance(e, StreamChunk) else "gap"
        for e in events
        if isinstance(e, StreamChunk | StreamGap)
    ]
    assert order == [(True, b"REQ1"), "gap", (True, b"REQ3"), (False, b"RESP2")]


def test_gap_before_fin_when_connection_closes(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, _lost = f.send(True, b"AAA"), f.send(True, b"BBBB")
    events, _ = read(tmp_path, hs + [a] + f.close())
    assert streams(events)[(1, True)] == b"AAA<gap 4>"
    assert kinds(events, ConnectionClosed)[0].reason == "fin"


def test_rst_closes_and_turns_holes_into_gaps(tmp_path):
    f = Flow()
    hs = f.handshake()
    a, _lost, c = f.send(True, b"AAA"), f.send(True, b"BBBB"), f.send(True, b"CC")
    rst = f.send(False, flags="R")
    after = f.send(True, b"late")
    events, run = read(tmp_path, hs + [a, c, rst, after])
    assert streams(events)[(1, True)] == b"AAA<gap 4>CC"
    closed = kinds(events, ConnectionClosed)
    assert len(closed) == 1 and closed[0].reason == "rst"
    assert run.stats.connections == 1  # the straggler after the reset is not a new connection


def test_connection_first_seen_mid_stream(tmp_path):
    f = Flow()
    f.handshake()
    pkts = [f.send(True, b"middle"), f.send(False, b"reply"), f.send(True, b"more")]
    events, _ = read(tmp_path, pkts)
    opened = events[0]
    assert isinstance(opened, ConnectionOpened) and not opened.handshake_seen
    assert streams(events) == {(1, True): b"middlemore", (1, False): b"reply"}


def test_syn_ack_first_makes_the_receiver_the_client(tmp_path):
    f = Flow()
    hs = f.handshake()
    events, _ = read(tmp_path, hs[1:] + [f.send(True, b"req"), f.send(False, b"resp")])
    opened = events[0]
    assert str(opened.src) == "10.0.0.1:40000" and opened.handshake_seen
    assert streams(events) == {(1, True): b"req", (1, False): b"resp"}


def test_four_tuple_reused_after_close_is_a_new_connection(tmp_path):
    first = Flow(isn_c=1000, isn_s=5000)
    second = Flow(isn_c=777777, isn_s=888888)
    pkts = first.handshake() + [first.send(True, b"one")] + first.close()
    pkts += second.handshake() + [second.send(True, b"two")] + second.close()
    events, run = read(tmp_path, pkts)
    opened = kinds(events, ConnectionOpened)
    assert [o.conn for o in opened] == [1, 2]
    assert streams(events) == {(1, True): b"one", (2, True): b"two"}
    assert run.stats.connections == 2


def test_four_tuple_reused_without_a_captured_close(tmp_path):
    first = Flow(isn_c=1000)
    second = Flow(isn_c=900000)
    pkts = first.handshake() + [first.send(True, b"one")] + second.handshake() + [second.send(True, b"two")]
    events, _ = read(tmp_path, pkts)
    assert kinds(events, ConnectionClosed)[0].reason == "reused"
    assert streams(events) == {(1, True): b"one", (2, True): b"two"}


def test_retransmitted_syn_is_not_a_new_connection(tmp_path):
    f = Flow()
    syn = f.send(True, flags="S")
    pkts = [syn, syn, f.send(False, flags="SA"), f.send(True, b"x")]
    events, run = read(tmp_path, pkts)
    assert run.stats.connections == 1
    assert streams(events) == {(1, True): b"x"}


def test_idle_connection_expires(tmp_path):
    quiet, busy = Flow(client=("10.0.0.3", 1111)), Flow(client=("10.0.0.4", 2222))
    pkts = quiet.handshake() + [quiet.send(True, b"q")] + busy.handshake()
    pkts += [busy.send(True, b"b") for _ in range(30)]
    events, _ = read(tmp_path, pkts, limits=CaptureLimits(idle_timeout=10.0), step=1.0)
    closed = kinds(events, ConnectionClosed)
    assert closed[0].conn == 1 and closed[0].reason == "idle"
    idle_at = events.index(closed[0])
    assert any(isinstance(e, StreamChunk) and e.conn == 2 for e in events[idle_at:])


def test_out_of_order_cap_per_direction_gives_up_the_hole(tmp_path):
    f = Flow()
    hs = f.handshake()
    segs = [f.send(True, bytes([65 + i]) * 100) for i in range(10)]
    limits = CaptureLimits(ooo_bytes_per_direction=350)
    events, run = read(tmp_path, hs + segs[1:], limits=limits)
    data = streams(events)[(1, True)]
    assert data.startswith(b"<gap 100>") and data.endswith(b"J" * 100)
    assert run.stats.dropped_by_limits == 1
    assert any("out-of-order" in w for w in run.warnings)


def test_out_of_order_total_cap(tmp_path):
    flows = [Flow(client=(f"10.0.1.{i}", 3000 + i)) for i in range(1, 4)]
    pkts = []
    for f in flows:
        pkts += f.handshake()
        f.send(True, b"L" * 50)  # lost: everything after it waits
    for f in flows:
        pkts += [f.send(True, b"x" * 100), f.send(True, b"y" * 100)]
    limits = CaptureLimits(ooo_bytes_total=450)
    events, run = read(tmp_path, pkts, limits=limits)
    assert run.stats.dropped_by_limits >= 1
    for f in range(1, 4):
        assert streams(events)[(f, True)] == b"<gap 50>" + b"x" * 100 + b"y" * 100


def test_connection_cap_evicts_the_longest_idle(tmp_path):
    flows = [Flow(client=(f"10.0.2.{i}", 4000 + i)) for i in range(1, 5)]
    pkts = []
    for f in flows:
        pkts += f.handshake() + [f.send(True, b"data")]
    events, run = read(tmp_path, pkts, limits=CaptureLimits(max_connections=2))
    closed = kinds(events, ConnectionClosed)
    assert [c.reason for c in closed][:2] == ["evicted", "evicted"]
    assert [c.conn for c in closed][:2] == [1, 2]
    assert run.stats.dropped_by_limits == 2 and run.stats.connections == 4
    assert any("connection limit" in w for w in run.warnings)


def test_snaplen_cut_payload_is_a_gap_not_zeros(tmp_path):
    from capture_builders import ethernet, pcap_bytes

    f = Flow()
    pkts = [ethernet(p) for p in f.handshake() + [f.send(True, b"A" * 100), f.send(True, b"B" * 10)]]
    cut = pkts[3][:-60]  # the capture kept only the first 40 payload bytes
    frames = [(1000.0 + i, p) for i, p in enumerate(pkts)]
    frames[3] = (1003.0, cut, len(pkts[3]))
    path = tmp_path / "cut.pcap"
    path.write_bytes(pcap_bytes(frames))
    events, run = run_file(path)
    assert streams(events)[(1, True)] == b"<gap 100>" + b"B" * 10
    assert run.stats.truncated_packets == 1


def test_drop_stops_events_for_a_connection(tmp_path):
    from ksniff.capture import read_files

    one, two = Flow(client=("10.0.3.1", 1)), Flow(client=("10.0.3.2", 2))
    pkts = one.handshake() + two.handshake()
    for _ in range(5):
        pkts += [one.send(True, b"1111"), two.send(True, b"2222")]
    path = tmp_path / "d.pcap"
    write_ip_packets(path, pkts)
    run = read_files([str(path)])
    seen = []
    for event in run:
        seen.append(event)
        if isinstance(event, StreamChunk) and event.conn == 1:
            run.drop(1)
    assert [e for e in seen if e.conn == 1 and isinstance(e, StreamChunk)] == [seen[2]]
    assert streams(seen)[(2, True)] == b"2222" * 5
    assert not any(isinstance(e, ConnectionClosed) and e.conn == 1 for e in seen)


def test_a_dropped_connection_counted_under_a_port_counts_each_byte_once(tmp_path):
    """Reassembler.drop(conn, tally=port): after the drop, every byte the connection carries is counted
    once: reordered segments and the holes they leave filled later count, retransmissions do not."""
    from ksniff.capture import read_files

    f = Flow()
    pkts = f.handshake() + [f.send(True, b"req0"), f.send(False, b"answer0")]
    later = [f.send(True, bytes([65 + i]) * 100) for i in range(6)] + [f.send(False, b"x" * 50)]
    a, b, c, d, e, g, back = later
    # After the drop: in order, then d before c (a hole), c filling it, retransmissions of b and c, then
    # g ahead of e, e (the fill), and the answer twice.
    pkts += [a, b, d, c, b, c, g, e, back, back]
    path = tmp_path / "tally.pcap"
    write_ip_packets(path, pkts)
    run = read_files([str(path)])
    taken = 0
    for event in run:
        if isinstance(event, StreamChunk) and event.conn == 1:
            taken += len(event.data)
            if taken >= len(b"req0answer0"):
                run.drop(1, tally=9092)
    assert taken == len(b"req0answer0")
    assert run.stats.kafka_elsewhere_bytes == {9092: 6 * 100 + 50}


def test_large_stream_is_chunked(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send(True, bytes([i % 256]) * 1000) for i in range(300)]
    events, _ = read(tmp_path, pkts, limits=CaptureLimits(max_chunk_bytes=64 << 10))
    chunks = kinds(events, StreamChunk)
    assert len(chunks) > 1 and all(len(c.data) <= (64 << 10) + 1000 for c in chunks)
    assert streams(events)[(1, True)] == b"".join(bytes([i % 256]) * 1000 for i in range(300))


@pytest.mark.parametrize("link", ["EN10MB", "LINUX_SLL2", "NULL", "RAW"])
def test_same_streams_over_link_types(tmp_path, link):
    f = Flow()
    pkts = f.handshake() + [f.send(True, b"req"), f.send(False, b"resp")] + f.close()
    events, _ = read(tmp_path, pkts, link=link)
    assert streams(events) == {(1, True): b"req", (1, False): b"resp"}


def test_reassembler_takes_the_engine_s_connection_ids(tmp_path):
    """An engine that runs one reassembler per connection names connections itself (`conn_id`)."""
    from ksniff.capture import Reassembler, iter_segments

    def named(src_ip, src_port, dst_ip, dst_port, ts):
        return hash((src_ip, src_port, dst_ip, dst_port, ts)) & 0xFFFF_FFFF

    f = Flow()
    path = tmp_path / "s.pcap"
    write_ip_packets(path, f.handshake() + [f.send(True, b"abc"), f.send(False, b"de")])
    segs = list(iter_segments(str(path)))
    first = list(Reassembler(conn_id=named).events(iter(segs)))
    again = list(Reassembler(conn_id=named).events(iter(segs)))
    assert first == again
    conn = first[0].conn
    assert conn == named(bytes([10, 0, 0, 1]), 40000, bytes([10, 0, 0, 2]), 9092, 1000.0)
    assert streams(first) == {(conn, True): b"abc", (conn, False): b"de"}


def test_sweeps_on_the_callers_clock(tmp_path):
    """An engine holding one connection's segments sweeps on the whole capture's clock: without
    `sweeps`, idle expiry waits for `sweep(now)`; `flush` emits the chunk being merged."""
    from ksniff.capture import Reassembler, iter_segments

    f = Flow()
    path = tmp_path / "s.pcap"
    write_ip_packets(path, f.handshake() + [f.send(True, b"abc"), f.send(True, b"late")], step=20.0)
    segs = list(iter_segments(str(path)))
    limits = CaptureLimits(idle_timeout=10.0)

    own = list(Reassembler(limits).events(iter(segs)))
    assert kinds(own, ConnectionClosed)[0].reason == "idle"  # its own 20 s pauses expire it

    r = Reassembler(limits)
    assert r.sweep_every == 2.5
    held = list(r.events(iter(segs[:4]), finish=False, sweeps=False))
    assert not kinds(held, ConnectionClosed) and not kinds(held, StreamChunk)  # "abc" is being merged
    assert r.open_connections == 1
    r.flush()
    assert [e.data for e in r.out] == [b"abc"]
    r.out.clear()
    r.sweep(segs[3][0] + 5.0)  # not idle long enough yet
    assert not r.out and r.open_connections == 1
    # Sweeps run at the multiples of sweep_every: the first one past the idle timeout closes it.
    at = (math.floor((segs[3][0] + 10.0) / 2.5) + 1) * 2.5
    r.sweep(at - 0.01)
    assert not r.out and r.open_connections == 1
    r.sweep(at + 1.0)
    assert [(e.reason, e.ts) for e in r.out if isinstance(e, ConnectionClosed)] == [("idle", at)]
    assert r.open_connections == 0


def test_an_idle_connection_closes_at_a_sweep_time_whatever_traffic_ends_the_silence(tmp_path):
    """Idle expiry runs at fixed times of capture time (the multiples of sweep_every): a connection left
    open closes at the first of them past its idle timeout, whichever later packet of which connection
    moved the clock past it. Two connections idle since different times close at their own sweep times,
    and one silence crossing many sweep times at once gives what sweeping at every one of them gives."""
    from capture_builders import LINKS, pcap_bytes

    from ksniff.capture import Reassembler, iter_segments

    limits = CaptureLimits(idle_timeout=10.0)  # sweeps every 2.5 s
    a, b = Flow(), Flow(client=("10.0.0.3", 40001))
    c = Flow(client=("10.0.0.5", 40002))
    linktype, frame = LINKS["EN10MB"]
    opening = [(1000.0 + i * 0.001, p) for i, p in enumerate(a.handshake() + [a.send(True, b"abc")])]
    opening += [(1004.0 + i * 0.001, p) for i, p in enumerate(b.handshake() + [b.send(True, b"de")])]
    closes = []
    for later in (1030.3, 1047.9):  # the silence ends earlier or later, with another connection's SYN
        path = tmp_path / f"{later}.pcap"
        path.write_bytes(
            pcap_bytes([(t, frame(p)) for t, p in [*opening, (later, c.handshake()[0])]], linktype)
        )
        events, _run = run_file(path, limits)
        closes.append([(e.conn, e.reason, e.ts) for e in kinds(events, ConnectionClosed)])

        r = Reassembler(limits)  # the same segments, swept at every sweep time one by one
        segs = list(iter_segments(str(path)))
        one_by_one = list(r.events(iter(segs[:-1]), finish=False))
        t = r.next_sweep
        while t <= later:
            r.sweep(t)
            t += r.sweep_every
        one_by_one += list(r.events(iter(segs[-1:])))
        assert [(e.conn, e.reason, e.ts) for e in kinds(one_by_one, ConnectionClosed)] == closes[-1]
    first, second = closes
    assert first[:2] == second[:2] == [(1, "idle", 1012.5), (2, "idle", 1015.0)]


def test_addresses_are_written_as_inet_ntop_writes_them():
    import random
    import socket

    from ksniff.capture.halves import ip_text

    rng = random.Random(4)
    fours = [bytes(4), b"\xff" * 4, b"\x7f\x00\x00\x01", *(rng.randbytes(4) for _ in range(200))]
    mapped = bytes(10) + b"\xff\xff\x7f\x00\x00\x01"  # ::ffff:127.0.0.1
    sixes = [bytes(16), bytes(15) + b"\x01", mapped, *(rng.randbytes(16) for _ in range(50))]
    for packed in fours:
        assert ip_text(packed) == socket.inet_ntop(socket.AF_INET, packed)
    for packed in sixes:
        assert ip_text(packed) == socket.inet_ntop(socket.AF_INET6, packed)
