"""The layout's rules, read from the code (issue 34): who may import whom, no import circles, file
sizes, and no private name reached across modules. Each rule is DESIGN.md's or the issue's."""
from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nnapi"
#: The kit's test catalogues may be longer than 600 lines (DESIGN.md, "Sizes and seams").
CATALOGUES = {"conformance/vts/caching.py", "conformance/vts/domains.py"}
#: The toolkits every driver shares, and the layers above them that a toolkit never imports.
TOOLKITS = ("hal", "ops", "memory", "caching", "qos", "validation", "tracing")
ABOVE_TOOLKITS = ("runtime", "drivers", "service", "conformance", "cli", "importers", "session", "ray", "bench")


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in SRC.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(module imported, name imported or '', line) for every import of the package in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, "", node.lineno) for a in node.names if a.name.split(".")[0] == "nnapi"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "nnapi":
                continue
            for a in node.names:
                full = f"{target}.{a.name}"
                found.append((full, "", node.lineno) if full in modules else (target, a.name, node.lineno))
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _folder(module: str) -> str:
    """A module's folder: `nnapi.drivers.xla` for the xla driver, `nnapi.ops` for an operation."""
    parts = module.split(".")
    return ".".join(parts[:3] if len(parts) > 2 and parts[1] == "drivers" else parts[:2])


@pytest.fixture(scope="module")
def graph() -> dict[str, list[tuple[str, str, int]]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _broken(graph, rule) -> list[str]:
    return [f"{src} imports {dst} (line {line})" for src, found in sorted(graph.items())
            for dst, _, line in found if rule(src, dst)]


def test_hal_imports_nothing_of_the_package(graph):
    assert _broken(graph, lambda s, d: _layer(s) == "hal" and _layer(d) != "hal") == []


def test_toolkits_import_no_layer_above_them(graph):
    assert _broken(graph, lambda s, d: _layer(s) in TOOLKITS and _layer(d) in ABOVE_TOOLKITS) == []


def test_memory_imports_neither_operations_nor_validation(graph):
    assert _broken(graph, lambda s, d: _layer(s) == "memory" and _layer(d) in ("ops", "validation")) == []


def test_the_driver_base_and_each_driver_import_no_other_driver(graph):
    def rule(s: str, d: str) -> bool:
        return (_layer(s) == _layer(d) == "drivers" and _folder(d) not in (_folder(s), "nnapi.drivers.base",
                                                                           "nnapi.drivers"))
    assert _broken(graph, rule) == []


def test_the_runtime_and_the_service_import_no_driver(graph):
    assert _broken(graph, lambda s, d: _layer(s) in ("runtime", "service") and _layer(d) == "drivers") == []


def test_the_service_imports_neither_the_runtime_nor_the_command(graph):
    assert _broken(graph, lambda s, d: _layer(s) == "service" and _layer(d) in ("runtime", "cli", "session")) == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_across_folders(graph):
    edges: dict[str, set[str]] = defaultdict(set)
    for src, found in graph.items():
        for dst, _, _ in found:
            if _folder(src) != _folder(dst) and _folder(dst) != "nnapi":
                edges[_folder(src)].add(_folder(dst))
    assert _cycles(edges) == []


def test_no_import_circle_inside_the_runtime(graph):
    edges: dict[str, set[str]] = defaultdict(set)
    for src, found in graph.items():
        for dst, _, _ in found:
            if _layer(src) == _layer(dst) == "runtime" and src != dst and dst != "nnapi.runtime":
                edges[src].add(dst)
    assert _cycles(edges) == []


def test_no_file_over_600_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600 and str(p.relative_to(SRC)) not in CATALOGUES}
    assert long == {}


def test_no_private_name_reached_across_modules(graph):
    """`from x import _y` and `x._y` on a module of the package; a `_module` is private to its own package,
    which may import it."""
    modules = _modules()
    reached = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        aliases = {}
        for dst, what, line in graph[name]:
            last = dst.rpartition(".")[2]
            if what.startswith("_") and not what.startswith("__"):
                reached.append(f"{name}:{line} imports {what} from {dst}")
            elif not what and last.startswith("_") and not last.startswith("__") \
                    and dst.rpartition(".")[0] != package and not name.startswith(dst.rpartition(".")[0] + "."):
                reached.append(f"{name}:{line} imports the private module {dst}")
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    full = a.name if isinstance(node, ast.Import) else None
                    if isinstance(node, ast.ImportFrom):
                        for dst, what, _ in graph[name]:
                            if dst.endswith("." + a.name) and not what and dst in modules:
                                full = dst
                    if full and full in modules:
                        aliases[a.asname or a.name.rpartition(".")[2]] = full
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                reached.append(f"{name}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    assert reached == []
