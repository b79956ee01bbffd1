"""The house's shape, read from the source (ast; nothing of ksniff is imported or run):

- no import cycle between ksniff's modules, counting every import (inside functions and under
  TYPE_CHECKING too: a lazy import still ties two modules together);
- no import up the rooms: common < capture < decode < audit < report (with ksniff.result, the report's
  input) < the top (engines, config, options, run, cli, api and the package itself). A module may
  import its own room and the rooms below; ksniff.common, the shared low room, imports nothing else
  of ksniff.

The README's development section describes the same rooms; this test is where they are enforced.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ksniff"

# Rooms from the ground up; a module's room is the longest prefix of its name listed here.
ROOMS: list[tuple[str, tuple[str, ...]]] = [
    ("common", ("ksniff.common",)),
    ("capture", ("ksniff.capture",)),
    ("decode", ("ksniff.decode",)),
    ("audit", ("ksniff.audit",)),
    ("report", ("ksniff.report", "ksniff.result")),
    (
        "top",
        (
            "ksniff.engine",
            "ksniff.config",
            "ksniff.options",
            "ksniff.run",
            "ksniff.cli",
            "ksniff.api",
            "ksniff",
        ),
    ),
]
LEVEL = {name: level for level, (name, _) in enumerate(ROOMS)}


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root` (a package's __init__ is the package)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports, anywhere in its file."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(_resolve(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for alias in node.names:  # `from pkg import module` imports the module itself
                full = f"{base}.{alias.name}"
                out.add(full if full in known else _resolve(base, known))
    out.discard(None)
    out.discard(name)
    return out


def _resolve(dotted: str, known: set[str]) -> str | None:
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def import_graph(root: Path) -> dict[str, set[str]]:
    names = module_names(root)
    known = set(names)
    return {name: imports_of(name, path, known) for name, path in names.items()}


def room_of(module: str) -> str:
    best = max(
        (
            (prefix, room)
            for room, prefixes in ROOMS
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        key=lambda p: len(p[0]),
    )
    return best[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module in a higher room by one in a lower room (or of anything by common)."""
    bad = []
    for module, targets in sorted(graph.items()):
        room = room_of(module)
        for target in sorted(targets):
            other = room_of(target)
            if LEVEL[other] > LEVEL[room] or (room == "common" and other != "common"):
                bad.append(f"{module} ({room}) imports {target} ({other})")
    return bad


def test_ksniff_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the walk read the package
    found = cycles(graph)
    detail = ["; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert not found, "import cycles:\n" + "\n".join(detail)


def test_no_room_imports_a_room_above_it() -> None:
    graph = import_graph(PACKAGE)
    assert {room_of(m) for m in graph} == set(LEVEL)  # every room was seen
    bad = upward(graph)
    assert not bad, "imports up the rooms:\n" + "\n".join(bad)


@pytest.fixture
def toy_package(tmp_path: Path) -> Path:
    """A small ksniff-shaped package with one cycle and one upward import, to show the checks bite."""
    root = tmp_path / "ksniff"
    files = {
        "__init__.py": "",
        "common/__init__.py": "",
        "common/codegen.py": "import os\n",
        "capture/__init__.py": "",
        "capture/events.py": "from ksniff.common.codegen import define\n",
        "decode/__init__.py": "from ksniff.decode.decoder import Decoder\n",
        "decode/decoder.py": "from ksniff.decode import connection\n",
        "decode/connection.py": "def f():\n    from .decoder import Decoder\n",
        "audit/__init__.py": "",
        "report/__init__.py": "",
        "report/tables.py": "from ksniff.decode.events import x\n",
        "engine/__init__.py": "",
        "engine/local.py": "import ksniff.report.tables\n",
        "capture/run.py": "from ksniff.engine.local import y\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checks_find_a_lazy_cycle_and_an_upward_import(toy_package: Path) -> None:
    graph = import_graph(toy_package)
    assert graph["ksniff.engine.local"] == {"ksniff.report.tables"}
    assert graph["ksniff.report.tables"] == {"ksniff.decode"}  # an unknown module: its package
    assert cycles(graph) == [["ksniff.decode.connection", "ksniff.decode.decoder"]]
    assert upward(graph) == ["ksniff.capture.run (capture) imports ksniff.engine.local (top)"]
