"""The standard RL training curves from the ledger, against cumulative FLOPs: one figure per metric, one panel
per selector with uniform in every panel (multiples.py). The first metric drawn is `rl_curves`, the others
`rl_curves_<column>`.

Metrics, in this order, when the ledgers have them (CURVES):

    reward            reward_mean: mean reward over every rolled-out response of the step
    response length   generated_tokens / samples: mean response tokens per generated response
    KL                kl: mean k3 KL to the reference policy per trained token (only with trainer.kl_coef > 0)
    clip fraction     clip_frac: share of trained tokens where the PPO clip binds
    grad norm         grad_norm: global gradient norm before clipping, last optimizer step of the update
    zero variance     zero_variance_frac: share of rolled-out groups whose rewards are all equal

Both backends write every one of these each step (kl, clip_frac, grad_norm and
loss are ledger extras: backends/local/grpo.py, backends/openrlhf/accounting.py);
a value is NaN where it was not measured (no update that step; no reference
policy for the KL). A metric whose column is absent or NaN in every run, or
holds one value in every step of every run (clip fraction 0 with one PPO
epoch: the ratio is 1 and the clip cannot bind), is left out and the caption
says which and why, so an empty or flat axis is never drawn.

x is the step's `cum_flops` (after the step), so selectors that spend
different compute per step line up at equal compute; each seed's per-step
values are joined linearly and averaged where every seed has a value
(plot_style.seed_grid). No smoothing: each vertex is one step of one seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.report.multiples import REFERENCE_TEXT, axis_names, draw, seed_curves
from lze_bench.report.plot_style import BAND_TEXT, Figure, order, power_of_ten, save

# column -> (axis title, why a column present in the ledgers can hold no value at all)
CURVES = {
    "reward_mean": ("reward (mean over responses)", "no response was graded"),
    "response_length": ("response length (tokens, mean)", "no response was generated"),
    "kl": ("KL to reference (k3, per token)", "not measured: trainer.kl_coef = 0, so no reference policy"),
    "clip_frac": ("clip fraction (tokens clipped)", "not measured: no update"),
    "grad_norm": ("grad norm (before clipping)", "not measured: no update"),
    "zero_variance_frac": ("zero-variance groups (fraction)", "no group was rolled out"),
}


def curves_frame(runs) -> pd.DataFrame:
    """Per run and step: label, seed, step, cum_flops and every CURVES column (NaN where a ledger lacks it)."""
    frames = []
    for run in runs:
        led = run.ledger
        frame = pd.DataFrame({"label": run.label, "seed": run.seed, "step": led["step"].to_numpy(),
                              "cum_flops": led["cum_flops"].to_numpy(float)})
        samples = led["samples"].to_numpy(float)
        frame["response_length"] = np.where(samples > 0, led["generated_tokens"] / np.maximum(samples, 1), np.nan)
        for column in CURVES:
            if column != "response_length":
                frame[column] = led[column].to_numpy(float) if column in led else np.nan
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def figure_name(column: str, first: bool, name: str = "rl_curves") -> str:
    """The first metric drawn (the reward, whenever responses were graded) keeps the plain name."""
    return name if first else f"{name}_{column}"


def rl_curves(runs, styles: dict, out_dir: Path, name: str = "rl_curves") -> list[Figure]:
    """One figure per metric with values, one panel per selector (multiples.py); [] when no curve has a single
    value. The first figure's caption also says which metrics are left out and why."""
    frame = curves_frame(runs)
    drawn = [c for c in CURVES if frame[c].dropna().nunique() > 1]
    missing = [c for c in CURVES if c not in drawn]
    in_ledgers = {"response_length"} | {c for c in CURVES if any(c in run.ledger for run in runs)}
    power = power_of_ten(float(frame["cum_flops"].max()))
    frame = frame.assign(x=frame["cum_flops"] / 10.0**power)
    figures = []
    for k, column in enumerate(drawn):
        curves = {label: seed_curves(frame, label, "x", column) for label in order(frame["label"])}
        fig, axes, _ = draw({label: seeds for label, seeds in curves.items() if seeds}, styles)
        if column in ("reward_mean", "zero_variance_frac", "clip_frac"):
            for ax in axes.values():
                ax.set_ylim(bottom=0)
        axis_names(fig, f"cumulative compute ($10^{{{power}}}$ FLOPs)", CURVES[column][0])
        stem = figure_name(column, k == 0, name)
        figures.append(Figure(stem, save(fig, out_dir, stem),
                              caption(column, drawn, missing if k == 0 else [], frame, in_ledgers)))
    return figures


def caption(column: str, drawn: list[str], missing: list[str], frame: pd.DataFrame, in_ledgers: set[str]) -> str:
    titles = {c: CURVES[c][0].split(" (")[0] for c in CURVES}
    defined = {"reward_mean": "mean reward over every rolled-out response of the step",
               "response_length": "generated tokens / generated responses",
               "kl": "mean k3 estimate to the reference policy per trained token",
               "clip_frac": "share of trained tokens where the PPO clip binds",
               "grad_norm": "global gradient norm before clipping",
               "zero_variance_frac": "share of rolled-out groups whose rewards are all equal"}
    others = [f"rl_curves_{c}" if i else "rl_curves" for i, c in enumerate(drawn)]
    text = (f"RL training curve from the ledger against cumulative training FLOPs: {titles[column]} "
            f"({defined[column]}), one panel per selector; {BAND_TEXT}; {REFERENCE_TEXT}; one vertex per training "
            f"step, no smoothing.")
    if len(drawn) > 1 and column == drawn[0]:
        text += f" One figure per metric: {', '.join(titles[c] for c in drawn)} ({', '.join(others)})."
    if missing:
        why = []
        for gone in missing:
            values = frame[gone].dropna().unique()
            if len(values) == 1:
                reason = f"{values[0]:g} at every step of every run"
                if gone == "clip_frac" and values[0] == 0:
                    reason += ": with one PPO epoch on fresh groups the policy ratio is 1 and the clip cannot bind"
            else:
                reason = CURVES[gone][1] if gone in in_ledgers else "no such column in these ledgers"
            why.append(f"{titles[gone]} ({reason})")
        text += f" Left out: {'; '.join(why)}."
    if frame[column].isna().any():
        text += " Gaps where a step measured nothing (no update that step)."
    return text
