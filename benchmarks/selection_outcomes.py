"""Measured outcomes of local-backend runs, read from their ledgers only (issue 4 "Measured outcomes").

    python benchmarks/selection_outcomes.py RUN_DIR [RUN_DIR ...] [--json OUT.json]

For every finished run directory: selector, seed, held-out accuracy of the
initial policy (heldout.jsonl, updates 0) and after the last step, cumulative
FLOPs and wall time (ledger), and the held-out accuracy curve against
cumulative FLOPs. Then, per selector, the mean over seeds and the cumulative
FLOPs at which each run first reaches the target accuracy = uniform's mean
final accuracy (NaN when never reached). Nothing is estimated from config:
accuracies come from heldout.jsonl / the ledger, FLOPs from `cum_flops`.
The report engineer's `lze-bench report` supersedes this for full reports;
this script is the quick check the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from lze_bench.ledger import read_ledger


def load_run(run_dir: Path) -> dict:
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    ledger = read_ledger(run_dir)
    heldout = [json.loads(line) for line in (run_dir / "heldout.jsonl").read_text().splitlines() if line.strip()]
    by_updates = {r["updates"]: r for r in heldout}
    # accuracy after update t is in ledger row t; updates = t + 1; the initial policy sits at 0 FLOPs
    curve = [(0.0, 0.0, by_updates[0]["accuracy"])] if 0 in by_updates else []
    evaluated = ledger[ledger["heldout_accuracy"].notna()]
    curve += [(float(r.cum_flops), float(r.cum_time_s), float(r.heldout_accuracy)) for r in evaluated.itertuples()]
    return {
        "run_dir": str(run_dir), "selector": config["selector"]["name"], "seed": int(config["seed"]),
        "steps": int(len(ledger)), "initial": curve[0][2] if curve else float("nan"),
        "final": curve[-1][2] if curve else float("nan"),
        "final_by_level": heldout[-1]["by_level"] if heldout else {},
        "initial_by_level": by_updates.get(0, {}).get("by_level", {}),
        "cum_flops": float(ledger["cum_flops"].iloc[-1]), "wall_s": float(ledger["cum_time_s"].iloc[-1]),
        "curve": curve,
    }


def flops_to_reach(curve: list, target: float) -> float:
    for flops, _, accuracy in curve:
        if accuracy >= target - 1e-12:
            return flops
    return float("nan")


def summarize(runs: list[dict]) -> dict:
    selectors = sorted({r["selector"] for r in runs})
    uniform = [r["final"] for r in runs if r["selector"] == "uniform"]
    target = float(np.mean(uniform)) if uniform else float("nan")
    summary = {"target_accuracy": target, "selectors": {}}
    for name in selectors:
        mine = [r for r in runs if r["selector"] == name]
        reach = [flops_to_reach(r["curve"], target) for r in mine]
        summary["selectors"][name] = {
            "seeds": [r["seed"] for r in mine],
            "initial_mean": float(np.mean([r["initial"] for r in mine])),
            "final_mean": float(np.mean([r["final"] for r in mine])),
            "final_per_seed": [r["final"] for r in mine],
            "cum_flops_mean": float(np.mean([r["cum_flops"] for r in mine])),
            "wall_s_mean": float(np.mean([r["wall_s"] for r in mine])),
            "flops_to_target_per_seed": reach,
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = [load_run(path) for path in args.run_dirs]
    for r in sorted(runs, key=lambda r: (r["selector"], r["seed"])):
        print(f"{r['selector']:8s} seed {r['seed']}: held-out {r['initial']:.3f} -> {r['final']:.3f} "
              f"({r['steps']} steps, {r['cum_flops']:.3e} FLOPs, {r['wall_s']:.0f} s in steps)")
        print("   by level initial", r["initial_by_level"], "final", r["final_by_level"])
        print("   curve (cum FLOPs, accuracy):", ", ".join(f"({f:.2e}, {a:.3f})" for f, _, a in r["curve"]))
    summary = summarize(runs)
    print(f"target = uniform's mean final accuracy = {summary['target_accuracy']:.3f}")
    for name, s in summary["selectors"].items():
        reach = ", ".join("never" if np.isnan(f) else f"{f:.3e}" for f in s["flops_to_target_per_seed"])
        print(f"{name:8s} final {s['final_mean']:.3f} (seeds {s['final_per_seed']}), FLOPs to target per seed: {reach}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
