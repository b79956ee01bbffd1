"""A progress bar for long reads, on the diagnostics console and only on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class ByteProgress:
    """A bytes-of-bytes bar on a terminal console; does nothing otherwise, so callers need no `if`."""

    def __init__(self, console: Console, total_bytes: int | None, description: str = "reading") -> None:
        self._progress: Progress | None = None
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self._task = self._progress.add_task(description, total=total_bytes or None)
            self._progress.start()

    def update(self, bytes_read: int, total_bytes: int | None = None) -> None:
        """`bytes_read` is the running total, not an increment; `total_bytes` may be learnt late. At the
        total, the bar says the run is finishing (the audit's end, the exports), not that it hangs."""
        if self._progress is not None:
            kwargs = {"total": total_bytes} if total_bytes else {}
            if total_bytes and bytes_read >= total_bytes:
                kwargs["description"] = "finishing"
            self._progress.update(self._task, completed=bytes_read, **kwargs)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(console: Console, total_bytes: int | None) -> ByteProgress:
    """A progress bar for long reads; give it the stderr console, it shows only on a terminal."""
    return ByteProgress(console, total_bytes)
