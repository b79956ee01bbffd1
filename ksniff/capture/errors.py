"""Errors and memory limits of the capture room."""

from __future__ import annotations

from ksniff.common.frozen import frozen_dataclass


class CaptureError(Exception):
    """An input that cannot be read at all; the message is one line meant for the user."""


@frozen_dataclass
class CaptureLimits:
    """Memory caps of the reassembler. What a cap drops is counted and becomes a gap, never silence."""

    max_connections: int = 50_000  # open connections tracked; the longest idle is evicted beyond this
    ooo_bytes_per_direction: int = 4 << 20  # out-of-order bytes buffered for one half-connection
    ooo_bytes_total: int = 128 << 20  # out-of-order bytes buffered across all connections
    idle_timeout: float = 600.0  # seconds of capture time without a packet before a connection expires
    closed_linger: float = 60.0  # a closed connection's 4-tuple swallows stray packets this long
    max_chunk_bytes: int = 256 << 10  # consecutive in-order segments are merged into chunks up to this
    max_interfaces: int = 4096  # pcapng interfaces kept per section; packets of later ones are skipped
    # A gzip capture inflates to at most this many times its size (and at least gunzip_floor bytes):
    # real captures compress a few times, a decompression bomb a thousand.
    gunzip_ratio: int = 200
    gunzip_floor: int = 256 << 20
