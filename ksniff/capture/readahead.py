"""Page work for mapped capture files, done beside the walk instead of in it.

A capture file is read through a memory map (ksniff.capture.source). Each page the walk reaches for the
first time stops it for a page fault (about a tenth of a second per GB from the page cache, much more
from a disk), and the pages it has passed are dropped so that memory stays flat (a madvise call that
takes as long again). With the compiled walk built, one worker thread per process does both: it maps
in the window after the one being walked, and drops the windows walked, each in one call without the
GIL, so the walk finds its pages ready and never waits for the drop. Both are advice: a page the worker
has not reached yet is faulted in by the walk as before, and the bytes read are the same either way.

Without the compiled module (`ksniff.capture.compiled`), the pages are dropped in the walk's own thread,
as a Python thread would wait for the GIL, and none is mapped in ahead.
"""

from __future__ import annotations

import mmap
import os
import queue
import threading

from ksniff.capture import compiled


class _Worker:
    """The process's one page worker: jobs run in the order they were given."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="ksniff-readahead", daemon=True).start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                job[0](*job[1:])
            except Exception:  # noqa: BLE001 - advice only: the walk faults its pages in itself
                pass
            del job  # the view it held: the map may close now

    def idle(self) -> None:
        """Waits until the jobs given so far are done (for tests and measurements)."""
        done = threading.Event()
        self.jobs.put((done.set,))
        done.wait()


_worker: _Worker | None = None


def _forget_worker() -> None:
    global _worker
    _worker = None  # a forked child has no thread: it starts its own when it needs one


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker)


def _the_worker() -> _Worker:
    global _worker
    if _worker is None:
        _worker = _Worker()
    return _worker


# Jobs the worker may have waiting (one step of the walk: a window to drop, the next to map in) before a
# walk stops handing it more: a walk that only reads the records (the capture-set planner's scan) runs
# through windows faster than the worker maps and drops them, and every page it passed would stay in
# memory until the worker caught up (half of a 1 GB file).
LAG_MAX = 2


def _behind_by(worker: _Worker) -> bool:
    return worker.jobs.qsize() >= LAG_MAX


def ahead(view: memoryview, start: int, stop: int) -> None:
    """Maps the pages of view[start:stop] in, soon, beside the walk (nothing without the compiled
    module, nor while the worker is behind the walk: the walk maps the pages in itself)."""
    walk = compiled.fastwalk
    if walk is not None and start < stop:
        worker = _the_worker()
        if not _behind_by(worker):
            worker.jobs.put((walk.populate, view, start, stop))


def behind(mapped: mmap.mmap, view: memoryview, stop: int) -> None:
    """Drops the pages of the map's first `stop` bytes (`view` is the whole map): by the worker when
    the compiled module is there, else now; now too, without the GIL, when the worker is behind the
    walk (its late jobs then find those pages gone, which costs it next to nothing)."""
    walk = compiled.fastwalk
    if walk is not None:
        worker = _the_worker()
        if not _behind_by(worker):
            worker.jobs.put((walk.release, view, stop))
            return
        walk.release(view, stop)
    elif hasattr(mapped, "madvise"):
        mapped.madvise(mmap.MADV_DONTNEED, 0, stop)


def threads() -> int:
    """How many threads the page work runs in this process (0 or 1)."""
    return 0 if _worker is None else 1


def idle() -> None:
    """Waits until the page work asked for so far is done."""
    if _worker is not None:
        _worker.idle()
