"""What the capture room hands to the decode room: connection lifecycle, in-order stream bytes and gaps.

Nothing above the capture room knows about packets. A connection has two directions; `from_src` is True
for bytes flowing from `src` to `dst`. When the TCP handshake was captured, `src` is the side that sent
the SYN (the client); otherwise it is the sender of the first segment seen, and the decode room works
out which side is the Kafka client.
"""

from __future__ import annotations

from dataclasses import field

from ksniff.common.codegen import fast_init
from ksniff.common.counters import MAX, MIN
from ksniff.common.frozen import frozen_dataclass, slotted_dataclass


@fast_init
@frozen_dataclass(init=False)
class Endpoint:
    """One end of a connection: address and port."""

    ip: str
    port: int

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


@fast_init
@frozen_dataclass(init=False)
class ConnectionOpened:
    """A connection seen for the first time (with or without its handshake)."""

    conn: int  # unique within one run; never reused, even when a 4-tuple is
    src: Endpoint
    dst: Endpoint
    ts: float
    handshake_seen: bool  # the SYN was captured, so `src` is certainly the client


@fast_init
@frozen_dataclass(init=False)
class StreamChunk:
    """In-order bytes of one direction, starting at `offset` of that direction's stream."""

    conn: int
    from_src: bool
    offset: int  # bytes since the first byte of this direction seen (0 = first payload byte)
    # The bytes; or, from a reassembler told to (Reassembler.hand_pieces), the tuple of its segments'
    # payloads in order (bytes or views of the capture's buffer), for a consumer that takes pieces.
    data: bytes | tuple
    first_ts: float  # capture time of the segment carrying the first byte
    last_ts: float  # capture time of the segment carrying the last byte
    # Where the capture time changes within the chunk, when it merged segments of different times:
    # (stream offset, capture time of the segment from there on), in offset order. A frame's times are
    # those of the segments carrying its first and last bytes, wherever the chunk was cut.
    marks: tuple[tuple[int, float], ...] = ()
    # Where the segment that started it came in the capture (the reassembler's count of segments): what
    # orders the decode events of chunks given at one time (ksniff.engine.local).
    at: int = 0


@fast_init
@frozen_dataclass(init=False)
class StreamGap:
    """Bytes [offset, offset + length) of one direction are missing from the capture."""

    conn: int
    from_src: bool
    offset: int
    length: int
    ts: float


@fast_init
@frozen_dataclass(init=False)
class ConnectionClosed:
    """A connection ended: by FIN, RST, idleness, eviction, reuse or the end of the capture."""

    conn: int
    ts: float
    reason: str  # "fin" | "rst" | "idle" | "evicted" | "end_of_capture" | "reused" (new SYN on its 4-tuple)


StreamEvent = ConnectionOpened | StreamChunk | StreamGap | ConnectionClosed


@frozen_dataclass
class InputInfo:
    """One capture source, as the JSON document's `inputs` lists it."""

    path: str  # file path, or the interface name for live capture
    format: str  # "pcap" | "pcapng" | "live"
    linktype: str  # e.g. "EN10MB", "LINUX_SLL2", "NULL", "RAW" (several joined by "," for pcapng)
    packets: int
    bytes: int


@slotted_dataclass
class CaptureStats:
    """Counters of the capture stage: the JSON document's `capture` block, plus what limits dropped.
    Parts of a run add up with ksniff.common.counters.add_counters."""

    packets: int = 0
    tcp_segments: int = 0
    connections: int = 0
    kafka_connections: int = 0  # filled in by the decode room
    gaps: int = 0
    gap_bytes: int = 0
    first_ts: float | None = field(default=None, metadata=MIN)
    last_ts: float | None = field(default=None, metadata=MAX)
    ip_fragments: int = 0
    non_tcp_packets: int = 0
    truncated_packets: int = 0  # captured length shorter than the headers or the TCP payload
    damaged_times: int = 0  # packets whose recorded time was damaged, given their predecessor's instead
    damaged_packets: int = 0  # packets left out: their IPv4 header fails its checksum (damaged bytes)
    overlaps_differing: int = 0  # retransmitted bytes that disagreed with what was already delivered
    dropped_by_limits: int = 0  # segments or bytes dropped because a memory cap was hit
    evicted_connections: int = 0  # closed early because the connection cap was reached
    forced_gaps: int = 0  # holes given up as gaps because an out-of-order buffer cap was reached
    kernel_drops: int = 0  # live capture only
    skipped_files: int = 0  # files in the folders given that were not audited: not captures, or unreadable
    # Bytes of connections on ports not named that looked like Kafka, by port, counted after the decode
    # room gave them up (ksniff.decode.events.ElsewhereCounts has what it saw before).
    kafka_elsewhere_bytes: dict[int, int] = field(default_factory=dict)

    def as_contract(self) -> dict:
        return {
            "packets": self.packets,
            "tcp_segments": self.tcp_segments,
            "connections": self.connections,
            "kafka_connections": self.kafka_connections,
            "gaps": self.gaps,
            "gap_bytes": self.gap_bytes,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            # Additions to the contract's keys: damage and limits, so a partial result says why.
            "truncated_packets": self.truncated_packets,
            "damaged_times": self.damaged_times,
            "damaged_packets": self.damaged_packets,
            "evicted_connections": self.evicted_connections,
            "forced_gaps": self.forced_gaps,
            "skipped_files": self.skipped_files,
        }
