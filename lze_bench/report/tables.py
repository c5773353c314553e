"""The statistics every table uses, and Table 3 (cost per selector), as numbers.

Statistics (mean ± 95% CI over seeds): a Student-t interval,
mean ± t(0.975, n-1) · sd / sqrt(n) with the sample sd (ddof=1); one seed gives
no interval (shown as the mean alone). t quantiles: a table for df <= 30, the
Cornish-Fisher expansion beyond (error < 1e-3), so SciPy is not needed.
The paired headline tables (accuracy at equal compute, compute to a target)
are in paired.py.
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


def cost_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per label: FLOPs by phase, steps, kept fraction, wall time (mean, ci over seeds); numbers only."""
    rows = []
    for label, group in summary.groupby("label", sort=False):
        row = {"label": label, "seeds": len(group)}
        for col in ("flops_rollout", "flops_logprob", "flops_train", "flops_select", "flops_total", "kept_fraction",
                    "rolled_out_fraction", "wall_time_s", "steps"):
            row[col], row[f"{col}_ci"], _ = mean_ci(group[col])
        rows.append(row)
    return _baseline_first(pd.DataFrame(rows))


def _baseline_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the figures' order: uniform, dapo, astral, hive, lze, then other labels sorted."""
    from lze_bench.report.plots import order

    return frame.set_index("label").loc[order(frame["label"])].reset_index()
