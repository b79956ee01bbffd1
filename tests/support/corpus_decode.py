"""A corpus capture decoded as the engines decode it: the tests that read its exchanges share this."""

from __future__ import annotations

from pathlib import Path

from ksniff.capture import read_files
from ksniff.decode import Decoder
from ksniff.decode.events import Exchange


def decode(path: Path, ports: list[int]) -> tuple[Decoder, list[Exchange]]:
    """The decoder (its counts) and every exchange of the capture at `path`, Kafka on `ports`, in the
    order the decoder gave them."""
    run = read_files([str(path)])
    dec = Decoder(ports=tuple(ports), on_not_kafka=run.drop)
    out = []
    for ev in run:
        out += dec.feed(ev)
    out += dec.finish()
    return dec, [e for e in out if isinstance(e, Exchange)]
