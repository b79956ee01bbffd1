"""`--html FILE` in a real browser: headless Chromium loads the page from a file, offline, and renders it.

Checked as a reader would: the screenshot is not blank, the DOM holds the transactional ids and the
findings, every marker on a timeline leads to a finding's evidence, nothing is fetched from the network,
and hostile ids stay text.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.report.hostile import NASTY, hostile_capture

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")


def chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered RGB(A) rows of an 8-bit PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = header[:4]
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def write_page(out: Path, *captures: Path, txn_timeout_ms: int | None = None) -> Path:
    import ksniff
    from ksniff.report.html import html_report

    result = ksniff.audit([str(c) for c in captures], txn_timeout_ms=txn_timeout_ms).result
    out.write_text(html_report(result), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    return write_page(
        tmp_path_factory.mktemp("html") / "incident.html",
        PCAPS / "txn_confluent_tansu.pcap",
        PCAPS / "anomalies_tansu.pcap",
    )


def test_the_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", text, re.I)  # nothing fetched
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert text.count("<script") == 1 and "<script src" not in text
    assert len(text) < 500_000


@needs_chromium
def test_chromium_renders_the_ids_and_the_findings(page, tmp_path):
    r = chromium(page, tmp_path, "--dump-dom")
    assert r.returncode == 0, r.stderr
    dom = r.stdout
    for txn_id in ("tx-A", "tx-zombie", "tx-hang"):
        assert f'<h3 class="id">{txn_id}</h3>' in dom
    for kind in ("producer_fenced", "epoch_regression", "hanging_transaction", "unanswered_request"):
        assert f"<b>{kind}</b>" in dom
    assert dom.count("<svg") == 3 and dom.count("<rect") >= 6  # a lane of bars per instance
    # Every marker leads to a finding whose evidence is on the page.
    targets = set(re.findall(r'<a href="#(f-\d+)" class="finding">', dom))
    assert targets and targets <= set(re.findall(r'<details id="(f-\d+)"', dom))


@needs_chromium
def test_the_screenshot_is_not_blank(page, tmp_path):
    shot = tmp_path / "shot.png"
    r = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1100,900")
    assert r.returncode == 0 and shot.exists(), r.stderr
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1100, 900)
    colours = {row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12)}
    # Text, the outcome colours of the bars and the severity colours of the markers.
    assert len(colours) > 50
    green = sum(1 for row in rows for i in range(0, len(row), 3) if row[i : i + 3] == bytes.fromhex("2e7d32"))
    assert green > 500, "committed transactions are drawn as green bars"


@needs_chromium
def test_hostile_ids_stay_text(tmp_path):
    txn_id = '<img src=x onerror="document.title=1">' + NASTY + "<script>document.title=2</script>"
    capture = hostile_capture(tmp_path / "h.pcap", txn_id, '=HYPERLINK("http://evil")', "c" + NASTY)
    out = write_page(tmp_path / "h.html", capture, txn_timeout_ms=1)
    text = out.read_text(encoding="utf-8")
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", text)
    dom = chromium(out, tmp_path, "--dump-dom").stdout
    assert "<img" not in dom and dom.count("<script") == 1
    assert "&lt;img src=x" in dom and "\\x1b[2J" in dom
