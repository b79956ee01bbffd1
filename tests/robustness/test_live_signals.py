"""`ksniff live` when things go wrong or the user stops it: no permission, no interface, the interface
going away, Ctrl-C (SIGINT) and SIGTERM. Stopping loses nothing: the final report, the JSON, the CSV
tables and the --write capture are all complete, and the exit code follows the contract.

The Kafka traffic is a canned request/response conversation between two sockets on loopback (no broker
needed); tests/engine/test_live.py covers a real broker and client.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest
from decode_builders import (
    api_versions,
    api_versions_response,
    frame,
    init_producer_id,
    init_producer_id_response,
)
from harness import free_port
from live_cli import start_live
from robustness_support import REPO, assert_no_traceback, assert_one_line_error, check_document, cli_process

root = pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root")

EXCHANGES = [
    (frame(api_versions(3), 3, 1), frame(api_versions_response(3), 3, 1)),
    (frame(init_producer_id(4), 4, 2), frame(init_producer_id_response(4), 4, 2)),
]


@root
@pytest.mark.root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_writes_everything(tmp_path, sig):
    port = free_port()  # chosen first: the capture's filter names it
    proc = start_live(tmp_path, port, "--csv", str(tmp_path / "csv"))
    try:
        converse(port)
    finally:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err  # clean traffic: no finding
    assert_no_traceback(out, err)
    assert "KeyboardInterrupt" not in err
    doc = json.loads((tmp_path / "live.json").read_text())
    check_document(doc)
    assert doc["inputs"][0]["format"] == "live"
    assert doc["decode"]["by_api"]["InitProducerId"]["exchanges"] == 1
    assert doc["decode"]["by_api"]["ApiVersions"]["exchanges"] == 1
    for table in ("exchanges", "batches", "transactions", "findings"):
        assert (tmp_path / "csv" / f"{table}.csv").exists()
    assert not list(tmp_path.glob("**/.*.tmp"))  # no half-written export left behind
    assert "Findings" in out or "No findings" in out  # the final report
    # What --write kept is a whole capture of the same conversation.
    again = cli_process("audit", tmp_path / "live.pcap", "--port", str(port), "--json", "-")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["decode"]["exchanges"] == 2


def converse(port: int) -> None:
    """A loopback 'broker' on `port` answering canned frames, and a client sending them."""
    server = socket.create_server(("127.0.0.1", port))

    def broker() -> None:
        conn, _ = server.accept()
        with conn:
            for request, response in EXCHANGES:
                got = b""
                while len(got) < len(request):
                    got += conn.recv(65536)
                conn.sendall(response)
        server.close()

    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        for request, response in EXCHANGES:
            client.sendall(request)
            got = b""
            while len(got) < len(response):
                got += client.recv(65536)
    thread.join(5)


@root
@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv")
def test_no_permission_to_capture(tmp_path):
    r = cli_process("live", "lo", "--duration", "1", user="65534", cwd="/")
    assert_one_line_error(r.returncode, r.stdout, r.stderr, "no permission to capture")


def test_missing_interface(tmp_path):
    r = cli_process("live", "no-such-if0", "--duration", "1", "--json", tmp_path / "out.json")
    assert r.returncode == 2
    assert_no_traceback(r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "no-such-if0" in r.stderr
    assert not (tmp_path / "out.json").exists()  # nothing half-done is left behind


@root
@pytest.mark.root
@pytest.mark.skipif(not shutil.which("ip"), reason="needs iproute2")
@pytest.mark.parametrize("ring", ["1", "0"], ids=["ring", "recvfrom"])
def test_the_interface_going_away_ends_the_capture_with_a_report(tmp_path, ring):
    """A veth interface in a network namespace of the test's own is deleted while `ksniff live` captures
    on it: the capture ends at once (not at --duration), says why, and the report and JSON are written."""
    ns = f"ksniff-gone-{os.getpid()}-{ring}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        ip = ["ip", "-n", ns, "link"]
        subprocess.run([*ip, "add", "v0", "type", "veth", "peer", "name", "v1"], check=True)
        subprocess.run([*ip, "set", "v0", "up"], check=True)
        cmd = [
            "ip",
            "netns",
            "exec",
            ns,
            sys.executable,
            "-m",
            "ksniff.cli",
            "live",
            "v0",
            "--duration",
            "120",
        ]
        cmd += ["--no-color", "--json", str(tmp_path / "live.json")]
        env = {**os.environ, "PYTHONPATH": str(REPO), "KSNIFF_LIVE_RING": ring}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            ready = proc.stderr.readline()
            assert ready.startswith("ksniff: capturing on v0"), ready + proc.stderr.read()
            subprocess.run([*ip, "del", "v0"], check=True)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
    assert proc.returncode == 0, err
    assert_no_traceback(out, err)
    doc = json.loads((tmp_path / "live.json").read_text())
    assert "v0: capture ended: Network is down" in doc["warnings"]
    assert "No findings" in out
