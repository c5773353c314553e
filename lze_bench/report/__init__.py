"""`lze-bench report DIR`: paper tables and plots from ledgers and eval results.

Reads files only (data.py: config.yaml, DONE, ledger.parquet, rollouts, evals.parquet)
and writes `<out_root>/<name>/`:

    report.md                 the summary, the three tables (Markdown), their definitions, the figures
    summary.md .tex .csv      per selector: FLOPs to the target as a ratio to uniform and Δ accuracy at the
                              budget, each with its paired interval (Tables 2 and 1's numbers; summary.py)
    benchmarks.md .tex .csv   per eval benchmark: problems, samples per problem, suite and settings used
                              (report/suites.py; `--eval-suite` chooses when a run holds several)
    table1.md .tex .csv       accuracy at equal compute (the FLOP budget) per selector: seed mean and per-seed
                              range, and its difference to uniform on the same seed (paired; paired.py)
    table1b.md .tex .csv      that difference per seed pair, when each pair has its own initial policy
                              (initial.py; the report says what variation the intervals cover)
    table2.md .tex .csv       FLOPs to reach a fraction of uniform's gain over the initial
                              policy, as a ratio to uniform on the same seed (paired.py)
    table3.md .tex .csv       training FLOPs by phase, offline FLOPs, steps, rollout rounds per step, rollouts
                              generated and trained per step, kept fraction, wall time (tables.py)
    runs.csv at_budget.csv reach.csv points.csv   per-seed numbers behind them (points: every eval point)
    astral_predictor.csv      ASTRAL's predictors' accuracy per run (predictor.py; only with astral runs)
    offline.csv               offline compute per run (offline.py; only with a learned predictor)
    summary                   the summary table as a figure (summary.py)
    accuracy_vs_flops, delta_vs_flops, accuracy_vs_wallclock (+ accuracy_vs_gpu_hours on GPUs): one panel per
                              selector, uniform in each (multiples.py); further benchmarks add `_<benchmark>`
    rl_curves (the reward), rl_curves_<metric>: one figure per ledger metric, one panel per selector
    flops_by_phase, kept_fraction, pass_rate_distribution  (.png + .pdf; report.md captions each)

Importing this module loads pandas/numpy only; matplotlib loads when plotting
(a test checks that neither torch nor a backend is imported).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from lze_bench.report.data import (accuracy_points, flop_budget, heldout_problems, load_runs, pass_rates, per_step,
                                   run_summary)
from lze_bench.report.formats import benchmark_cells, budget_cells, cost_cells, latex, markdown, reach_cells, sci
from lze_bench.report.document import report_md
from lze_bench.report.initial import per_seed_cells, with_provenance
from lze_bench.report.offline import charged_points, offline_summary
from lze_bench.report.predictor import predictor_accuracy
from lze_bench.report.suites import benchmark_table, choose, eval_results
from lze_bench.report.paired import ReportOptions, at_budget, reach, table_budget, table_reach
from lze_bench.report.summary import summary_cells, summary_table
from lze_bench.report.tables import BASELINE, cost_table
from lze_bench.rundir import atomic_write_text

log = logging.getLogger(__name__)


def build(sweep_dir: str | Path, options: ReportOptions | None = None) -> dict:
    """All report numbers as DataFrames (no files written)."""
    options = options or ReportOptions()
    runs = load_runs(sweep_dir)
    evals = choose(eval_results(runs), options.eval_suites)  # one settings key per benchmark (suites.py)
    points = accuracy_points(runs, evals)
    summary = run_summary(runs, points)
    budget = flop_budget(runs)
    # `<label> (+offline)` rows: runs with offline compute (ASTRAL's learned head), charged (offline.py)
    shifted, cut = charged_points(points, runs, budget)
    ends = at_budget(pd.concat([points, cut], ignore_index=True), summary)
    reached = reach(pd.concat([points, shifted], ignore_index=True), options) if len(points) else None
    table1 = table_budget(ends, budget)
    table2 = table_reach(reached) if reached is not None else None
    return {
        "runs": runs, "points": points, "summary": summary, "budget": budget, "options": options,
        "benchmarks": benchmark_table(evals),  # per benchmark: problems, samples, suite, settings
        "heldout_problems": heldout_problems(runs), "at_budget": ends,
        "table1": table1, "reach": reached, "table2": table2,
        "summary_table": summary_table(table1, table2),  # Tables 1 and 2 side by side, per selector
        "table3": cost_table(summary),
        "predictor": predictor_accuracy(runs),  # ASTRAL's predictor (predictor.py); None without astral runs
        "conventions": _conventions(evals),  # grading mode and prompt of the eval results used
        "offline": offline_summary(runs),  # offline compute per run (offline.py); None without it
    }


def _conventions(evals: pd.DataFrame) -> pd.DataFrame | None:
    """(benchmark, grading, prompt) of the eval results the report uses; None without any."""
    if not len(evals):
        return None
    frame = evals[["benchmark", "grading", "prompt_template"]].drop_duplicates()
    return frame.rename(columns={"prompt_template": "prompt"}).reset_index(drop=True)


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_text(path, frame.to_csv(index=False, float_format="%.10g"))


def _write_table(out: Path, stem: str, cells, caption: str, label: str, frame: pd.DataFrame) -> str:
    """`stem`.md, `stem`.tex (booktabs) and `stem`.csv; returns the Markdown."""
    headers, rows = cells
    text = markdown(headers, rows)
    atomic_write_text(out / f"{stem}.md", text)
    atomic_write_text(out / f"{stem}.tex", latex(headers, rows, caption, label))
    _write_csv(out / f"{stem}.csv", frame)
    return text


def write_tables(report: dict, out: Path) -> dict[str, str]:
    """Markdown/LaTeX/CSV files; returns the Markdown of each table for report.md."""
    texts = {}
    budget = report["budget"]
    at = f"the FLOP budget ({sci(budget)} FLOPs)" if budget else "the end of each run (no common trainer.flop_budget)"
    caption1 = (f"Accuracy at {at}: mean over seeds and the per-seed range (min–max; each seed pair starts from "
                "its own initial policy where the runs say so), and the paired difference to uniform GRPO on the "
                "same seed (mean ± 95% paired t-interval): the comparison.")
    texts["table1"] = _write_table(out, "table1", budget_cells(report["table1"], budget), caption1,
                                   "tab:equal-compute", report["table1"])
    per_seed = per_seed_cells(report["at_budget"], report["runs"])
    if per_seed is not None:
        texts["table1b"] = _write_table(out, "table1b", per_seed, "Δ vs uniform GRPO (points) per seed pair, each "
                                        "pair starting from its own initial policy.", "tab:per-seed",
                                        report["at_budget"])
    if len(report["summary_table"]):
        fraction = report["options"].target_fraction
        texts["summary"] = _write_table(
            out, "summary", summary_cells(report["summary_table"]),
            f"Each selector against uniform GRPO on the same seed: FLOPs to reach {fraction:g} of uniform's gain as "
            f"a ratio to uniform's (Table 2) and the accuracy difference at {at} (Table 1), each with its 95% paired "
            "interval; sorted by that difference.", "tab:summary", report["summary_table"])
    _write_csv(out / "runs.csv", with_provenance(report["summary"], report["runs"]))
    _write_csv(out / "at_budget.csv", report["at_budget"])
    _write_csv(out / "points.csv", report["points"])
    if len(report["benchmarks"]):
        texts["benchmarks"] = _write_table(out, "benchmarks", benchmark_cells(report["benchmarks"]),
                                           "Eval results used per benchmark: problems, samples per problem, suite "
                                           "and settings.", "tab:benchmarks", report["benchmarks"])
    if report["table2"] is not None:
        fraction = report["options"].target_fraction
        caption2 = (f"FLOPs to reach {fraction:g} of uniform GRPO's gain over the initial policy (per seed), "
                    "as a ratio to uniform's on the same seed: geometric mean over seeds, 95% CI on log ratios.")
        texts["table2"] = _write_table(out, "table2", reach_cells(report["table2"]), caption2,
                                       "tab:flops-to-target", report["table2"])
        _write_csv(out / "reach.csv", report["reach"])
    else:
        texts["table2"] = f"(no `{BASELINE}` runs with accuracy: Table 2 needs the uniform baseline)\n"
        log.warning("no %s runs with accuracy: Table 2 left out", BASELINE)
    caption3 = ("Training FLOPs by phase (seed means), steps, rollouts generated and trained per step, fraction of "
                "rolled-out prompts kept, wall time.")
    texts["table3"] = _write_table(out, "table3", cost_cells(report["table3"]), caption3, "tab:cost",
                                   report["table3"])
    return texts


def write_plots(report: dict, out: Path) -> list:
    """Every figure (plot_style.Figure: name, files, caption), in the order report.md shows them."""
    from lze_bench.report import plots
    from lze_bench.report.plot_style import power_of_ten, styles_for
    from lze_bench.report.rl_curves import rl_curves
    from lze_bench.report.wallclock import accuracy_vs_time

    runs = report["runs"]
    styles = styles_for({r.label for r in runs})
    figures = []
    points = report["points"]
    if len(report["summary_table"]):
        from lze_bench.report.summary import summary_figures

        budget_text = "the FLOP budget" if report["budget"] else "the end of each run"
        figures += summary_figures(report["summary_table"], styles, out, report["options"].target_fraction,
                                   budget_text)
    if len(points):
        targets = {}
        if report["table2"] is not None:
            base = report["table2"][report["table2"]["label"] == BASELINE]
            targets = dict(zip(base["benchmark"], base["target"]))
        power = power_of_ten(float(points["cum_flops"].max()))
        budget = report["budget"] / 10.0**power if report["budget"] else None
        scaled = points.assign(x=points["cum_flops"] / 10.0**power)
        axis = f"cumulative compute ($10^{{{power}}}$ FLOPs)"
        figures += plots.accuracy_curves(scaled, "x", axis, "accuracy_vs_flops", styles, out, targets, budget,
                                         what="cumulative training FLOPs")
        figures += plots.delta_curves(scaled, "x", axis, "delta_vs_flops", styles, out, budget,
                                      what="cumulative training FLOPs")
        figures += accuracy_vs_time(points, runs, styles, out)
    figures += rl_curves(runs, styles, out)
    figures.append(plots.flops_by_phase(report["summary"], out))
    figures.append(plots.per_step_lines(
        per_step(runs), "kept_fraction", "kept fraction (kept / rolled out)", "kept_fraction", styles, out,
        "Kept fraction: groups that reached the actor update / prompts rolled out, per step (uniform keeps every "
        "group: 1)."))
    rates = pass_rates(runs)
    if len(rates):
        figures.append(plots.pass_rate_distribution(rates, out))
    return figures


def main(sweep_dir: str | Path, name: str | None = None, out_root: str | Path = "reports",
         options: ReportOptions | None = None) -> Path:
    """Write the report of `sweep_dir` into `<out_root>/<name>/` (name: the folder's name); returns that folder."""
    sweep_dir = Path(sweep_dir)
    name = name or sweep_dir.resolve().name
    out = Path(out_root) / name
    out.mkdir(parents=True, exist_ok=True)
    report = build(sweep_dir, options)
    texts = write_tables(report, out)
    if report["predictor"] is not None:
        _write_csv(out / "astral_predictor.csv", report["predictor"])
    if report["offline"] is not None:
        _write_csv(out / "offline.csv", report["offline"].drop(columns=["validation", "time_s"]))
    figures = write_plots(report, out)
    atomic_write_text(out / "report.md", report_md(name, sweep_dir, report, texts, figures))
    from rich.console import Console

    console = Console()
    if "benchmarks" in texts:
        console.print("[bold]Eval results used[/] (per benchmark)", highlight=False)
        console.print(texts["benchmarks"], markup=False, highlight=False, soft_wrap=True)
    console.print(f"[bold]Table 1[/] ({len(report['runs'])} runs)", highlight=False)
    console.print(texts["table1"], markup=False, highlight=False, soft_wrap=True)
    console.print("[bold]Table 2[/]", highlight=False)
    console.print(texts["table2"], markup=False, highlight=False, soft_wrap=True)
    console.print("[bold]Table 3[/]", highlight=False)
    console.print(texts["table3"], markup=False, highlight=False, soft_wrap=True)
    console.print(f"report written to {out}/", highlight=False)
    return out


