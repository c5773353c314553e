"""`lze-bench report DIR`: paper tables and plots from ledgers and eval results.

Reads files only (data.py: config.yaml, ledger.parquet, rollouts, evals.parquet)
and writes `<out_root>/<name>/`:

    report.md                 both tables (Markdown) and the figures, with definitions
    table1.md table1.tex      per selector: final accuracy per benchmark (mean ± 95% CI
                              over seeds), rollout/train/total FLOPs, kept fraction, wall time
    table2.md table2.tex      FLOPs and wall time to reach uniform's final accuracy, as a
                              ratio to uniform (definition: tables.py)
    astral_predictor.csv      ASTRAL's predictor accuracy per run (predictor.py; only with astral runs)
    table1.csv table2.csv     the tables' numbers (means, CI half-widths, counts)
    runs.csv reach.csv        per-seed numbers behind them
    accuracy_vs_flops, kept_fraction, pass_rate_distribution, zero_variance  (.png + .pdf)

Importing this module loads pandas/numpy only; matplotlib loads when plotting
(a test checks that neither torch nor a backend is imported).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from lze_bench.report.data import accuracy_points, load_runs, pass_rates, per_step, run_summary
from lze_bench.report.formats import latex, markdown, table1_cells, table2_cells
from lze_bench.report.predictor import predictor_accuracy, predictor_section
from lze_bench.report.tables import BASELINE, benchmarks_of, reach, table1, table2
from lze_bench.rundir import atomic_write_text

log = logging.getLogger(__name__)


def build(sweep_dir: str | Path) -> dict:
    """All report numbers as DataFrames (no files written)."""
    runs = load_runs(sweep_dir)
    points = accuracy_points(runs)
    summary = run_summary(runs, points)
    benches = benchmarks_of(points) if len(points) else []
    reached = [r for r in (reach(points, summary, b) for b in benches) if r is not None]
    reach_frame = pd.concat(reached, ignore_index=True) if reached else None
    return {
        "runs": runs, "points": points, "summary": summary, "benchmarks": benches,
        "table1": table1(summary, benches), "reach": reach_frame,
        "table2": table2(reach_frame) if reach_frame is not None else None,
        "predictor": predictor_accuracy(runs),  # ASTRAL's predictor (predictor.py); None without astral runs
    }


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
    caption1 = ("Final accuracy (mean ± 95% CI over seeds), FLOPs spent (seed mean), fraction of rolled-out "
                "prompts kept for the update, and wall time, per selector.")
    texts["table1"] = _write_table(out, "table1", table1_cells(report["table1"], report["benchmarks"]),
                                   caption1, "tab:final", report["table1"])
    _write_csv(out / "runs.csv", report["summary"])
    if report["table2"] is not None:
        caption2 = ("FLOPs and wall time to first reach uniform GRPO's mean final accuracy (the target), "
                    "as a ratio to uniform's (mean ± 95% CI over the seeds that reach it).")
        texts["table2"] = _write_table(out, "table2", table2_cells(report["table2"]), caption2,
                                       "tab:flops-to-target", report["table2"])
        _write_csv(out / "reach.csv", report["reach"])
    else:
        texts["table2"] = f"(no `{BASELINE}` runs with accuracy: Table 2 needs the uniform baseline)\n"
        log.warning("no %s runs with accuracy: Table 2 left out", BASELINE)
    return texts


def write_plots(report: dict, out: Path) -> list[Path]:
    from lze_bench.report import plots

    runs = report["runs"]
    colors = plots.colors_for({r.label for r in runs})
    steps = per_step(runs)
    paths = []
    if len(report["points"]):
        targets = {}
        if report["table2"] is not None:
            targets = dict(zip(report["table2"]["benchmark"], report["table2"]["target"]))
        paths += plots.accuracy_vs_flops(report["points"], targets, colors, out)
    paths += plots.per_step_lines(steps, "kept_fraction", "kept fraction (kept / rolled out)", "kept_fraction",
                                  colors, out)
    paths += plots.per_step_lines(steps, "zero_variance_frac", "zero-variance groups (fraction)", "zero_variance",
                                  colors, out)
    rates = pass_rates(runs)
    if len(rates):
        paths += plots.pass_rate_distribution(rates, out)
    return paths


def main(sweep_dir: str | Path, name: str | None = None, out_root: str | Path = "reports") -> Path:
    """Write the report of `sweep_dir` into `<out_root>/<name>/` (name: the folder's name); returns that folder."""
    sweep_dir = Path(sweep_dir)
    name = name or sweep_dir.resolve().name
    out = Path(out_root) / name
    out.mkdir(parents=True, exist_ok=True)
    report = build(sweep_dir)
    texts = write_tables(report, out)
    if report["predictor"] is not None:
        _write_csv(out / "astral_predictor.csv", report["predictor"])
    figures = write_plots(report, out)
    atomic_write_text(out / "report.md", _report_md(name, sweep_dir, report, texts, figures))
    from rich.console import Console

    console = Console()
    console.print(f"[bold]Table 1[/] ({len(report['runs'])} runs)", highlight=False)
    console.print(texts["table1"], markup=False, highlight=False, soft_wrap=True)
    console.print("[bold]Table 2[/]", highlight=False)
    console.print(texts["table2"], markup=False, highlight=False, soft_wrap=True)
    console.print(f"report written to {out}/", highlight=False)
    return out


def _report_md(name: str, sweep_dir: Path, report: dict, texts: dict, figures: list[Path]) -> str:
    seeds = sorted({r.seed for r in report["runs"]})
    pngs = [p.name for p in figures if p.suffix == ".png"]
    lines = [
        f"# Report: {name}",
        "",
        f"Generated by `lze-bench report {sweep_dir}` from {len(report['runs'])} finished runs "
        f"(seeds {', '.join(map(str, seeds))}). Accuracy `heldout` is the synthetic held-out set evaluated "
        "during training; other benchmarks come from `lze-bench eval`. ± is the 95% Student-t interval over seeds.",
        "",
        "## Table 1: final accuracy and cost",
        "",
        texts["table1"],
        "FLOPs: counted from the tokens actually processed (design.md, FLOP accounting); train = update + "
        "log-prob passes. Kept fraction = groups reaching the actor update / prompts rolled out.",
        "",
        "## Table 2: compute to reach uniform GRPO's final accuracy",
        "",
        texts["table2"],
        "Target = uniform's mean final accuracy. Per seed, the FLOPs (cumulative, ledger) at the first eval point "
        "at or above the target; ratio = that / uniform's mean FLOPs to the target; mean ± CI over the seeds that "
        "reach it. \"not reached\": no eval point of any seed reaches the target.",
        "",
    ]
    lines += predictor_section(report.get("predictor"))
    lines += [
        "## Figures",
        "",
    ]
    lines += [f"![{png[:-4]}]({png})" for png in pngs]
    return "\n".join(lines) + "\n"
