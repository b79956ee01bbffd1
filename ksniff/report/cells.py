"""Text that people open in a spreadsheet or a browser: never a formula, never a raw control character.

Transactional ids, topics, client ids, group ids and file names are chosen by whoever runs a client, so
a CSV cell or an HTML table cell made of them must not be able to act. The rule, the same for every
text cell of the CSV export and of the HTML report (numeric cells are numbers and are never touched, so a
producer id of -1 stays -1):

- a cell whose text starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`
  (OWASP's advice against CSV injection): the spreadsheet shows the text and does not evaluate it;
- control characters (C0, DEL, C1), the bidirectional overrides and the line and paragraph separators
  are written as visible escapes (`\\n`, `\\x1b`, `\\u202e`): no cell carries a raw escape sequence, a line
  break a reader could take for a new row, or text that reorders itself on screen.

The JSON and Parquet exports keep the exact text; these are the outputs for people.
"""

from __future__ import annotations

import re

FORMULA_STARTS = frozenset("=+-@\t\r")

# Cc (C0, DEL, C1), the bidi embeddings, overrides, isolates and marks, and the Unicode line breaks.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    ch = match.group()
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character written as a visible escape."""
    if text.isprintable():  # C speed; true for almost every id (a printable char is never escaped)
        return text
    return _INVISIBLE.sub(_escape, text)


def neutral(text: str) -> str:
    """A text cell as the CSV export and the HTML report write it: no formula, no control character."""
    if not text:
        return text
    out = visible(text)
    return "'" + out if text[0] in FORMULA_STARTS else out
