"""What the capture walks share: the largest record believed, and the counts a walk leaves behind."""

from __future__ import annotations

# A record or block claiming more than this is corruption, not data (the largest snapshot length tools
# write is 256 KiB); it also bounds what a gzip stream's window must hold to finish one record.
MAX_RECORD = 16 << 20
PROGRESS_EVERY = 0x3FF  # the walk notes its position every 1,024 packets (a mask: one AND per packet)


class WalkCounts:
    """What a file's walk saw, kept in locals while walking and stored here when it ends."""

    __slots__ = ("packets", "non_tcp", "fragments", "cut_short", "first_ts", "last_ts")

    def __init__(self) -> None:
        self.packets = self.non_tcp = self.fragments = self.cut_short = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None

    def store(
        self,
        packets: int,
        non_tcp: int,
        fragments: int,
        cut_short: int,
        first_ts: float | None,
        last_ts: float | None,
    ) -> None:
        self.packets, self.non_tcp, self.fragments, self.cut_short = packets, non_tcp, fragments, cut_short
        self.first_ts, self.last_ts = first_ts, last_ts


def more_or_stop(b, pos: int, warnings: list[str]) -> int | None:
    """`b.more(pos)` for a walk (`b` a CaptureBuffer, or the live ring's block): at the end of the bytes,
    None, and a warning when a record was cut there (bytes left at `pos`)."""
    new_pos = b.more(pos)
    if new_pos is None and pos < b.end:
        warnings.append(b.truncated(pos))
    return new_pos
