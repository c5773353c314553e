"""Report figures (PNG + PDF) from the report's DataFrames; matplotlib only (Agg), no torch.

Each function returns a plot_style.Figure whose caption report.md prints under
it; the look (sizes, one style per selector, bands) is plot_style.py's, the
RL training curves are rl_curves.py's.

Curves are small multiples (multiples.py): one panel per selector, uniform's
seed mean in every panel as the reference, shared axes, one figure per
benchmark; the paired difference to uniform has its own figure
(delta_vs_flops).

Accuracy curves (against cumulative FLOPs, wall-clock, GPU-hours): each
seed's eval points are joined linearly and resampled on 100 x values spanning
the range every seed covers (plot_style.seed_grid), so seeds that spent
different FLOPs or seconds per step (DAPO, ASTRAL) are averaged at equal x.
The line is that mean and carries no markers; a marker is drawn at each
measured eval of each seed, nowhere else, so a reader sees how many evals a
curve rests on and where.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.report.multiples import (MAX_COLS, REFERENCE_COLOR, REFERENCE_TEXT, axis_names, draw, paired_deltas,
                                        seed_curves)
from lze_bench.report.plot_style import (BAND_TEXT, COLUMN_IN, Figure, band, coincide_note, coinciding, legend_below,
                                         order, plt, power_of_ten, save, seed_grid, seed_mean)
from lze_bench.report.tables import BASELINE

__all__ = ["order", "accuracy_curves", "accuracy_panel", "delta_curves", "flops_by_phase", "per_step_lines",
           "pass_rate_distribution"]

PHASES = {"flops_rollout": ("rollout", "#4c72b0"), "flops_logprob": ("log-prob", "#dd8452"),
          "flops_train": ("train", "#55a868"), "flops_select": ("select", "#c44e52")}
PASS_BINS = [(-0.001, 0.0, "0"), (0.0, 0.25, "(0, ¼]"), (0.25, 0.5, "(¼, ½]"), (0.5, 0.75, "(½, ¾]"),
             (0.75, 0.999, "(¾, 1)"), (0.999, 1.0, "1")]
COINCIDE_POINTS = 0.5  # accuracy curves closer than this (percentage points) everywhere are named in the caption


def _benchmarks(points: pd.DataFrame) -> list[str]:
    names = sorted(points["benchmark"].unique())
    return (["heldout"] if "heldout" in names else []) + [b for b in names if b != "heldout"]


def _title(bench: str) -> str:
    return "held-out" if bench == "heldout" else bench


def _named(name: str, bench: str, first: bool) -> str:
    """The first benchmark's figure keeps the plain name (the held-out set's, when the runs have it)."""
    return name if first else f"{name}_{bench}"


def accuracy_curves(points: pd.DataFrame, x: str, x_label: str, name: str, styles: dict, out_dir: Path,
                    targets: dict[str, float] | None = None, vline: float | None = None, what: str = "",
                    extra: str = "") -> list[Figure]:
    """Accuracy (%) against column `x` of `points` (already in the axis' unit): one figure per benchmark
    (`name`, then `name_<benchmark>`), one panel per selector with uniform in every panel (multiples.py).

    Dashed horizontal: Table 2's target per benchmark (`targets`, a fraction); dotted vertical: `vline`
    (the FLOP budget). `what` names the x quantity in the caption, `extra` ends it.
    """
    figures = []
    for k, bench in enumerate(_benchmarks(points)):
        mine = points[points["benchmark"] == bench]
        curves = {label: seed_curves(mine, label, x, "accuracy", 100.0) for label in order(mine["label"])}
        fig, axes, means = draw(curves, styles, markers=True)
        for ax in axes.values():
            if targets and bench in targets:
                ax.axhline(100 * targets[bench], color="black", linestyle="--", linewidth=0.6)
            if vline:
                ax.axvline(vline, color="black", linestyle=":", linewidth=0.7)
        axis_names(fig, x_label, f"{_title(bench)} accuracy (%)")
        evals = max(len(c) for seeds in curves.values() for c, _ in seeds)
        note = coincide_note(coinciding(means, COINCIDE_POINTS), "points")
        caption = (f"Accuracy ({_title(bench)}) against {what}, one panel per selector; {BAND_TEXT}; "
                   f"{REFERENCE_TEXT}. Each seed's evals are joined linearly and averaged where every seed has a "
                   f"value. Markers sit only at measured evals, one per seed and eval, the initial policy included (per seed "
                   f"at most {evals})."
                   + (" Dashed: Table 2's target accuracy (seed mean)." if targets and bench in targets else "")
                   + (" Dotted: the FLOP budget." if vline else "") + note + (f" {extra}" if extra else ""))
        stem = _named(name, bench, k == 0)
        figures.append(Figure(stem, save(fig, out_dir, stem), caption, [note.strip()] if note else []))
    return figures


def delta_curves(points: pd.DataFrame, x: str, x_label: str, name: str, styles: dict, out_dir: Path,
                 vline: float | None = None, what: str = "") -> list[Figure]:
    """Paired accuracy difference to uniform on the same seed (points) against `x`, one panel per selector, one
    figure per benchmark (`name`, then `name_<benchmark>`); [] without uniform runs."""
    figures = []
    for k, bench in enumerate(_benchmarks(points)):
        mine = points[points["benchmark"] == bench]
        if BASELINE not in set(mine["label"]):
            continue
        curves = {label: paired_deltas(mine, label, x, "accuracy") for label in order(mine["label"])
                  if label != BASELINE}
        curves = {label: seeds for label, seeds in curves.items() if seeds}
        if not curves:
            continue
        fig, axes, _ = draw(curves, styles, reference=False)
        for ax in axes.values():
            ax.axhline(0.0, color=REFERENCE_COLOR, linewidth=0.8, zorder=1)
            if vline:
                ax.axvline(vline, color="black", linestyle=":", linewidth=0.7)
        axis_names(fig, x_label, f"Δ {_title(bench)} accuracy vs {BASELINE} (points)")
        caption = (f"Paired difference in {_title(bench)} accuracy to {BASELINE} GRPO on the same seed, against "
                   f"{what}, one panel per selector: per seed, both runs' evals joined linearly over the range both "
                   f"cover and subtracted; line: mean of the per-seed differences; band: their min–max over seeds "
                   f"(no band with one seed pair). Dark grey: no difference; panels share both axes."
                   + (" Dotted: the FLOP budget." if vline else "") + " The value at the budget is Table 1's Δ.")
        stem = _named(name, bench, k == 0)
        figures.append(Figure(stem, save(fig, out_dir, stem), caption))
    return figures


def accuracy_panel(ax, mine: pd.DataFrame, x: str, styles: dict) -> dict:
    """One benchmark's curves on `ax`: per label, the seed-mean line and band (no markers) and one line of
    markers at every seed's measured evals. Returns {label: (grid, mean %)} and "_evals": {label: most evals of a
    seed}."""
    means, evals = {}, {}
    for label in order(mine["label"]):
        style = styles[label]
        seeds = seed_curves(mine, label, x, "accuracy", 100.0)
        grid, ys = seed_grid(seeds)
        band(ax, grid, ys, style, label)
        ax.plot(np.concatenate([s[0] for s in seeds]), np.concatenate([s[1] for s in seeds]), linestyle="none",
                marker=style.marker, markersize=3.2, markerfacecolor="white", markeredgewidth=0.8, color=style.color,
                alpha=0.9)
        means[label] = (grid, seed_mean(ys))
        evals[label] = max(len(s[0]) for s in seeds)
    return {**means, "_evals": evals}


def per_step_lines(frame: pd.DataFrame, column: str, ylabel: str, name: str, styles: dict, out_dir: Path,
                   caption: str, ylim=(0.0, 1.02)) -> Figure:
    """Seed mean and min-max band of a per-step ledger quantity against the step, one panel per label with
    uniform's mean in every panel (multiples.py)."""
    curves = {label: seed_curves(frame, label, "step", column) for label in order(frame["label"])}
    curves = {label: seeds for label, seeds in curves.items() if seeds}
    fig, axes, means = draw(curves, styles)
    for ax in axes.values():
        ax.set_ylim(*ylim)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axis_names(fig, "training step", ylabel)
    note = coincide_note(coinciding(means, 0.005 * (ylim[1] - ylim[0])), "")
    return Figure(name, save(fig, out_dir, name),
                  f"{caption} Per training step, one panel per selector; {BAND_TEXT}; {REFERENCE_TEXT}.{note}")


def pass_rate_distribution(rates: pd.DataFrame, out_dir: Path, windows: int = 10) -> Figure:
    """Per label, the share of rolled-out prompts in each pass-rate bin, over training (seeds pooled).

    Steps are cut into `windows` equal spans so each column pools enough prompts.
    Bins 0 and 1 are the zero-variance groups (all wrong / all right).
    """
    pyplot = plt()
    labels = order(rates["label"])
    ncols = min(MAX_COLS, len(labels))  # rows of five panels: legible at thirty selectors as at three
    nrows = -(-len(labels) // ncols)
    fig, axes = pyplot.subplots(nrows, ncols, figsize=(1.5 * ncols + 0.8, 1.7 * nrows + 0.5), sharey=True,
                                squeeze=False)
    cmap = pyplot.get_cmap("viridis")
    shades = [cmap(i / (len(PASS_BINS) - 1)) for i in range(len(PASS_BINS))]
    steps = np.sort(rates["step"].unique())
    windows = max(1, min(windows, len(steps)))
    edges = np.linspace(steps[0], steps[-1] + 1, windows + 1)  # windows of equal step span
    for ax in list(axes.flat)[len(labels):]:
        ax.set_visible(False)
    for ax, label in zip(axes.flat, labels):
        mine = rates[rates["label"] == label]
        window = np.clip(np.digitize(mine["step"], edges) - 1, 0, windows - 1)
        counts = np.zeros((len(PASS_BINS), windows))
        for k, (lo, hi, _) in enumerate(PASS_BINS):
            inside = ((mine["pass_rate"] > lo) & (mine["pass_rate"] <= hi)).to_numpy()
            counts[k] = np.bincount(window[inside], minlength=windows)
        total = counts.sum(axis=0)
        shares = counts / np.maximum(total, 1)
        width = (edges[1] - edges[0]) * 0.9
        bottom = np.zeros(windows)
        for k in range(len(PASS_BINS)):  # stacked bars; an empty window stays blank
            ax.bar(edges[:-1], np.where(total > 0, shares[k], 0), width=width, bottom=bottom, align="edge",
                   color=shades[k], linewidth=0)
            bottom += shares[k]
        ax.set_title(label)
        ax.set_xlabel("training step")
        ax.set_ylim(0, 1)
        ax.grid(False)
    for row in axes:
        row[0].set_ylabel("share of rolled-out prompts")
    handles = [pyplot.Rectangle((0, 0), 1, 1, color=c) for c in shades]
    fig.legend(handles, [b[2] for b in PASS_BINS], title="pass rate (of n responses)", loc="lower center",
               ncols=len(PASS_BINS), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.45 / fig.get_size_inches()[1], 1, 1))  # ~0.45 in for the legend
    caption = (f"Pass rate of the rolled-out prompts (mean reward of each prompt's n responses), per selector, "
               f"seeds pooled; steps cut into {windows} windows of equal span, each bar the share of that window's "
               "rolled-out prompts in each bin. Bins 0 and 1 are the zero-variance groups (no learning signal).")
    return Figure("pass_rate_distribution", save(fig, out_dir, "pass_rate_distribution"), caption)


def flops_by_phase(summary: pd.DataFrame, out_dir: Path) -> Figure:
    """Stacked bars: each label's training FLOPs (seed mean) by phase, from the ledger's flops_* columns.
    Probe rollouts (ASTRAL's reference set) are generation and sit in the rollout part."""
    pyplot = plt()
    labels = order(summary["label"])
    means = summary.groupby("label")[list(PHASES)].mean().loc[labels]
    power = power_of_ten(float(means.sum(axis=1).max()))
    fig, ax = pyplot.subplots(figsize=(max(COLUMN_IN[0], 0.55 * len(labels) + 1.2), COLUMN_IN[1]))
    bottom = np.zeros(len(labels))
    for column, (name, color) in PHASES.items():
        values = means[column].to_numpy(float) / 10.0**power
        ax.bar(labels, values, bottom=bottom, color=color, label=name, width=0.7)
        bottom += values
    ax.set_ylabel(f"$10^{{{power}}}$ FLOPs")  # short: the panel is low, a longer label ran off the figure
    ax.set_ylim(0, 1.05 * float(bottom.max()))  # headroom: the tallest bar stays inside the frame
    ax.tick_params(axis="x", rotation=30)
    ax.grid(axis="x", visible=False)
    legend_below(fig, ax)
    caption = ("Training FLOPs per selector by phase (seed means; Table 3's numbers): rollout (generation, ASTRAL's "
               "probes included), log-prob (old-policy and reference forwards), train (3·F(L) per trained sequence "
               "per PPO epoch), select (a selector's extra passes). Held-out evals are not training compute.")
    return Figure("flops_by_phase", save(fig, out_dir, "flops_by_phase"), caption)
