"""The package layout: one package per concern, no import cycles, and imports only go down.

`LAYERS` declares the floors of the house, bottom first: every top-level
module or package of lze_bench stands on exactly one floor and may import only
from its own unit or from a lower floor (never sideways, never up). Imports
inside functions count. Imports by name (`importlib`) are how registries fill
(config's PLUGIN_MODULES, a BenchmarkSpec.loader) and are not checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lze_bench"


# Bottom first. A new top-level module or package takes the lowest floor its imports allow.
LAYERS = [
    ["__init__", "errors", "env"],  # the version; LzeBenchError; the environment variables read or set
    ["registry", "jsonl", "rundir", "flops", "data_order", "rollout_store", "budget", "hub", "preemption",
     "state_file", "advantages", "reward_shape"],
    # plumbing on errors alone (preemption: Slurm's warning signal, recorded; state_file: run-state files that load
    # without running code; advantages and reward_shape: the trainer's estimator and reward, which config
    # validates and every backend computes)
    ["tracking", "fingerprint"],  # experiment trackers (their config schema is part of config); the run's data
    # fingerprint
    ["metadata", "grading", "ledger", "config", "runlock"],  # per-prompt columns (a labels file names the data it
    # labelled by its fingerprint); the one grading function; the ledger schema; config; run-dir locks
    ["benchmarks", "launchers", "selectors.stats", "selectors.topk"],  # plug-ins described by config: datasets,
    # launchers; the reward statistics and top-k a selector computes with
    ["selectors.base"],  # the selector protocol: RolloutBatch, Selector, UpdateDecision
    ["ragged", "api"],  # ragged rollout batches (held and extended groups), built from the selectors'
    # RolloutBatch; the public selector API (re-exports of selectors' base, stats, topk)
    ["selectors"],  # the built-in selectors, which import only api (and build_selector, the registry's loader)
    ["plugins"],  # selectors from outside the package, checked against api (config and build_selector load it
    # by name)
    ["data", "step_rounds", "replay", "predictor"],  # rows by benchmark name; selection rounds; replay;
    # ASTRAL's learned head (torch: the selector's NumPy side is in selectors)
    ["tasks", "conformance"],  # training prompt sets, loaded through data; `check selector` (through
    # step_rounds)
    ["evaluation", "backends"],  # `eval`/`grade`; training runs
    ["sweep", "bench"],  # grids of training runs; timings
    ["report"],  # reads sweeps' manifests and run directories
    ["argv"],  # the command line's grammar: overrides, --help's config panel, completion
    ["cli"],  # the Typer app over all of it
]


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


# Packages whose modules sit on different floors: the selector interface below lze_bench.api, the built-in
# selectors above it (they import only the API, as a plug-in does).
SPLIT = {"selectors": ("base", "stats", "topk")}


def unit_of(module: str) -> str:
    """lze_bench.grading.pool -> grading; lze_bench -> __init__; lze_bench.selectors.base -> selectors.base."""
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in SPLIT.get(parts[1], ()):
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_module_has_one_floor():
    units = {unit_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    declared = [unit for layer in LAYERS for unit in layer]
    assert len(declared) == len(set(declared)), "a unit is on two floors"
    assert not units - set(declared), f"add to LAYERS in tests/test_layout.py: {sorted(units - set(declared))}"
    assert not set(declared) - units, f"LAYERS names what lze_bench lacks: {sorted(set(declared) - units)}"


def test_imports_only_go_down():
    floor = {unit: level for level, layer in enumerate(LAYERS) for unit in layer}
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    wrong = []
    for name, path in sorted(paths.items()):
        here = unit_of(name)
        for target in sorted(imports_of(path, set(paths))):
            there = unit_of(target)
            if there != here and floor.get(there, -1) >= floor.get(here, -1):
                wrong.append(f"{name} imports {target} ({here} is on floor {floor.get(here)}, {there} on {floor.get(there)})")
    assert not wrong, "imports that do not go down (see LAYERS):\n" + "\n".join(wrong)


def test_no_prefix_families_at_the_top():
    top = [p.stem for p in PACKAGE.glob("*.py")]
    for prefix in ("sweep_", "report_", "replay_", "plots"):
        assert not [name for name in top if name.startswith(prefix)], prefix
    assert not (PACKAGE.parent / "benchmarks").exists()
