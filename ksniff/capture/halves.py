"""The reassembler's state per connection and per direction (half-connection), and connection ids."""

from __future__ import annotations

from ksniff.capture.events import Endpoint

MASK = 0xFFFFFFFF
HALF = 0x80000000
INF = float("inf")


def ip_text(packed: bytes) -> str:
    """An address as inet_ntop writes it: a dotted quad, or IPv6's shortest form."""
    if len(packed) == 4:
        return f"{packed[0]}.{packed[1]}.{packed[2]}.{packed[3]}"
    import socket  # only for IPv6: the module and its enums are a few ms of every run's start-up

    return socket.inet_ntop(socket.AF_INET6, packed)


class Conn:
    __slots__ = ("id", "src", "dst", "halves", "closed", "dropped", "tally", "holes")

    def __init__(self, conn_id: int, src: Endpoint, dst: Endpoint) -> None:
        self.id, self.src, self.dst = conn_id, src, dst
        self.halves: tuple[Half, Half] = ()  # type: ignore[assignment]
        self.closed: str | None = None
        self.dropped = False
        self.tally = 0  # dropped, but its bytes counted under this port (CaptureStats.kafka_elsewhere_bytes)
        self.holes: dict[bool, list[tuple[int, int]]] | None = None  # while tallied: per direction

    def last_ts(self) -> float:
        return max(self.halves[0].last_ts, self.halves[1].last_ts)


class Half:
    """One direction of a connection. `nxt` is the stream offset expected next, `nxt32` its sequence no.

    `ooo` holds out-of-order pieces `(start, end, data, ts)` sorted by start and never overlapping (data
    None: bytes the capture lost); `ooo_held` is what they cost against the buffer caps; `ooo_ts` is no
    later than the earliest of their times (exact after an insert, possibly earlier after a drain: the
    horizon it feeds may only err early). `parts` and `p_*` are the chunk being merged
    (ksniff.capture.chunks); `tail` holds the last bytes delivered, to compare retransmissions with.
    """

    __slots__ = (
        "conn",
        "from_src",
        "peer",
        "key",
        "fast",
        "isn",
        "base",
        "nxt",
        "nxt32",
        "ooo",
        "ooo_held",
        "ooo_ts",
        "fin",
        "ack_out",
        "last_ts",
        "parts",
        "p_off",
        "p_len",
        "p_first",
        "p_at",
        "p_last",
        "p_marks",
        "tail",
        "tail_off",
    )

    def __init__(self, conn: Conn, from_src: bool, key: tuple, ts: float) -> None:
        self.conn, self.from_src, self.key = conn, from_src, key
        self.peer: Half = self
        self.fast = False  # in-order delivery needs no checks: base known, nothing buffered, open
        self.isn: int | None = None
        self.base: int | None = None  # sequence number of stream offset 0
        self.nxt = 0
        self.nxt32 = 0
        self.ooo: list[tuple[int, int, bytes | None, float]] = []
        self.ooo_held = 0
        self.ooo_ts = INF
        self.fin: int | None = None
        self.ack_out: int | None = None  # last ACK number this side sent: what it got of the peer's bytes
        self.last_ts = ts
        self.parts: list | None = None
        self.p_off = self.p_len = 0
        self.p_first = self.p_last = 0.0
        self.p_at = 0  # StreamChunk.at of the chunk being merged
        self.p_marks: list[tuple[int, float]] | None = None  # StreamChunk.marks of the chunk being merged
        self.tail: bytes | None = None
        self.tail_off = 0

    def offset(self, seq: int) -> int:
        """The stream offset of `seq`, taken as the nearest one to `nxt` (handles wrap-around)."""
        d = (seq - self.nxt32) & MASK
        return self.nxt + (d - 0x100000000 if d >= HALF else d)

    def set_base(self, base: int) -> None:
        self.base = base
        self.nxt = 0
        self.nxt32 = base

    def advance(self, n: int) -> None:
        """`n` more bytes of this direction delivered (or declared lost)."""
        self.nxt += n
        self.nxt32 = (self.base + self.nxt) & MASK

    def refresh(self) -> None:
        """Whether this half and its peer may take the hot path. A half whose peer holds out-of-order
        bytes takes the careful path: its ACKs may end a gap there."""
        for x in (self, self.peer):
            x.fast = (
                x.base is not None
                and not x.ooo
                and not x.peer.ooo
                and x.conn.closed is None
                and not x.conn.dropped
            )
