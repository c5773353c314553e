"""Report figures stay legible at many selectors: one panel per selector, a bounded number of lines per panel.

The figure functions are called on synthetic curves of 13 and 30 selectors (3 seeds each, uniform among
them); `save` is replaced so the matplotlib Figure objects can be inspected before they are closed.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from lze_bench.report import plots, rl_curves, summary
from lze_bench.report.plot_style import coincide_note, styles_for

SEEDS = (0, 1, 2)
# per panel: uniform's reference, the selector's mean, one line of markers, a target, a budget
MOST_LINES = 5


def labels_of(count: int) -> list[str]:
    return ["uniform"] + [f"sel{k:02d}" for k in range(1, count)]


def accuracy_points(labels: list[str]) -> pd.DataFrame:
    rows = []
    for k, label in enumerate(labels):
        for seed in SEEDS:
            for step in range(-1, 6):
                rows.append({"label": label, "seed": seed, "benchmark": "heldout", "step": step,
                             "x": float(step + 1), "accuracy": 0.3 + 0.05 * (step + 1) + 0.002 * k + 0.01 * seed})
    return pd.DataFrame(rows)


@pytest.fixture
def drawn(monkeypatch):
    """The figures the report functions draw, kept open instead of written."""
    figures = []

    def keep(fig, out_dir, name):
        figures.append((name, fig))
        return []

    for module in (plots, rl_curves, summary):
        monkeypatch.setattr(module, "save", keep, raising=False)
    monkeypatch.setattr("lze_bench.report.plot_style.save", keep)
    yield figures
    from lze_bench.report.plot_style import plt

    for _, fig in figures:
        plt().close(fig)


def panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]


@pytest.mark.parametrize("count", [13, 30])
def test_accuracy_and_delta_curves_draw_one_panel_per_selector_with_few_lines(drawn, tmp_path, count):
    labels = labels_of(count)
    points = accuracy_points(labels)
    styles = styles_for(labels)
    plots.accuracy_curves(points, "x", "x", "accuracy_vs_flops", styles, tmp_path, {"heldout": 0.5}, 6.0, "FLOPs")
    plots.delta_curves(points, "x", "x", "delta_vs_flops", styles, tmp_path, 6.0, "FLOPs")
    (_, accuracy), (_, delta) = drawn
    assert [ax.get_title() for ax in panels(accuracy)] == labels
    assert [ax.get_title() for ax in panels(delta)] == labels[1:]  # uniform minus itself is no panel
    for ax in panels(accuracy) + panels(delta):
        assert len(ax.get_lines()) <= MOST_LINES, ax.get_title()
    # shared axes: every panel shows the same x and y range
    assert len({ax.get_xlim() for ax in panels(accuracy)}) == 1 and len({ax.get_ylim() for ax in panels(accuracy)}) == 1
    # uniform's seed mean is drawn in every other panel, in uniform's colour: the same line everywhere
    reference = [line for ax in panels(accuracy)[1:] for line in ax.get_lines()
                 if line.get_color() == styles["uniform"].color]
    assert len(reference) == count - 1
    assert all(np.array_equal(line.get_ydata(), reference[0].get_ydata()) for line in reference)
    # the figure grows in rows, not in width: at most five panels across
    assert accuracy.get_size_inches()[0] < 8.5


@pytest.mark.parametrize("count", [13, 30])
def test_rl_curves_are_one_figure_per_metric_with_a_panel_per_selector(drawn, tmp_path, count):
    labels = labels_of(count)
    runs = []
    for k, label in enumerate(labels):
        for seed in SEEDS:
            steps = np.arange(6)
            ledger = pd.DataFrame({"step": steps, "cum_flops": 100.0 * (steps + 1), "samples": 32.0,
                                   "generated_tokens": 32.0 * (20 + steps + k), "reward_mean": 0.3 + 0.05 * steps,
                                   "grad_norm": 1.0 + steps + seed, "zero_variance_frac": 0.5 - 0.05 * steps})
            runs.append(SimpleNamespace(label=label, seed=seed, ledger=ledger))
    figures = rl_curves.rl_curves(runs, styles_for(labels), tmp_path)
    assert [f.name for f in figures] == ["rl_curves", "rl_curves_response_length", "rl_curves_grad_norm",
                                         "rl_curves_zero_variance_frac"]
    assert "Left out: KL to reference (no such column in these ledgers)" in figures[0].caption
    for _, fig in drawn:
        assert [ax.get_title() for ax in panels(fig)] == labels
        assert max(len(ax.get_lines()) for ax in panels(fig)) <= 2  # the selector's mean and uniform's


def test_kept_fraction_panels_and_one_sentence_for_many_coinciding_curves(drawn, tmp_path):
    labels = labels_of(13)
    frame = pd.DataFrame([{"label": label, "seed": seed, "step": step,
                           "kept_fraction": 1.0 if k < 7 else 0.5 + 0.01 * k}
                          for k, label in enumerate(labels) for seed in SEEDS for step in range(5)])
    figure = plots.per_step_lines(frame, "kept_fraction", "kept", "kept_fraction", styles_for(labels), tmp_path,
                                  "Kept.")
    (_, fig), = drawn
    assert len(panels(fig)) == 13 and max(len(ax.get_lines()) for ax in panels(fig)) <= 2
    # seven identical curves are 21 pairs, named as one group in one sentence
    assert ("Curves that coincide (each drawn in its own panel): uniform, sel01, sel02, sel03, sel04, sel05 and "
            "sel06 (identical).") in figure.caption
    assert figure.caption.count("coincide") == 1


def test_coinciding_pairs_join_into_groups():
    pairs = [("uniform", "astral", 0.0), ("lze", "lze_full", 0.3), ("astral", "mopps", 0.0)]
    assert coincide_note(pairs, "points") == (" Curves that coincide (each drawn in its own panel): uniform, astral "
                                              "and mopps (identical); lze and lze_full (within 0.3 points).")


def summary_frame(count: int) -> pd.DataFrame:
    """table1/table2-shaped rows: uniform, then selectors with alternating significance; sel03 never reaches."""
    t1, t2 = [], []
    for k, label in enumerate(labels_of(count) + ["sel01 (+offline)"]):
        base = label == "uniform"
        t1.append({"benchmark": "heldout", "label": label, "seeds": 3, "accuracy": 0.5, "accuracy_ci": 0.1,
                   "delta": float("nan") if base else 0.01 * (k - 5), "delta_ci": float("nan") if base else 0.02,
                   "pairs": 0 if base else 3, "significant": "–" if base else ("yes" if abs(k - 5) > 2 else "no")})
        reached = 0 if label == "sel03" else 3
        t2.append({"benchmark": "heldout", "label": label, "target": 0.5, "flops_to_target": 1e3, "reached": reached,
                   "seeds": 3, "ratio": 1.0 if base else 0.5 + 0.05 * k, "ratio_low": 0.4 + 0.05 * k,
                   "ratio_high": 0.7 + 0.05 * k, "significant": "–" if base else "no"})
    return summary.summary_table(pd.DataFrame(t1), pd.DataFrame(t2))


@pytest.mark.parametrize("count", [13, 30])
def test_summary_sorts_by_delta_keeps_offline_rows_under_their_selector_and_draws_each(drawn, tmp_path, count):
    frame = summary_frame(count)
    labels = list(frame["label"])
    assert "uniform" not in labels and len(labels) == count
    deltas = frame[~frame["label"].str.endswith("(+offline)")]["delta"].to_list()
    assert deltas == sorted(deltas, reverse=True)
    assert labels[labels.index("sel01") + 1] == "sel01 (+offline)"
    assert frame.set_index("label").loc["sel03", "reached"] == 0 and np.isnan(frame.set_index("label").loc["sel03",
                                                                                                            "ratio"])
    styles = styles_for(labels_of(count))
    figures = summary.summary_figures(frame, styles, tmp_path, 0.9, "the FLOP budget")
    assert [f.name for f in figures] == ["summary"]
    assert "Not reached by any seed (arrow at the right edge): sel03." in figures[0].caption
    (_, fig), = drawn
    left, right = fig.axes
    assert left.get_xscale() == "log"
    assert [t.get_text() for t in left.get_yticklabels()] == labels  # top to bottom: the table's order
    # the markers: filled where significant, hollow where not (right panel: Δ)
    markers = [line for line in right.get_lines() if line.get_marker() == "o"]
    filled = [line.get_markerfacecolor() != "white" for line in markers]
    assert filled == [s == "yes" for s in frame["delta_significant"]]
    cells = summary.summary_cells(frame)[1]
    assert cells[labels.index("sel03")][2] == "not reached"
