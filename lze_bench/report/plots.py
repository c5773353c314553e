"""Report figures (PNG + PDF) from the report's DataFrames; matplotlib only (Agg), no torch.

Each function returns a plot_style.Figure whose caption report.md prints under
it; the look (sizes, one style per selector, bands) is plot_style.py's, the
RL training curves are rl_curves.py's.

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

from lze_bench.report.plot_style import (BAND_TEXT, COLUMN_IN, Figure, band, coincide_note, coinciding, legend_below,
                                         order, plt, power_of_ten, save, seed_grid, seed_mean)

__all__ = ["order", "accuracy_curves", "accuracy_panel", "flops_by_phase", "per_step_lines", "pass_rate_distribution"]

PHASES = {"flops_rollout": ("rollout", "#4c72b0"), "flops_logprob": ("log-prob", "#dd8452"),
          "flops_train": ("train", "#55a868"), "flops_select": ("select", "#c44e52")}
PASS_BINS = [(-0.001, 0.0, "0"), (0.0, 0.25, "(0, ¼]"), (0.25, 0.5, "(¼, ½]"), (0.5, 0.75, "(½, ¾]"),
             (0.75, 0.999, "(¾, 1)"), (0.999, 1.0, "1")]
COINCIDE_POINTS = 0.5  # accuracy curves closer than this (percentage points) everywhere are named in the caption


def _benchmarks(points: pd.DataFrame) -> list[str]:
    names = sorted(points["benchmark"].unique())
    return (["heldout"] if "heldout" in names else []) + [b for b in names if b != "heldout"]


def accuracy_curves(points: pd.DataFrame, x: str, x_label: str, name: str, styles: dict, out_dir: Path,
                    targets: dict[str, float] | None = None, vline: float | None = None, what: str = "",
                    extra: str = "") -> Figure:
    """Accuracy (%) against column `x` of `points` (already in the axis' unit), one panel per benchmark.

    Dashed horizontal: Table 2's target per benchmark (`targets`, a fraction); dotted vertical: `vline`
    (the FLOP budget). `what` names the x quantity in the caption, `extra` ends it.
    """
    pyplot = plt()
    benches = _benchmarks(points)
    ncols = min(2, len(benches))
    nrows = -(-len(benches) // ncols)
    fig, axes = pyplot.subplots(nrows, ncols, figsize=(COLUMN_IN[0] * ncols, COLUMN_IN[1] * nrows), squeeze=False)
    notes, evals = [], {}
    for ax, bench in zip(axes.flat, benches):
        means = accuracy_panel(ax, points[points["benchmark"] == bench], x, styles)
        evals["held-out" if bench == "heldout" else bench] = max(means.pop("_evals").values())
        if targets and bench in targets:
            ax.axhline(100 * targets[bench], color="#4d4d4d", linestyle="--", linewidth=0.8, label="target")
        if vline:
            ax.axvline(vline, color="black", linestyle=":", linewidth=0.8, label="budget")
        ax.set_xlabel(x_label)
        ax.set_ylabel(f"{'held-out' if bench == 'heldout' else bench} accuracy (%)")
        note = coincide_note(coinciding(means, COINCIDE_POINTS), "points",
                             ("held-out" if bench == "heldout" else bench) if len(benches) > 1 else None)
        if note:
            notes.append(note.strip())
    for ax in list(axes.flat)[len(benches):]:
        ax.set_visible(False)
    legend_below(fig, axes.flat[0])
    counts = (f"{evals.popitem()[1]}" if len(evals) == 1
              else ", ".join(f"{n} in the {panel} panel" for panel, n in evals.items()))
    panels = ", ".join("held-out" if b == "heldout" else b for b in benches)
    caption = (f"Accuracy against {what}; one panel per benchmark ({panels}); {BAND_TEXT}. "
               "Each seed's evals are joined linearly and averaged where every seed has a value. Markers sit only "
               f"at measured evals, one per seed and eval, the initial policy included (per seed at most {counts})."
               + (" Dashed: Table 2's target accuracy (seed mean)." if targets else "")
               + (" Dotted: the FLOP budget." if vline else "") + "".join(" " + n for n in notes)
               + (f" {extra}" if extra else ""))
    return Figure(name, save(fig, out_dir, name), caption, notes)


def accuracy_panel(ax, mine: pd.DataFrame, x: str, styles: dict) -> dict:
    """One benchmark's curves on `ax`: per label, the seed-mean line and band (no markers) and a marker at
    each seed's measured evals. Returns {label: (grid, mean %)} and "_evals": {label: most evals of a seed}."""
    means, evals = {}, {}
    for label in order(mine["label"]):
        style = styles[label]
        seeds = [g.sort_values(x) for _, g in mine[mine["label"] == label].groupby("seed")]
        grid, ys = seed_grid([(g[x].to_numpy(float), 100 * g["accuracy"].to_numpy(float)) for g in seeds])
        band(ax, grid, ys, style, None)
        for g in seeds:
            ax.plot(g[x], 100 * g["accuracy"], linestyle="none", marker=style.marker, markersize=3.2,
                    markerfacecolor="white", markeredgewidth=0.8, color=style.color, alpha=0.9)
        ax.plot([], [], color=style.color, linestyle=style.linestyle, marker=style.marker, markersize=3.2,
                markerfacecolor="white", label=label)  # the legend entry: line style and marker together
        means[label] = (grid, seed_mean(ys))
        evals[label] = max(len(g) for g in seeds)
    return {**means, "_evals": evals}


def per_step_lines(frame: pd.DataFrame, column: str, ylabel: str, name: str, styles: dict, out_dir: Path,
                   caption: str, ylim=(0.0, 1.02)) -> Figure:
    """Seed mean and min-max band of a per-step ledger quantity against the step, one line per label.
    Every step is measured, so markers (every few steps, staggered per label) mark only real points."""
    pyplot = plt()
    fig, ax = pyplot.subplots(figsize=COLUMN_IN)
    labels = order(frame["label"])
    means = {}
    for k, label in enumerate(labels):
        wide = frame[frame["label"] == label].pivot_table(index="step", columns="seed", values=column)
        every = max(len(labels), len(wide) // 6, 1)
        band(ax, wide.index.to_numpy(), wide.to_numpy().T, styles[label], label, markevery=(k % every, every))
        means[label] = (wide.index.to_numpy(float), seed_mean(wide.to_numpy().T))
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_ylim(*ylim)
    ax.xaxis.get_major_locator().set_params(integer=True)
    legend_below(fig, ax)
    note = coincide_note(coinciding(means, 0.005 * (ylim[1] - ylim[0])), "")
    return Figure(name, save(fig, out_dir, name), f"{caption} Per training step; {BAND_TEXT}.{note}")


def pass_rate_distribution(rates: pd.DataFrame, out_dir: Path, windows: int = 10) -> Figure:
    """Per label, the share of rolled-out prompts in each pass-rate bin, over training (seeds pooled).

    Steps are cut into `windows` equal spans so each column pools enough prompts.
    Bins 0 and 1 are the zero-variance groups (all wrong / all right).
    """
    pyplot = plt()
    labels = order(rates["label"])
    fig, axes = pyplot.subplots(1, len(labels), figsize=(min(7.0, 1.6 * len(labels) + 0.8), 2.2), sharey=True,
                                squeeze=False)
    cmap = pyplot.get_cmap("viridis")
    shades = [cmap(i / (len(PASS_BINS) - 1)) for i in range(len(PASS_BINS))]
    steps = np.sort(rates["step"].unique())
    windows = max(1, min(windows, len(steps)))
    edges = np.linspace(steps[0], steps[-1] + 1, windows + 1)  # windows of equal step span
    for ax, label in zip(axes[0], labels):
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
    axes[0][0].set_ylabel("share of rolled-out prompts")
    handles = [pyplot.Rectangle((0, 0), 1, 1, color=c) for c in shades]
    fig.legend(handles, [b[2] for b in PASS_BINS], title="pass rate (of n responses)", loc="lower center",
               ncols=len(PASS_BINS), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.14, 1, 1))
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
    ax.set_ylabel(f"training compute ($10^{{{power}}}$ FLOPs)")
    ax.tick_params(axis="x", rotation=30)
    ax.grid(axis="x", visible=False)
    legend_below(fig, ax)
    caption = ("Training FLOPs per selector by phase (seed means; Table 3's numbers): rollout (generation, ASTRAL's "
               "probes included), log-prob (old-policy and reference forwards), train (3·F(L) per trained sequence "
               "per PPO epoch), select (a selector's extra passes). Held-out evals are not training compute.")
    return Figure("flops_by_phase", save(fig, out_dir, "flops_by_phase"), caption)
