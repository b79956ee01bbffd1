"""A mapped capture file's pages: mapped in a window ahead of the walk and dropped behind it
(ksniff.capture.readahead), so that the walk does not stop for page faults and memory stays at about
two windows of the file however big it is. Measured as the kernel counts it: the resident size of the
file's mapping in /proc/self/smaps. The kernel may map a file's pages in folios of up to 2 MiB, so the
ranges here start and end on 2 MiB."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest
from compiled_walk import fastwalk

from ksniff.capture import compiled, readahead, source

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's smaps")

MB = 1 << 20
W = 2 * MB  # the windows of these tests: a whole number of the largest folios


def resident(path: Path) -> int:
    """Bytes of `path`'s mappings in this process that are in memory."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and head and head[0] == "Rss:":
            total += int(head[1]) * 1024
    return total


@pytest.fixture
def capture_file(tmp_path) -> Path:
    path = tmp_path / "big.pcap"
    path.write_bytes(os.urandom(MB) * 16)  # what it holds does not matter to the pages
    return path


def test_pages_are_mapped_in_and_dropped_without_the_gil(capture_file):
    walk = fastwalk()
    with open(capture_file, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapped)
    assert resident(capture_file) == 0
    walk.populate(view, 4 * MB + 100, 10 * MB)  # from within a page: that page is mapped too
    assert resident(capture_file) == 6 * MB
    assert walk.release(view[1:], 16 * MB) == -1  # not the map's start: nothing dropped
    assert resident(capture_file) == 6 * MB
    assert walk.release(view, 8 * MB + 100) == 0  # whole pages only
    assert resident(capture_file) == 2 * MB
    walk.populate(view, 14 * MB, 99 * MB)  # clipped at the end
    assert resident(capture_file) == 4 * MB
    view.release()
    mapped.close()


def test_the_walk_finds_its_next_window_mapped_and_at_most_two_windows_held(capture_file, monkeypatch):
    fastwalk()
    monkeypatch.setattr(source, "WINDOW", W)
    buffer = source.CaptureBuffer(str(capture_file))
    readahead.idle()
    assert resident(capture_file) == 0  # opened (for its header, for its first packet's time): not read
    pos = 0
    while (moved := buffer.more(buffer.end)) is not None:
        pos = moved
        readahead.idle()
        held = resident(capture_file)
        # from the second window on, the one the walk is in was mapped in before it got there; the one
        # after it is now
        assert held == min(2 * W if pos > W else W, buffer.size - pos)
    assert pos == 16 * MB - W
    buffer.close()


def test_without_the_compiled_module_pages_are_dropped_in_the_walk_and_none_read_ahead(
    capture_file, monkeypatch
):
    monkeypatch.setattr(compiled, "fastwalk", None)
    monkeypatch.setattr(source, "WINDOW", W)
    buffer = source.CaptureBuffer(str(capture_file))
    bytes(buffer.buf[: buffer.end])  # the walk reads its first window
    assert resident(capture_file) == W
    buffer.more(buffer.end)  # the first dropped at once, the second not read ahead
    assert resident(capture_file) == 0
    buffer.close()


def test_a_walk_faster_than_the_worker_drops_what_it_passed_itself(capture_file, monkeypatch):
    """A walk that only reads the records (the capture-set planner's scan of every file) can run ahead of
    the worker: it then drops the pages it has passed itself, so they do not pile up (they did: half of a
    1 GB file resident at the end of a scan), and stops asking for pages ahead."""
    fastwalk()
    monkeypatch.setattr(source, "WINDOW", W)
    import threading

    held_up = threading.Event()
    readahead._the_worker().jobs.put((held_up.wait,))  # the worker stuck behind a slow job
    try:
        buffer = source.CaptureBuffer(str(capture_file))
        pos, peak = 0, 0
        while True:
            bytes(buffer.buf[pos : buffer.end])  # the walk reads its window
            peak = max(peak, resident(capture_file))
            moved = buffer.more(buffer.end)
            if moved is None:
                break
            pos = moved
        assert pos == 16 * MB - W
        # the window read, the one before it (dropped once the worker is LAG_MAX jobs behind), and no more
        assert peak <= 2 * W + W * readahead.LAG_MAX // 2
        assert resident(capture_file) <= 2 * W
        buffer.close()
    finally:
        held_up.set()
        readahead.idle()
