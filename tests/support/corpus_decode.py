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


def decoded(path: Path, pieces: bool = False) -> list:
    """[every decode event, the decode counters] of the capture at `path`, read by the decoder the engine
    makes (`EngineConfig.decoder`); `pieces`: a large chunk handed over as its segments, as the engine's
    reassembler hands it."""
    from ksniff.config import EngineConfig
    from ksniff.engine.local import PIECES_FROM

    run = read_files([str(path)])
    if pieces:
        run.reassembler.hand_pieces(PIECES_FROM)
    decoder = EngineConfig(keep_tables=False).decoder(run.drop, run.drop)
    out = []
    for event in run:
        out.extend(decoder.feed(event))
    out.extend(decoder.finish())
    return [out, decoder.stats.as_contract()]
