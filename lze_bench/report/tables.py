"""The statistics every table uses, and Table 3 (cost per selector), as numbers.

Statistics (mean ± 95% CI over seeds): a Student-t interval,
mean ± t(0.975, n-1) · sd / sqrt(n) with the sample sd (ddof=1); one seed gives
no interval (shown as the mean alone). t quantiles from scipy.stats.t.
The paired headline tables (accuracy at equal compute, compute to a target)
are in paired.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

BASELINE = "uniform"


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (12.706 for df=1)."""
    from scipy.stats import t  # here, not at the top: importing the report stays pandas/numpy only

    return float(t.ppf(0.975, df))


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
    """Per label: FLOPs by phase, offline FLOPs, steps, rollout rounds per step, rollouts generated and trained
    per step, kept fraction, wall time (mean, ci over seeds); numbers only.

    Generated = the ledger's `samples` (every rollout generated, probes included); trained = its
    `responses_trained` (fresh rollouts that reached the actor update: a per-rollout selector such as pods
    trains fewer than it generates; replayed groups are not counted). A ledger written before
    `responses_trained` existed gives NaN there, and the mean over seeds takes the seeds that have it."""
    rows = []
    for label, group in summary.groupby("label", sort=False):
        row = {"label": label, "seeds": len(group)}
        for col in ("flops_rollout", "flops_logprob", "flops_train", "flops_select", "flops_total", "kept_fraction",
                    "rolled_out_fraction", "wall_time_s", "steps", "gen_rounds_per_step", "generated_per_step",
                    "trained_per_step", "offline_flops"):
            row[col], row[f"{col}_ci"], _ = mean_ci(group[col])
        rows.append(row)
    return _baseline_first(pd.DataFrame(rows))


def _baseline_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in the figures' order: uniform, dapo, astral, hive, lze, then other labels sorted."""
    from lze_bench.registry import display_order as order

    return frame.set_index("label").loc[order(frame["label"])].reset_index()
