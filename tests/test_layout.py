"""The package layout: one package per concern, no import cycles between modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lze_bench"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """lze_bench modules this file imports, lazily (inside functions) or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {name for name in names if name in modules}
    return found


def test_no_import_cycles():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: imports_of(path, set(paths)) - {name} for name, path in paths.items()}
    # a package importing its own submodules (or a submodule its package) is not a cycle of concerns
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not t.startswith(name + ".") and not name.startswith(t + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_prefix_families_at_the_top():
    top = [p.stem for p in PACKAGE.glob("*.py")]
    for prefix in ("sweep_", "report_", "replay_", "plots"):
        assert not [name for name in top if name.startswith(prefix)], prefix
    assert not (PACKAGE.parent / "benchmarks").exists()
