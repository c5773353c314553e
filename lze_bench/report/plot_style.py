"""How every report figure looks: size, fonts, one style per selector, bands, legends, files.

Readable at paper column width: single-panel figures are 3.4 x 2.4 in (a
two-column paper's column), fonts 8 pt, every axis names its quantity and unit.
Each label (selector) keeps one colour, one line style and one marker shape in
every figure (`styles_for`): the built-in selectors have fixed colours; any
other label takes the next unused colour in sorted order. Line style and marker
come from the label's position in the display order, so two labels drawn in one
axes still show as two lines; the small multiples (multiples.py) give each
label its own panel and draw it solid.

Bands are the min-max envelope over seeds, the line the seed mean: with 2-3
seeds an interval estimate would be wider than the plot and say less than the
seeds themselves. Every caption says so (BAND_TEXT).
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lze_bench.registry import display_order as order

SELECTOR_COLORS = {"uniform": "#4d4d4d", "dapo": "#1f77b4", "astral": "#ff7f0e", "hive": "#2ca02c", "greso": "#8c564b",
                   "lze": "#d62728"}
SPARE_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
# only the first label (the baseline) is solid: a broken line drawn over another still shows it in its gaps
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3)), (0, (3, 3))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
COLUMN_IN = (3.4, 2.4)
BAND_TEXT = "line: mean over seeds; band: min–max over seeds (no band with one seed)"


@dataclass(frozen=True)
class Style:
    color: str
    linestyle: object
    marker: str


@dataclass
class Figure:
    """A written figure: its name (file stem), files (.png, .pdf) and the caption report.md prints under it."""

    name: str
    paths: list[Path]
    caption: str
    notes: list[str] = field(default_factory=list)


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    pyplot.rcParams.update({"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "legend.fontsize": 7,
                            "xtick.labelsize": 7, "ytick.labelsize": 7, "lines.linewidth": 1.3, "axes.grid": True,
                            "grid.alpha": 0.3, "savefig.bbox": "tight", "pdf.fonttype": 42})
    return pyplot


def colors_for(labels) -> dict[str, str]:
    spare = itertools.cycle(SPARE_COLORS)  # repeats past six other labels: panels and legends name them
    return {label: SELECTOR_COLORS.get(label) or next(spare) for label in order(labels)}


def styles_for(labels) -> dict[str, Style]:
    """One Style per label; the k-th label in display order gets line style k and marker k (cycled)."""
    colors = colors_for(labels)
    return {label: Style(colors[label], LINESTYLES[k % len(LINESTYLES)], MARKERS[k % len(MARKERS)])
            for k, label in enumerate(order(labels))}


def power_of_ten(peak: float) -> int:
    """The exponent an axis is shown in (values / 10**power): floor(log10(peak)), 0 for peak <= 0."""
    return int(np.floor(np.log10(peak))) if peak > 0 else 0


def save(fig, out_dir: Path, name: str) -> list[Path]:
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=200)
    fig.savefig(paths[1])
    plt().close(fig)
    return paths


def legend_below(fig, handles_from) -> None:
    """One legend under the axes (an Axes, or a list whose entries are gathered in order), so no line is
    ever hidden behind it."""
    handles, labels = [], []
    for ax in handles_from if isinstance(handles_from, list) else [handles_from]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    ncols = len(labels) if len(labels) <= 5 else 4
    rows = -(-len(labels) // ncols)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.45, (0.12 + 0.16 * rows) / height), 1, 1))  # ~0.16 in per legend row
    fig.legend(handles, labels, loc="lower center", ncols=ncols, frameon=False,
               bbox_to_anchor=(0.5, 0.0), handlelength=2.6, columnspacing=1.0)


def band(ax, x, ys: np.ndarray, style: Style, label: str | None, markevery=None) -> None:
    """Seed-mean line and min-max band; ys is float[seeds, len(x)]. Markers only where `markevery` says
    (index list or None: no markers); a label of None draws without a legend entry."""
    mean = seed_mean(ys) if len(ys) else np.full(len(x), np.nan)
    ax.plot(x, mean, color=style.color, linestyle=style.linestyle, label=label,
            marker=style.marker if markevery is not None else None, markevery=markevery, markersize=3.5)
    if len(ys) > 1:
        ax.fill_between(x, np.nanmin(ys, axis=0), np.nanmax(ys, axis=0), color=style.color, alpha=0.16, linewidth=0)


def seed_mean(ys: np.ndarray) -> np.ndarray:
    """Mean over seeds (axis 0) ignoring NaN; NaN, without a warning, where no seed has a value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(ys, axis=0)


def seed_grid(runs: list[tuple[np.ndarray, np.ndarray]], points: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Seeds' (x, y) curves joined linearly and resampled on one grid of x:
    (grid float[points], ys float[seeds, points]).

    The grid spans the x range every seed covers, so the mean is never taken over
    a subset of seeds; when the seeds share no range (or there is one seed) it
    spans the union and a seed is NaN outside its own range.
    """
    lo, hi = max(x.min() for x, _ in runs), min(x.max() for x, _ in runs)
    if len(runs) == 1 or hi <= lo:
        lo, hi = min(x.min() for x, _ in runs), max(x.max() for x, _ in runs)
    grid = np.linspace(lo, hi, points)
    ys = np.array([np.interp(grid, x, y, left=np.nan, right=np.nan) for x, y in runs])
    return grid, ys


def coinciding(curves: dict[str, tuple[np.ndarray, np.ndarray]], tolerance: float) -> list[tuple[str, str, float]]:
    """Pairs of labels whose mean curves (x, y) stay within `tolerance` of each other over their common x
    range: (a, b, largest gap), in display order. Captions name them, since one may hide the other."""
    labels = order(curves)
    pairs = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            (xa, ya), (xb, yb) = curves[a], curves[b]
            lo, hi = max(np.nanmin(xa), np.nanmin(xb)), min(np.nanmax(xa), np.nanmax(xb))
            if hi <= lo:
                continue
            grid = np.linspace(lo, hi, 50)
            gap = np.abs(np.interp(grid, xa, ya) - np.interp(grid, xb, yb))
            if np.isfinite(gap).any() and np.nanmax(gap) <= tolerance:
                pairs.append((a, b, float(np.nanmax(gap))))
    return pairs


def coincide_groups(pairs: list[tuple[str, str, float]]) -> list[tuple[list[str], float]]:
    """Coinciding pairs joined into groups (labels linked by any chain of pairs), each in display order with its
    largest gap, groups ordered by their first label: twenty-one pairs among seven identical curves are one
    group of seven."""
    groups: list[set[str]] = []
    for a, b, _ in pairs:
        touching = [group for group in groups if a in group or b in group]
        groups = [group for group in groups if group not in touching] + [set().union({a, b}, *touching)]
    rank = {label: i for i, label in enumerate(order({label for a, b, _ in pairs for label in (a, b)}))}
    found = [(order(group), max(gap for a, _, gap in pairs if a in group)) for group in groups]
    return sorted(found, key=lambda item: rank[item[0][0]])


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


def coincide_note(pairs: list[tuple[str, str, float]], unit: str, panel: str | None = None) -> str:
    """One caption sentence naming the groups of coinciding curves (in `panel`, when the figure has several), or
    ""."""
    if not pairs:
        return ""
    said = "; ".join(f"{_names(members)} (" + ("identical" if gap == 0 else
                                              f"within {gap:.2g}{' ' + unit if unit else ''}") + ")"
                     for members, gap in coincide_groups(pairs))
    where = f"In the {panel} panels, curves" if panel else "Curves"
    return f" {where} that coincide (each drawn in its own panel): {said}."
