"""What the capture walks share: the largest record believed, and the counts a walk leaves behind."""

from __future__ import annotations

# A record or block claiming more than this is corruption, not data (the largest snapshot length tools
# write is 256 KiB); it also bounds what a gzip stream's window must hold to finish one record.
MAX_RECORD = 16 << 20
PROGRESS_EVERY = 0x3FF  # the walk notes its position every 1,024 packets (a mask: one AND per packet)

# A packet's time more than this out of line with both its neighbours, while they are in line with each
# other, is taken as a damaged timestamp (one flipped bit moves a packet a millisecond, seconds or days),
# not a packet that came late: one capture clock stamps packets in the order it writes them, give or take
# the microseconds of a queue (the most measured here: 0.1 ms, in the benchmark's 1 GB capture; a busy
# host steering packets between cores can make more, and such a packet is then only given its
# neighbour's time). A millisecond, because requests on two connections that depend on each other
# (an AddPartitionsToTxn's answer, then the write it allows) can be that close: a flipped bit of 8 ms
# reordered them in bench/bench_damage.py. A clock stepped back is no spike (the neighbours are out of
# line with each other) and is left as it is.
TIME_SLACK = 0.001


def out_of_line(prev: float, ts: float, nxt: float) -> bool:
    """The rule above, for a packet at `ts` between packets at `prev` (the time given to the one before)
    and `nxt` (the next one's as written); the compiled walk has it again (`_fastwalk._out_of_line`)."""
    return prev <= nxt + TIME_SLACK and (ts < prev - TIME_SLACK or ts > nxt + TIME_SLACK)


class WalkCounts:
    """What a file's walk saw, kept in locals while walking and stored here when it ends."""

    __slots__ = (
        "packets",
        "non_tcp",
        "fragments",
        "cut_short",
        "damaged_headers",
        "first_ts",
        "last_ts",
        "damaged_times",
    )

    def __init__(self) -> None:
        self.packets = self.non_tcp = self.fragments = self.cut_short = 0
        self.damaged_headers = 0  # packets left out: their IPv4 header fails its checksum
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.damaged_times = 0  # packets given their predecessor's time instead of a damaged one of their own

    def store(
        self,
        packets: int,
        non_tcp: int,
        fragments: int,
        cut_short: int,
        damaged_headers: int,
        first_ts: float | None,
        last_ts: float | None,
        damaged_times: int = 0,
    ) -> None:
        self.packets, self.non_tcp, self.fragments, self.cut_short = packets, non_tcp, fragments, cut_short
        self.damaged_headers = damaged_headers
        self.first_ts, self.last_ts, self.damaged_times = first_ts, last_ts, damaged_times


def more_or_stop(b, pos: int, warnings: list[str]) -> int | None:
    """`b.more(pos)` for a walk (`b` a CaptureBuffer, or the live ring's block): at the end of the bytes,
    None, and a warning when a record was cut there (bytes left at `pos`)."""
    new_pos = b.more(pos)
    if new_pos is None and pos < b.end:
        warnings.append(b.truncated(pos))
    return new_pos
