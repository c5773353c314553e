"""What the report's intervals vary over: the initial policy of each seed pair, and the machine.

Read from each run's config.yaml (`warmstart`: the init seed, recipe key, whether the weights were the
package's shipped ones; `machine`: where the RL run computed). When every seed pair starts from its own
warm start (`backend.warmstart_per_seed=true`), the intervals over seeds include what another initial
policy would do, and the per-seed table shows how each conclusion moves from one initial policy to the
next; when all seeds share one warm start, the report says its intervals do not cover that.
"""

from __future__ import annotations

import math

import pandas as pd

from lze_bench.report.data import _read_config
from lze_bench.report.formats import BENCH_TITLES


def initial_policies(runs) -> pd.DataFrame:
    """One row per seed: init seed, recipe key, shipped, warm-start held-out accuracy (None where unknown)."""
    rows = {}
    for run in runs:
        block = _read_config(run.run_dir).get("warmstart") or {}
        if not block:
            continue
        rows.setdefault(run.seed, {"seed": run.seed, "init_seed": block.get("init_seed"),
                                   "recipe_key": block.get("recipe_key") or block.get("key"),
                                   "shipped": bool(block.get("shipped")),
                                   "heldout": block.get("heldout_accuracy")})
    return pd.DataFrame(sorted(rows.values(), key=lambda r: r["seed"]))


def machine_text(config: dict) -> str:
    """config.yaml's `machine` as one readable string ("" for runs that did not record it)."""
    machine = config.get("machine") or {}
    if not machine:
        return ""
    if machine.get("device") != "cpu":
        return f"{machine.get('gpu') or machine.get('device')}, torch {machine.get('torch')}"
    return (f"{machine.get('cpu_model')} ({machine.get('cpu_vendor')}, {machine.get('cpu_capability')}), "
            f"{machine.get('threads')} torch thread(s), torch {machine.get('torch')}")


def machines(runs) -> list[str]:
    """The distinct machines the runs computed on, as readable strings."""
    seen = []
    for run in runs:
        text = machine_text(_read_config(run.run_dir))
        if text and text not in seen:
            seen.append(text)
    return seen


def with_provenance(summary: pd.DataFrame, runs) -> pd.DataFrame:
    """runs.csv's rows plus where each run computed and which initial policy it started from."""
    extra = {}
    for run in runs:
        config = _read_config(run.run_dir)
        block = config.get("warmstart") or {}
        extra[run.run_dir.name] = {"machine": machine_text(config),
                                   "warmstart": block.get("recipe_key") or block.get("key") or "",
                                   "init_seed": block.get("init_seed")}
    if "run" not in summary or not extra:
        return summary
    columns = pd.DataFrame([{"run": name, **values} for name, values in extra.items()])
    return summary.merge(columns, on="run", how="left")


def variation_note(runs) -> str:
    policies = initial_policies(runs)
    if policies.empty:
        return ""
    shipped = "shipped with lze-bench, the same weights on every machine" if policies["shipped"].all() else \
        "built on the machine that ran them, so their weights depend on its threads and processor"
    accuracy = "; ".join(f"seed {r.seed}: init seed {r.init_seed}, {_pct(r.heldout)}" for r in policies.itertuples())
    if policies["recipe_key"].nunique() > 1:
        head = ("Variation the intervals cover: training seeds and the initial policy. Each seed pair starts from "
                "its own warm start (`backend.warmstart_per_seed=true`), so the intervals over seeds include what "
                "another initial policy would do; Table 1b shows each seed pair's Δ.")
    else:
        head = ("Variation the intervals cover: training seeds only (data order, sampling). Every run starts from "
                "one warm start, so the intervals say nothing about another initial policy "
                "(`backend.warmstart_per_seed=true` gives each seed pair its own).")
    where = machines(runs)
    machine = f" RL runs computed on {'; '.join(where)}." if where else ""
    return (f"{head} Warm starts, {shipped} (their own held-out accuracy at the end of the warm start): "
            f"{accuracy}.{machine}")


def per_seed_cells(at_budget: pd.DataFrame, runs) -> tuple[list[str], list[list[str]]] | None:
    """Table 1b: Δ vs uniform (points) per selector and seed pair, headed by each pair's initial accuracy."""
    if at_budget is None or at_budget.empty or "delta" not in at_budget:
        return None
    policies = initial_policies(runs)
    if policies.empty or policies["recipe_key"].nunique() < 2:
        return None
    frame = at_budget[at_budget["label"] != "uniform"]
    seeds = sorted(frame["seed"].unique())
    init = {int(r.seed): r.heldout for r in policies.itertuples()}
    header = ["benchmark", "selector", *[f"seed {s} (initial {_pct(init.get(int(s)))})" for s in seeds]]
    cells = []
    order = {b: i for i, b in enumerate(["heldout", *sorted(set(frame["benchmark"]) - {"heldout"})])}
    groups = sorted(frame.groupby(["benchmark", "label"], sort=False), key=lambda item: order[item[0][0]])
    for (benchmark, label), group in groups:  # held-out first, then benchmarks by name; selectors in sweep order
        by_seed = dict(zip(group["seed"], group["delta"]))
        cells.append([BENCH_TITLES.get(str(benchmark), str(benchmark)), str(label),
                      *[f"{100 * by_seed[s]:+.1f}" if s in by_seed and _finite(by_seed[s]) else "–" for s in seeds]])
    return header, cells


def _pct(value) -> str:
    return f"{100 * float(value):.1f} %" if _finite(value) else "?"


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def provenance_line(sweep_dir, runs) -> str:
    """One line: the sweep recipe (its manifest's name), lze-bench's version and the machines the runs computed on."""
    from lze_bench import __version__
    from lze_bench.errors import LzeBenchError
    from lze_bench.sweep.manifest import load_manifest

    try:
        recipe = (load_manifest(sweep_dir) or {}).get("name")
    except LzeBenchError:  # a damaged manifest is `lze-bench sweep status`'s to report
        recipe = None
    where = "; ".join(machines(runs)) or "machine not recorded"
    return (f"Recipe `{recipe}`" if recipe else "A folder of runs") + f"; lze-bench {__version__}; computed on {where}."


def recipe_notes(sweep_dir) -> list[str]:
    """report.md's "Notes from the recipe": the sweep recipe's `notes` as its manifest kept them."""
    from lze_bench.errors import LzeBenchError
    from lze_bench.sweep.manifest import load_manifest

    try:
        notes = (load_manifest(sweep_dir) or {}).get("notes") or []  # a folder of run directories has none
    except LzeBenchError:  # a damaged manifest is `lze-bench sweep status`'s to report, not the tables'
        return []
    if not notes:
        return []
    return ["## Notes from the recipe", "", *[f"- {' '.join(str(note).split())}" for note in notes], ""]
