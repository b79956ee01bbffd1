"""The JSON document's long lists written in one pass (`ksniff.report._jsonitems.joined`) against json's
encoder item by item, the reference: the same text for every list of every document of the corpus, for
values a client chooses (any character, any number) and for whatever the one pass leaves to the
encoder; and the same errors.

Where the project is built without a C compiler the module is missing and these tests skip; in CI (`CI`
set) it must have been built, so there they fail instead."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path

import pytest
from compiled_support import require_compiled

from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths
from ksniff.report import formats

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.iterdir() if p.suffix in (".pcap", ".pcapng"))
SEPARATOR = ",\n    "


@pytest.fixture(scope="module")
def joined():
    module = require_compiled("ksniff.report._jsonitems", "the compiled JSON lists")
    if formats._jsonitems is None:
        pytest.skip("KSNIFF_PURE_PYTHON is set: the compiled module is not loaded")
    one_line = formats._one_line_encoder()

    def both(values, separator=SEPARATOR):
        reference = separator.join([one_line(v) for v in values])
        return module.joined(values, separator, one_line), reference

    return both


def _outcome(fn):
    try:
        return ("text", fn())
    except Exception as exc:  # the same class and message is what is compared
        return ("error", type(exc), str(exc))


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Text(str):
    pass


STRINGS = [
    "",
    "plain",
    'a "quoted" word',
    "back\\slash",
    "\x00\x01\x1f control",
    "tab\tnew\nline\rform\x0cback\x08",
    "del \x7f",
    "café ünïcödé",
    "日本語",
    "emoji 🦀 astral",
    "lone \ud800 surrogate",
    "\u2028\u2029 separators",
    "\x1b[31m escape sequence \x1b[0m",
    "=cmd|' /C calc'!A0",
    "x" * 100_000,
]
NUMBERS = [
    0,
    -1,
    1,
    2**63 - 1,
    -(2**63),
    2**63,
    -(2**63) - 1,
    10**40,
    -(10**40),
    0.0,
    -0.0,
    0.1,
    1e-300,
    5e-324,
    1e300,
    1e16,
    123456789012345678.0,
    1796629593.232563,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    None,
]


def test_the_corpus_documents_lists(joined):
    lists = 0
    for path in CORPUS:
        doc = audit_paths([str(path)], EngineConfig()).as_contract()
        for key, value in doc.items():
            if isinstance(value, list) and value:
                got, want = joined(value)
                assert got == want, (path.name, key)
                lists += 1
    assert lists > 100


def test_the_document_is_the_same_text(joined, monkeypatch):
    result = audit_paths([str(PCAPS / "anomalies_tansu.pcap")], EngineConfig())
    fast = formats.json_text(result)
    monkeypatch.setattr(formats, "_jsonitems", None)
    assert fast == formats.json_text(result) and json.loads(fast)["findings"]


def test_what_a_client_chooses(joined):
    rows = [
        {"transactional_id": s, "client": s, "topic": s, "partitions": [s, s], "n": n, s: n}
        for s in STRINGS
        for n in NUMBERS
    ]
    got, want = joined(rows)
    assert got == want
    got, want = joined(STRINGS + NUMBERS)
    assert got == want
    got, want = joined([STRINGS, tuple(NUMBERS), {"nested": [{"deeper": (STRINGS, NUMBERS)}]}])
    assert got == want


def test_what_is_left_to_the_encoder(joined):
    deep: list = []
    inner = deep
    for _ in range(40):
        inner.append([1])
        inner = inner[-1]
    odd = [
        {1: "int key", None: "none key", False: "bool key", 2.5: "float key"},
        {"colour": Colour.RED, "level": Level.HIGH, "text": Text("sub"), "set": {3, 1, 2}},
        {"bytes": b"\x00\xff", "tuple": (1, (2, 3))},
        Level.HIGH,
        Text('a "str" subclass'),
        deep,
        {"fine": 1, "then": Colour.RED},  # the item's first keys already written: left to the encoder
        [],
        {},
        (),
    ]
    many_keys = [{f"key{i}": i} for i in range(10_000)]  # past the kept keys
    for values in (odd, many_keys, odd + many_keys):
        got, want = joined(values)
        assert got == want
    for separator in (", ", "", "\n", " — "):
        got, want = joined(odd, separator)
        assert got == want, separator


def test_the_same_errors(joined):
    module = require_compiled("ksniff.report._jsonitems", "the compiled JSON lists")
    circular: list = []
    circular.append(circular)
    looped: dict = {}
    looped["self"] = looped
    for values in ([circular], [{"a": looped}], [object()], [{"ok": 1}, {"bad": object()}], [{(1, 2): "x"}]):
        # An encoder per call: json's keeps what it was in the middle of when it raised.
        mine, theirs = formats._one_line_encoder(), formats._one_line_encoder()
        got = _outcome(lambda v=values, e=mine: module.joined(v, SEPARATOR, e))
        want = _outcome(lambda v=values, e=theirs: SEPARATOR.join([e(x) for x in v]))
        assert got == want and got[0] == "error", values


def test_floats_of_every_kind_written_as_repr(joined):
    """Times and durations of microseconds are written from their integer of microseconds, every other
    float by Python's shortest digits: both give float.__repr__'s text (json's), for capture times,
    durations, the edges of the range written from microseconds (1e-4, 2**33), integers, negatives,
    values with a seventh decimal, and doubles of any bits."""
    import random
    import struct

    rng = random.Random(23)
    values = [1796694148.201503, 5.0, 0.5, 0.000123, 1e-4, 9.99e-5, 2**33 - 0.5, 2**33, -1.25, -0.0, 0.0]
    values += [1e16, 1e15 + 0.5, 0.1, 0.3, 2.675, 1234567.8912345, 8589934591.999999, 0.0001000001]
    for _ in range(40_000):
        roll = rng.random()
        if roll < 0.3:  # capture times
            values.append(rng.randrange(10**9, 2 * 10**9) + rng.randrange(10**6) / 1e6)
        elif roll < 0.5:  # durations, either sign
            values.append(rng.randrange(10**6) / 1e6 * rng.choice((1, 10, 1000, -1)))
        elif roll < 0.7:
            values.append(struct.unpack("<d", rng.randbytes(8))[0])
        elif roll < 0.85:
            values.append(rng.uniform(1e-5, 2**34))
        else:
            values.append(round(rng.uniform(1e-4, 2**33), rng.randrange(0, 8)))
    values = [v for v in values if math.isfinite(v)]
    items = [{"ts": v, "span": [v, -v]} for v in values]
    fast, reference = joined(items)
    assert fast == reference
    assert len(values) > 35_000
