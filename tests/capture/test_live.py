"""Live capture on loopback (root only): traffic between two local sockets arrives as stream bytes."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from capture_builders import streams
from harness import free_port
from live_cli import replay_copy

from ksniff.capture import CaptureError, compiled, read_files
from ksniff.capture.events import ConnectionOpened
from ksniff.capture.live import open_live

root = pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root")
PCAPS = Path(__file__).resolve().parents[1] / "pcaps"


@pytest.fixture(params=["ring", "ring-pure", "recvfrom"])
def how(request, monkeypatch) -> dict:
    """open_live's arguments for each way of reading: the ring with the compiled copy, the ring with the
    pure-Python copy, one recvfrom per packet."""
    if request.param == "ring-pure":
        monkeypatch.setattr(compiled, "fastwalk", None)
    return {"ring": None} if request.param == "recvfrom" else {}


@root
@pytest.mark.root
@pytest.mark.parametrize("iface", ["lo", "any"])
def test_live_loopback_capture_delivers_the_stream(tmp_path, how, iface):
    """`any` has no link header (a datagram socket: the ring's frames start at the IP header) and sees
    loopback's packets leaving and arriving: each is kept once."""
    messages = [b"hello " * 10, b"x" * 70000, b"end"]
    port = free_port()
    written = tmp_path / "live.pcap"
    run = open_live(iface, bpf=f"tcp port {port}", duration=20, write_path=str(written), **how)
    assert run.uses_ring == (how.get("ring", ()) is not None) and not run.warnings
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()

    def traffic():
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        for m in messages:
            client.sendall(m)
        want, got = sum(map(len, messages)), 0
        while got < want:
            got += len(conn.recv(65536))
        conn.sendall(b"thanks")
        client.recv(6)
        client.close()
        conn.close()
        server.close()
        time.sleep(0.3)
        run.stop()

    thread = threading.Thread(target=traffic)
    thread.start()
    events = list(run)
    thread.join()
    opened = [e for e in events if isinstance(e, ConnectionOpened)]
    assert len(opened) == 1 and opened[0].handshake_seen and opened[0].dst.port == port
    assert streams(events) == {(opened[0].conn, True): b"".join(messages), (opened[0].conn, False): b"thanks"}
    assert run.stats.kernel_drops == 0 and run.inputs[0].format == "live"
    assert run.inputs[0].linktype == ("RAW" if iface == "any" else "EN10MB")
    # what was kept on disk reads back to the same streams
    again = list(read_files([str(written)]))
    assert streams(again) == streams(events)


@root
@pytest.mark.root
def test_live_stops_on_count_and_duration(how):
    start = time.monotonic()
    run = open_live("lo", bpf="tcp port 1", duration=0.5, **how)
    assert list(run) == []
    assert time.monotonic() - start < 3
    port = free_port()
    run = open_live("lo", bpf=f"udp port {port}", count=2, duration=10, **how)

    def send_datagrams():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(5):
                s.sendto(b"ping", ("127.0.0.1", port))
                time.sleep(0.1)

    sender = threading.Thread(target=send_datagrams)
    sender.start()
    list(run)
    sender.join()
    assert run.stats.packets == 2 and run.stats.non_tcp_packets == 2
    assert time.monotonic() - start < 5


@root
@pytest.mark.root
def test_live_stop_from_another_thread_ends_a_quiet_capture(how):
    """No packet at all, no duration: stop() alone ends the iteration (the ring hands over its block
    within its retire timeout, the recvfrom loop wakes from its poll)."""
    run = open_live("lo", bpf="tcp port 1", **how)
    threading.Timer(0.3, run.stop).start()
    assert list(run) == [] and run.stats.packets == 0


@root
@pytest.mark.root
def test_without_a_ring_the_capture_reads_one_packet_per_call_and_says_why():
    port = free_port()
    run = open_live("lo", bpf=f"udp port {port}", count=1, duration=10, ring=(4096 + 1, 2))  # not a page
    assert not run.uses_ring
    assert run.warnings == ["lo: no capture ring (Invalid argument); reading one packet per call"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"ping", ("127.0.0.1", port))
    list(run)
    assert run.stats.packets == 1


@root
@pytest.mark.root
@pytest.mark.skipif(not shutil.which("tcpreplay"), reason="needs tcpreplay")
def test_ring_drops_are_counted_exactly(tmp_path):
    """A ring of two 64 KiB blocks and a backlog of 64 KiB, not read while tcpreplay sends a corpus
    capture (real client and broker, moved to a network of its own) twenty times over at top speed: the
    copying stops at the backlog's cap, the ring fills, the kernel drops; what was captured plus what
    the kernel says it dropped is every packet sent, and the warning says so."""
    pcap, net = replay_copy(PCAPS / "txn_confluent_tansu_mtu1500.pcap", tmp_path)
    run = open_live("lo", bpf=f"net {net} and tcp port 9092", ring=(1 << 16, 2), backlog=1 << 16)
    assert run.uses_ring
    replay = subprocess.run(
        ["tcpreplay", "--topspeed", "--loop=20", "-i", "lo", str(pcap)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    sent = int(re.search(r"Actual: (\d+) packets", replay).group(1))
    time.sleep(0.3)  # the last packets through the kernel's loopback queue
    run.stop()
    for _ in run:
        pass
    assert sent == 20 * 171
    assert run.stats.kernel_drops > 0 and run.ring_freezes > 0
    assert run.stats.packets + run.stats.kernel_drops == sent
    assert f"lo: the kernel dropped {run.stats.kernel_drops} packets" in " ".join(run.warnings)


@root
@pytest.mark.root
def test_live_errors_are_one_line():
    with pytest.raises(CaptureError, match="no such interface"):
        open_live("nosuchif0")
    with pytest.raises(CaptureError, match="bad capture filter"):
        open_live("lo", bpf="tcp port banana")


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the unprivileged error")
def test_live_without_permission():
    with pytest.raises(CaptureError, match="no permission"):
        open_live("lo")
