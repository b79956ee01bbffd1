"""Wires the rooms for the CLI: inputs -> engine -> report and exports -> exit code."""

from __future__ import annotations

from ksniff.cli import EXIT_ERROR, Options, abort


def run_audit(captures: tuple[str, ...], opts: Options, *, engine: str, master: str) -> int:
    abort("ksniff audit is not yet implemented")
    return EXIT_ERROR


def run_live(iface: str, opts: Options, *, duration, count, write_path, bpf) -> int:
    abort("ksniff live is not yet implemented")
    return EXIT_ERROR
