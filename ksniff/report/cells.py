"""Text that people open in a spreadsheet or a browser: never a formula, never a raw control character.

Transactional ids, topics, client ids, group ids and file names are chosen by whoever runs a client, so
a CSV cell or an HTML table cell made of them must not be able to act. The rule, the same for every
text cell of the CSV export and of the HTML report (numeric cells are numbers and are never touched, so a
producer id of -1 stays -1):

- a cell whose text starts with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'`
  (OWASP's advice against CSV injection): the spreadsheet shows the text and does not evaluate it;
- control characters (C0, DEL, C1), the bidirectional overrides, the line and paragraph separators and
  the other invisible characters are written as visible escapes (`\\n`, `\\x1b`, `\\u202e`), by the rule of
  `report.text.escape`: no cell carries a raw escape sequence, a line break a reader could take for a new
  row, or text that reorders itself on screen.

The JSON and Parquet exports keep the exact text; these are the outputs for people.
"""

from __future__ import annotations

from ksniff.report.text import escape

FORMULA_STARTS = frozenset("=+-@\t\r")

# One rule for every output meant for people: the terminal's (report.text) escapes are the cells' too.
visible = escape


def neutral(text: str) -> str:
    """A text cell as the CSV export and the HTML report write it: no formula, no control character."""
    if not text or (text.isprintable() and text[0] not in FORMULA_STARTS):  # almost every cell: as is
        return text
    out = visible(text)
    return "'" + out if text[0] in FORMULA_STARTS else out
