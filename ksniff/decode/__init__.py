"""Decode room: reassembled streams into Kafka exchanges (request + response) and record batch headers."""

from ksniff.decode.decoder import Decoder

__all__ = ["Decoder"]
