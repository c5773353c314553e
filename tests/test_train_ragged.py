"""`lze-bench train` with selectors that extend groups (speed, reinforce_ada) on the local backend: the ledger
books every generated rollout and every trained one, the rollout log shows each group's rollouts and how stale
they are, and SPEED's carried-over groups survive a kill and resume (they live in the checkpoint)."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.ledger import LEDGER_COLUMNS, read_ledger, read_rollouts
from lze_bench.rundir import is_done
from tiny_run import TINY_TRAIN as TINY

runner = CliRunner()
TIME_COLUMNS = [c for c in LEDGER_COLUMNS if c.startswith("time_") or c == "cum_time_s"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def train(run_dir, cache_dir, *extra, tiny=True):
    model = [*TINY, f"backend.cache_dir={cache_dir}"] if tiny else []
    result = runner.invoke(app, ["train", *model, f"run_dir={run_dir}", *extra])
    assert result.exit_code == 0, result.output + repr(result.exception)


# the default (shipped) warm start: the tiny test policy solves nothing, so no group would pass SPEED's screen
SPEED = ["task.num_train=64", "backend.threads=1", "trainer.batch_size=4", "trainer.n_samples=4",
         "trainer.max_new_tokens=16", "selector=speed", "selector.n_init=2", "selector.n_continue=4",
         "selector.gen_batch_size=12", "trainer.steps=5", "trainer.checkpoint_every=2", "trainer.eval_every=0"]


@pytest.mark.slow  # three runs on the shipped warm start (~40 s on 2 cores)
def test_speed_books_generated_and_trained_rollouts_and_resumes_its_queue(tmp_path, cache_dir):
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    train(unbroken, cache_dir, *SPEED, tiny=False)
    ledger, log = read_ledger(unbroken), read_rollouts(unbroken)
    kept = log[log["kept"]]
    assert (kept["rewards"].map(len) == 6).all()  # screening 2 + continuation 4, all trained
    assert (kept["kept_rollouts"].map(all)).all()
    assert (ledger["responses_trained"] == ledger["groups_kept"] * 6).all()
    screened_out = log[~log["kept"]]
    assert (screened_out["rewards"].map(len) == 2).all() and (screened_out["rewards"].map(set).map(len) == 1).all()
    # a step's samples: fresh screenings (2 each) + continuations (4 each) generated in that step
    # every rollout the log shows was booked at the step that generated it (the rest are still held at the end)
    steps = log["rollout_steps"].map(list)
    generated = pd.Series([s for row in steps for s in row]).value_counts().reindex(ledger["step"], fill_value=0)
    assert (ledger["samples"].to_numpy() >= generated.to_numpy()).all() and generated.sum() > 0
    assert (ledger["groups_kept"] == 4).all()
    assert any(min(row) < step for step, row in zip(kept["step"], kept["rollout_steps"].map(list))), \
        "no trained group was carried over from an earlier step"

    train(broken, cache_dir, *SPEED, "backend.stop_after_steps=3", tiny=False)  # dies after step 2, checkpoint at 2
    assert not is_done(broken)
    train(broken, cache_dir, *SPEED, tiny=False)
    columns = [c for c in LEDGER_COLUMNS if c not in TIME_COLUMNS]
    pd.testing.assert_frame_equal(ledger[columns], read_ledger(broken)[columns])
    again = read_rollouts(broken)
    assert log[["step", "prompt_id", "kept"]].equals(again[["step", "prompt_id", "kept"]])
    assert log["rewards"].map(list).tolist() == again["rewards"].map(list).tolist()
    assert log["rollout_steps"].map(list).tolist() == again["rollout_steps"].map(list).tolist()


def test_reinforce_ada_generates_in_rounds_and_trains_n_per_prompt(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    train(run_dir, cache_dir, "selector=reinforce_ada", "trainer.steps=2", "trainer.eval_every=0")
    ledger, log = read_ledger(run_dir), read_rollouts(run_dir)
    assert (ledger["groups_kept"] == 4).all() and (ledger["prompts_rolled_out"] == 4).all()
    assert (ledger["responses_kept"] == 4 * 4).all()  # n = trainer.n_samples = 4 kept per prompt
    assert (ledger["samples"] == log.groupby("step")["rewards"].apply(lambda r: r.map(len).sum())).all()
    assert (ledger["samples"] > ledger["responses_trained"]).all()
    lengths = log["rewards"].map(len)
    assert set(lengths) <= {8, 16, 24, 32} and (log["kept_rollouts"].map(sum) == 4).all()
    assert (ledger["gen_rounds"] == log.groupby("step")["rewards"].apply(lambda r: r.map(len).max() // 8)).all()
