"""The standard RL training curves from the ledger, against cumulative FLOPs (one figure, a panel each).

Panels, in this order, when the ledgers have them (CURVES):

    reward            reward_mean: mean reward over every rolled-out response of the step
    response length   generated_tokens / samples: mean response tokens per generated response
    KL                kl: mean k3 KL to the reference policy per trained token (only with trainer.kl_coef > 0)
    clip fraction     clip_frac: share of trained tokens where the PPO clip binds
    grad norm         grad_norm: global gradient norm before clipping, last optimizer step of the update
    zero variance     zero_variance_frac: share of rolled-out groups whose rewards are all equal

Both backends write every one of these each step (kl, clip_frac, grad_norm and
loss are ledger extras: backends/local/grpo.py, backends/openrlhf/accounting.py);
a value is NaN where it was not measured (no update that step; no reference
policy for the KL). A panel whose column is absent or NaN in every run, or
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

from lze_bench.report.plot_style import (BAND_TEXT, Figure, band, legend_below, order, plt, power_of_ten, save,
                                         seed_grid)

# column -> (panel title, why a column present in the ledgers can hold no value at all)
CURVES = {
    "reward_mean": ("reward (mean over responses)", "no response was graded"),
    "response_length": ("response length (tokens, mean)", "no response was generated"),
    "kl": ("KL to reference (k3, per token)", "not measured: trainer.kl_coef = 0, so no reference policy"),
    "clip_frac": ("clip fraction (tokens clipped)", "not measured: no update"),
    "grad_norm": ("grad norm (before clipping)", "not measured: no update"),
    "zero_variance_frac": ("zero-variance groups (fraction)", "no group was rolled out"),
}
PANEL_IN = (2.4, 1.9)


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


def rl_curves(runs, styles: dict, out_dir: Path, name: str = "rl_curves") -> Figure | None:
    """The figure, or None when no curve has a single value."""
    frame = curves_frame(runs)
    drawn = [c for c in CURVES if frame[c].dropna().nunique() > 1]
    missing = [c for c in CURVES if c not in drawn]
    in_ledgers = {"response_length"} | {c for c in CURVES if any(c in run.ledger for run in runs)}
    if not drawn:
        return None
    pyplot = plt()
    ncols = 2 if len(drawn) in (2, 4) else min(3, len(drawn))
    nrows = -(-len(drawn) // ncols)
    fig, axes = pyplot.subplots(nrows, ncols, figsize=(PANEL_IN[0] * ncols, PANEL_IN[1] * nrows + 0.4),
                                squeeze=False, sharex=True)
    power = power_of_ten(float(frame["cum_flops"].max()))
    labelled = set()  # each label enters the legend once, from the first panel it has values in
    for ax, column in zip(axes.flat, drawn):
        for label in order(frame["label"]):
            seeds = []
            for _, g in frame[(frame["label"] == label) & frame[column].notna()].groupby("seed"):
                g = g.sort_values("cum_flops")
                seeds.append((g["cum_flops"].to_numpy(float) / 10.0**power, g[column].to_numpy(float)))
            if seeds:
                grid, ys = seed_grid(seeds)
                band(ax, grid, ys, styles[label], None if label in labelled else label)
                labelled.add(label)
        ax.set_title(CURVES[column][0])
        if column in ("reward_mean", "zero_variance_frac", "clip_frac"):
            ax.set_ylim(bottom=0)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    for ax in axes.flat[len(drawn) - ncols:len(drawn)]:  # the bottom panel of each column names the axis
        ax.set_xlabel(f"cumulative compute ($10^{{{power}}}$ FLOPs)")
        ax.xaxis.set_tick_params(labelbottom=True)
    legend_below(fig, list(axes.flat))
    return Figure(name, save(fig, out_dir, name), caption(drawn, missing, frame, in_ledgers))


def caption(drawn: list[str], missing: list[str], frame: pd.DataFrame, in_ledgers: set[str]) -> str:
    titles = {c: CURVES[c][0].split(" (")[0] for c in CURVES}
    defined = {"response_length": "response length: generated tokens / generated responses",
               "kl": "KL: mean k3 estimate to the reference policy per trained token",
               "clip_frac": "clip fraction: share of trained tokens where the PPO clip binds",
               "grad_norm": "grad norm: global gradient norm before clipping"}
    said = "; ".join(defined[c] for c in drawn if c in defined)
    text = (f"RL training curves from the ledger against cumulative training FLOPs: "
            f"{', '.join(titles[c] for c in drawn)}; {BAND_TEXT}; one vertex per training step, no smoothing."
            + (f" {said[0].upper()}{said[1:]}." if said else ""))
    if missing:
        why = []
        for column in missing:
            values = frame[column].dropna().unique()
            if len(values) == 1:
                reason = f"{values[0]:g} at every step of every run"
                if column == "clip_frac" and values[0] == 0:
                    reason += ": with one PPO epoch on fresh groups the policy ratio is 1 and the clip cannot bind"
            else:
                reason = CURVES[column][1] if column in in_ledgers else "no such column in these ledgers"
            why.append(f"{titles[column]} ({reason})")
        text += f" Left out: {'; '.join(why)}."
    partial = [titles[c] for c in drawn if frame[c].isna().any()]
    if partial:
        text += f" Gaps where a step measured nothing (no update that step): {', '.join(partial)}."
    return text
