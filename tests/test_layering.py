"""The layering of ``broker_core`` (``docs/ARCHITECTURE.md``): no import circles, no upward imports.

The check reads the source with ``ast``; it imports nothing.  Every import counts, wherever it is:
at module level, inside a function (a "lazy" import still ties the two modules together) and under
``if TYPE_CHECKING:`` (a type-only import is still a dependency of the design; depend on a small
``typing.Protocol`` instead, as ``client/context.py`` does).

``LAYERS`` is the map: bottom first, each entry a list of module prefixes (dotted, under
``broker_core``).  A module may import modules of its own layer and of the layers below.  A new
module must be placed in a layer here and in ``docs/ARCHITECTURE.md``; the test says so.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, list[str]]] = [
    ("base", ["errors", "clock", "config", "naming", "hashing", "message_id", "authentication", "version"]),
    ("storage", ["storage"]),
    ("log", ["log"]),
    ("topic", ["topic", "schema"]),
    ("producer, subscription, message", ["producer", "subscription", "message", "crypto"]),
    ("broker, non-persistent dispatch", ["broker", "non_persistent"]),
    ("client, jobs, metrics", ["client", "jobs", "metrics"]),
    ("asyncio client", ["asyncio"]),
    ("cli", ["cli"]),
    ("public surface", ["", "__main__"]),  # broker_core/__init__.py re-exports from everything
]


def module_paths(package_dir: Path) -> dict[str, Path]:
    """Dotted module name (package itself included) -> file, for every module under ``package_dir``."""
    name = package_dir.name
    mods = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _owner(name: str, mods: Mapping[str, Path]) -> str | None:
    """The module a dotted import name lands in (``a.b.C`` -> ``a.b``), None if outside ``mods``."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (every import statement, anywhere)."""
    mods = module_paths(package_dir)
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        edges = graph.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = mod.split(".") if is_package else mod.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join([*here, base] if base else here)
                # ``from pkg import submodule`` depends on the submodule, ``from mod import name`` on mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                owner = _owner(target, mods)
                if owner is not None and owner != mod:
                    edges.add(owner)
    return graph


def import_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def layer_of(module: str, package: str, layers: list[tuple[str, list[str]]]) -> int | None:
    """The index of the layer whose longest prefix matches ``module`` (None: in no layer)."""
    rel = module[len(package) + 1 :] if module != package else ""
    best: tuple[int, int] | None = None
    for i, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            hit = rel == prefix if prefix in ("", "__main__") else rel == prefix or rel.startswith(prefix + ".")
            if hit and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return None if best is None else best[1]


def upward_imports(
    graph: Mapping[str, Iterable[str]], package: str, layers: list[tuple[str, list[str]]]
) -> list[str]:
    """Every import of a module in a higher layer, as readable lines."""
    found = []
    for mod in sorted(graph):
        here = layer_of(mod, package, layers)
        for target in sorted(graph[mod]):
            there = layer_of(target, package, layers)
            if here is not None and there is not None and there > here:
                found.append(f"{mod} ({layers[here][0]}) imports {target} ({layers[there][0]})")
    return found


# -- the checks on broker_core ----------------------------------------------------------------------


def test_every_module_is_in_a_layer() -> None:
    graph = import_graph(ROOT / "broker_core")
    lost = [m for m in sorted(graph) if layer_of(m, "broker_core", LAYERS) is None]
    assert not lost, f"place these modules in a layer (tests/test_layering.py and docs/ARCHITECTURE.md): {lost}"


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph(ROOT / "broker_core"))
    assert not cycles, f"import circles (depend on a small typing.Protocol instead): {cycles}"


def test_no_upward_imports() -> None:
    upward = upward_imports(import_graph(ROOT / "broker_core"), "broker_core", LAYERS)
    assert not upward, "imports against the layering (docs/ARCHITECTURE.md):\n" + "\n".join(upward)


def test_spark_pubsub_has_no_import_cycles() -> None:
    cycles = import_cycles(import_graph(ROOT / "spark_pubsub"))
    assert not cycles, f"import circles in spark_pubsub: {cycles}"


def test_broker_core_never_imports_spark() -> None:
    offenders = []
    for path in sorted((ROOT / "broker_core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )
            banned = [n for n in names if n.split(".")[0] in ("pyspark", "spark_pubsub")]
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in banned]
    assert not offenders, offenders


# -- the checks check: they fail on a circle and on an upward import ---------------------------------


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_the_check_finds_a_type_checking_circle(tmp_path: Path) -> None:
    pkg = _fake_package(tmp_path, {
        "a.py": "from pkg.b import B\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
        "c.py": "def f():\n    from pkg import d\n",
        "d.py": "from . import c\n",
        "e.py": "import pkg.a\n",
    })
    assert import_cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


def test_the_check_finds_an_upward_import(tmp_path: Path) -> None:
    pkg = _fake_package(tmp_path, {
        "low/__init__.py": "",
        "low/x.py": "from pkg.high.y import Y\n",
        "high/__init__.py": "",
        "high/y.py": "from pkg.low.x import X\n",
    })
    layers = [("low", ["low"]), ("high", ["high"]), ("top", [""])]
    assert upward_imports(import_graph(pkg), "pkg", layers) == ["pkg.low.x (low) imports pkg.high.y (high)"]


# -- what importing the core loads ----------------------------------------------------------------


def test_broker_core_does_not_import_pyspark() -> None:
    code = (
        "import sys, broker_core, broker_core.client, broker_core.producer.bulk, broker_core.topic.topic_log\n"
        "loaded = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"broker_core loaded {out.stdout.strip()}"


def test_public_surface_is_sorted_and_importable() -> None:
    import broker_core

    assert broker_core.__all__ == sorted(broker_core.__all__)
    for name in broker_core.__all__:
        assert hasattr(broker_core, name), name
