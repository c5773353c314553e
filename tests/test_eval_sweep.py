"""`lze-bench eval sweep_dir=DIR`: plan, dry run, refusals, and (slow) submission through submitit's local executor
with resume and resubmission of a failed job, on hand-made run directories.

Each run directory is what a backend leaves behind: config.yaml (selector, seed, the initial policy as
model.path), a two-step ledger, complete checkpoints step_000001 and step_000002 (copies of the random
tiny checkpoint from conftest.py) and DONE. Benchmarks come from a data folder written here (two problems
each), so nothing depends on the shared benchmark files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app

runner = CliRunner(env={"COLUMNS": "200"})  # rich tables one row per line


def write_data(root: Path) -> Path:
    (root / "gsm8k").mkdir(parents=True, exist_ok=True)
    (root / "gsm8k" / "test.jsonl").write_text('{"question": "6*7?", "answer": "#### 42"}\n'
                                               '{"question": "3+4?", "answer": "#### 7"}\n')
    (root / "math500").mkdir(exist_ok=True)
    (root / "math500" / "test.jsonl").write_text('{"problem": "40+2?", "answer": "42", "unique_id": "a"}\n'
                                                 '{"problem": "5+2?", "answer": "7", "unique_id": "b"}\n')
    return root


def make_run(root: Path, name: str, checkpoint: Path, done: bool = True) -> Path:
    from lze_bench.ledger import LEDGER_COLUMNS, Ledger
    from lze_bench.rundir import atomic_write_text, checkpoint_dir, mark_checkpoint_complete, mark_done

    selector, seed = name.split("-s")
    run = root / name
    atomic_write_text(run / "config.yaml", f"selector:\n  name: {selector}\nseed: {seed}\nmodel:\n  path: {checkpoint}\n")
    ledger = Ledger(run)
    for step in (0, 1):
        row = {c: 0 for c in LEDGER_COLUMNS if c not in ("cum_flops", "flops_total", "cum_time_s")}
        ledger.append({**row, "step": step, "flops_rollout": 1000, "time_step_s": 1.0, "partial": False,
                       "heldout_accuracy": float("nan")})
        target = checkpoint_dir(run, step + 1)
        shutil.copytree(checkpoint, target)
        mark_checkpoint_complete(target)
    if done:
        mark_done(run, {"stopped_by": "budget", "flop_budget": 2000.0})
    return run


@pytest.fixture
def runs(tmp_path, tiny_checkpoint) -> Path:
    root = tmp_path / "runs"
    for name in ("uniform-s0", "lze-s0"):
        make_run(root, name, tiny_checkpoint)
    make_run(root, "hive-s0", tiny_checkpoint, done=False)  # still training: left out
    return root


def args(runs: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["eval", f"sweep_dir={runs}", "eval=smoke", "eval.benchmarks=[gsm8k,math500]", "eval.max_new_tokens=4",
            f"data.root={write_data(tmp_path / 'data')}", "grading.workers=1", "poll_s=0.5", *extra]


def test_dry_run_lists_each_runs_checkpoints_and_writes_nothing(runs, tmp_path):
    result = runner.invoke(app, [*args(runs, tmp_path), "--dry-run"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "uniform-s0" in out and "lze-s0" in out and "initial step_000001 step_000002" in out
    assert "left out (not finished): hive-s0" in out
    assert "benchmarks (checked): gsm8k 2 problems, math500 2 problems" in out
    assert "n=2 T=1 top_p=1 max_new_tokens=4 limit=2 seed=0 prompt=default grading=boxed" in out
    assert "2 job(s) to submit" in out
    assert not (runs / "evals").exists()
    per_checkpoint = runner.invoke(app, [*args(runs, tmp_path), "job_per=checkpoint", "--dry-run"])
    assert per_checkpoint.exit_code == 0 and "6 job(s) to submit" in per_checkpoint.output
    assert "lze-s0-step_000002" in per_checkpoint.output


def test_slurm_dry_run_shows_the_sbatch_script_with_the_jobs_gpus(runs, tmp_path):
    result = runner.invoke(app, [*args(runs, tmp_path), "launcher=slurm", "launcher.gpus_per_node=2",
                                 "launcher.array_parallelism=1", "device=cuda", "generation.backend=vllm",
                                 "generation.data_parallel_size=2", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "#SBATCH --gpus-per-node=2" in result.output and "#SBATCH --job-name=lze-eval-smoke" in result.output
    assert "#SBATCH --array=0-1%1" in result.output  # the two runs' jobs, one at a time
    assert not (runs / "evals").exists()


@pytest.mark.parametrize("extra,message", [
    (["launcher=slurm", "device=cuda", "generation.backend=vllm", "generation.tensor_parallel_size=2"],
     "launcher.gpus_per_node: an eval job with device=cuda uses generation.tensor_parallel_size x data_parallel_size "
     "= 2 GPU(s); pass launcher.gpus_per_node=2"),
    (["out_dir=/tmp/x"], "out_dir: not with sweep_dir="),
    (["run=/tmp/x"], "pass one of model=PATH_OR_HF_ID, run=RUN_DIR or sweep_dir=SWEEP_DIR"),
    (["eval.benchmarks=[gsm8k,aime25]"], "aime25"),  # not in the data folder, no hub: fails before submitting
])
def test_refusals_are_one_line_and_submit_nothing(runs, tmp_path, extra, message, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)  # no hub fallback: the file must be there
    result = runner.invoke(app, [*args(runs, tmp_path), *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not (runs / "evals").exists()


def _manifest(runs: Path) -> tuple[Path, dict]:
    [path] = list((runs / "evals").glob("*/manifest.json"))
    return path.parent, json.loads(path.read_text())


@pytest.mark.slow
def test_local_eval_sweep_resumes_and_resubmits_a_failed_job(runs, tmp_path, tiny_checkpoint):
    from lze_bench.ledger import read_evals

    broken = runs / "lze-s0" / "checkpoints" / "step_000002"
    (broken / "config.json").write_text("{ not json")  # this checkpoint cannot be loaded: lze-s0's job fails
    first = runner.invoke(app, args(runs, tmp_path))
    assert first.exit_code == 2 and "1 of 2 jobs failed (lze-s0)" in first.output, first.output
    folder, manifest = _manifest(runs)
    assert folder.name.startswith("smoke-") and manifest["kind"] == "eval"
    assert {n: e["attempts"] for n, e in manifest["jobs"].items()} == {"uniform-s0": 1, "lze-s0": 1}
    status = runner.invoke(app, ["sweep", "status", str(runs)])
    assert status.exit_code == 0 and "lze-s0" in status.output and "failed" in status.output
    assert "3/3" in status.output and "2/3" in status.output  # uniform all checkpoints, lze all but the broken one

    done_before = runs / "lze-s0" / "evals" / "step_000001" / folder.name.split("-")[-1] / "gsm8k.jsonl"
    stamp = done_before.stat().st_mtime_ns
    shutil.rmtree(broken)
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "COMPLETE").write_text("")
    second = runner.invoke(app, args(runs, tmp_path))
    assert second.exit_code == 0, second.output
    _, manifest = _manifest(runs)
    assert {n: e["attempts"] for n, e in manifest["jobs"].items()} == {"uniform-s0": 1, "lze-s0": 2}  # only it
    assert done_before.stat().st_mtime_ns == stamp  # finished checkpoints were not evaluated again
    for name in ("uniform-s0", "lze-s0"):
        evals = read_evals(runs / name)
        assert sorted(zip(evals["checkpoint"], evals["benchmark"])) == sorted(
            (c, b) for c in ("initial", "step_000001", "step_000002") for b in ("gsm8k", "math500"))
        flops = dict(zip(evals["checkpoint"], evals["cum_flops"]))
        assert flops == {"initial": 0.0, "step_000001": 1000.0, "step_000002": 2000.0}
    third = runner.invoke(app, args(runs, tmp_path))  # everything done: nothing submitted
    assert third.exit_code == 0
    assert {n: e["attempts"] for n, e in _manifest(runs)[1]["jobs"].items()} == {"uniform-s0": 1, "lze-s0": 2}

    other = runner.invoke(app, args(runs, tmp_path, "limit=1", "job_per=checkpoint"))  # other settings: side by side
    assert other.exit_code == 0, other.output
    evals = read_evals(runs / "uniform-s0")
    assert len(evals) == 12 and sorted(evals.groupby("settings_key")["limit"].first()) == [1, 2]
    assert len(list((runs / "evals").glob("*/manifest.json"))) == 2
    status = runner.invoke(app, ["sweep", "status", str(runs)])
    assert status.output.count("evals eval-smoke") == 2


def test_checkpoints_choose_a_subset_of_every_run_and_a_missing_one_is_named_before_anything_starts(runs, tmp_path):
    chosen = runner.invoke(app, [*args(runs, tmp_path), "checkpoints=[step_000002,initial]", "--dry-run"])
    assert chosen.exit_code == 0, chosen.output
    assert "step_000002 initial" in chosen.output and "step_000001" not in chosen.output
    assert "2 job(s) to submit" in chosen.output
    (runs / "lze-s0" / "checkpoints" / "step_000002" / "COMPLETE").unlink()  # lze-s0 now lacks step_000002
    result = runner.invoke(app, [*args(runs, tmp_path), "checkpoints=[step_000002,step_000009]"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: checkpoints: lze-s0 has no step_000002, step_000009; uniform-s0 has no "
                               "step_000009 (under ")
    assert not (runs / "evals").exists()  # nothing planned, written or submitted
