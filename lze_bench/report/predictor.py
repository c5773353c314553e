"""How well ASTRAL's difficulty predictor did: a report section from the ledgers' predictor columns.

ASTRAL's `p_hat` comes from lze-bench's kernel predictor (an untrained cosine
kernel over the reference set; the original uses a trained attention head,
selectors.md §3 and Q4), so every astral run records, per step, the mean
absolute error and Spearman's rho between the `p_hat` of the prompts it rolled
out and their measured pass rates (ledger `astral_pred_mae`,
`astral_pred_spearman`; NaN for other selectors and steps without a
prediction). This section summarises them per label (seed means); it reads
ledgers only and is separate from Tables 1 and 2.
"""

from __future__ import annotations

import math

import pandas as pd

from lze_bench.report.formats import markdown

COLUMNS = ("astral_pred_mae", "astral_pred_spearman")


def predictor_accuracy(runs) -> pd.DataFrame | None:
    """One row per run that recorded its predictor: steps measured, mean MAE, mean Spearman, first and last
    measured step's MAE; None when no run has the columns (no astral run in the sweep)."""
    rows = []
    for run in runs:
        led = run.ledger
        if not set(COLUMNS) <= set(led.columns):
            continue
        measured = led[led["astral_pred_mae"].notna()]
        if not len(measured):
            continue
        rows.append({
            "label": run.label, "seed": run.seed, "steps": int(len(measured)),
            "mae": float(measured["astral_pred_mae"].mean()),
            "spearman": float(measured["astral_pred_spearman"].mean()),  # NaN steps (constant ranks) left out
            "mae_first": float(measured["astral_pred_mae"].iloc[0]),
            "mae_last": float(measured["astral_pred_mae"].iloc[-1]),
        })
    return pd.DataFrame(rows) if rows else None


def predictor_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Markdown cells: seed means per label."""
    def fmt(value: float) -> str:
        return "–" if not math.isfinite(value) else f"{value:.3f}"

    header = ["selector", "seeds", "steps measured", "MAE of p̂", "Spearman ρ", "MAE first step", "MAE last step"]
    body = []
    for label, group in frame.groupby("label", sort=False):
        body.append([label, str(len(group)), str(int(group["steps"].sum())), fmt(group["mae"].mean()),
                     fmt(group["spearman"].mean()), fmt(group["mae_first"].mean()), fmt(group["mae_last"].mean())])
    return header, body


def predictor_section(frame: pd.DataFrame | None) -> list[str]:
    """report.md lines of the section (empty without astral runs)."""
    if frame is None:
        return []
    return [
        "## ASTRAL's predictor: predicted vs measured pass rate",
        "",
        markdown(*predictor_cells(frame)),
        "Per step, over the prompts ASTRAL rolled out: mean absolute error between the kernel predictor's `p̂` "
        "(from the round's draw) and the measured pass rate, and Spearman's ρ between them (ledger "
        "`astral_pred_mae`, `astral_pred_spearman`); averaged over steps, then seeds. Our predictor is an "
        "untrained cosine kernel, not the authors' trained head.",
        "",
    ]
