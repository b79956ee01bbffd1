"""Paths as users give them: a local path, or a URI naming a file system (read by the Spark engine only).

Here rather than in ksniff.engine.spark so that the local engine can refuse a URI without loading the
Spark engine's module."""

from __future__ import annotations

import re

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def is_uri(path: str) -> bool:
    """Whether `path` names a file system by scheme (`file:`, `hdfs://`, `s3a://`, ...)."""
    return bool(_URI.match(path)) and not (len(path) > 1 and path[1] == ":" and len(path.split(":")[0]) == 1)
