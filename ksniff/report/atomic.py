"""Writing export files so that no reader ever sees half of one, with one-line errors.

Every export (ksniff.report.formats, ksniff.report.stream) writes to a temporary file in the target's
own directory and renames it over the target once complete: a reader, or a run interrupted half way,
sees either the previous file or the whole new one. A failure is a `ReportError` whose message is one
line the CLI prints as is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

__all__ = [
    "ReportError",
    "atomic_file",
    "create_temporary",
    "ensure_dir",
    "ensure_parent",
    "reason",
    "unlink_quietly",
    "write_atomically",
]


class ReportError(Exception):
    """An export could not be written; the message is one line, fit for `ksniff: error: ...`."""


def reason(err: OSError) -> str:
    """The OS's words for a failed write, for a one-line error."""
    return err.strerror or err.__class__.__name__


@contextmanager
def atomic_file(path: str, mode: str = "w") -> Iterator[IO]:
    """A temporary file beside `path`, renamed onto it only when the block finishes without error."""
    tmp, fd = create_temporary(path)
    try:
        text = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, mode, **text) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())  # the rename must not land before the data does
        os.replace(tmp, path)
    except BaseException:  # also KeyboardInterrupt: the point is never to leave a partial file
        unlink_quietly(tmp)
        raise


def create_temporary(path: str) -> tuple[str, int]:
    """A new temporary file beside `path` (hidden, unique): its name and an open descriptor."""
    # Not tempfile.mkstemp: its files are 0600, and an export should get the mode the umask gives.
    directory, name = os.path.split(os.path.abspath(path))
    _remove_orphans(directory, name)
    while True:
        # The writer's process id in the name: a later run can tell a temporary file whose writer died
        # (killed with -9, the machine lost power) from one still being written.
        tmp = os.path.join(directory, f".{name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


_ORPHAN_AGE = 3600.0  # seconds: a temporary file without a writer's id older than this is left over


def _remove_orphans(directory: str, name: str) -> None:
    """Temporary files of `name` left by earlier runs that died: their writer's process is gone (or,
    written before names carried it, they are over an hour old)."""
    prefix = f".{name}."
    try:
        entries = [e for e in os.scandir(directory) if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return  # the export itself will say what is wrong with the folder
    now = time.time()
    for entry in entries:
        middle = entry.name[len(prefix) : -len(".tmp")]
        pid, dash, _token = middle.partition("-")
        try:
            if dash and pid.isdigit():
                if _alive(int(pid)):
                    continue
            elif now - entry.stat(follow_symlinks=False).st_mtime < _ORPHAN_AGE:
                continue
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
        except OSError:
            continue


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_atomically(path: str, write: Callable[[IO], None], mode: str = "w") -> None:
    """`write(fh)` into `path` through atomic_file; a failure is a ReportError."""
    try:
        with atomic_file(path, mode) as fh:
            write(fh)
    except OSError as err:
        raise ReportError(f"cannot write {path}: {reason(err)}") from err


def ensure_dir(directory: str) -> None:
    """The directory exists (made if need be) and can be written into, or a ReportError."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise ReportError(f"cannot create directory {directory}: {reason(err)}") from err
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ReportError(f"cannot write into {directory}: permission denied")


def ensure_parent(path: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        ensure_dir(parent)
