"""The result in one table and one figure: each selector against uniform GRPO on the same seed.

Per benchmark and selector, side by side, the two paired comparisons the
report already computes (paired.py), no new statistic:

* FLOPs to reach the target, as a ratio to uniform's (Table 2: geometric mean
  over seeds, 95% t-interval on log ratios; "not reached" when no seed did);
* Δ accuracy at the FLOP budget (Table 1: mean ± 95% paired t-interval).

Rows are sorted by Δ at the budget, best first; a `<label> (+offline)` row
sits right under its selector, whatever its own Δ, so the cost of the
offline compute reads beside the run that spent it. A comparison whose
interval excludes the null (1, 0) is significant: a filled marker in the
figure, "yes" in the table.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.report.offline import CHARGED
from lze_bench.report.tables import BASELINE

COLUMNS = ["benchmark", "label", "pairs", "delta", "delta_low", "delta_high", "delta_significant", "reached", "seeds",
           "ratio", "ratio_low", "ratio_high", "ratio_significant"]


def summary_table(table1: pd.DataFrame, table2: pd.DataFrame | None) -> pd.DataFrame:
    """Per benchmark and selector (uniform left out: it is the reference): Table 1's Δ with its interval and
    Table 2's ratio with its interval, sorted as the module docstring says."""
    rows = []
    reach = table2.set_index(["benchmark", "label"]) if table2 is not None and len(table2) else None
    for _, r in table1[table1["label"] != BASELINE].iterrows():
        half = r["delta_ci"] if math.isfinite(r["delta_ci"]) else float("nan")
        row = {"benchmark": r["benchmark"], "label": r["label"], "pairs": int(r["pairs"]), "delta": r["delta"],
               "delta_low": r["delta"] - half, "delta_high": r["delta"] + half,
               "delta_significant": r["significant"], "reached": 0, "seeds": 0, "ratio": float("nan"),
               "ratio_low": float("nan"), "ratio_high": float("nan"), "ratio_significant": "–"}
        if reach is not None and (r["benchmark"], r["label"]) in reach.index:
            t2 = reach.loc[(r["benchmark"], r["label"])]
            row.update(reached=int(t2["reached"]), seeds=int(t2["seeds"]),
                       ratio=float(t2["ratio"]) if int(t2["reached"]) else float("nan"),
                       ratio_low=float(t2["ratio_low"]), ratio_high=float(t2["ratio_high"]),
                       ratio_significant=str(t2["significant"]))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return _sorted(frame)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """Held-out first, then benchmarks by name; within one, by Δ (best first, NaN last), `(+offline)` rows under
    their selector."""
    if frame.empty:
        return frame
    parts = []
    benches = sorted(frame["benchmark"].unique(), key=lambda b: (b != "heldout", b))
    for bench in benches:
        mine = frame[frame["benchmark"] == bench]
        own = mine[~mine["label"].str.endswith(CHARGED)]
        own = own.assign(_key=own["delta"].fillna(-np.inf)).sort_values("_key", ascending=False, kind="stable")
        for _, row in own.drop(columns="_key").iterrows():
            parts.append(row.to_frame().T)
            charged = mine[mine["label"] == row["label"] + CHARGED]
            if len(charged):
                parts.append(charged)
        orphans = mine[mine["label"].str.endswith(CHARGED) & ~mine["label"].str[:-len(CHARGED)].isin(own["label"])]
        parts.append(orphans)
    return pd.concat(parts, ignore_index=True).infer_objects()


def summary_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The summary table's Markdown/LaTeX cells."""
    from lze_bench.report.formats import BENCH_TITLES

    header = ["benchmark", "selector", "FLOPs to target (× uniform, paired)", "95% CI", "significant",
              "seeds reached", "Δ accuracy at budget (points, paired)", "95% CI", "significant"]
    rows = []
    for _, r in frame.iterrows():
        reached = int(r["reached"])
        ratio = f"{r['ratio']:.2f}" if reached and math.isfinite(r["ratio"]) else "not reached"
        ratio_ci = f"[{r['ratio_low']:.2f}, {r['ratio_high']:.2f}]" if math.isfinite(r["ratio_low"]) else "–"
        delta = f"{100 * r['delta']:+.1f}" if math.isfinite(r["delta"]) else "–"
        delta_ci = (f"[{100 * r['delta_low']:+.1f}, {100 * r['delta_high']:+.1f}]" if math.isfinite(r["delta_low"])
                    else "–")
        rows.append([BENCH_TITLES.get(r["benchmark"], str(r["benchmark"])), str(r["label"]), ratio, ratio_ci,
                     str(r["ratio_significant"]), f"{reached}/{int(r['seeds'])}", delta, delta_ci,
                     str(r["delta_significant"])])
    return header, rows


def summary_figures(frame: pd.DataFrame, styles: dict, out_dir: Path, fraction: float, budget: str,
                    name: str = "summary") -> list:
    """One figure per benchmark (`summary`, then `summary_<benchmark>`): two panels sharing the selector axis,
    left the FLOPs ratio to the target (log scale), right Δ accuracy at the budget; [] without rows."""
    from lze_bench.report.plot_style import Figure, plt, save

    figures = []
    for k, bench in enumerate(sorted(frame["benchmark"].unique(), key=lambda b: (b != "heldout", b))):
        mine = frame[frame["benchmark"] == bench].reset_index(drop=True)
        fig, (left, right) = plt().subplots(1, 2, figsize=(6.8, 0.22 * len(mine) + 1.0), sharey=True)
        ys = np.arange(len(mine))[::-1]  # the first row at the top
        unreached = _ratio_panel(left, mine, ys, styles)
        _delta_panel(right, mine, ys, styles)
        left.set_yticks(ys, list(mine["label"]))
        left.set_ylim(-0.7, len(mine) - 0.3)
        left.set_xlabel(f"FLOPs to reach {fraction:g} of {BASELINE}'s gain (× {BASELINE}, log)")
        right.set_xlabel(f"Δ {'held-out' if bench == 'heldout' else bench} accuracy at {budget} (points)")
        fig.tight_layout(pad=0.4, w_pad=0.8)
        where = "held-out" if bench == "heldout" else bench
        caption = (f"Each selector against {BASELINE} GRPO on the same seed ({where}; the summary table's numbers, "
                   f"from Tables 1 and 2). Left: FLOPs to reach {fraction:g} of {BASELINE}'s gain over the initial "
                   f"policy, as a ratio to {BASELINE}'s (geometric mean over seeds, 95% t-interval on log ratios; "
                   f"below 1: less compute); right: accuracy difference at {budget} (mean, 95% paired t-interval). "
                   "Filled: the interval excludes 1 (left) or 0 (right), significant at 5%; hollow: not; no bar: "
                   "one seed pair or one seed reached. Sorted by Δ at the budget, best first; `(+offline)` rows "
                   "(offline compute charged) sit under their selector."
                   + (f" Not reached by any seed (arrow at the right edge): {', '.join(unreached)}." if unreached
                      else ""))
        stem = name if k == 0 else f"{name}_{bench}"
        figures.append(Figure(stem, save(fig, out_dir, stem), caption))
    return figures


def _marker(ax, x, y, low, high, significant: bool, style, log: bool) -> None:
    if math.isfinite(low) and math.isfinite(high):
        ax.errorbar([x], [y], xerr=[[x - low], [high - x]], fmt="none", ecolor=style.color, elinewidth=1.1,
                    capsize=1.8)
    ax.plot([x], [y], linestyle="none", marker="o", markersize=4.5, color=style.color,
            markerfacecolor=style.color if significant else "white", markeredgewidth=1.0)


def _ratio_panel(ax, mine: pd.DataFrame, ys, styles) -> list[str]:
    """Ratios on a log axis; rows no seed reached get an arrow at the right edge. Returns those rows' labels."""
    ax.set_xscale("log")
    ax.axvline(1.0, color="#4d4d4d", linewidth=0.8)
    finite = mine[["ratio", "ratio_low", "ratio_high"]].to_numpy(float)
    finite = finite[np.isfinite(finite)]
    lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.5, 2.0)
    lo, hi = min(lo, 0.9) / 1.15, max(hi, 1.1) * 1.15
    unreached = []
    for y, (_, r) in zip(ys, mine.iterrows()):
        style = styles.get(r["label"]) or styles.get(r["label"].removesuffix(CHARGED))
        if not math.isfinite(r["ratio"]):
            unreached.append(str(r["label"]))
            ax.plot([hi / 1.08], [y], linestyle="none", marker=">", markersize=4.5, color=style.color,
                    markerfacecolor="white")
            continue
        _marker(ax, r["ratio"], y, r["ratio_low"], r["ratio_high"], r["ratio_significant"] == "yes", style, True)
    ax.set_xlim(lo, hi)
    _ratio_ticks(ax, lo, hi)
    return unreached


RATIO_TICKS = (0.05, 0.1, 0.2, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0)


def _ratio_ticks(ax, lo: float, hi: float) -> None:
    """Ratios as plain numbers (0.5, 1, 2) at the ticks inside the axis, not powers of ten."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    ticks = [t for t in RATIO_TICKS if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(lambda value, _: f"{value:g}")
    ax.xaxis.set_minor_formatter(NullFormatter())


def _delta_panel(ax, mine: pd.DataFrame, ys, styles) -> None:
    ax.axvline(0.0, color="#4d4d4d", linewidth=0.8)
    for y, (_, r) in zip(ys, mine.iterrows()):
        if not math.isfinite(r["delta"]):
            continue
        style = styles.get(r["label"]) or styles.get(r["label"].removesuffix(CHARGED))
        _marker(ax, 100 * r["delta"], y, 100 * r["delta_low"], 100 * r["delta_high"],
                r["delta_significant"] == "yes", style, False)
