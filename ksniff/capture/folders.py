"""Inputs named on the command line: files as given, folders walked recursively for captures.

Nothing is skipped in silence: a file in a folder that cannot be read, or a subfolder that cannot be
listed, is named in a warning; so are the files that are not captures (an incident folder also holds
notes, logs and exports), one warning per folder naming the first few; a folder that cannot be listed
at all is an error. The run counts every skipped file (`capture.skipped_files` in the JSON).
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from collections.abc import Iterator

from ksniff.capture.errors import CaptureError
from ksniff.capture.pcap import PCAP_MAGICS
from ksniff.capture.pcapng import PCAPNG_SHB
from ksniff.capture.source import GZIP_MAGIC

_NOT_A_CAPTURE, _CAPTURE = False, True


NAMES_PER_WARNING = 5  # non-captures named per folder; the rest are counted


def expand_inputs(paths: list[str]) -> tuple[list[str], list[str], int]:
    """(capture files, warnings, files skipped): files as given, folders walked (sorted) for files that
    look like captures. Raises CaptureError for a path that does not exist, a folder that cannot be
    listed, or a folder without any capture."""
    files: list[str] = []
    warnings: list[str] = []
    skipped = 0
    for path in paths:
        if os.path.isdir(path):
            found = []
            others: dict[str, list[str]] = {}  # folder -> names of its files that are not captures
            for f in _walk(path, warnings):
                verdict = _sniff(f)
                if verdict is _CAPTURE:
                    found.append(f)
                    continue
                skipped += 1
                if verdict is _NOT_A_CAPTURE:
                    folder, name = os.path.split(f)
                    others.setdefault(folder, []).append(name)
                else:
                    warnings.append(f"{f}: skipped: {verdict}")
            if not found:
                if any(w.startswith(path) for w in warnings):
                    raise CaptureError(
                        f"{path}: no readable pcap or pcapng files in this folder ({_first_reason(warnings)})"
                    )
                seen = sum(len(names) for names in others.values())
                raise CaptureError(
                    f"{path}: no pcap or pcapng files in this folder"
                    + (f" ({seen} other {'file' if seen == 1 else 'files'})" if seen else "")
                )
            warnings += [_not_captures(folder, names) for folder, names in others.items()]
            files.extend(found)
        elif os.path.exists(path) or os.path.islink(path):
            files.append(path)
        else:
            raise CaptureError(f"{path}: no such file or folder")
    return files, warnings, skipped


def _not_captures(folder: str, names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_PER_WARNING])
    more = f" (and {len(names) - NAMES_PER_WARNING} more)" if len(names) > NAMES_PER_WARNING else ""
    files = "file" if len(names) == 1 else "files"
    return f"{folder}: {len(names)} {files} skipped, not a capture: {shown}{more}"


def expand_paths(paths: list[str]) -> list[str]:
    """`expand_inputs` without the warnings."""
    return expand_inputs(paths)[0]


def _first_reason(warnings: list[str]) -> str:
    return warnings[0].split(": ", 1)[1] if warnings else "unreadable"


def _walk(folder: str, warnings: list[str]) -> Iterator[str]:
    def unreadable(err: OSError) -> None:
        where = err.filename or folder
        if where == folder:
            raise CaptureError(f"{folder}: cannot list this folder: {err.strerror or err}")
        warnings.append(f"{where}: folder skipped: {err.strerror or err}")

    for root, dirs, names in os.walk(folder, onerror=unreadable):
        dirs.sort()
        for name in sorted(names):
            yield os.path.join(root, name)


def _sniff(path: str) -> bool | str:
    """True for a capture (by its magic, inside gzip too), False for anything else, or why it could not
    be read."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO in a folder would block the walk
            return _NOT_A_CAPTURE
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] == GZIP_MAGIC:
                f.seek(0)
                with gzip.GzipFile(fileobj=f) as g:
                    head = g.read(4)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return _NOT_A_CAPTURE
    except OSError as exc:
        return exc.strerror or str(exc)
    return len(head) == 4 and (
        int.from_bytes(head, "little") in PCAP_MAGICS or int.from_bytes(head, "little") == PCAPNG_SHB
    )


def looks_like_capture(path: str) -> bool:
    """Whether the first bytes are a capture magic (inside gzip, too); never raises."""
    return _sniff(path) is True
