"""ksniff: a passive Apache Kafka protocol sniffer and transaction auditor.

    import ksniff
    result = ksniff.audit("dump.pcap")      # or a folder, a pathlib.Path, or a list of captures
    result.findings                          # pandas DataFrames: findings, transactions, exchanges, batches

The Python API is ksniff.api.audit_captures. `ksniff.audit` is also the name of the audit room
(ksniff/audit/, a pure fold that imports nothing above it), so this top package, which may import
everything, makes that room's module object callable: `ksniff.audit(...)` runs the API, while
`from ksniff.audit import step` and `import ksniff.audit as room` keep giving the room, and
`help(ksniff.audit)` shows the function's documentation first. The room itself knows nothing of this.
"""

import inspect as _inspect
import types as _types

from ksniff.common import sources as _sources

_sources.install()  # before any module that may be compiled from its source is imported

from ksniff import audit as _room  # noqa: E402
from ksniff.common.version import VERSION as __version__  # noqa: E402

__all__ = ["__version__", "audit", "audit_captures"]


def __getattr__(name: str):
    if name in ("audit_captures", "Audit"):  # pandas and the engines load on first use, not on import
        from ksniff import api

        return getattr(api, name)
    raise AttributeError(f"module 'ksniff' has no attribute {name!r}")


class _CallableRoom(_types.ModuleType):
    """The audit room's module, callable as ksniff.api.audit_captures."""

    def __call__(self, paths, **options):
        from ksniff.api import audit_captures

        return audit_captures(paths, **options)

    @property
    def __doc__(self) -> str:  # help(ksniff.audit): the call's documentation, then the room's
        from ksniff.api import audit_captures

        call = _inspect.cleandoc(audit_captures.__doc__ or "")
        room = _inspect.cleandoc(self.__dict__.get("__doc__") or "")
        return f"{call}\n\nThe module ksniff.audit is also the audit room:\n\n{room}"

    @property
    def __signature__(self) -> _inspect.Signature:
        from ksniff.api import audit_captures

        return _inspect.signature(audit_captures)


_room.__class__ = _CallableRoom
audit = _room
