"""Offline compute in the report: ASTRAL's learned head, charged beside the equal-online-FLOPs rows.

A run that used a learned predictor (selector.predictor=trained|checkpoint) has `offline_flops.json`
(lze_bench/predictor/features.py): labelling rollouts, encoder passes and head training, spent before
step 0 and in no ledger row. Tables 1 and 2 compare at equal *online* FLOPs, as the paper does; this
module adds, for each label with offline compute, a row `<label> (+offline)` whose accuracy-vs-FLOPs
curve is the run's own shifted right by its offline FLOPs (the initial policy at x = offline):

* Table 1: the accuracy of that curve at the budget, eval points joined linearly (as Table 2 joins
  them); a run whose offline cost alone reaches the budget scores its initial accuracy;
* Table 2: FLOPs to the target on that curve = the run's own + its offline FLOPs.

Reads files only (design.md "Data flows one way").
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

OFFLINE_FILE = "offline_flops.json"  # lze_bench.predictor.OFFLINE_FILE (not imported: that package loads torch)
CHARGED = " (+offline)"


def read_offline(run_dir: Path) -> dict:
    """The run's offline record ({} when it has none: no learned predictor)."""
    path = Path(run_dir) / OFFLINE_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def offline_flops(run_dir: Path) -> float:
    return float((read_offline(run_dir).get("flops") or {}).get("total") or 0.0)


def charged_points(points: pd.DataFrame, runs, budget: float | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points for Table 2, points for Table 1) of the `(+offline)` labels; both empty without offline runs.

    Table 2's are every eval point shifted by the run's offline FLOPs. Table 1's are the shifted initial
    point and one point at the budget with the curve's accuracy there (the last point if the run ended
    before the budget, shifted).
    """
    shifted, at_budget = [], []
    for run in runs:
        extra = offline_flops(run.run_dir)
        if extra <= 0:
            continue
        mine = points[(points["label"] == run.label) & (points["seed"] == run.seed)].copy()
        mine["label"] = run.label + CHARGED
        mine["cum_flops"] = mine["cum_flops"] + extra
        shifted.append(mine)
        for _, curve in mine.groupby("benchmark"):
            at_budget.append(_cut_at(curve.sort_values("step"), budget))
    empty = points.iloc[0:0]
    return (pd.concat(shifted, ignore_index=True) if shifted else empty,
            pd.concat(at_budget, ignore_index=True) if at_budget else empty)


def _cut_at(curve: pd.DataFrame, budget: float | None) -> pd.DataFrame:
    """The initial point plus one point: the curve's accuracy at `budget` (its last point without a budget)."""
    initial, trained = curve[curve["step"] < 0], curve[curve["step"] >= 0]
    if trained.empty:
        return curve
    last = trained.iloc[[-1]].copy()
    if budget and math.isfinite(budget) and len(initial):
        x = np.concatenate([initial["cum_flops"].to_numpy(float), trained["cum_flops"].to_numpy(float)])
        y = np.concatenate([initial["accuracy"].to_numpy(float), trained["accuracy"].to_numpy(float)])
        if budget < x[-1]:
            last["cum_flops"] = budget
            last["accuracy"] = float(np.interp(budget, x, y)) if budget > x[0] else float(y[0])
    return pd.concat([initial, last], ignore_index=True)


def portable_path(path) -> str | None:
    """A path as the report may print it: from the warm-start store's folder on (`warmstarts/KEY/...`, the same
    on every machine), else its last component; a relative path as is. A report never names the machine's
    folders (where a checkout or cache lives)."""
    if path is None:
        return None
    text = str(path)
    for folder in ("/warmstarts/", "/warmstart/"):  # the shipped store's or the cache's
        if folder in text:
            return text[text.index(folder) + 1:]
    normalised = text.replace("\\", "/")
    if normalised.startswith("/") or re.match(r"^[A-Za-z]:/", normalised):
        return normalised.rstrip("/").rsplit("/", 1)[-1]
    return text


def offline_summary(runs) -> pd.DataFrame | None:
    """One row per run with offline compute: label, seed, predictor, FLOPs by part, held-out validation."""
    rows = []
    for run in runs:
        record = read_offline(run.run_dir)
        if not record:
            continue
        flops = record.get("flops") or {}
        rows.append({"label": run.label, "seed": run.seed, "predictor": record.get("predictor"),
                     "encoder": portable_path(record.get("encoder")), "labeling": flops.get("labeling"),
                     "encoder_flops": flops.get("encoder"), "training": flops.get("training"),
                     "total": flops.get("total"), "validation": record.get("validation") or {},
                     "time_s": record.get("time_s") or {},
                     "labeler_warmstart_s": (record.get("labeler_warmstart") or {}).get("time_s")})
    return pd.DataFrame(rows) if rows else None
