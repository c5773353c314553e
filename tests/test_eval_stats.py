"""Eval statistics: intervals that never collapse, pass@k / maj@k intervals, the console table, `eval.seeds`.

Interval numbers are computed by hand from metrics.py's rule (Wilson's score
interval at the effective number of trials n_eff = p(1-p) / (s^2/P), clipped
to [P, P·m]); z = 1.959964, so z^2 = 3.841459. The CLI tests run the real
`lze-bench eval` on conftest's random tiny checkpoint, which answers nothing
right: every accuracy is 0 of N, the case the old percentile bootstrap gave a
zero-width [0, 0] interval for. For numbers other than 0, one test rewrites
the verdicts of the seeds' sample files by hand and lets `eval` aggregate them.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.evaluation import metrics

DATA = Path(__file__).parent / "data"
runner = CliRunner(env={"COLUMNS": "250"})  # rich tables one row per line
Z2 = 1.959963984540054 ** 2


def wilson(p: float, n: float) -> tuple[float, float]:
    """Wilson 1927, written out once more for the expected numbers."""
    center = (p + Z2 / (2 * n)) / (1 + Z2 / n)
    half = math.sqrt(Z2) * math.sqrt(p * (1 - p) / n + Z2 / (4 * n * n)) / (1 + Z2 / n)
    return center - half, center + half


# --- metrics: hand-computed ---------------------------------------------------------


def test_intervals_never_collapse_at_zero_or_all_correct():
    wrong = np.zeros((3, 4), dtype=bool)  # 3 problems, 4 samples, none right
    summary = metrics.summarize(wrong, [[None] * 4] * 3, ks=[2])
    # n_eff = P = 3 at p = 0: [0, z^2 / (3 + z^2)]
    assert (summary["ci_low"], summary["ci_high"]) == (0.0, pytest.approx(Z2 / (3 + Z2)))
    assert summary["pass@2_ci_high"] == summary["maj@2_ci_high"] == pytest.approx(0.5615, abs=1e-4)
    right = metrics.summarize(~wrong, [["7"] * 4] * 3, ks=[2])
    assert (right["ci_low"], right["ci_high"]) == (pytest.approx(3 / (3 + Z2)), 1.0)
    assert right["pass@2_ci_low"] == right["maj@2_ci_low"] == pytest.approx(0.4385, abs=1e-4)


def test_interval_uses_the_effective_number_of_trials():
    correct = np.array([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=bool)
    answers = [["1", None, None, None], ["2", "2", "3", None]]
    summary = metrics.summarize(correct, answers, ks=[2])
    # avg@4 per problem 0.25, 0.75: p 0.5, s^2 0.125, n_eff = 0.25 / (0.125 / 2) = 4 (in [2, 8])
    assert (summary["ci_low"], summary["ci_high"]) == pytest.approx(wilson(0.5, 4))
    assert wilson(0.5, 4) == pytest.approx((0.1500, 0.8500), abs=1e-4)
    assert summary["ci_method"] == "wilson_deff"
    # pass@2 per problem 1 - C(3,2)/C(4,2) = 0.5 and 1: p 0.75, n_eff = 0.1875 / 0.0625 = 3 (in [2, 2·2])
    assert summary["pass@2"] == 0.75
    assert (summary["pass@2_ci_low"], summary["pass@2_ci_high"]) == pytest.approx(wilson(0.75, 3))
    # maj@2 per problem: "1" (right), "2" (right) -> 2 of 2 problems: plain Wilson over problems
    assert (summary["maj@2"], summary["maj@2_ci_low"], summary["maj@2_ci_high"]) == (1.0, pytest.approx(2 / (2 + Z2)),
                                                                                     1.0)
    # every problem at the same inside fraction: s^2 = 0, n_eff = P·n = 6
    even = metrics.summarize(np.array([[1, 0]] * 3, dtype=bool), [["1", None]] * 3, ks=[1])
    assert (even["ci_low"], even["ci_high"]) == pytest.approx(wilson(0.5, 6))
    greedy = metrics.summarize(np.array([[True], [False]]), [["1"], ["2"]], ks=[1])
    assert greedy["ci_method"] == "wilson" and (greedy["ci_low"], greedy["ci_high"]) == pytest.approx(wilson(0.5, 2))


def test_seed_summary_means_spread_and_interval():
    seeds = [np.array([[1, 1], [0, 0]], bool), np.array([[1, 0], [0, 0]], bool), np.zeros((2, 2), bool)]
    answers = [[["4", "4"], [None, None]], [["4", None], [None, None]], [[None, None], [None, None]]]
    out = metrics.summarize_seeds(seeds, answers, ks=[2])
    assert out["accuracy_per_seed"] == [0.5, 0.25, 0.0] and out["accuracy"] == pytest.approx(0.25)
    assert out["accuracy_std"] == pytest.approx(0.25)  # sd (ddof 1) of 0.5, 0.25, 0
    # seed-averaged per problem: 0.5, 0 -> p 0.25, s^2 0.125, n_eff 0.1875 / 0.0625 = 3 (in [2, 2·2·3])
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(wilson(0.25, 3))
    assert out["pass@2_per_seed"] == [0.5, 0.5, 0.0] and out["maj@2_per_seed"] == [0.5, 0.5, 0.0]
    assert out["pass@2"] == pytest.approx(1 / 3) and out["pass@2_std"] == pytest.approx(np.std([0.5, 0.5, 0], ddof=1))


# --- the command ----------------------------------------------------------------------


COMMON = [f"data.root={DATA}", "eval=smoke", "eval.benchmarks=[gsm8k]", "eval.max_new_tokens=6", "grading.workers=1"]


def _base(checkpoint: Path, out: Path, *extra: str) -> list[str]:
    return ["eval", f"model={checkpoint}", f"out_dir={out}", *COMMON, *extra]


def _stamps(folder: Path) -> dict[str, int]:
    """Modification times of the results; the run-dir lock files (runlock.py) are rewritten by every eval."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))
            if p.is_file() and ".lock" not in p.name}


def test_console_labels_avg_at_n_and_prints_pass_and_maj_with_intervals(tiny_checkpoint, tmp_path):
    result = runner.invoke(app, _base(tiny_checkpoint, tmp_path / "out"))
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("┃") and "benchmark" in line)
    assert "avg@2" in header and "pass@2" in header and "maj@2" in header and "accuracy" not in header
    [folder] = [p for p in (tmp_path / "out").iterdir()]
    entry = json.loads((folder / "summary.json").read_text())["gsm8k"]
    assert entry["accuracy"] == 0.0  # the random checkpoint: 0 of 2 problems
    row = next(line for line in result.output.splitlines() if line.startswith("│") and "gsm8k" in line)
    assert row.count("[0.000, 0.658]") == 3  # avg@2, pass@2, maj@2 at 0 of 2 problems: [0, z^2/(2+z^2)]
    for name in ("", "pass@2_", "maj@2_"):
        assert entry[f"{name}ci_low"] == 0.0 and entry[f"{name}ci_high"] == pytest.approx(Z2 / (2 + Z2))
    assert "pass@2,pass@2_ci_low,pass@2_ci_high" in (folder / "summary.csv").read_text().splitlines()[0]


def test_eval_seeds_side_by_side_aggregated_and_idempotent(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    first = runner.invoke(app, _base(tiny_checkpoint, out, "eval.seeds=[0,1,2]"))
    assert first.exit_code == 0, first.output
    keys = sorted(p.name for p in out.iterdir() if not p.name.startswith("seeds-"))
    [group] = [p for p in out.iterdir() if p.name.startswith("seeds-")]
    assert len(keys) == 3  # one settings key (folder) per seed
    seeds = {json.loads((out / k / "summary.json").read_text())["gsm8k"]["settings"]["seed"]: k for k in keys}
    assert sorted(seeds) == [0, 1, 2]
    responses = {s: [json.loads(x)["response"] for x in (out / k / "gsm8k.jsonl").read_text().splitlines()]
                 for s, k in seeds.items()}
    assert responses[0] != responses[1] != responses[2]  # each seed samples its own responses
    header = next(line for line in first.output.splitlines() if line.startswith("┃") and "benchmark" in line)
    assert "seeds" in header and "per seed" in header and "avg@2" in header
    assert "seeds=0,1,2" in first.output and f"outputs: {group}" in first.output

    stamps = _stamps(out)
    again = runner.invoke(app, _base(tiny_checkpoint, out, "eval.seeds=[0,1,2]"))
    assert again.exit_code == 0 and _stamps(out) == stamps  # nothing generated or rewritten
    plain = runner.invoke(app, _base(tiny_checkpoint, out))  # seed=0 alone: the list's seed-0 result
    assert plain.exit_code == 0 and _stamps(out) == stamps and f"outputs: {out / seeds[0]}" in plain.output

    # hand verdicts (the random model has none right): seed 0 2/2 and 0/2, seed 1 1/2 and 0/2, seed 2 none
    verdicts = {0: [True, True, False, False], 1: [True, False, False, False], 2: [False] * 4}
    for seed, marks in verdicts.items():
        path = out / seeds[seed] / "gsm8k.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        for row, mark in zip(rows, marks):
            row.update(correct=mark, extracted="18" if mark else None)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.rmtree(group)
    third = runner.invoke(app, _base(tiny_checkpoint, out, "eval.seeds=[2,0,1]"))  # order does not matter
    assert third.exit_code == 0, third.output
    agg = json.loads((group / "summary.json").read_text())["gsm8k"]
    assert agg["seeds"] == [0, 1, 2] and agg["seed_settings_keys"] == [seeds[0], seeds[1], seeds[2]]
    assert agg["accuracy_per_seed"] == [0.5, 0.25, 0.0] and agg["accuracy"] == pytest.approx(0.25)
    assert agg["accuracy_std"] == pytest.approx(0.25)
    assert (agg["ci_low"], agg["ci_high"]) == pytest.approx(wilson(0.25, 3))  # see test_seed_summary_...
    assert agg["pass@2_per_seed"] == [0.5, 0.5, 0.0] and agg["maj@2_per_seed"] == [0.5, 0.5, 0.0]
    assert "0.2500 ± 0.2500" in third.output and "0.500 0.250 0.000" in third.output

    stamps = _stamps(out)
    more = runner.invoke(app, _base(tiny_checkpoint, out, "eval.seeds=[0,1,2,3]"))  # only seed 3 is new
    assert more.exit_code == 0, more.output
    assert {k: v for k, v in _stamps(out).items() if k in stamps} == stamps
    assert len([p for p in out.iterdir() if not p.name.startswith("seeds-")]) == 4
    assert len(list(out.glob("seeds-*/summary.json"))) == 2  # the 3-seed aggregate stays beside the 4-seed one


def _run_dir(root: Path, checkpoint: Path) -> Path:
    from lze_bench.ledger import LEDGER_COLUMNS, Ledger
    from lze_bench.rundir import atomic_write_text, checkpoint_dir, mark_checkpoint_complete, mark_done

    run = root / "uniform-s0"
    atomic_write_text(run / "config.yaml", f"selector:\n  name: uniform\nseed: 0\nmodel:\n  path: {checkpoint}\n")
    row = {c: 0 for c in LEDGER_COLUMNS if c not in ("cum_flops", "flops_total", "cum_time_s")}
    Ledger(run).append({**row, "step": 0, "flops_rollout": 1000, "time_step_s": 1.0, "partial": False,
                        "heldout_accuracy": float("nan")})
    target = checkpoint_dir(run, 1)
    shutil.copytree(checkpoint, target)
    mark_checkpoint_complete(target)
    mark_done(run, {"stopped_by": "budget", "flop_budget": 1000.0})
    return run


def test_eval_run_seeds_are_rows_side_by_side_with_intervals(tiny_checkpoint, tmp_path):
    from lze_bench.ledger import read_evals

    run = _run_dir(tmp_path / "runs", tiny_checkpoint)
    result = runner.invoke(app, ["eval", f"run={run}", "initial=false", *COMMON, "eval.seeds=[0,1]"])
    assert result.exit_code == 0, result.output
    evals = read_evals(run)
    assert sorted(evals["seed"]) == [0, 1] and evals["settings_key"].nunique() == 2
    assert set(evals["checkpoint"]) == {"step_000001"} and set(evals["k"]) == {2}
    for metric in ("pass_at_k", "maj_at_k"):
        assert (evals[f"{metric}_ci_low"] <= evals[metric]).all() and (evals[metric] < evals[f"{metric}_ci_high"]).all()
    assert (evals["ci_high"] > evals["ci_low"]).all()
    [aggregate] = list((run / "evals" / "step_000001").glob("seeds-*/summary.json"))
    assert json.loads(aggregate.read_text())["gsm8k"]["seeds"] == [0, 1]


def test_eval_sweep_plans_every_seed_and_counts_a_checkpoint_done_with_all(tiny_checkpoint, tmp_path):
    runs = tmp_path / "runs"
    run = _run_dir(runs, tiny_checkpoint)
    sweep = ["eval", f"sweep_dir={runs}", *COMMON, "eval.seeds=[0,1]", "initial=false"]
    dry = runner.invoke(app, [*sweep, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "seeds=0,1" in dry.output and "1 job(s) to submit" in dry.output
    one = runner.invoke(app, ["eval", f"run={run}", "initial=false", *COMMON])
    assert one.exit_code == 0, one.output  # seed 0 alone: the job still has seed 1 to do
    assert "1 job(s) to submit" in runner.invoke(app, [*sweep, "--dry-run"]).output
    both = runner.invoke(app, ["eval", f"run={run}", "initial=false", *COMMON, "eval.seeds=[0,1]"])
    assert both.exit_code == 0, both.output
    done = runner.invoke(app, [*sweep, "--dry-run"])
    assert "done (skip)" in done.output and "0 job(s) to submit" in done.output


def test_evals_parquet_without_interval_columns_reads_as_nan(tmp_path):
    from lze_bench.ledger import EVAL_INTERVAL_COLUMNS, append_eval_rows, read_evals

    row = dict(step=1, checkpoint="step_000001", benchmark="gsm8k", num_problems=5, samples_per_problem=1,
               accuracy=0.2, ci_low=0.0, ci_high=0.5, pass_at_k=0.2, maj_at_k=0.2, k=1, suite="s",
               settings_key="aaaaaaaaaaaa", split="", temperature=0.0, top_p=1.0, max_new_tokens=8, limit=0, seed=0,
               prompt_template="default", chat_template=True, grading="boxed", generation_backend="hf", cum_flops=0.0)
    append_eval_rows(tmp_path, [row])  # a row as lze-bench wrote it before pass@k / maj@k had intervals
    frame = pd.read_parquet(tmp_path / "evals.parquet").drop(columns=list(EVAL_INTERVAL_COLUMNS))
    frame.to_parquet(tmp_path / "evals.parquet")
    evals = read_evals(tmp_path)
    assert evals[list(EVAL_INTERVAL_COLUMNS)].isna().all().all() and evals["accuracy"].tolist() == [0.2]
