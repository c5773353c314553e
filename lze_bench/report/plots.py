"""Report figures (PNG + PDF) from the report's DataFrames; matplotlib only (Agg), no torch.

Readable at paper column width: single-panel figures are 3.4 x 2.4 in (a
two-column paper's column), fonts 8 pt, every axis names its quantity and unit.
Every figure colours a selector the same way (`colors_for`): the five built-in
selectors have fixed colours, any other label takes the next unused colour in
sorted order. Seed bands are the min-max envelope over seeds (with 2-3 seeds an
interval estimate would be wider than the plot); the line is the seed mean.

Accuracy vs FLOPs: each seed's eval points are joined linearly and resampled
on 100 FLOP values spanning the range every seed covers, so seeds that spent
different FLOPs per step (DAPO, ASTRAL) can be averaged at equal compute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.registry import display_order as order  # paired.py and tables.py import it from here

SELECTOR_COLORS = {"uniform": "#4d4d4d", "dapo": "#1f77b4", "astral": "#ff7f0e", "hive": "#2ca02c", "greso": "#8c564b",
                   "lze": "#d62728"}
PHASES = {"flops_rollout": ("rollout", "#4c72b0"), "flops_logprob": ("log-prob", "#dd8452"),
          "flops_train": ("train", "#55a868"), "flops_select": ("select", "#c44e52")}
SPARE_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
# markers (staggered along each line) keep lines that coincide, e.g. kept fraction 1.0, distinguishable
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
COLUMN_IN = (3.4, 2.4)
PASS_BINS = [(-0.001, 0.0, "0"), (0.0, 0.25, "(0, ¼]"), (0.25, 0.5, "(¼, ½]"), (0.5, 0.75, "(½, ¾]"),
             (0.75, 0.999, "(¾, 1)"), (0.999, 1.0, "1")]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "legend.fontsize": 7,
                         "xtick.labelsize": 7, "ytick.labelsize": 7, "lines.linewidth": 1.3, "axes.grid": True,
                         "grid.alpha": 0.3, "savefig.bbox": "tight", "pdf.fonttype": 42})
    return plt


def colors_for(labels) -> dict[str, str]:
    spare = iter(SPARE_COLORS * 4)
    return {label: SELECTOR_COLORS.get(label) or next(spare) for label in order(labels)}


def _marker(label: str, labels) -> tuple[str, int, int]:
    """(marker, index, count): the label's position in the canonical order picks its marker and offset."""
    ordered = order(labels)
    index = ordered.index(label)
    return MARKERS[index % len(MARKERS)], index, len(ordered)


def _save(fig, out_dir: Path, name: str) -> list[Path]:
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=200)
    fig.savefig(paths[1])
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths


def _legend_below(fig, ax) -> None:
    """One legend row under the axes, so no line is ever hidden behind it."""
    handles, labels = ax.get_legend_handles_labels()
    ncols = len(labels) if len(labels) <= 5 else 4
    rows = -(-len(labels) // ncols)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.45, (0.12 + 0.16 * rows) / height), 1, 1))  # ~0.16 in per legend row
    fig.legend(handles, labels, loc="lower center", ncols=ncols, frameon=False,
               bbox_to_anchor=(0.5, 0.0), handlelength=1.5, columnspacing=1.0)


def _band(ax, x, ys: np.ndarray, color: str, label: str, marker: tuple[str, int, int] = ("", 0, 1)) -> None:
    """Seed-mean line and min-max band; ys is float[seeds, len(x)]. A marker every `every` points,
    label k starting at point k, so lines that coincide still show each label's markers."""
    symbol, index, count = marker
    every = max(count, len(x) // 6, 1)
    ax.plot(x, np.nanmean(ys, axis=0), color=color, label=label, marker=symbol, markersize=3.5,
            markevery=(index % every, every))
    if len(ys) > 1:
        ax.fill_between(x, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=color, alpha=0.18, linewidth=0)


def accuracy_vs_flops(points: pd.DataFrame, targets: dict[str, float], colors: dict, out_dir: Path,
                      budget: float | None = None) -> list[Path]:
    """Seed mean and band of accuracy against cumulative FLOPs; dashed: the seed-mean target of Table 2
    (horizontal) and the FLOP budget (vertical)."""
    plt = _plt()
    names = sorted(points["benchmark"].unique())
    benches = (["heldout"] if "heldout" in names else []) + [b for b in names if b != "heldout"]
    ncols = min(2, len(benches))
    nrows = -(-len(benches) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(COLUMN_IN[0] * ncols, COLUMN_IN[1] * nrows), squeeze=False)
    peak = float(points["cum_flops"].max())
    power = int(np.floor(np.log10(peak))) if peak > 0 else 0  # axis in units of 10^power FLOPs
    for ax, bench in zip(axes.flat, benches):
        mine = points[points["benchmark"] == bench].assign(cum_flops=lambda f: f["cum_flops"] / 10.0**power)
        for label in order(mine["label"]):
            runs = [g.sort_values("step") for _, g in mine[mine["label"] == label].groupby("seed")]
            lo, hi = max(r["cum_flops"].min() for r in runs), min(r["cum_flops"].max() for r in runs)
            if len(runs) == 1 or hi <= lo:
                lo, hi = min(r["cum_flops"].min() for r in runs), max(r["cum_flops"].max() for r in runs)
            grid = np.linspace(lo, hi, 100)
            ys = np.array([np.interp(grid, r["cum_flops"], 100 * r["accuracy"], left=np.nan, right=np.nan)
                           for r in runs])
            _band(ax, grid, ys, colors[label], label, _marker(label, colors))
        if bench in targets:
            ax.axhline(100 * targets[bench], color=colors.get("uniform", "gray"), linestyle="--", linewidth=0.8,
                       label="target")
        if budget:
            ax.axvline(budget / 10.0**power, color="black", linestyle=":", linewidth=0.8, label="budget")
        ax.set_xlabel(f"cumulative compute ($10^{{{power}}}$ FLOPs)")
        ax.set_ylabel(f"{'held-out' if bench == 'heldout' else bench} accuracy (%)")
    for ax in list(axes.flat)[len(benches):]:
        ax.set_visible(False)
    _legend_below(fig, axes.flat[0])
    return _save(fig, out_dir, "accuracy_vs_flops")


def per_step_lines(frame: pd.DataFrame, column: str, ylabel: str, name: str, colors: dict, out_dir: Path,
                   ylim=(0.0, 1.02)) -> list[Path]:
    """Seed mean and min-max band of a per-step ledger quantity, one line per label."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=COLUMN_IN)
    for label in order(frame["label"]):
        wide = frame[frame["label"] == label].pivot_table(index="step", columns="seed", values=column)
        _band(ax, wide.index.to_numpy(), wide.to_numpy().T, colors[label], label, _marker(label, colors))
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_ylim(*ylim)
    ax.xaxis.get_major_locator().set_params(integer=True)
    _legend_below(fig, ax)
    return _save(fig, out_dir, name)


def pass_rate_distribution(rates: pd.DataFrame, out_dir: Path, windows: int = 10) -> list[Path]:
    """Per label, the share of rolled-out prompts in each pass-rate bin, over training (seeds pooled).

    Steps are cut into `windows` equal spans so each column pools enough prompts.
    Bins 0 and 1 are the zero-variance groups (all wrong / all right).
    """
    plt = _plt()
    labels = order(rates["label"])
    fig, axes = plt.subplots(1, len(labels), figsize=(min(7.0, 1.6 * len(labels) + 0.8), 2.2), sharey=True,
                             squeeze=False)
    cmap = plt.get_cmap("viridis")
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
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in shades]
    fig.legend(handles, [b[2] for b in PASS_BINS], title="pass rate (of n responses)", loc="lower center",
               ncols=len(PASS_BINS), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    return _save(fig, out_dir, "pass_rate_distribution")


def flops_by_phase(summary: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Stacked bars: each label's training FLOPs (seed mean) by phase, from the ledger's flops_* columns.
    Probe rollouts (ASTRAL's reference set) are generation and sit in the rollout part."""
    plt = _plt()
    labels = order(summary["label"])
    means = summary.groupby("label")[list(PHASES)].mean().loc[labels]
    peak = float(means.sum(axis=1).max())
    power = int(np.floor(np.log10(peak))) if peak > 0 else 0
    fig, ax = plt.subplots(figsize=(max(COLUMN_IN[0], 0.55 * len(labels) + 1.2), COLUMN_IN[1]))
    bottom = np.zeros(len(labels))
    for column, (name, color) in PHASES.items():
        values = means[column].to_numpy(float) / 10.0**power
        ax.bar(labels, values, bottom=bottom, color=color, label=name, width=0.7)
        bottom += values
    ax.set_ylabel(f"training compute ($10^{{{power}}}$ FLOPs)")
    ax.tick_params(axis="x", rotation=30)
    ax.grid(axis="x", visible=False)
    _legend_below(fig, ax)
    return _save(fig, out_dir, "flops_by_phase")
