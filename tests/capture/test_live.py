"""Live capture on loopback (root only): traffic between two local sockets arrives as stream bytes."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
from capture_builders import streams
from harness import free_port

from ksniff.capture import CaptureError, read_files
from ksniff.capture.events import ConnectionOpened
from ksniff.capture.live import open_live

root = pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root")


@root
@pytest.mark.root
def test_live_loopback_capture_delivers_the_stream(tmp_path):
    messages = [b"hello " * 10, b"x" * 70000, b"end"]
    port = free_port()
    written = tmp_path / "live.pcap"
    run = open_live("lo", bpf=f"tcp port {port}", duration=20, write_path=str(written))
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
    # what was kept on disk reads back to the same streams
    again = list(read_files([str(written)]))
    assert streams(again) == streams(events)


@root
@pytest.mark.root
def test_live_stops_on_count_and_duration():
    start = time.monotonic()
    run = open_live("lo", bpf="tcp port 1", duration=0.5)
    assert list(run) == []
    assert time.monotonic() - start < 3
    port = free_port()
    run = open_live("lo", bpf=f"udp port {port}", count=2, duration=10)

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
def test_live_errors_are_one_line():
    with pytest.raises(CaptureError, match="no such interface"):
        open_live("nosuchif0")
    with pytest.raises(CaptureError, match="bad capture filter"):
        open_live("lo", bpf="tcp port banana")


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the unprivileged error")
def test_live_without_permission():
    with pytest.raises(CaptureError, match="no permission"):
        open_live("lo")
