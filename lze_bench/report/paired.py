"""The headline comparisons: each selector against uniform GRPO on the same seed, at equal compute.

Source: design.md "Equal compute". Runs of one seed are paired: same data
order, same warm start (the sweep manifest's `pairs`), so a per-seed
difference cancels what the seed alone decides; the interval is over seeds.

Table 1, accuracy at equal compute. Per run, the accuracy of its last eval
point: with `trainer.flop_budget` every run stops at the first step with
`cum_flops` >= the budget and is evaluated there, so this is the accuracy at
the budget (a run overshoots it by at most one step's FLOPs: the table shows
the FLOPs actually spent); the table shows its mean over seeds and the per-seed range
(min-max), not an interval: when each seed pair starts from its own initial policy the seeds'
accuracies differ by what those policies knew, and only the paired Δ removes that. Per label and seed,
Δ = accuracy − uniform's
accuracy on that seed; mean ± 95% CI of Δ over the seeds where both ran
(a paired t-interval: tables.mean_ci on the differences).

Table 2, compute to a target. Per seed s, with a0 = the initial policy's
accuracy (uniform's run, eval point before any update) and A = uniform's
accuracy at the budget:

    target_s = a0 + f · (A − a0)          f = ReportOptions.target_fraction

(a fraction of uniform's gain, so the target sits where uniform still climbs,
not on the plateau where noise decides whether it is "reached"). F = the FLOPs
at which a run's accuracy-vs-FLOPs curve (eval points joined linearly, the
initial policy at 0 FLOPs) first reaches target_s. Ratio = F(selector) /
F(uniform) on the same seed; the table shows the geometric mean over seeds
with a 95% t-interval computed on log ratios (ratios multiply, so their logs
are what a mean suits). A seed where uniform gained nothing (A <= a0) has no
target and is left out; a run that never reaches its target counts as "not
reached" (its ratio would exceed F at its last point / F(uniform); it is not
averaged in, and "k/n reached" says so).

Significant: the 95% interval excludes 0 (Δ) or 1 (ratio), i.e. a two-sided
paired t-test at 5%; with one pair there is no interval and no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lze_bench.errors import LzeBenchError
from lze_bench.report.tables import BASELINE, mean_ci


@dataclass
class ReportOptions:
    # A fraction below 1 keeps the target off uniform's plateau: on the embedded task held-out
    # accuracy plateaus near 80% and a target at the plateau was "not reached" on a seed by 0.007.
    target_fraction: float = 0.9
    # which eval results (evals.parquet) per benchmark: suite names or settings keys (report/suites.py); () = the
    # only settings each benchmark has
    eval_suites: tuple[str, ...] = ()

    def __post_init__(self):
        if not 0 < self.target_fraction <= 1:
            raise LzeBenchError(f"--target-fraction: must be in (0, 1], got {self.target_fraction}")


def _last_and_initial(points: pd.DataFrame) -> pd.DataFrame:
    """Per (benchmark, label, seed): accuracy and cum_flops at the last eval point, initial accuracy (or NaN)."""
    rows = []
    for (bench, label, seed), group in points.groupby(["benchmark", "label", "seed"], sort=False):
        group = group.sort_values("step")
        trained = group[group["step"] >= 0]
        initial = group[group["step"] < 0]
        if trained.empty:
            continue
        rows.append({"benchmark": bench, "label": label, "seed": int(seed),
                     "accuracy": float(trained["accuracy"].iloc[-1]), "cum_flops": float(trained["cum_flops"].iloc[-1]),
                     "initial": float(initial["accuracy"].iloc[0]) if len(initial) else float("nan")})
    return pd.DataFrame(rows, columns=["benchmark", "label", "seed", "accuracy", "cum_flops", "initial"])


def _verdict(low: float, high: float, null: float) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "–"
    return "yes" if low > null or high < null else "no"


def at_budget(points: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per run and benchmark: accuracy at its end, FLOPs spent, stop reason, Δ to uniform on the same seed."""
    frame = _last_and_initial(points)
    stops = summary.set_index(["label", "seed"])["stopped_by"] if "stopped_by" in summary else None
    frame["stopped_by"] = [stops.get((l, s), None) if stops is not None else None
                           for l, s in zip(frame["label"], frame["seed"])]
    base = frame[frame["label"] == BASELINE].set_index(["benchmark", "seed"])["accuracy"]
    frame["uniform_accuracy"] = [base.get((b, s), np.nan) for b, s in zip(frame["benchmark"], frame["seed"])]
    frame["delta"] = frame["accuracy"] - frame["uniform_accuracy"]
    return frame


def table_budget(frame: pd.DataFrame, budget: float | None) -> pd.DataFrame:
    """Per benchmark and label: accuracy (mean, per-seed min and max; `accuracy_ci` the t-interval over seeds,
    kept in the CSV but not shown: seeds that start from different initial policies make it a measure of
    those, not of the selector), paired Δ to uniform (mean, ci, pairs, significant), FLOPs spent (mean, and as a
    multiple of the budget), runs stopped by the step cap."""
    rows = []
    for (bench, label), group in frame.groupby(["benchmark", "label"], sort=False):
        acc, acc_ci, n = mean_ci(group["accuracy"])
        delta, delta_ci, pairs = mean_ci(group["delta"]) if label != BASELINE else (float("nan"),) * 2 + (0,)
        flops, _, _ = mean_ci(group["cum_flops"])
        measured = group["accuracy"].dropna()
        rows.append({"benchmark": bench, "label": label, "seeds": n, "accuracy": acc, "accuracy_ci": acc_ci,
                     "accuracy_min": float(measured.min()) if len(measured) else float("nan"),
                     "accuracy_max": float(measured.max()) if len(measured) else float("nan"),
                     "delta": delta, "delta_ci": delta_ci, "pairs": pairs,
                     "significant": _verdict(delta - delta_ci, delta + delta_ci, 0.0) if pairs else "–",
                     "flops": flops, "flops_over_budget": flops / budget if budget else float("nan"),
                     "capped": int((group["stopped_by"] == "steps").sum()) if budget else 0})
    return _ordered(pd.DataFrame(rows))


def first_crossing(curve: pd.DataFrame, target: float) -> float:
    """FLOPs where the curve (rows sorted by step: cum_flops, accuracy; initial point first) first reaches
    `target`, interpolating linearly between eval points; NaN when it never does."""
    flops, acc = curve["cum_flops"].to_numpy(float), curve["accuracy"].to_numpy(float)
    for i in range(len(acc)):
        if acc[i] >= target - 1e-12:
            if i == 0:  # reached before any update (only when the target is at or below a0)
                return float(flops[i])
            share = (target - acc[i - 1]) / (acc[i] - acc[i - 1])
            return float(flops[i - 1] + max(0.0, share) * (flops[i] - flops[i - 1]))
    return float("nan")


def reach(points: pd.DataFrame, options: ReportOptions) -> pd.DataFrame | None:
    """Per benchmark, label and seed: the paired target, FLOPs to reach it, ratio to uniform (None without uniform)."""
    ends = _last_and_initial(points)
    base = ends[ends["label"] == BASELINE].set_index(["benchmark", "seed"])
    if base.empty:
        return None
    rows = []
    for (bench, label, seed), curve in points.groupby(["benchmark", "label", "seed"], sort=False):
        if (bench, seed) not in base.index:
            continue
        a0, final = base.loc[(bench, seed), "initial"], base.loc[(bench, seed), "accuracy"]
        gain = final - a0
        target = a0 + options.target_fraction * gain if math.isfinite(gain) and gain > 0 else float("nan")
        flops = first_crossing(curve.sort_values("step"), target) if math.isfinite(target) else float("nan")
        rows.append({"benchmark": bench, "label": label, "seed": int(seed), "initial": a0,
                     "uniform_accuracy": final, "target": target, "flops_to_target": flops})
    frame = pd.DataFrame(rows)
    uniform = frame[frame["label"] == BASELINE].set_index(["benchmark", "seed"])["flops_to_target"]
    frame["uniform_flops_to_target"] = [uniform.get((b, s), np.nan) for b, s in zip(frame["benchmark"], frame["seed"])]
    frame["flops_ratio"] = frame["flops_to_target"] / frame["uniform_flops_to_target"]
    return frame


def table_reach(frame: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark and label: geometric-mean FLOPs ratio to uniform with a 95% CI on log ratios."""
    rows = []
    for (bench, label), group in frame.groupby(["benchmark", "label"], sort=False):
        defined = group[group["target"].notna()]
        logs = np.log(defined["flops_ratio"].dropna().to_numpy(float))
        mean_log, half, n = mean_ci(logs)
        low, high = (math.exp(mean_log - half), math.exp(mean_log + half)) if n > 1 else (float("nan"),) * 2
        is_base = label == BASELINE
        rows.append({"benchmark": bench, "label": label, "target": float(defined["target"].mean()),
                     "flops_to_target": mean_ci(defined["flops_to_target"])[0],
                     "reached": int(defined["flops_to_target"].notna().sum()), "seeds": len(defined),
                     "ratio": math.exp(mean_log) if n else float("nan"), "ratio_low": low, "ratio_high": high,
                     "significant": "–" if is_base or n < 2 else _verdict(low, high, 1.0)})
    return _ordered(pd.DataFrame(rows))


def heldout_standard_error(accuracy: float, problems: int | None) -> float:
    """Binomial standard error sqrt(p(1-p)/n) of an accuracy measured on n problems (NaN when n unknown)."""
    if not problems or not math.isfinite(accuracy):
        return float("nan")
    return math.sqrt(accuracy * (1 - accuracy) / problems)


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    from lze_bench.registry import display_order as order

    if frame.empty:
        return frame
    rank = {label: i for i, label in enumerate(order(frame["label"]))}
    keys = sorted(range(len(frame)), key=lambda i: (frame["benchmark"][i] != "heldout", frame["benchmark"][i],
                                                    rank[frame["label"][i]]))
    return frame.iloc[keys].reset_index(drop=True)
