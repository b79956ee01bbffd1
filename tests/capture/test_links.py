"""Link layers, IP versions and options, fragments and non-TCP traffic."""

from __future__ import annotations

import struct

import pytest
from capture_builders import LINKS, Flow, ethernet, ipv4, ipv6, null, pcap_bytes, run_file, streams, tcp


def write(tmp_path, frames, linktype=1):
    path = tmp_path / "l.pcap"
    path.write_bytes(pcap_bytes([(100.0 + i, f) for i, f in enumerate(frames)], linktype))
    return run_file(path)


def conversation(flow=None):
    f = flow or Flow()
    return f.handshake() + [f.send(True, b"ping"), f.send(False, b"pong")] + f.close()


@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("v6", [False, True])
def test_every_link_type_both_ip_versions(tmp_path, link, v6):
    if (link, v6) in (("IPV4", True), ("IPV6", False)):
        pytest.skip("link type carries the other IP version only")
    flow = Flow(client=("fd00::1", 40000), server=("fd00::2", 9092)) if v6 else Flow()
    linktype, framing = LINKS[link]
    events, run = write(tmp_path, [framing(p) for p in conversation(flow)], linktype)
    assert streams(events) == {(1, True): b"ping", (1, False): b"pong"}
    assert run.inputs[0].linktype == ("RAW" if link == "RAW" else link)
    if v6:
        assert str(events[0].src) == "[fd00::1]:40000"


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("family6", [10, 24, 28, 30])
def test_null_loopback_byte_orders_and_ipv6_families(tmp_path, order, family6):
    flow = Flow(client=("fd00::1", 40000), server=("fd00::2", 9092))
    events, _ = write(tmp_path, [null(p, order, family6) for p in conversation(flow)], 0)
    assert streams(events) == {(1, True): b"ping", (1, False): b"pong"}


@pytest.mark.parametrize(("vlans", "tpid"), [((10,), 0x8100), ((10, 20), 0x88A8), ((5, 6), 0x9100)])
def test_vlan_and_qinq(tmp_path, vlans, tpid):
    events, _ = write(tmp_path, [ethernet(p, vlans, tpid) for p in conversation()])
    assert streams(events) == {(1, True): b"ping", (1, False): b"pong"}


def test_ipv4_options_and_tcp_options(tmp_path):
    opts = b"\x94\x04\0\0" + b"\x01" * 4  # router alert + NOPs
    tcp_opts = b"\x02\x04\x05\xb4\x01\x01\x04\x02"  # MSS, NOP, NOP, SACK permitted
    pkts = [
        ipv4("10.0.0.1", "10.0.0.2", tcp(1, 2, 100, 0, "S", options=tcp_opts), options=opts),
        ipv4("10.0.0.1", "10.0.0.2", tcp(1, 2, 101, 1, "PA", b"data", tcp_opts), options=opts),
    ]
    events, _ = write(tmp_path, [ethernet(p) for p in pkts])
    assert streams(events) == {(1, True): b"data"}


def test_ipv6_extension_headers(tmp_path):
    ext = [
        (0, b"\x01\x04\0\0\0\0"),
        (60, b"\x01\x04\0\0\0\0"),
        (43, b"\0\0\0\0\0\0"),
        (44, b"\0\0\0\0\0\x07"),
    ]  # the fragment header says offset 0, no more fragments: atomic
    pkts = [
        ipv6("fd00::1", "fd00::2", tcp(1, 2, 100, 0, "S"), ext),
        ipv6("fd00::1", "fd00::2", tcp(1, 2, 101, 1, "PA", b"data"), ext),
    ]
    events, run = write(tmp_path, [ethernet(p) for p in pkts])
    assert streams(events) == {(1, True): b"data"}
    assert run.stats.ip_fragments == 0


def test_fragments_are_counted(tmp_path):
    l4 = tcp(1, 2, 100, 0, "PA", b"x" * 64)
    frags = [
        ipv4("10.0.0.1", "10.0.0.2", l4[:40], frag=0x2000),  # more fragments
        ipv4("10.0.0.1", "10.0.0.2", l4[40:], frag=5),  # offset 40 bytes
        ipv6("fd00::1", "fd00::2", l4[:40], [(44, b"\0\x01\0\0\0\x07")]),
    ]
    events, run = write(tmp_path, [ethernet(p) for p in frags])
    assert run.stats.ip_fragments == 3
    assert run.stats.tcp_segments == 0
    assert any("fragments" in w for w in run.warnings)


def test_non_tcp_traffic_is_counted_and_skipped(tmp_path):
    udp = ipv4("10.0.0.1", "10.0.0.2", struct.pack("!HHHH", 53, 53, 8, 0), proto=17)
    arp = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x06" + b"\0" * 28
    f = Flow()
    frames = [ethernet(udp), arp] + [ethernet(p) for p in f.handshake() + [f.send(True, b"x")]]
    events, run = write(tmp_path, frames)
    assert run.stats.non_tcp_packets == 2 and run.stats.tcp_segments == 4 and run.stats.packets == 6
    assert streams(events) == {(1, True): b"x"}


def test_ethernet_padding_is_not_payload(tmp_path):
    f = Flow()
    frames = [ethernet(p) for p in f.handshake()] + [ethernet(f.send(True, b"ab")) + b"\0" * 10]
    events, _ = write(tmp_path, frames)
    assert streams(events) == {(1, True): b"ab"}


def test_frames_cut_inside_headers_are_counted(tmp_path):
    f = Flow()
    good = [ethernet(p) for p in f.handshake()]
    cut = [(103.0, ethernet(f.send(True, b"x" * 50))[:30], 104)]  # cut inside the IP header
    path = tmp_path / "c.pcap"
    path.write_bytes(pcap_bytes([(100.0 + i, p) for i, p in enumerate(good)] + cut))
    _, run = run_file(path)
    assert run.stats.truncated_packets == 1 and run.stats.packets == 4
