"""The one configuration of a run: every option that changes what a run reads, keeps or finds.

The CLI (ksniff.options), the Python API (ksniff.api) and every engine (local, live, Spark) take this
one frozen value as is; each room's own settings are derived from it here (`limits` for the capture
room, `decoder()` for the decode room, `audit_config()` for the audit room), so an option added here
reaches every engine and cannot be dropped by one of them. Adding an engine option: a field here, its
use in the method of the room it tunes, and the flag in ksniff.options.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ksniff.audit import AuditConfig
from ksniff.capture import CaptureLimits
from ksniff.common.frozen import frozen_dataclass
from ksniff.decode import Decoder
from ksniff.decode.context import DecodeContext
from ksniff.decode.decoder import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_IN_FLIGHT_TOTAL,
    DEFAULT_MAX_PARTIAL_TOTAL,
    DEFAULT_PORTS,
)
from ksniff.decode.frames import DEFAULT_MAX_FRAME
from ksniff.decode.reader import MAX_BODY_ITEMS
from ksniff.decode.records import MAX_DECOMPRESSED, MAX_DECOMPRESSED_REQUEST, MAX_DECOMPRESSED_RUN

_LIMITS = CaptureLimits()

__all__ = ["DEFAULT_PORTS", "EngineConfig", "parse_ports"]


def parse_ports(values: Iterable[str | int]) -> tuple[int, ...]:
    """Broker ports as the CLI and the Python API take them: numbers, or text of comma-separated
    numbers (`"9092,19093"`), each in 1-65535; repeated ones once, in order. Raises ValueError naming
    the first that is not a TCP port."""
    ports: list[int] = []
    for value in values:
        parts = [value] if isinstance(value, int) and not isinstance(value, bool) else str(value).split(",")
        for part in parts:
            text = str(part).strip()
            if not text:
                continue
            if not text.isdigit() or not 0 < int(text) < 65536:
                raise ValueError(f"not a TCP port: {text!r}")
            ports.append(int(text))
    return tuple(dict.fromkeys(ports))


@frozen_dataclass
class EngineConfig:
    """Everything a run is asked to do, shared by every engine."""

    ports: tuple[int, ...] = DEFAULT_PORTS  # broker ports (the side on one of them is the broker)
    auto_detect: bool = True  # also find Kafka on any other port
    txn_timeout_ms: int | None = None  # hanging-transaction threshold; None: the audit room's default
    keep_tables: bool = True  # build exchange and batch rows (exports, --producer); off saves memory
    keep_records: bool = False  # decode record keys, values and headers (the `records` table)
    reorder_window: float = 5.0  # capture seconds a decode event may wait for earlier ones
    # The capture room's memory caps (what a cap cuts is counted and becomes a gap).
    max_connections: int = _LIMITS.max_connections
    max_buffer_bytes: int = _LIMITS.ooo_bytes_per_direction  # out-of-order bytes per direction
    max_buffer_total: int = _LIMITS.ooo_bytes_total  # out-of-order bytes across all connections
    # The decode room's caps.
    max_frame: int = DEFAULT_MAX_FRAME  # bytes; a frame claiming more is skipped and counted
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # requests awaiting a response, per connection
    max_in_flight_total: int = DEFAULT_MAX_IN_FLIGHT_TOTAL  # ... across all connections
    max_partial_total: int = DEFAULT_MAX_PARTIAL_TOTAL  # bytes of frames waiting to complete, in all
    max_body_items: int = MAX_BODY_ITEMS  # array elements and record batches one body may make
    # --records: bytes records may decompress to, per batch, per Produce request and per run.
    max_records_batch: int = MAX_DECOMPRESSED
    max_records_request: int = MAX_DECOMPRESSED_REQUEST
    max_records_run: int = MAX_DECOMPRESSED_RUN
    # Input files: pcapng interfaces per section, and how far a gzip capture may inflate.
    max_interfaces: int = _LIMITS.max_interfaces
    max_gunzip_ratio: int = _LIMITS.gunzip_ratio
    # How inputs group into capture sets (ksniff.engine.sets): "auto", "merge" (--merge), "separate".
    capture_sets: str = "auto"

    @property
    def limits(self) -> CaptureLimits:
        """The capture room's caps."""
        return CaptureLimits(
            max_connections=self.max_connections,
            ooo_bytes_per_direction=self.max_buffer_bytes,
            ooo_bytes_total=self.max_buffer_total,
            max_interfaces=self.max_interfaces,
            gunzip_ratio=self.max_gunzip_ratio,
        )

    def decoder(
        self,
        on_not_kafka: Callable[[int], Any] | None = None,
        on_elsewhere: Callable[[int, int], Any] | None = None,
        shared: DecodeContext | None = None,
    ) -> Decoder:
        """A decoder for one run (or one partition of it) with this run's ports and caps; `on_elsewhere`:
        how to give up a connection on another port that looks like Kafka; `shared`: the context of
        another decoder of this config whose counters and caches it adds to (Decoder)."""
        return Decoder(
            ports=self.ports,
            auto_detect=self.auto_detect,
            on_not_kafka=on_not_kafka,
            on_elsewhere=on_elsewhere,
            keep_records=self.keep_records,
            max_frame=self.max_frame,
            max_in_flight=self.max_in_flight,
            max_in_flight_total=self.max_in_flight_total,
            max_partial_total=self.max_partial_total,
            max_body_items=self.max_body_items,
            records_caps=(self.max_records_batch, self.max_records_request, self.max_records_run),
            shared=shared,
        )

    def audit_config(self) -> AuditConfig:
        """The audit room's settings."""
        if self.txn_timeout_ms is None:
            return AuditConfig()
        return AuditConfig(txn_timeout_ms=self.txn_timeout_ms)
