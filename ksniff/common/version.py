"""The version of ksniff, importable from every room; the only place it is written (pyproject.toml reads it
from here when the package is built)."""

VERSION = "0.1.0"
