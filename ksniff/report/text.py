"""Text from the wire or from file names, made safe to show to people.

Transactional ids, client ids, topics, group ids and file names are chosen by whoever runs a client or
names a file. On a terminal, an escape sequence in one can clear the screen, set the window title, plant
a hyperlink or forge a `ksniff: warning:` line; a bidi override can make text read backwards; an id of
megabytes makes rich's wrapping crawl. Everything shown to people goes through `shown`: control
characters (C0, DEL, C1), bidi and other invisible format characters and lone surrogates become visible
escapes (`\\x1b`, `\\n`, `\\u202e`), and a value longer than `SHOWN_CHARS` is cut with its length said. The
JSON, CSV and Parquet exports keep every value exact (CSV has its own cell rule).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from rich.rule import Rule
from rich.text import Text

from ksniff.report.tables import in_calendar

SHOWN_CHARS = 120  # of one identifier; real ones are far shorter (Kafka's topic names stop at 249)
SHOWN_MESSAGE_CHARS = 1000  # of one sentence that quotes identifiers (a finding's message, a warning)

# C0 and DEL, C1, the Arabic letter mark, zero-width and direction marks, line/paragraph separators, bidi
# embeddings/overrides/isolates, invisible operators, the byte order mark, interlinear annotations, lone
# surrogates (file names from os.fsdecode) and the invisible tag characters.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
    "\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(value: str) -> str:
    """Every character that could act on a terminal or hide text, as a visible escape; the rest as is."""
    if value.isprintable():  # C speed, true for almost every id; no character escaped here is printable
        return value
    return _UNSAFE.sub(_escape_one, value)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`value` as people see it: escaped, and cut to `limit` characters with its full length said.

    Only the part shown is escaped, so a value of megabytes costs what its first `limit` characters cost.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return escape(text)
    return f"{escape(text[:limit])}…({len(text):,} chars)"


def shown_message(message: str, quoted: Iterable[Any] = (), limit: int = SHOWN_MESSAGE_CHARS) -> str:
    """A sentence that quotes identifiers (`quoted`: the values it may contain, raw): each long one is
    cut where it appears, as itself or as Python's repr of it, then the sentence is escaped and cut."""
    for value in quoted:
        if isinstance(value, str) and len(value) > SHOWN_CHARS:
            short = shown(value)
            message = message.replace(value, short)
            message = message.replace(repr(value)[1:-1], short)
    return shown(message, limit)


# ---- how values read: times, sizes, counts ----------------------------------------------------------------
# Times are UTC time of day with milliseconds; the report's header gives the date once.


def _utc(ts: float) -> datetime | None:
    """The calendar time, or None for a time no calendar holds (a capture may carry any 64-bit time)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc) if in_calendar(ts) else None


def clock(ts: float | None) -> str:
    """UTC time of day with milliseconds, `12:00:02.156`; epoch seconds for a time outside years 1-9999."""
    if ts is None or (isinstance(ts, float) and math.isnan(ts)):
        return ""
    utc = _utc(ts)
    return f"@{ts:.6g}s" if utc is None else utc.strftime("%H:%M:%S.%f")[:12]


def stamp(ts: float) -> str:
    """Date and time, for the one place a date is shown."""
    utc = _utc(ts)
    return clock(ts) if utc is None else utc.strftime("%Y-%m-%d ") + clock(ts)


def span(first: float | None, last: float | None) -> str:
    if first is None or last is None:
        return "nothing captured"
    a, b = _utc(first), _utc(last)
    end = clock(last) if a is not None and b is not None and a.date() == b.date() else stamp(last)
    return f"{stamp(first)} -> {end} UTC ({duration(last - first)})"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover - the loop returns at GB


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def ranges(values: Iterable[int]) -> str:
    """`0, 1, 2, 5` as `0-2, 5`: epochs and API versions read better compressed."""
    out: list[str] = []
    run: list[int] = []
    for v in sorted(set(values)):
        if run and v != run[-1] + 1:
            out.append(_run_text(run))
            run = []
        run.append(v)
    if run:
        out.append(_run_text(run))
    return ", ".join(out)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def producer_label(txn_id: str | None, pid: int | None, epoch: int | None = None) -> str:
    parts = [shown(txn_id)] if txn_id else []
    if pid is not None:
        parts.append(f"pid {pid}")
    if epoch is not None:
        parts.append(f"epoch {epoch}")
    return " ".join(parts) or "-"


def more(n: int, what: str, hint: str = "--verbose shows all") -> Text:
    return Text(f"... and {plural(n, what)} more ({hint})", style="dim")


def section(title: str) -> Rule:
    return Rule(Text(title, style="bold"), align="left", style="dim")
