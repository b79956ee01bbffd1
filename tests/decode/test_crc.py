"""The compiled CRC-32C (`ksniff.decode._crc`) against the crc32c package, the reference: the same checksum
for every length around the three-stream blocks, at every alignment, for bytes, bytearrays and views,
and the CRC verdicts of the corpus's batches the same whichever computes them.

Where the project is built without a C compiler (or the CPU lacks the instruction) the package is used
and these tests skip; in CI (`CI` set) the compiled one must have been built, so there they fail."""

from __future__ import annotations

import importlib
import os
import random

import crc32c as package
import pytest
from decode_builders import record_batch

from ksniff.decode import crc, records

BLOCK = 8192  # the compiled one's stream block: KS_BLOCK in _crc.pyx


@pytest.fixture(scope="module")
def compiled():
    try:
        module = importlib.import_module("ksniff.decode._crc")
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the compiled CRC-32C was not built (pip install -e . needs Cython and gcc)")
        pytest.skip("the compiled CRC-32C is not built here")
    if not module.hardware:
        pytest.skip("this CPU has no crc32 instruction: the package computes the CRC")
    return module.crc32c


def test_the_check_value(compiled):
    assert compiled(b"123456789") == package.crc32c(b"123456789") == 0xE3069283
    assert compiled(b"") == 0


LENGTHS = [*range(0, 70), *(k * BLOCK + d for k in (1, 3, 6, 7) for d in (-9, -1, 0, 1, 8, 13)), 1 << 20]


@pytest.mark.parametrize("length", LENGTHS)
def test_equal_to_the_package(compiled, length):
    data = random.Random(length).randbytes(length + 8)
    for start in (0, 1, 3, 7):
        view = memoryview(data)[start : start + length]
        assert compiled(view) == package.crc32c(view), (length, start)
    assert compiled(bytearray(data)) == package.crc32c(data)
    assert compiled(data[:length]) == package.crc32c(data[:length])


def test_a_run_uses_the_compiled_one_when_built(compiled):
    if os.environ.get("KSNIFF_PURE_PYTHON", "") not in ("", "0"):
        assert crc.ENGINE == "package" and crc.crc32c is package.crc32c
    else:
        assert crc.ENGINE == "compiled" and crc.crc32c is compiled


@pytest.mark.parametrize("value_size", [0, 1, 100, 3 * BLOCK, 100_000])
def test_batch_verdicts_do_not_depend_on_which_computes_them(compiled, monkeypatch, value_size):
    """Good and damaged batches of every size: the headers, crc_ok included, the same with the package."""
    batch = bytearray(record_batch(records=3, codec="none", value_size=value_size))
    for damaged in (False, True):
        if damaged:
            batch[-1] ^= 0x40
        monkeypatch.setattr(records, "crc32c", package.crc32c)
        reference = records.parse_batches(bytes(batch))
        monkeypatch.setattr(records, "crc32c", compiled)
        assert records.parse_batches(bytes(batch)) == reference
        assert reference[0].crc_ok is (not damaged)
