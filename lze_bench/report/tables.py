"""Tables 1 and 2 of the report, as DataFrames (numbers) and as Markdown / LaTeX (booktabs) text.

Statistics (mean ± 95% CI over seeds): a Student-t interval,
mean ± t(0.975, n-1) · sd / sqrt(n) with the sample sd (ddof=1); one seed gives
no interval (shown as the mean alone). t quantiles: a table for df <= 30, the
Cornish-Fisher expansion beyond (error < 1e-3), so SciPy is not needed.

Table 2, "FLOPs to reach uniform's final accuracy", precisely:
1. target T_b = mean over uniform's seeds of its final accuracy on benchmark b
   (the accuracy at its last eval point);
2. for each label and seed, F = cumulative FLOPs (ledger `cum_flops`) at the
   first eval point after at least one update (the initial policy is not
   counted: it would give 0 FLOPs whenever training lowers accuracy) whose
   accuracy >= T_b; no interpolation between eval
   points, so F is what a practitioner evaluating at that cadence would pay;
   "not reached" when no eval point gets there;
3. the denominator D_b = mean of F over uniform's seeds that reach T_b
   (at least one does: the best seed's final accuracy is >= the mean);
4. ratio per seed = F / D_b; the table shows mean ± CI of the ratio over the
   seeds that reached T_b, and "k/n" seeds reached. Wall time: the same with
   `cum_time_s` in place of `cum_flops`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
BASELINE = "uniform"


def t975(df: int) -> float:
    if df <= 30:
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values) -> tuple[float, float, int]:
    """(mean, CI half-width (NaN for n < 2), n) of the finite values."""
    vals = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(vals)
    if n == 0:
        return float("nan"), float("nan"), 0
    if n == 1:
        return float(vals[0]), float("nan"), 1
    return float(vals.mean()), t975(n - 1) * float(vals.std(ddof=1)) / math.sqrt(n), n


def benchmarks_of(points: pd.DataFrame) -> list[str]:
    """Held-out first, then eval benchmarks by name."""
    names = sorted(points["benchmark"].unique())
    return (["heldout"] if "heldout" in names else []) + [b for b in names if b != "heldout"]


def table1(summary: pd.DataFrame, benchmarks: list[str]) -> pd.DataFrame:
    """Per label: final accuracy per benchmark (mean, ci), FLOPs, kept fraction, wall time; numbers only."""
    rows = []
    for label, group in summary.groupby("label", sort=False):
        row = {"label": label, "seeds": len(group)}
        for bench in benchmarks:
            col = f"final_accuracy_{bench}"
            mean, half, _ = mean_ci(group[col] if col in group else [])
            row[f"acc_{bench}"], row[f"acc_{bench}_ci"] = mean, half
        for col in ("flops_rollout", "flops_train", "flops_total", "kept_fraction", "rolled_out_fraction",
                    "wall_time_s"):
            row[col], row[f"{col}_ci"], _ = mean_ci(group[col])
        rows.append(row)
    return _baseline_first(pd.DataFrame(rows))


def _baseline_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the figures' order: uniform, dapo, astral, hive, lze, then other labels sorted."""
    from lze_bench.report.plots import order

    return frame.set_index("label").loc[order(frame["label"])].reset_index()


def first_reach(points: pd.DataFrame, target: float) -> tuple[float, float]:
    """(cum_flops, cum_time_s) at the first eval point after training started (ledger step >= 0, so
    not the initial policy) with accuracy >= target; NaN when never reached."""
    hit = points[points["step"] >= 0].sort_values("step")
    hit = hit[hit["accuracy"] >= target - 1e-12]
    if hit.empty:
        return float("nan"), float("nan")
    return float(hit["cum_flops"].iloc[0]), float(hit["cum_time_s"].iloc[0])


def reach(points: pd.DataFrame, summary: pd.DataFrame, bench: str) -> pd.DataFrame | None:
    """Per label and seed: FLOPs/time to reach uniform's mean final accuracy on `bench` (None without uniform)."""
    col = f"final_accuracy_{bench}"
    base = summary[summary["label"] == BASELINE]
    if base.empty or col not in base or base[col].isna().all():
        return None
    target = float(base[col].mean())
    rows = []
    mine = points[points["benchmark"] == bench]
    for (label, seed), group in mine.groupby(["label", "seed"], sort=False):
        flops, time_s = first_reach(group, target)
        rows.append({"benchmark": bench, "label": label, "seed": int(seed), "target": target,
                     "flops_to_target": flops, "time_to_target_s": time_s})
    frame = pd.DataFrame(rows)
    base_rows = frame[frame["label"] == BASELINE]
    frame["flops_ratio"] = frame["flops_to_target"] / base_rows["flops_to_target"].mean()
    frame["time_ratio"] = frame["time_to_target_s"] / base_rows["time_to_target_s"].mean()
    return frame


def table2(reached: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (bench, label), group in reached.groupby(["benchmark", "label"], sort=False):
        row = {"benchmark": bench, "label": label, "target": float(group["target"].iloc[0]),
               "reached": int(group["flops_to_target"].notna().sum()), "seeds": len(group)}
        for col in ("flops_to_target", "flops_ratio", "time_to_target_s", "time_ratio"):
            row[col], row[f"{col}_ci"], _ = mean_ci(group[col])
        rows.append(row)
    from lze_bench.report.plots import order

    frame = pd.DataFrame(rows)
    rank = {label: i for i, label in enumerate(order(frame["label"]))}
    keys = sorted(range(len(frame)), key=lambda i: (frame["benchmark"][i] != "heldout", frame["benchmark"][i],
                                                    rank[frame["label"][i]]))
    return frame.iloc[keys].reset_index(drop=True)
