"""The equal-compute pipeline with benchmarks, on the embedded backend, at the CLI: a micro sweep (2 selectors x
2 seeds, one FLOP budget, a checkpoint every 2 steps and at the end) -> `lze-bench eval sweep_dir=` (submitit's local executor, HF
generation on the tiny checkpoints, a 2-benchmark suite with `limit`) -> `lze-bench report`.

The two benchmarks are gsm8k and math500 *by format*: a data folder written here holds held-out problems of
the synthetic task in each benchmark's file layout (gsm8k: question + "#### answer"; math500: problem, answer,
unique_id), prompted with the bare problem as the tiny policy was trained, so accuracies are not all zero and
the tables have something to compare. Nothing here reads the shared benchmark files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.ledger import read_evals, read_ledger
from lze_bench.rundir import list_checkpoints
from lze_bench.sweep.manifest import load_manifest

runner = CliRunner(env={"COLUMNS": "200"})
SELECTORS = ["uniform", "lze"]
BENCHMARKS = ["gsm8k", "math500"]
SUITE = """name: two
benchmarks: [gsm8k, math500]
n_samples: 1
temperature: 0.0
max_new_tokens: 64
ks: [1]
prompt_template: "{problem}"
"""


def write_data(root: Path) -> Path:
    from lze_bench.tasks.synthetic import load_split

    rows = load_split("test")[:20]
    (root / "gsm8k").mkdir(parents=True)
    (root / "math500").mkdir()
    with (root / "gsm8k" / "test.jsonl").open("w") as handle:
        for row in rows[:10]:
            handle.write(json.dumps({"question": row["problem"], "answer": f"{row['solution']}\n#### {row['answer']}"}) + "\n")
    with (root / "math500" / "test.jsonl").open("w") as handle:
        for i, row in enumerate(rows[10:]):
            handle.write(json.dumps({"problem": row["problem"], "answer": str(row["answer"]), "unique_id": f"s/{i}"}) + "\n")
    return root


@pytest.mark.slow
def test_sweep_then_eval_sweep_then_report_per_benchmark(tmp_path):
    sweep_dir = tmp_path / "micro"
    trained = runner.invoke(app, ["sweep", "sweep=micro", "selector=uniform,lze", "seed=0,1", "trainer.steps=8",
                                  "trainer.flop_budget=7.5e10", "trainer.checkpoint_every=2", f"sweep_dir={sweep_dir}",
                                  "poll_s=2"])
    assert trained.exit_code == 0, trained.output
    (tmp_path / "two.yaml").write_text(SUITE)
    evaluate = ["eval", f"sweep_dir={sweep_dir}", f"eval={tmp_path / 'two.yaml'}", f"data.root={write_data(tmp_path / 'data')}",
                "limit=10", "grading.workers=1", "poll_s=2"]
    result = runner.invoke(app, evaluate)
    assert result.exit_code == 0, result.output
    [manifest_path] = list((sweep_dir / "evals").glob("two-*/manifest.json"))
    jobs = json.loads(manifest_path.read_text())["jobs"]
    assert sorted(jobs) == sorted(f"{s}-s{seed}" for s in SELECTORS for seed in (0, 1))
    assert all(e["checkpoints"][0] == "initial" for e in jobs.values())
    status = runner.invoke(app, ["sweep", "status", str(sweep_dir)])
    assert status.exit_code == 0 and "evals eval-two" in status.output and "4 done" in status.output
    again = runner.invoke(app, evaluate)  # everything finished: nothing is submitted again
    assert again.exit_code == 0 and {e["attempts"] for e in json.loads(manifest_path.read_text())["jobs"].values()} == {1}

    # every run stopped on the budget, every checkpoint of it evaluated on both benchmarks, at its FLOPs
    train = load_manifest(sweep_dir)
    for entry in train["jobs"].values():
        run = sweep_dir / entry["run_dir"]
        assert json.loads((run / "DONE").read_text())["stopped_by"] == "budget"
        ledger, evals = read_ledger(run), read_evals(run)
        saved = [step for step, _ in list_checkpoints(run)]
        assert saved[-1] == len(ledger) and sorted(set(evals["step"])) == [0, *saved]  # initial and every checkpoint
        assert set(evals["benchmark"]) == set(BENCHMARKS) and set(evals["limit"]) == {10}
        for _, row in evals.iterrows():
            expected = 0.0 if row["step"] == 0 else float(ledger.loc[ledger["step"] == row["step"] - 1, "cum_flops"].iloc[0])
            assert row["cum_flops"] == expected

    out_root = tmp_path / "reports"
    report = runner.invoke(app, ["report", str(sweep_dir), "--name", "micro", "--out-root", str(out_root)])
    assert report.exit_code == 0, report.output
    out = out_root / "micro"
    t1 = pd.read_csv(out / "table1.csv").set_index(["benchmark", "label"])
    assert sorted(t1.index) == sorted((b, s) for b in ["heldout", *BENCHMARKS] for s in SELECTORS)
    for bench in BENCHMARKS:
        lze, uniform = t1.loc[(bench, "lze")], t1.loc[(bench, "uniform")]
        assert lze["seeds"] == 2 and lze["pairs"] == 2 and math.isfinite(lze["delta_ci"])  # a paired interval
        assert math.isnan(uniform["delta"]) and 0 <= uniform["accuracy"] <= 1 and math.isfinite(uniform["accuracy_ci"])
        assert lze["capped"] == 0 and uniform["flops_over_budget"] >= 1.0  # stopped on the budget
    t2 = pd.read_csv(out / "table2.csv").set_index(["benchmark", "label"])
    assert sorted(t2.index) == sorted((b, s) for b in ["heldout", *BENCHMARKS] for s in SELECTORS)
    points = pd.read_csv(out / "points.csv")
    for (label, seed), group in points[points["benchmark"].isin(BENCHMARKS)].groupby(["label", "seed"]):
        ledger = read_ledger(sweep_dir / "runs" / f"{label}-s{seed}")
        at = dict(zip(ledger["step"], ledger["cum_flops"]))
        expected = [0.0 if s < 0 else at[s] for s in group["step"]]  # ledger step K-1 = checkpoint step_K
        assert group["cum_flops"].tolist() == pytest.approx(expected, rel=1e-9)  # points.csv keeps 10 digits
    used = pd.read_csv(out / "benchmarks.csv").set_index("benchmark")
    assert list(used.index) == BENCHMARKS and (used["problems"] == 10).all() and (used["suite"] == "two").all()
    assert (used["samples_per_problem"] == 1).all() and "limit=10" in used.loc["gsm8k", "settings"]
    assert "## Eval results used" in (out / "report.md").read_text() and "| gsm8k | 10 | 1 | two |" in report.output

    # the same runs evaluated with other settings: both results kept; the report must be told which
    other = runner.invoke(app, [*evaluate[:-3], "limit=5", "grading.workers=1", "poll_s=2"])
    assert other.exit_code == 0, other.output
    evals = read_evals(sweep_dir / "runs" / "uniform-s0")
    assert sorted(set(evals["limit"])) == [5, 10] and evals.groupby("settings_key").size().nunique() == 1
    mixed = runner.invoke(app, ["report", str(sweep_dir), "--out-root", str(out_root)])
    assert mixed.exit_code == 2 and "has eval results under 2 settings" in mixed.output
    key5 = evals.loc[evals["limit"] == 5, "settings_key"].iloc[0]
    chosen = runner.invoke(app, ["report", str(sweep_dir), "--name", "five", "--out-root", str(out_root),
                                 "--eval-suite", key5])
    assert chosen.exit_code == 0, chosen.output
    assert (pd.read_csv(out_root / "five" / "benchmarks.csv")["problems"] == 5).all()
