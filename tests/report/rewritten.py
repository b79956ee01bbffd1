"""A real corpus capture rewritten to carry attacker-chosen strings.

`anomalies_tansu.pcap` (kafka-python's protocol classes against Tansu: a zombie fenced with
PRODUCER_FENCED, a hanging transaction, sequence gaps and duplicates) with its transactional id, client
id and topic replaced, byte for byte, by hostile strings of the same length. Kafka strings are length
prefixed and none of these sits inside a record batch's CRC, so every frame still decodes as the broker
and client exchanged it; only the text changed.
"""

from __future__ import annotations

from pathlib import Path

PCAPS = Path(__file__).parent.parent / "pcaps"
SOURCE = PCAPS / "anomalies_tansu.pcap"

# A formula with a screen clear and a forged line break; a DDE payload; a tab-led formula.
TXN_ID = "=A1\x1b[2J\r\n"  # was tx-zombie
CLIENT_ID = "+cmd|'/C'!"  # was corpus-raw
TOPIC = "\t=1"  # was raw
HANG_ID = "<b>x</b"  # was tx-hang: markup, for the HTML report

REPLACEMENTS = (
    (b"tx-zombie", TXN_ID.encode()),
    (b"corpus-raw", CLIENT_ID.encode()),
    (b"\x00\x03raw", b"\x00\x03" + TOPIC.encode()),  # the topic, by its INT16 length prefix
    (b"tx-hang", HANG_ID.encode()),
)


def hostile_copy(directory: Path) -> Path:
    """Writes the rewritten capture into `directory`; returns its path."""
    data = SOURCE.read_bytes()
    for old, new in REPLACEMENTS:
        assert len(old) == len(new) and data.count(old) > 0
        data = data.replace(old, new)
    path = directory / "anomalies_hostile.pcap"
    path.write_bytes(data)
    return path
