"""Which eval results a report uses: one settings key per benchmark, never a mix.

A run's evals.parquet may hold several results per checkpoint and benchmark,
one per settings key (a smoke eval beside the full one, greedy beside sampled;
lze_bench/evaluation/settings.py). A table row averages and pairs accuracies,
so every number of one benchmark must come from one settings key:

* `--eval-suite NAME_OR_KEY` (repeatable) keeps the results whose suite name
  or settings key is one of the choices; benchmarks no choice covers are left
  out of the report;
* without it, every benchmark is used as long as it has one settings key;
* either way, a benchmark left with more than one key is refused with one line
  naming each key, its suite and its settings, and the option to choose.

Then, per run and benchmark, the results are only used when the run's final
checkpoint (step = its ledger's step count: the policy at the budget) was
evaluated: Table 1 reads the last eval point as the accuracy at the budget,
so a run whose last checkpoints are not evaluated yet is left out of that
benchmark (named in a warning) rather than reported at less compute.

`benchmark_table` gives what the report prints per benchmark: problems,
samples per problem, suite, settings key and settings, runs evaluated.
"""

from __future__ import annotations

import logging

import pandas as pd

from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

SETTING_COLUMNS = ("split", "temperature", "top_p", "max_new_tokens", "limit", "seed", "prompt_template",
                   "chat_template", "grading")


def eval_results(runs) -> pd.DataFrame:
    """Every evals.parquet row of every run, with the run's label, selector, seed and final step."""
    from lze_bench.ledger import read_evals

    frames = []
    for run in runs:
        rows = read_evals(run.run_dir)
        if len(rows):
            final = int(run.ledger["step"].max()) + 1 if len(run.ledger) else 0
            frames.append(rows.assign(label=run.label, selector=run.selector, seed_run=run.seed, run=run.run_dir.name,
                                      run_dir=str(run.run_dir), final_step=final))
    if not frames:
        return pd.DataFrame(columns=["label", "selector", "seed_run", "run", "run_dir", "final_step", "benchmark",
                                     "step", "settings_key", "suite", "accuracy"])
    return pd.concat(frames, ignore_index=True)


def settings_of(row) -> dict:
    return {"n_samples": int(row["samples_per_problem"]), **{c: row[c] for c in SETTING_COLUMNS}}


def _name(rows: pd.DataFrame, key: str) -> str:
    from lze_bench.evaluation.settings import describe

    first = rows[rows["settings_key"] == key].iloc[0]
    suites = "/".join(sorted(set(rows.loc[rows["settings_key"] == key, "suite"])))
    return f"{suites} {key} ({describe(settings_of(first))})"


def choose(results: pd.DataFrame, choices: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows the report uses: one settings key per benchmark (module docstring)."""
    if results.empty:
        if choices:
            raise LzeBenchError(f"--eval-suite {', '.join(choices)}: these runs have no eval results "
                                "(evals.parquet; `lze-bench eval sweep_dir=DIR` writes them)")
        return results
    chosen = results
    if choices:
        keep = pd.Series(False, index=results.index)
        for choice in choices:
            hit = (results["suite"] == choice) | (results["settings_key"] == choice)
            if not hit.any():
                available = "; ".join(_name(results, key) for key in sorted(results["settings_key"].unique()))
                raise LzeBenchError(f"--eval-suite {choice}: no eval results with that suite name or settings key "
                                    f"(available: {available})")
            keep |= hit
        chosen = results[keep]
    for bench, rows in chosen.groupby("benchmark"):
        keys = sorted(rows["settings_key"].unique())
        if len(keys) > 1:
            named = "; ".join(_name(rows, key) for key in keys)
            raise LzeBenchError(f"benchmark {bench} has eval results under {len(keys)} settings ({named}); choose one "
                                "with --eval-suite NAME_OR_KEY (a suite name or settings key, repeatable)")
    return _final_evaluated(chosen)


def _final_evaluated(rows: pd.DataFrame) -> pd.DataFrame:
    """Drop (run, benchmark) pairs whose final checkpoint has no result (see the module docstring)."""
    kept, left_out = [], []
    for (_, bench), group in rows.groupby(["run_dir", "benchmark"], sort=False):
        if (group["step"] == group["final_step"].iloc[0]).any():
            kept.append(group)
        else:
            left_out.append(f"{group['run'].iloc[0]} {bench}")
    if left_out:
        log.warning("left out (final checkpoint not evaluated; run `lze-bench eval sweep_dir=...` again): %s",
                    ", ".join(sorted(left_out)))
    return pd.concat(kept, ignore_index=True) if kept else rows.iloc[0:0]


def benchmark_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark: problems, samples per problem, suite, settings key and settings, runs, checkpoints."""
    from lze_bench.evaluation.settings import describe

    out = []
    for bench, group in rows.groupby("benchmark"):
        first = group.iloc[0]
        problems = sorted(set(group["num_problems"].astype(int)))
        out.append({"benchmark": bench, "problems": "/".join(map(str, problems)),
                    "samples_per_problem": int(first["samples_per_problem"]),
                    "suite": "/".join(sorted(set(group["suite"]))), "settings_key": first["settings_key"],
                    "settings": describe(settings_of(first)), "runs": int(group["run"].nunique()),
                    "eval_points": int(len(group))})
    return pd.DataFrame(out, columns=["benchmark", "problems", "samples_per_problem", "suite", "settings_key",
                                      "settings", "runs", "eval_points"])
