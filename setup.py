"""The optional compiled parts of ksniff, built by Cython: the modules written for it
(`ksniff.capture._fastwalk`, `ksniff.decode._crc`, `ksniff.common._slots`, `ksniff.decode._bodies`,
`ksniff.engine._pack`, `ksniff.report._jsonitems`, `ksniff.audit._steps`, from their .pyx), and the
audit's fold compiled from its own Python source (`ksniff.audit.fold`, `partlog`, ...: the same code,
without the interpreter's dispatch; KSNIFF_PURE_PYTHON=1 runs the source, ksniff.common.sources).

Everything else (metadata, dependencies, packages) is in pyproject.toml. The extensions are optional: when
Cython is missing or no C compiler works, the build goes on without them and ksniff runs its pure-Python
code (the reference each compiled part is tested against).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns and goes on, instead of failing the install, when an extension cannot build."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any build failure means: install without it
            print(f"ksniff: compiled parts not built ({exc}); their pure-Python code will be used")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"ksniff: {ext.name} not built ({exc}); its pure-Python code will be used")


# The modules of ksniff/audit/ compiled from their Python source (ksniff.common.sources loads the source
# instead when KSNIFF_PURE_PYTHON is set).
COMPILED_SOURCES = (
    "auditor",
    "fold",
    "idempotence",
    "identity",
    "keys",
    "offsets",
    "partlog",
    "produce",
    "state",
    "transactions",
)


def extensions() -> list:
    try:
        import Cython.Build  # noqa: F401 - only whether it is there
    except ImportError:
        print("ksniff: Cython not found; the pure-Python code will be used")
        return []
    # The capture walk, the CRC-32C of record batches (else the crc32c package computes it), and the
    # events' slot store (else their __init__ stores each field through its descriptor), and the body
    # reader (else the generated decoders read every body), and the Spark engine's codec of decode events
    # (else ksniff.engine.pack's Python one), and the JSON document's long lists (else json's encoder,
    # item by item), and the partition logs' placing of acknowledged batches (else partlog's Python).
    exts = [
        Extension(name, [path], optional=True, extra_compile_args=["-O2"])
        for name, path in (
            ("ksniff.capture._fastwalk", "ksniff/capture/_fastwalk.pyx"),
            ("ksniff.decode._crc", "ksniff/decode/_crc.pyx"),
            ("ksniff.common._slots", "ksniff/common/_slots.pyx"),
            ("ksniff.decode._bodies", "ksniff/decode/_bodies.pyx"),
            ("ksniff.engine._pack", "ksniff/engine/_pack.pyx"),
            ("ksniff.report._jsonitems", "ksniff/report/_jsonitems.pyx"),
            ("ksniff.audit._steps", "ksniff/audit/_steps.pyx"),
        )
    ]
    # The audit fold's modules, each compiled from its .py as it is: every exchange goes through them
    # (bench/README, "The fold compiled"). Neither inferred nor read from annotations, their types stay
    # the Python objects the source makes, with the source's semantics.
    sources = [
        Extension(
            f"ksniff.audit.{name}", [f"ksniff/audit/{name}.py"], optional=True, extra_compile_args=["-O2"]
        )
        for name in COMPILED_SOURCES
    ]
    untyped = {"infer_types": False, "annotation_typing": False}
    return _translated(exts) + _translated(sources, compiler_directives=untyped)


def _translated(exts: list, **options) -> list:
    """`exts` translated to C by Cython, or none (and the pure-Python code is used) when it cannot."""
    from Cython.Build import cythonize

    try:
        return cythonize(exts, language_level=3, quiet=True, **options)
    except Exception as exc:
        names = ", ".join(e.name for e in exts)
        print(f"ksniff: Cython could not translate {names} ({exc}); the pure-Python code is used")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
