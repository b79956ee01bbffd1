"""The named scenarios of the corpus: each one records one capture and its expectations."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    record: Callable[[Path], None]  # writes NAME.pcap[ng] and NAME.expect.json into the folder
    needs_netns: bool = False


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, summary: str, needs_netns: bool = False):
    def register(func: Callable[[Path], None]) -> Callable[[Path], None]:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name} registered twice")
        SCENARIOS[name] = Scenario(name, summary, func, needs_netns)
        return func

    return register


def on_tansu_and_mock(stem: str, record: Callable[..., None], tansu: str, mock: str) -> None:
    """STEM_tansu and STEM_mock (librdkafka's mock cluster), summarised as given, each recorded by
    record(out, name=..., broker="tansu" or "mock")."""
    for broker, summary in (("tansu", tansu), ("mock", mock)):
        name = f"{stem}_{broker}"
        scenario(name, summary)(functools.partial(record, name=name, broker=broker))
