"""The ledger and run directory files that every report reads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lze_bench import rundir
from lze_bench.errors import LzeBenchError
from lze_bench.ledger import (
    LEDGER_COLUMNS,
    Ledger,
    RolloutLog,
    append_eval_rows,
    read_evals,
    read_ledger,
    read_rollouts,
)


def _row(step: int, **extra) -> dict:
    row = {name: 0 for name, dtype in LEDGER_COLUMNS.items() if dtype == "int64"}
    row.update({name: 0.0 for name, dtype in LEDGER_COLUMNS.items() if dtype == "float64"})
    row.update(step=step, partial=False, flops_rollout=10 * (step + 1), flops_logprob=5, flops_train=30,
               time_step_s=1.5)
    for key in ("flops_total", "cum_flops", "cum_time_s", "heldout_accuracy"):
        row.pop(key)
    row.update(extra)
    return row


def test_ledger_fills_totals_and_cumulative_columns(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(_row(0))
    ledger.append(_row(1, heldout_accuracy=0.5))
    frame = read_ledger(tmp_path)
    assert frame["flops_total"].tolist() == [45, 55]
    assert frame["cum_flops"].tolist() == [45.0, 100.0]
    assert frame["cum_time_s"].tolist() == [1.5, 3.0]
    assert np.isnan(frame["heldout_accuracy"].iloc[0]) and frame["heldout_accuracy"].iloc[1] == 0.5
    assert set(LEDGER_COLUMNS) <= set(frame.columns)


def test_ledger_refuses_duplicate_steps_and_missing_columns(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(_row(0))
    with pytest.raises(LzeBenchError, match="duplicate step 0"):
        ledger.append(_row(0))
    incomplete = _row(1)
    del incomplete["samples"]
    with pytest.raises(LzeBenchError, match="samples"):
        ledger.append(incomplete)


def test_resume_truncates_ledger_and_rollouts_after_checkpoint(tmp_path):
    ledger, log = Ledger(tmp_path), RolloutLog(tmp_path)
    for step in range(4):
        ledger.append(_row(step))
        log.append(step, [{"step": step, "prompt_id": step, "rewards": [1.0, 0.0], "response_tokens": [3, 4],
                           "kept": True}])
    reopened = Ledger(tmp_path)
    reopened.truncate_after(1)
    RolloutLog(tmp_path).truncate_after(1)
    assert read_ledger(tmp_path)["step"].tolist() == [0, 1]
    assert read_rollouts(tmp_path)["step"].tolist() == [0, 1]
    reopened.append(_row(2))  # continues without a gap or a duplicate
    assert read_ledger(tmp_path)["step"].tolist() == [0, 1, 2]
    assert read_ledger(tmp_path)["cum_flops"].iloc[-1] == pytest.approx(45 + 55 + 65)


def test_rollout_parts_compact_into_one_file(tmp_path):
    log = RolloutLog(tmp_path)
    for step in range(3):
        log.append(step, pd.DataFrame({"step": [step, step], "prompt_id": [2 * step, 2 * step + 1],
                                       "rewards": [[1.0], [0.0]], "response_tokens": [[5], [6]],
                                       "kept": [True, False]}))
    log.compact()
    assert (tmp_path / "rollouts.parquet").exists() and not (tmp_path / "rollouts").exists()
    frame = read_rollouts(tmp_path)
    assert frame["prompt_id"].tolist() == [0, 1, 2, 3, 4, 5]
    assert frame["kept"].tolist() == [True, False] * 3


def test_eval_rows_are_keyed_by_checkpoint_benchmark_and_settings(tmp_path):
    settings = dict(split="", temperature=0.0, top_p=1.0, max_new_tokens=64, limit=0, seed=0, prompt_template="default",
                    chat_template=True, grading="boxed")
    base = dict(step=10, checkpoint="step_000010", benchmark="gsm8k", num_problems=5, samples_per_problem=1,
                accuracy=0.2, ci_low=0.0, ci_high=0.5, pass_at_k=0.2, maj_at_k=0.2, k=1, suite="math_suite",
                settings_key="aaaaaaaaaaaa", generation_backend="hf", cum_flops=1e9, **settings)
    append_eval_rows(tmp_path, [base])
    smoke = dict(base, suite="smoke", settings_key="bbbbbbbbbbbb", limit=2, accuracy=1.0)
    append_eval_rows(tmp_path, [dict(base, accuracy=0.4), dict(base, benchmark="amc23", accuracy=0.0), smoke])
    frame = read_evals(tmp_path)
    assert sorted(zip(frame["benchmark"], frame["settings_key"], frame["accuracy"])) == [
        ("amc23", "aaaaaaaaaaaa", 0.0), ("gsm8k", "aaaaaaaaaaaa", 0.4), ("gsm8k", "bbbbbbbbbbbb", 1.0)]
    with pytest.raises(LzeBenchError, match="eval rows lack columns: settings_key"):
        append_eval_rows(tmp_path, [{k: v for k, v in base.items() if k != "settings_key"}])
    pd.read_parquet(tmp_path / "evals.parquet").drop(columns=["settings_key"]).to_parquet(tmp_path / "evals.parquet")
    with pytest.raises(LzeBenchError, match="written before eval results were keyed by their settings"):
        append_eval_rows(tmp_path, [base])  # an old file is never silently merged


def test_finished_run_is_never_overwritten(tmp_path):
    rundir.refuse_finished(tmp_path)  # not finished: fine
    rundir.mark_done(tmp_path, {"steps": 3})
    with pytest.raises(LzeBenchError, match="finished run"):
        rundir.refuse_finished(tmp_path)


def test_only_complete_checkpoints_are_listed(tmp_path):
    for step in (5, 10):
        rundir.checkpoint_dir(tmp_path, step).mkdir(parents=True)
    rundir.mark_checkpoint_complete(rundir.checkpoint_dir(tmp_path, 5))
    assert [step for step, _ in rundir.list_checkpoints(tmp_path)] == [5]
    assert rundir.latest_checkpoint(tmp_path)[0] == 5


def test_config_hash_ignores_run_dir_and_launcher():
    base = {"seed": 0, "selector": {"name": "lze"}, "run_dir": "a", "launcher": {"name": "local"}}
    same = dict(base, run_dir="b", launcher={"name": "slurm"})
    other = dict(base, seed=1)
    assert rundir.config_hash(base) == rundir.config_hash(same) != rundir.config_hash(other)


def test_damaged_tables_are_one_line_naming_the_file_and_are_never_overwritten(tmp_path):
    ledger, log = Ledger(tmp_path), RolloutLog(tmp_path)
    ledger.append(_row(0))
    log.append(0, [{"step": 0, "prompt_id": 0, "rewards": [1.0], "response_tokens": [3], "kept": True}])
    log.compact()
    eval_row = dict(step=0, checkpoint="step_000000", benchmark="gsm8k", num_problems=5, samples_per_problem=1,
                    accuracy=0.2, ci_low=0.0, ci_high=0.5, pass_at_k=0.2, maj_at_k=0.2, k=1, suite="math_suite",
                    settings_key="aaaaaaaaaaaa", generation_backend="hf", cum_flops=0.0, split="", temperature=0.0,
                    top_p=1.0, max_new_tokens=64, limit=0, seed=0, prompt_template="default", chat_template=True,
                    grading="boxed")
    append_eval_rows(tmp_path, [eval_row])
    readers = {
        "ledger.parquet": [lambda: Ledger(tmp_path), lambda: read_ledger(tmp_path)],
        "rollouts.parquet": [lambda: read_rollouts(tmp_path), lambda: RolloutLog(tmp_path).truncate_after(-1)],
        "evals.parquet": [lambda: read_evals(tmp_path), lambda: append_eval_rows(tmp_path, [eval_row])],
    }
    for name, calls in readers.items():
        path = tmp_path / name
        path.write_bytes(path.read_bytes()[:-7])
        damaged = path.read_bytes()
        for call in calls:
            with pytest.raises(LzeBenchError) as caught:
                call()
            message = str(caught.value)
            assert message.startswith(f"{path} is damaged and was left as is (ArrowInvalid: ") and "\n" not in message
            assert path.read_bytes() == damaged


_WRITER = """
import json, sys
from lze_bench.ledger import Ledger
ledger = Ledger(sys.argv[1])
for row in json.loads(open(sys.argv[2]).read()):
    ledger.append(row)
"""


def test_a_live_runs_ledger_reads_whole_while_every_step_replaces_it(tmp_path):
    """A report, `sweep status` or a test watching a run reads its ledger while the run renames a new one
    over it each step: every read sees a whole ledger, never the old file's size applied to the new one
    (a read by path failed ~7% of the time against such a writer)."""
    import json
    import subprocess
    import sys
    import time

    from lze_bench.sweep.manifest import ledger_position

    steps = 400
    (tmp_path / "rows.json").write_text(json.dumps([_row(step) for step in range(steps)]))
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "live"), str(tmp_path / "rows.json")])
    try:
        reads, seen = 0, 0
        deadline = time.monotonic() + 60
        while writer.poll() is None and time.monotonic() < deadline:
            if (tmp_path / "live" / "ledger.parquet").exists():
                rows = len(read_ledger(tmp_path / "live"))
                assert rows >= seen
                seen = rows
                assert ledger_position(tmp_path, {"run_dir": "live"})[0] >= rows
                reads += 1
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == 0 and reads >= 50, (writer.returncode, reads)
    assert len(read_ledger(tmp_path / "live")) == steps
