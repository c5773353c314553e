"""Which eval results a report uses: one setting per benchmark, never a mix; eval seeds averaged.

A run's evals.parquet may hold several results per checkpoint and benchmark,
one per settings key (a smoke eval beside the full one, greedy beside sampled;
lze_bench/evaluation/settings.py). A table row averages and pairs accuracies,
so every number of one benchmark must come from one setting. Keys that differ
only in their sampling seed (`eval.seeds=[0,1,2]`: one key per seed) are one
setting: a checkpoint's accuracy is the mean over the seeds it was evaluated
with (the `eval_seeds` column counts them per point; the benchmark table
names the seeds):

* `--eval-suite NAME_OR_KEY` (repeatable) keeps the results whose suite name
  or settings key is one of the choices (a seed's key keeps that seed alone);
  benchmarks no choice covers are left out of the report;
* without it, every benchmark is used as long as it has one setting;
* either way, a benchmark left with more than one setting is refused with one
  line naming each (its keys, suite and settings) and the option to choose;
  so is a checkpoint holding one seed under two keys (settings the parquet
  does not show apart, such as the list of ks).

Then, per run and benchmark, the results are only used when the run's final
checkpoint (step = its ledger's step count: the policy at the budget) was
evaluated: Table 1 reads the last eval point as the accuracy at the budget,
so a run whose last checkpoints are not evaluated yet is left out of that
benchmark (named in a warning) rather than reported at less compute.

`benchmark_table` gives what the report prints per benchmark: problems,
samples per problem, suite, settings key and settings, runs evaluated, and the
largest shares over its eval points of responses cut at max_new_tokens and of
prompts truncated to fit the context.
"""

from __future__ import annotations

import logging

import pandas as pd

from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

SETTING_COLUMNS = ("split", "temperature", "top_p", "max_new_tokens", "limit", "seed", "prompt_template",
                   "chat_template", "grading")
# what makes two results one setting: every recorded setting but the sampling seed
GROUP_COLUMNS = ("samples_per_problem", "k", *(c for c in SETTING_COLUMNS if c != "seed"))


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


def settings_of(row, seeds: list[int] | None = None) -> dict:
    """describe()'s fields of a row; `seeds`: a seed group's seeds (one: that seed)."""
    seed = row["seed"] if not seeds or len(seeds) == 1 else sorted(seeds)
    return {"n_samples": int(row["samples_per_problem"]), **{c: row[c] for c in SETTING_COLUMNS}, "seed": seed}


def _groups(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """The rows of each setting (GROUP_COLUMNS), ordered by their first settings key."""
    groups = [group for _, group in rows.groupby(list(GROUP_COLUMNS), sort=False, dropna=False)]
    return sorted(groups, key=lambda group: min(group["settings_key"]))


def _name(group: pd.DataFrame) -> str:
    from lze_bench.evaluation.settings import describe

    keys = "/".join(sorted(group["settings_key"].unique()))
    suites = "/".join(sorted(set(group["suite"])))
    return f"{suites} {keys} ({describe(settings_of(group.iloc[0], sorted(set(group['seed']))))})"


def choose(results: pd.DataFrame, choices: list[str] | tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows the report uses: one setting per benchmark, one row per checkpoint with its eval seeds
    averaged (module docstring)."""
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
                available = "; ".join(_name(group) for group in _groups(results))
                raise LzeBenchError(f"--eval-suite {choice}: no eval results with that suite name or settings key "
                                    f"(available: {available})")
            keep |= hit
        chosen = results[keep]
    for bench, rows in chosen.groupby("benchmark"):
        groups = _groups(rows)
        if len(groups) > 1:
            named = "; ".join(_name(group) for group in groups)
            raise LzeBenchError(f"benchmark {bench} has eval results under {len(groups)} settings ({named}); choose one "
                                "with --eval-suite NAME_OR_KEY (a suite name or settings key, repeatable)")
    return _final_evaluated(average_seeds(chosen))


def average_seeds(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, checkpoint, benchmark): accuracy, pass@k and maj@k averaged over its eval seeds;
    `eval_seeds` counts them and `seeds` lists them. A seed under two keys at one checkpoint is refused."""
    if rows.empty:
        return rows.assign(eval_seeds=pd.Series(dtype="int64"), seeds=pd.Series(dtype="object"),
                           seed_keys=pd.Series(dtype="object"))
    out = []
    for (_, checkpoint, bench), group in rows.groupby(["run_dir", "checkpoint", "benchmark"], sort=False):
        twice = group["seed"][group["seed"].duplicated()]
        if len(twice):
            keys = ", ".join(sorted(group.loc[group["seed"] == twice.iloc[0], "settings_key"]))
            raise LzeBenchError(f"benchmark {bench}: {group['run'].iloc[0]} {checkpoint} has eval seed "
                                f"{int(twice.iloc[0])} under settings keys {keys} (settings evals.parquet does not "
                                "record, such as eval.ks, differ); choose one with --eval-suite KEY")
        first = group.iloc[0].copy()
        for column in ("accuracy", "pass_at_k", "maj_at_k", "cut_response_frac", "cut_prompt_frac"):
            first[column] = float(group[column].mean())
        first["eval_seeds"] = len(group)
        pairs = sorted(zip(group["seed"].astype(int), group["settings_key"]))
        first["seeds"] = [seed for seed, _ in pairs]
        first["seed_keys"] = [key for _, key in pairs]
        out.append(first)
    return pd.DataFrame(out).reset_index(drop=True).infer_objects()


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
    """Per benchmark: problems, samples per problem, suite, settings key(s) and settings (the union of eval
    seeds), eval seeds per checkpoint ("3", or "2-3" when points differ), runs, checkpoints (`rows`: choose's)."""
    from lze_bench.evaluation.settings import describe

    out = []
    for bench, group in rows.groupby("benchmark"):
        first = group.iloc[0]
        problems = sorted(set(group["num_problems"].astype(int)))
        seeds = sorted({seed for listed in group["seeds"] for seed in listed})
        counts = sorted(set(group["eval_seeds"].astype(int)))
        out.append({"benchmark": bench, "problems": "/".join(map(str, problems)),
                    "samples_per_problem": int(first["samples_per_problem"]),
                    "suite": "/".join(sorted(set(group["suite"]))), "settings_key": _keys(group),
                    "settings": describe(settings_of(first, seeds)),
                    "eval_seeds": str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}",
                    "runs": int(group["run"].nunique()), "eval_points": int(len(group)),
                    # the worst eval point: a curve is only as trustworthy as its most-cut point (NaN: not recorded)
                    "cut_response_frac": float(group["cut_response_frac"].max()),
                    "cut_prompt_frac": float(group["cut_prompt_frac"].max())})
    return pd.DataFrame(out, columns=["benchmark", "problems", "samples_per_problem", "suite", "settings_key",
                                      "settings", "eval_seeds", "runs", "eval_points", "cut_response_frac",
                                      "cut_prompt_frac"])


def _keys(group: pd.DataFrame) -> str:
    """The settings key; each seed's key joined by "/" (in seed order) for a seed group."""
    pairs = sorted({pair for seeds, keys in zip(group["seeds"], group["seed_keys"]) for pair in zip(seeds, keys)})
    return "/".join(key for _, key in pairs)
