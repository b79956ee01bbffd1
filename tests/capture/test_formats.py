"""Capture file formats: pcap variants, pcapng sections and blocks, gzip, folders, merging, damage."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess

import pytest
from capture_builders import (
    Flow,
    ethernet,
    null,
    pcap_bytes,
    pcapng_section,
    run_file,
    sll,
    sll2,
    streams,
)

from ksniff.capture import CaptureError, iter_segments, read_files
from ksniff.capture.events import ConnectionOpened, StreamChunk


def conversation():
    f = Flow()
    return f.handshake() + [f.send(True, b"request"), f.send(False, b"response")] + f.close()


EXPECTED = {(1, True): b"request", (1, False): b"response"}


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nsec", [False, True])
def test_pcap_byte_orders_and_resolutions(tmp_path, order, nsec):
    path = tmp_path / "x.pcap"
    path.write_bytes(
        pcap_bytes(
            [(1700000000.123456 + i, ethernet(p)) for i, p in enumerate(conversation())],
            order=order,
            nsec=nsec,
        )
    )
    events, run = run_file(path)
    assert streams(events) == EXPECTED
    assert events[0].ts == pytest.approx(1700000000.123456, abs=1e-6)
    assert run.inputs[0].format == "pcap" and run.inputs[0].linktype == "EN10MB"
    assert run.inputs[0].packets == 8 and run.inputs[0].bytes == path.stat().st_size


def test_pcapng_sections_interfaces_resolutions_and_skipped_blocks(tmp_path):
    pkts = conversation()
    section1 = pcapng_section(
        [(1, None), (276, 9)], [(0, 100.5, ethernet(pkts[0])), (1, 101.25, sll2(pkts[1]))], order="<"
    )
    section2 = pcapng_section(
        [(101, 0x80 | 20), (1, 3)],
        [(1, 102.0, ethernet(pkts[2])), (0, 103.0, pkts[3]), (1, 104.0, ethernet(pkts[4]))]
        + [(0, 105.0 + i, p) for i, p in enumerate(pkts[5:])],
        order=">",
    )
    path = tmp_path / "x.pcapng"
    path.write_bytes(section1 + section2)
    events, run = run_file(path)
    assert streams(events) == EXPECTED
    assert run.inputs[0].format == "pcapng"
    assert run.inputs[0].linktype == "EN10MB,LINUX_SLL2,RAW"
    assert events[0].ts == 100.5
    chunk = next(e for e in events if isinstance(e, StreamChunk))
    assert chunk.first_ts == pytest.approx(103.0)
    assert run.stats.packets == 8 and not run.warnings


def test_pcapng_simple_packet_blocks(tmp_path):
    pkts = conversation()
    blocks = [(0, 50.0, ethernet(pkts[0]))] + [("spb", ethernet(p)) for p in pkts[1:]]
    path = tmp_path / "spb.pcapng"
    path.write_bytes(pcapng_section([(1, None)], blocks))
    events, run = run_file(path)
    assert streams(events) == EXPECTED
    assert run.stats.packets == 8


@pytest.mark.skipif(shutil.which("editcap") is None, reason="needs editcap")
@pytest.mark.parametrize(
    ("encap", "framing", "name"),
    [
        ("ether", ethernet, "EN10MB"),
        ("rawip", lambda ip: ip, "RAW"),
        ("linux-sll", sll, "LINUX_SLL"),
        ("linux-sll2", sll2, "LINUX_SLL2"),
        ("null", null, "NULL"),
    ],
)
def test_files_converted_by_editcap(tmp_path, encap, framing, name):
    # editcap -T relabels frames without rewriting them, so the frames are written in the target framing.
    src = tmp_path / "src.pcap"
    src.write_bytes(pcap_bytes([(10.0 + i, framing(p)) for i, p in enumerate(conversation())]))
    dst = tmp_path / "dst.pcapng"
    done = subprocess.run(["editcap", "-F", "pcapng", "-T", encap, str(src), str(dst)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"editcap cannot write {encap}")
    events, run = run_file(dst)
    assert streams(events) == EXPECTED
    assert run.inputs[0].format == "pcapng" and run.inputs[0].linktype == name


def test_gzip_capture(tmp_path):
    path = tmp_path / "x.pcap.gz"
    frames = [(1.0 + i, ethernet(p)) for i, p in enumerate(conversation())]
    path.write_bytes(gzip.compress(pcap_bytes(frames)))
    events, run = run_file(path)
    assert streams(events) == EXPECTED
    assert run.inputs[0].format == "pcap"


def test_gzip_stream_larger_than_one_window(tmp_path, monkeypatch):
    from ksniff.capture import source

    monkeypatch.setattr(source, "WINDOW", 4096)
    f = Flow()
    pkts = f.handshake() + [f.send(True, bytes([i % 251]) * 700) for i in range(200)]
    path = tmp_path / "big.pcapng.gz"
    path.write_bytes(
        gzip.compress(pcapng_section([(1, None)], [(0, 1.0 + i, ethernet(p)) for i, p in enumerate(pkts)]))
    )
    events, run = run_file(path)
    assert streams(events)[(1, True)] == b"".join(bytes([i % 251]) * 700 for i in range(200))
    assert not run.warnings


def test_format_detected_by_magic_not_extension(tmp_path):
    path = tmp_path / "really-pcapng.pcap"
    blocks = [(0, 1.0 + i, ethernet(p)) for i, p in enumerate(conversation())]
    path.write_bytes(pcapng_section([(1, None)], blocks))
    _, run = run_file(path)
    assert run.inputs[0].format == "pcapng"


def test_folder_recursive_and_files_merged_by_time(tmp_path):
    a, b = Flow(client=("10.1.0.1", 1)), Flow(client=("10.1.0.2", 2))
    a_pkts = a.handshake() + [a.send(True, b"a1"), a.send(True, b"a2")]
    b_pkts = b.handshake() + [b.send(True, b"b1"), b.send(True, b"b2")]
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    one = pcap_bytes([(10.0 + 2 * i, ethernet(p)) for i, p in enumerate(a_pkts)])
    (tmp_path / "sub" / "one.pcap").write_bytes(one)
    (tmp_path / "sub" / "deeper" / "two.cap").write_bytes(
        pcapng_section([(1, None)], [(0, 11.0 + 2 * i, ethernet(p)) for i, p in enumerate(b_pkts)])
    )
    (tmp_path / "sub" / "notes.expect.json").write_text("{}")
    run = read_files([str(tmp_path / "sub")])
    events = list(run)
    assert len(run.inputs) == 2
    times = [getattr(e, "ts", None) or e.first_ts for e in events]
    assert times == sorted(times)
    opened = [e for e in events if isinstance(e, ConnectionOpened)]
    assert [o.ts for o in opened] == [10.0, 11.0]
    s = streams(events)
    assert sorted(s.values()) == [b"a1a2", b"b1b2"]


def test_iter_segments_gives_flat_tuples(tmp_path):
    path = tmp_path / "x.pcap"
    path.write_bytes(pcap_bytes([(1.0 + i, ethernet(p)) for i, p in enumerate(conversation())]))
    segs = list(iter_segments(str(path)))
    assert len(segs) == 8
    ts, sip, sport, dip, dport, seq, ack, flags, payload = segs[3]
    assert (sip, sport, dip, dport) == (bytes([10, 0, 0, 1]), 40000, bytes([10, 0, 0, 2]), 9092)
    assert bytes(payload) == b"request" and flags & 0x18 == 0x18 and ts == 4.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"hello, this is text and not a capture\n", "not a pcap or pcapng file"),
        (b"\xd4\xc3\xb2", "not a pcap or pcapng file"),
        (bytes(range(256)) * 4, "not a pcap or pcapng file"),
    ],
)
def test_bad_files_raise_one_line(tmp_path, content, message):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(CaptureError) as err:
        read_files([str(path)])
    assert str(err.value) == f"{path}: {message}"
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(CaptureError, match="no such file"):
        read_files([str(tmp_path / "nope.pcap")])


def test_folder_without_captures(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    with pytest.raises(CaptureError, match="no pcap or pcapng files"):
        read_files([str(tmp_path)])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    path = tmp_path / "locked.pcap"
    path.write_bytes(pcap_bytes([]))
    path.chmod(0)
    with pytest.raises(CaptureError, match="locked.pcap"):
        read_files([str(path)])


def test_unsupported_link_type(tmp_path):
    path = tmp_path / "wifi.pcap"
    path.write_bytes(pcap_bytes([(1.0, b"\0" * 40)], linktype=127))
    with pytest.raises(CaptureError, match="unsupported link type 127"):
        read_files([str(path)])
    ng = tmp_path / "wifi.pcapng"
    ng.write_bytes(pcapng_section([(127, None)], [(0, 1.0, b"\0" * 40)]))
    with pytest.raises(CaptureError, match="unsupported link type 127"):
        read_files([str(ng)])


def test_bad_input_among_several_fails_at_open(tmp_path):
    good = tmp_path / "good.pcap"
    good.write_bytes(pcap_bytes([]))
    bad = tmp_path / "bad.pcap"
    bad.write_text("nope")
    with pytest.raises(CaptureError, match="bad.pcap"):
        read_files([str(good), str(bad)])


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_file_truncated_mid_record_is_a_partial_result(tmp_path, kind):
    frames = [(1.0 + i, ethernet(p)) for i, p in enumerate(conversation())]
    blocks = [(0, t, fr) for t, fr in frames]
    data = pcap_bytes(frames) if kind == "pcap" else pcapng_section([(1, None)], blocks, extra_blocks=False)
    cut = len(data) - 30
    path = tmp_path / f"cut.{kind}"
    path.write_bytes(data[:cut])
    events, run = run_file(path)
    assert run.stats.packets == 7
    assert streams(events) == {(1, True): b"request", (1, False): b"response"}
    assert len(run.warnings) == 1 and run.warnings[0].startswith(f"{path}: truncated at byte ")
    offset = int(run.warnings[0].rsplit(" ", 1)[1])
    assert 0 < offset < cut


def test_truncated_gzip_is_a_partial_result(tmp_path):
    f = Flow()
    pkts = f.handshake() + [f.send(True, bytes([i]) * 500) for i in range(100)]
    data = gzip.compress(pcap_bytes([(1.0 + i, ethernet(p)) for i, p in enumerate(pkts)]))
    path = tmp_path / "cut.pcap.gz"
    path.write_bytes(data[: len(data) // 2])
    events, run = run_file(path)
    assert 0 < run.stats.packets < len(pkts)
    assert run.warnings and "truncated at byte" in run.warnings[0]


def test_corrupt_record_length_ends_the_file_with_a_warning(tmp_path):
    frames = [(1.0 + i, ethernet(p)) for i, p in enumerate(conversation())]
    data = bytearray(pcap_bytes(frames))
    second = 24 + 16 + len(frames[0][1])
    data[second + 8 : second + 12] = (0x7FFFFFFF).to_bytes(4, "little")  # caplen of the second record
    path = tmp_path / "corrupt.pcap"
    path.write_bytes(bytes(data))
    _, run = run_file(path)
    assert run.stats.packets == 1
    assert run.warnings == [f"{path}: corrupt record at byte {second}; rest skipped"]
