"""The package's layers: every import points down, and no modules import each other (directly or round a loop).

Every `import` statement counts, inside functions and under TYPE_CHECKING too, so a lazy import cannot hide an
upward edge or a cycle. LAYERS is the one written order (docs/ARCHITECTURE.md draws it); a module belongs to
its longest matching prefix, and a new top-level module has to be placed here before the test passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "hinfer"

# Top to bottom. A module may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cli", ("hinfer.cli", "hinfer.__main__")),
    ("front ends", ("hinfer.server", "hinfer.llm", "hinfer.bench", "hinfer")),  # "hinfer": the package, hinfer.LLM
    ("engine", ("hinfer.engine",)),
    ("model", ("hinfer.model",)),
    ("ops", ("hinfer.ops",)),  # the op fronts: reference bodies, dispatch by backend and weight format
    ("weights", ("hinfer.weights", "hinfer.demo")),
    ("quant", ("hinfer.quant",)),  # weight formats; their .matmul picks a kernel
    ("kernels", ("hinfer.ops.triton", "hinfer.ops.dispatch", "hinfer.ops.kv_cache")),  # kv_cache: page views
    ("base", ("hinfer.batch", "hinfer.config", "hinfer.kv_format", "hinfer.errors", "hinfer.sampling_params",
              "hinfer.sampling_defaults", "hinfer.tokenizer", "hinfer.chat_template", "hinfer.fixtures",
              "hinfer.vision_config", "hinfer.sharding")),
)  # fmt: skip

# Known wrong edges, each to go with its fix (a test fails once one is gone, so this list only shrinks).
KNOWN_EDGES: set[tuple[str, str]] = set()


def module_files() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _targets(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = mod.split(".") if is_pkg else mod.split(".")[:-1]
            here = here[: len(here) - node.level + 1]
            base = ".".join(here + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for n in names:
        if n != "hinfer" and not n.startswith("hinfer."):
            continue
        while n not in known and "." in n:
            n = n.rsplit(".", 1)[0]
        out.append(n)
    return out


def all_imports() -> dict[str, dict[str, int]]:
    """module -> {imported hinfer module: line of the first import}, every import statement of the file."""
    files = module_files()
    known = set(files)
    graph: dict[str, dict[str, int]] = {}
    for mod, path in files.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mod, path.name == "__init__.py", node, known):
                    if t != mod:
                        edges.setdefault(t, node.lineno)
        graph[mod] = edges
    return graph


def import_graph() -> dict[str, dict[str, int]]:
    """all_imports() less KNOWN_EDGES."""
    return {m: {t: ln for t, ln in e.items() if (m, t) not in KNOWN_EDGES} for m, e in all_imports().items()}


def layer_of(mod: str) -> int | None:
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            hit = mod == p if p == "hinfer" else (mod == p or mod.startswith(p + "."))
            if hit and len(p) > depth:
                best, depth = i, len(p)
    return best


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    assert [m for m in module_files() if layer_of(m) is None] == []


def test_imports_point_down():
    graph = import_graph()
    files = module_files()
    upward = []
    for mod, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            a, b = layer_of(mod), layer_of(target)
            if a is not None and b is not None and b < a:
                rel = files[mod].relative_to(PKG.parent)
                upward.append(f"{rel}:{line} {mod} ({LAYERS[a][0]}) imports {target} ({LAYERS[b][0]})")
    assert upward == [], "\n".join(upward)


def test_no_import_cycles():
    assert _cycles(import_graph()) == []


def test_known_edges_still_exist():
    edges = {(m, t) for m, e in all_imports().items() for t in e}
    assert KNOWN_EDGES - edges == set(), "fixed: remove it from KNOWN_EDGES"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from hinfer.engine import core", ["hinfer.engine.core"]),
        ("from hinfer.engine.core import EngineCore", ["hinfer.engine.core"]),
        ("import hinfer.ops.triton.moe as tm", ["hinfer.ops.triton.moe"]),
        ("from . import core", ["hinfer.engine.core"]),
        ("from .core import EngineCore", ["hinfer.engine.core"]),
        ("from ..model import qwen3_5", ["hinfer.model.qwen3_5"]),
        ("import torch", []),
    ],
)
def test_import_resolution(source, expected):
    known = set(module_files())
    node = ast.parse(source).body[0]
    assert _targets("hinfer.engine.runner", False, node, known) == expected


def test_a_cycle_and_an_upward_edge_are_seen():
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert layer_of("hinfer.ops.triton.moe") > layer_of("hinfer.quant.int4") > layer_of("hinfer.ops.moe")
    assert layer_of("hinfer.server.app") < layer_of("hinfer.engine.core") < layer_of("hinfer.model.qwen3_5")
    assert layer_of("hinfer.llm") == layer_of("hinfer") and layer_of("hinfer.batch") == len(LAYERS) - 1
