"""CRC-32C (Castagnoli), the checksum of magic-2 record batches: `crc32c(data) -> int`.

The compiled one (`ksniff.decode._crc`, built with the capture walk) when it is built and the CPU has the
crc32 instruction; otherwise the crc32c package, the reference a test holds the compiled one to. Both
are as fast (tens of GB/s); the compiled one is preferred because importing the package loads
importlib.metadata to read the package's own version, about a tenth of ksniff's start-up.
`KSNIFF_PURE_PYTHON=1` uses the package, as it does the pure-Python capture walk.
"""

from __future__ import annotations

from ksniff.capture.compiled import load

_compiled = load("ksniff.decode._crc")

if _compiled is not None and _compiled.hardware:
    crc32c = _compiled.crc32c
    ENGINE = "compiled"
else:
    from crc32c import crc32c

    ENGINE = "package"

__all__ = ["ENGINE", "crc32c"]
