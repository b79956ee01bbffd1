"""Bytes after what a body's schema defines: every body of the corpus decodes to its last byte, except
the answers of librdkafka's mock cluster that are known to carry more (and are decoded all the same).
A decoder that stopped short of a field, or a schema that lost one, leaves bytes over and fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksniff.config import EngineConfig
from ksniff.engine.local import audit_paths

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(PCAPS.glob("*.pcap"))

# What the mock cluster (confluent-kafka's test.mock.num.brokers) writes beyond the schema, by API and
# the versions the captures ask for: an ApiVersions v3 answer of 5 bytes more than its layout (the
# answers to v3 requests it refuses as UNSUPPORTED_VERSION and those it takes), and a Metadata v13 answer
# of one byte more.
MOCK_LEFTOVER = {"ApiVersions", "Metadata"}


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bodies_decode_to_their_last_byte(path: Path) -> None:
    decode = audit_paths([str(path)], EngineConfig()).decode
    over = {name: c.with_leftover for name, c in decode.by_api.items() if c.with_leftover}
    assert sum(over.values()) == decode.bodies_with_leftover
    if path.stem.endswith("_mock"):
        assert set(over) <= MOCK_LEFTOVER
        assert decode.leftover_bytes <= 5 * over.get("ApiVersions", 0) + over.get("Metadata", 0)
    else:
        assert over == {} and decode.leftover_bytes == 0
