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

import re
from collections.abc import Iterable
from typing import Any

SHOWN_CHARS = 120  # of one identifier; real ones are far shorter (Kafka's topic names stop at 249)
SHOWN_MESSAGE_CHARS = 1000  # of one sentence that quotes identifiers (a finding's message, a warning)

# C0 and DEL, C1, the Arabic letter mark, zero-width and direction marks, line/paragraph separators, bidi
# embeddings/overrides/isolates, invisible operators, the byte order mark, interlinear annotations, lone
# surrogates (file names from os.fsdecode) and the invisible tag characters.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                     "\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]")
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
