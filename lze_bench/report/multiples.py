"""Small multiples: one panel per selector, uniform GRPO drawn in every panel as the reference, shared axes.

Thirteen (or thirty) selectors' curves in one axes hide each other; a panel
each keeps every curve readable, and the shared axes keep them comparable.
Each panel draws a bounded number of artists whatever the number of
selectors or seeds: uniform's seed mean (thin, in uniform's colour: the reference), the
panel's selector as its seed mean and min-max band, at most one line of
markers (every seed's measured points together) and the figure's reference
lines (a target, a budget, zero). Tests count them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lze_bench.report.plot_style import band, order, plt, seed_grid, seed_mean
from lze_bench.report.tables import BASELINE

PANEL_IN = (1.5, 1.2)  # per panel: five across fit a two-column paper's full width
MAX_COLS = 5
REFERENCE_COLOR = "#4d4d4d"  # uniform's own colour (plot_style.SELECTOR_COLORS), which no other label gets
REFERENCE_TEXT = (f"thin dark grey: {BASELINE} GRPO's seed mean, drawn in every panel as the reference; panels share "
                  "both axes")


def seed_curves(frame, label: str, x: str, y: str, scale: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per seed of `label`: (x, y · scale) sorted by x, rows where y is measured."""
    mine = frame[(frame["label"] == label) & frame[y].notna()]
    curves = []
    for _, group in mine.groupby("seed"):
        group = group.sort_values(x)
        curves.append((group[x].to_numpy(float), scale * group[y].to_numpy(float)))
    return curves


def panel_grid(labels: list[str]):
    """(figure, {label: axes}) with one panel per label in display order, MAX_COLS across, shared axes."""
    count = len(labels)
    ncols = min(MAX_COLS, count)
    nrows = -(-count // ncols)
    fig, axes = plt().subplots(nrows, ncols, figsize=(PANEL_IN[0] * ncols + 0.5, PANEL_IN[1] * nrows + 0.4),
                               sharex=True, sharey=True, squeeze=False)
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    for index, ax in enumerate(flat[:count]):
        ax.set_title(labels[index], pad=2)
        if index + ncols >= count:  # no visible panel below: this one shows the x tick labels
            ax.xaxis.set_tick_params(labelbottom=True)
    return fig, dict(zip(labels, flat[:count]))


def draw(curves: dict[str, list[tuple[np.ndarray, np.ndarray]]], styles: dict, markers: bool = False,
         reference: bool = True):
    """One panel per label: its seeds' curves as mean and min-max band (and, with `markers`, a marker at every
    measured point of every seed), and uniform's seed mean in every other panel.
    Returns (figure, {label: axes}, {label: (grid, seed mean)})."""
    labels = order(curves)
    fig, axes = panel_grid(labels)
    means = {}
    for label in labels:
        grid, ys = seed_grid(curves[label])
        means[label] = (grid, seed_mean(ys))
    base = means.get(BASELINE) if reference else None
    for label, ax in axes.items():
        if base is not None and label != BASELINE:
            ax.plot(*base, color=REFERENCE_COLOR, linewidth=0.8, zorder=1)
        style = styles[label]
        grid, ys = seed_grid(curves[label])
        band(ax, grid, ys, replace(style, linestyle="-"), None)  # the panel names the selector: no dashes needed
        if markers:
            xs = np.concatenate([x for x, _ in curves[label]])
            vals = np.concatenate([y for _, y in curves[label]])
            ax.plot(xs, vals, linestyle="none", marker=style.marker, markersize=2.6, markerfacecolor="white",
                    markeredgewidth=0.7, color=style.color, alpha=0.9)
    return fig, axes, means


def axis_names(fig, x_label: str, y_label: str) -> None:
    fig.supxlabel(x_label, fontsize=8)
    fig.supylabel(y_label, fontsize=8)
    width, height = fig.get_size_inches()
    # margins for the shared labels (tight_layout leaves them out): about 0.25 in each
    fig.tight_layout(pad=0.4, h_pad=0.6, w_pad=0.3, rect=(0.25 / width, 0.22 / height, 1, 1))


def paired_deltas(frame, label: str, x: str, y: str, scale: float = 100.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per seed both `label` and uniform ran: (x, (label − uniform) · scale) over the x range both cover, each
    curve joined linearly between its measured points (100 x values). Seeds without a common range are left out."""
    out = []
    measured = frame[frame[y].notna()]
    mine = {seed: g.sort_values(x) for seed, g in measured[measured["label"] == label].groupby("seed")}
    base = {seed: g.sort_values(x) for seed, g in measured[measured["label"] == BASELINE].groupby("seed")}
    for seed in sorted(set(mine) & set(base)):
        xa, ya = mine[seed][x].to_numpy(float), mine[seed][y].to_numpy(float)
        xb, yb = base[seed][x].to_numpy(float), base[seed][y].to_numpy(float)
        lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
        if hi <= lo:
            continue
        grid = np.linspace(lo, hi, 100)
        out.append((grid, scale * (np.interp(grid, xa, ya) - np.interp(grid, xb, yb))))
    return out
