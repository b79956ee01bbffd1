"""The version of ksniff (pyproject.toml carries the same), importable from every room."""

VERSION = "0.1.0"
