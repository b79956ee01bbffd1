"""Collects how many cases each fuzz target ran and prints them after the run (no `-s` needed)."""

from __future__ import annotations

import fuzz_counts


def pytest_terminal_summary(terminalreporter) -> None:
    if not fuzz_counts.COUNTS:
        return
    terminalreporter.section("robustness fuzz cases")
    for name, n in sorted(fuzz_counts.COUNTS.items()):
        terminalreporter.write_line(f"{name}: {n} cases")
    terminalreporter.write_line(f"total: {sum(fuzz_counts.COUNTS.values())} cases")
