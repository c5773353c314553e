"""`lze-bench train` on the local backend, through the CLI: run directory, ledger, resume, refusals.

Every run here is tiny (a 2-layer 32-wide policy, a 3-step warm start, a few
GRPO steps on 4 prompts x 4 samples), so the suite stays fast; the full
default run is the slow test at the bottom.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.flops import FlopModel
from lze_bench.ledger import LEDGER_COLUMNS, read_ledger, read_rollouts
from lze_bench.rundir import is_done, list_checkpoints
from tiny_run import TINY_TRAIN as TINY

runner = CliRunner()

TIME_COLUMNS = [c for c in LEDGER_COLUMNS if c.startswith("time_") or c == "cum_time_s"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def train(run_dir, cache_dir, *extra):
    args = ["train", *TINY, f"backend.cache_dir={cache_dir}", f"run_dir={run_dir}", *extra]
    return runner.invoke(app, args)


def ok(result):
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def prompt_lengths(run_dir) -> dict[int, int]:
    """Prompt tokens per train prompt id, from the checkpoint's own tokenizer (1 token per character)."""
    from lze_bench.backends.local.tokenizer import format_prompt
    from lze_bench.tasks.synthetic import SyntheticTaskConfig, load_split

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())["task"]
    rows = load_split("train", SyntheticTaskConfig(**cfg))
    return {r["id"]: len(format_prompt(r["problem"])) for r in rows}


def test_run_writes_a_complete_run_directory_with_exact_flops(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    result = ok(train(run_dir, cache_dir, "trainer.steps=3", "trainer.eval_every=2", "trainer.checkpoint_every=2"))
    assert result.output.strip().splitlines()[-1] == f"run directory: {run_dir}"
    assert is_done(run_dir)
    ledger = read_ledger(run_dir)
    assert ledger["step"].tolist() == [0, 1, 2]
    assert all(c in ledger for c in LEDGER_COLUMNS)
    parts = ledger[["flops_rollout", "flops_logprob", "flops_train", "flops_select"]].sum(axis=1)
    assert (ledger["flops_total"] == parts).all()
    assert np.allclose(ledger["cum_flops"], ledger["flops_total"].cumsum())
    assert ledger["heldout_accuracy"].notna().tolist() == [False, True, True]  # after updates 2 and 3
    assert (ledger["samples"] == 16).all() and (ledger["groups_kept"] == 4).all()
    # exact counts, recomputed from the rollout log and the model's own parameter count
    from transformers import AutoModelForCausalLM

    steps = [s for s, _ in list_checkpoints(run_dir)]
    assert steps == [2, 3]
    model = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_000003")
    flop_model = FlopModel.from_torch_model(model)
    rollouts = read_rollouts(run_dir)
    lengths = prompt_lengths(run_dir)
    for step, rows in rollouts.groupby("step"):
        seq = np.concatenate([lengths[pid] + np.asarray(tokens) for pid, tokens in zip(rows["prompt_id"],
                                                                                       rows["response_tokens"])])
        row = ledger[ledger["step"] == step].iloc[0]
        assert row["flops_rollout"] == flop_model.forward(seq)  # F(prompt + response) per sample
        assert row["flops_train"] == flop_model.train(seq)  # uniform trains every group
        assert row["trained_tokens"] == seq.sum()
        assert row["generated_tokens"] + row["prompt_tokens"] == seq.sum()
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["version"] and "git_commit" in config and config["warmstart"]["heldout_by_level"]


def test_checkpoint_is_a_normal_hf_directory(tmp_path, cache_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir = tmp_path / "run"
    ok(train(run_dir, cache_dir, "trainer.steps=1"))
    path = run_dir / "checkpoints" / "step_000001"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    text = "Q: 12+3\nA: 15 \\boxed{15} é"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text.replace("é", "<unk>")  # every text tokenizes; nothing dropped
    out = model.generate(**tokenizer(["Q: 1+2\nA: "], return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 1 and out.shape[1] <= len("Q: 1+2\nA: ") + 3
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "1+2"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat == "Q: 1+2\nA: "


def test_killed_run_resumes_to_the_same_ledger_as_an_unbroken_run(tmp_path, cache_dir):
    common = ["trainer.steps=4", "trainer.checkpoint_every=2", "trainer.eval_every=2"]
    unbroken = tmp_path / "unbroken"
    ok(train(unbroken, cache_dir, *common))
    broken = tmp_path / "broken"
    ok(train(broken, cache_dir, *common, "backend.stop_after_steps=3"))  # dies after step 2, checkpoint at 2
    assert not is_done(broken) and read_ledger(broken)["step"].tolist() == [0, 1, 2]
    ok(train(broken, cache_dir, *common))  # the same command resumes from step_000002
    assert is_done(broken)
    a, b = read_ledger(unbroken), read_ledger(broken)
    assert b["step"].tolist() == [0, 1, 2, 3]
    columns = [c for c in LEDGER_COLUMNS if c not in TIME_COLUMNS]
    pd.testing.assert_frame_equal(a[columns], b[columns])
    ra, rb = read_rollouts(unbroken), read_rollouts(broken)
    assert not rb.duplicated(["step", "prompt_id"]).any()
    assert ra[["step", "prompt_id", "kept"]].equals(rb[["step", "prompt_id", "kept"]])
    assert ra["rewards"].map(list).tolist() == rb["rewards"].map(list).tolist()


def test_finished_run_is_refused_and_other_config_in_same_dir_is_refused(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    ok(train(run_dir, cache_dir, "trainer.steps=1"))
    assert "finished run" in one_error_line(train(run_dir, cache_dir, "trainer.steps=1"))
    other = tmp_path / "other"
    ok(train(other, cache_dir, "trainer.steps=2", "backend.stop_after_steps=1"))
    assert "different config" in one_error_line(train(other, cache_dir, "trainer.steps=2", "trainer.lr=0.5"))


@pytest.mark.parametrize("override, needle", [
    ("trainer.batch_size=-1", "trainer.batch_size"),
    ("device=tpu", "unknown device"),
    ("backend.eval_size=0", "backend.eval_size"),
    ("trainer.max_new_tokens=100000", "trainer.max_new_tokens"),
])
def test_bad_overrides_fail_with_one_line(tmp_path, cache_dir, override, needle):
    assert needle in one_error_line(train(tmp_path / "run", cache_dir, "trainer.steps=1", override))


def test_cuda_asked_for_without_cuda_fails_with_one_line(tmp_path, cache_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the message is for machines without it")
    assert "CUDA is not available" in one_error_line(train(tmp_path / "run", cache_dir, "device=cuda"))


def train_argv(run_dir, cache_dir, *extra) -> list[str]:
    """`lze-bench train` as its own process (the console script's module)."""
    return [sys.executable, "-m", "lze_bench.cli", "train", *TINY, f"backend.cache_dir={cache_dir}",
            f"run_dir={run_dir}", *extra]


def test_a_second_train_on_a_run_dir_is_refused_and_a_killed_holder_leaves_no_stale_lock(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    endless = ["trainer.steps=100000"]
    first = subprocess.Popen(train_argv(run_dir, cache_dir, *endless), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        holder = run_dir / ".train.lock.holder"
        deadline = time.monotonic() + 300  # a bound on the wait for the first process, not an assertion on time
        while not (holder.exists() and f"pid {first.pid} " in holder.read_text()):
            assert first.poll() is None and time.monotonic() < deadline, "the first train never took its lock"
            time.sleep(0.1)
        line = one_error_line(train(run_dir, cache_dir, *endless, "backend.stop_after_steps=1"))
        assert f"run_dir='{run_dir}' is in use by another lze-bench train (pid {first.pid} " in line
        assert "pass another run_dir=PATH" in line
    finally:
        first.kill()  # SIGKILL: the holder runs no clean-up at all
        first.wait()
    ok(train(run_dir, cache_dir, *endless, "backend.stop_after_steps=1"))  # the OS released the dead holder's lock
    assert read_ledger(run_dir)["step"].tolist() == [0]


def test_train_prints_no_warnings_a_cpu_user_did_not_ask_for(tmp_path, cache_dir):
    """With OpenRLHF's dependencies installed (deepspeed, pynvml), a local run prints only its run directory:
    no DeepSpeed "Setting accelerator to CPU" (saving a checkpoint imported deepspeed) and no torch FutureWarning."""
    run_dir = tmp_path / "run"
    out = subprocess.run(train_argv(run_dir, cache_dir, "trainer.steps=2", "trainer.checkpoint_every=1"),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"run directory: {run_dir}"]
    for noise in ("accelerator", "DeepSpeed", "[WARNING]", "Warning:", "pynvml", "deprecated"):
        assert noise not in out.stdout + out.stderr, out.stdout + out.stderr


RESUMABLE = ["trainer.steps=4", "trainer.checkpoint_every=2", "trainer.eval_every=2", "selector=lze"]


@pytest.fixture(scope="module")
def resumable_run(tmp_path_factory, cache_dir):
    """An unfinished run (lze, with a selector state) checkpointed at step 2, ready to resume."""
    run_dir = tmp_path_factory.mktemp("resumable") / "run"
    ok(train(run_dir, cache_dir, *RESUMABLE, "backend.stop_after_steps=3"))
    assert not is_done(run_dir)
    return run_dir


@pytest.mark.parametrize("name", [
    "ledger.parquet", "config.yaml", "heldout.jsonl", "selector_state/step_000002.npz",
    "checkpoints/step_000002/trainer_state.pt", "checkpoints/step_000002/model.safetensors",
    "rollouts/part-step_000001.parquet",
])
def test_a_damaged_file_fails_the_resume_in_one_line_and_is_left_as_is(tmp_path, cache_dir, resumable_run, name):
    run_dir = tmp_path / "run"
    shutil.copytree(resumable_run, run_dir)
    path = run_dir / name
    path.write_bytes(path.read_bytes()[:-7])  # cut short, as a full disk or an interrupted copy leaves it
    damaged = path.read_bytes()
    ledger_before = (run_dir / "ledger.parquet").read_bytes()
    line = one_error_line(train(run_dir, cache_dir, *RESUMABLE))
    if name.startswith("rollouts/"):  # found before a step trained or the resume cut anything back
        assert (run_dir / "ledger.parquet").read_bytes() == ledger_before
        assert (run_dir / "rollouts" / "part-step_000002.parquet").exists()
    named = path.parent if name.endswith(".safetensors") else path  # weights: the whole checkpoint is named
    assert f"error: {named} is damaged and was left as is" in line
    assert "start the run over" in line and ("restore it" in line or "to resume from the checkpoint before" in line)
    assert path.read_bytes() == damaged


class Planted:
    """An object whose unpickling creates `marker` (as a planted file could run anything)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.mark.parametrize("name", ["trainer_state.pt", "rollout_store.pt"])
@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_a_planted_state_file_is_refused_in_one_line_and_runs_nothing(tmp_path, cache_dir, resumable_run, name,
                                                                     writer):
    """Resume reads the checkpoint's state files with torch.load(weights_only=True) (lze_bench.state_file)."""
    import pickle

    import torch

    run_dir = tmp_path / "run"
    shutil.copytree(resumable_run, run_dir)
    path, marker = run_dir / "checkpoints" / "step_000002" / name, tmp_path / "marker"
    state = {"optimizer": Planted(marker), "groups": [Planted(marker)]}
    with path.open("wb") as handle:
        torch.save(state, handle) if writer == "torch.save" else pickle.dump(state, handle)
    planted = path.read_bytes()
    line = one_error_line(train(run_dir, cache_dir, *RESUMABLE))
    assert not marker.exists()
    assert line.startswith(f"error: {path} ") and "which loading would run; it was not loaded" in line
    if writer == "torch.save":  # protocol 2 names the callable; pickle's protocol 4 opcode is refused unread
        assert f"{path} names io.open" in line
    assert "to resume from the checkpoint before it, or start the run over" in line
    assert path.read_bytes() == planted and read_ledger(run_dir)["step"].tolist() == [0, 1, 2]  # nothing cut back


def test_warm_start_is_shared_by_selectors_and_seeds(tmp_path, cache_dir):
    dirs = set()
    for extra in (["seed=1"], ["seed=2", "selector=lze"]):
        run_dir = tmp_path / "-".join(extra).replace("=", "_")
        ok(train(run_dir, cache_dir, "trainer.steps=1", *extra))
        dirs.add(yaml.safe_load((run_dir / "config.yaml").read_text())["warmstart"]["dir"])
    assert len(dirs) == 1
    assert len([p for p in (cache_dir / "warmstart").iterdir() if p.is_dir() and not p.name.startswith(".")]) == 1


def test_warm_start_waits_for_a_concurrent_builder_and_uses_its_result(tmp_path):
    """A job that finds another holding the warm-start lock waits for it, then loads what it built."""
    import threading

    import torch
    from filelock import FileLock

    from lze_bench.backends.local.warmstart import INFO_FILE, ensure_warmstart, warmstart_key
    from lze_bench.config import compose

    cfg = compose("train", [*TINY, f"backend.cache_dir={tmp_path}"])
    key, _ = warmstart_key(cfg.model, cfg.task, cfg.backend, "cpu")
    root = tmp_path / "warmstart"
    root.mkdir()
    found = []
    with FileLock(root / f"{key}.lock"):  # another sweep job is building this warm start
        waiter = threading.Thread(target=lambda: found.append(
            ensure_warmstart(cfg.model, cfg.task, cfg.backend, torch.device("cpu"), grader=None)))
        waiter.start()
        waiter.join(timeout=2.0)
        assert waiter.is_alive() and not found  # waiting on the lock, not building a second copy
        (root / key).mkdir()
        (root / key / INFO_FILE).write_text("{}")  # the other job's build is in place
    waiter.join(timeout=60)
    assert found == [root / key]


SELECTOR_OVERRIDES = {
    "astral": ["selector.ref_size=4", "selector.buffer_size=4"],  # small buffer, mu=2: the store must hold every key
    "dapo": ["selector.max_gen_batches=2"],
    "greso": [],
    "hive": [],
    "lze": [],
    "lze_full": [],
    "uniform": [],
    "mopps": [],
    "adarft": [],
    "sec": [],
    "pods": [],
}


@pytest.mark.parametrize("name", sorted(SELECTOR_OVERRIDES))
def test_every_selector_trains_and_books_its_extra_work(tmp_path, cache_dir, name):
    from lze_bench.config import group_options

    if name not in group_options("selector"):
        pytest.skip(f"selector {name!r} is not registered in this checkout")
    run_dir = tmp_path / name
    ok(train(run_dir, cache_dir, f"selector={name}", "trainer.steps=4", *SELECTOR_OVERRIDES[name]))
    ledger = read_ledger(run_dir)
    assert ledger["step"].tolist() == [0, 1, 2, 3]
    assert (ledger["groups_kept"] <= ledger["prompts_rolled_out"]).all()
    assert {"astral_pred_mae", "astral_pred_spearman", "responses_kept", "responses_trained"} <= set(ledger.columns)
    assert (ledger["responses_trained"] <= ledger["responses_kept"]).all()
    if name != "astral":
        assert ledger["astral_pred_mae"].isna().all()
    if name == "astral":  # its (our) predictor is measured on every step's rolled-out prompts
        assert ledger["astral_pred_mae"].between(0, 2).all()
        assert ledger["prompts_probed"].sum() > 0 and ledger["flops_select"].iloc[0] > 0  # probes + embeddings
        # replays from round 1 on, at most R = floor(0.5 * 4) = 2, never an all-0 / all-1 group (selectors.md §3):
        # every zero-variance group in the update is a fresh one (astral keeps every fresh group)
        assert ledger["groups_replayed"].iloc[:2].sum() == 0 and (ledger["groups_replayed"] <= 2).all()
        fresh_zero_var = read_rollouts(run_dir).groupby("step")["rewards"].apply(
            lambda rows: sum(min(r) == max(r) for r in rows))
        assert ledger["kept_zero_variance"].tolist() == fresh_zero_var.reindex(range(4), fill_value=0).tolist()
    if name == "hive":  # B = 4, R = 6: each round offers pool_factor x R = 12 candidates
        assert (ledger["flops_select"] > 0).all() and (ledger["prompts_considered"] % 12 == 0).all()
    if name == "greso":  # round 0 examines S = 6 candidates; later rounds continue while short
        assert (ledger["prompts_considered"] >= 6).all() and (ledger["gen_rounds"] >= 1).all()
    if name == "mopps":  # a pool of min(16 B, N) = 64 candidates per step, B = 4 rolled out
        assert (ledger["prompts_considered"] == 64).all() and (ledger["prompts_rolled_out"] == 4).all()
    import json

    record = json.loads((run_dir / "prompt_metadata.json").read_text())  # every run records the task's columns
    assert sorted(record["columns"]) == ["difficulty", "level"] and record["prompts"] == 64
    assert record["columns"]["level"]["charge"] == "external, not charged"
    read = {"adarft": ["difficulty"], "sec": ["level"]}.get(name, [])
    assert record["read_by_selector"] == read and not (run_dir / "offline_flops.json").exists()
    if read:  # the rolled-out prompts' columns, as the selector saw them
        rows = read_rollouts(run_dir)
        levels = np.asarray(record["columns"]["level"]["values"])[rows["prompt_id"].to_numpy()]
        if name == "adarft":  # T = 0 at step 0: the easiest level
            assert (levels[(rows["step"] == 0).to_numpy()] == 1).all()


def test_pods_books_generation_for_every_rollout_and_the_update_for_the_kept_ones(tmp_path, cache_dir):
    """selector=pods at n = 4 keeps m = 2 rollouts per prompt: the ledger's FLOP split against the rollout log."""
    from transformers import AutoModelForCausalLM

    from lze_bench.selectors.pods import max_variance_subset

    run_dir = tmp_path / "pods"
    ok(train(run_dir, cache_dir, "selector=pods", "trainer.steps=2", "trainer.kl_coef=0.01"))
    ledger, rollouts = read_ledger(run_dir), read_rollouts(run_dir)
    flop_model = FlopModel.from_torch_model(AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_000002"))
    lengths = prompt_lengths(run_dir)
    assert (ledger["samples"] == 16).all() and (ledger["groups_kept"] == 4).all()
    assert (ledger["responses_kept"] == 8).all() and (ledger["responses_trained"] == 8).all()
    for step, rows in rollouts.groupby("step"):
        rewards = np.stack(rows["rewards"].to_list())
        flags = np.stack(rows["kept_rollouts"].to_list())
        assert np.array_equal(flags, max_variance_subset(rewards, 2)) and rows["kept"].all()
        seq = np.stack([lengths[pid] + np.asarray(tokens) for pid, tokens in zip(rows["prompt_id"],
                                                                                 rows["response_tokens"])])
        trained = seq[flags]
        assert 0 < trained.size < seq.size
        row = ledger[ledger["step"] == step].iloc[0]
        assert row["flops_rollout"] == flop_model.forward(seq.ravel())  # every generated rollout
        assert row["flops_train"] == flop_model.train(trained)  # the kept ones only
        assert row["flops_logprob"] == 2 * flop_model.logprob(trained)  # old-policy and reference passes
        assert row["trained_tokens"] == trained.sum()
        assert row["generated_tokens"] + row["prompt_tokens"] == seq.sum()
        kept_rewards = [r[f] for r, f in zip(rewards, flags)]
        assert row["kept_zero_variance"] == sum(np.ptp(r) == 0 for r in kept_rewards)


def test_every_selector_logs_which_rollouts_reached_the_update(tmp_path, cache_dir):
    """Selectors that decide per group: `kept_rollouts` is `kept` repeated n times (lze's alignment cut aside)."""
    run_dir = tmp_path / "dapo"
    ok(train(run_dir, cache_dir, "selector=dapo", "trainer.steps=2", "selector.max_gen_batches=2"))
    rows = read_rollouts(run_dir)
    assert [list(flags) == [kept] * len(rewards) for flags, kept, rewards in
            zip(rows["kept_rollouts"], rows["kept"], rows["rewards"])] == [True] * len(rows)
    ledger = read_ledger(run_dir)
    per_step = rows.groupby("step")["kept"].sum().reindex(ledger["step"], fill_value=0).to_numpy()
    assert ledger["responses_kept"].tolist() == (4 * per_step).tolist()


def test_dry_run_prints_config_and_run_dir_and_runs_nothing(tmp_path, cache_dir):
    result = ok(runner.invoke(app, ["train", "--dry-run", f"run_dir={tmp_path / 'x'}"]))
    assert "run directory:" in result.output and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_default_run_trains_and_raises_heldout_accuracy(tmp_path):
    """The README quickstart: `lze-bench train` with defaults (warm start cached in the user cache)."""
    run_dir = tmp_path / "default"
    ok(runner.invoke(app, ["train", f"run_dir={run_dir}"]))
    held = read_ledger(run_dir)["heldout_accuracy"].dropna()
    import json

    initial = json.loads((run_dir / "DONE").read_text())["initial_heldout_accuracy"]
    assert held.iloc[-1] > initial


def test_kl_reference_pass_and_ppo_epochs_are_booked(tmp_path, cache_dir):
    run_dir = tmp_path / "kl"
    ok(train(run_dir, cache_dir, "trainer.steps=1", "trainer.kl_coef=0.05", "trainer.ppo_epochs=2"))
    row = read_ledger(run_dir).iloc[0]
    # old-policy + reference forward, F(L) each per trained sequence; 3·F(L) per sequence per PPO epoch
    assert row["flops_logprob"] > 0 and row["flops_train"] == 2 * 3 * (row["flops_logprob"] // 2)
    assert row["flops_logprob"] % 2 == 0
    assert row["trained_tokens"] == 2 * (row["prompt_tokens"] + row["generated_tokens"])
    # update diagnostics (ledger extras): the KL to the reference is measured, k3 >= 0
    assert row["kl"] >= 0 and 0 <= row["clip_frac"] <= 1 and row["grad_norm"] >= 0 and np.isfinite(row["loss"])


def test_flop_budget_stops_at_the_first_step_reaching_it_and_resumes_exactly(tmp_path, cache_dir):
    """design.md "Equal compute": stop at the first step boundary with cum_flops >= budget; evals at
    each crossing of a multiple of eval_every_flops and at the end; a killed run resumes to the same ledger."""
    import json

    reference = tmp_path / "reference"
    ok(train(reference, cache_dir, "trainer.steps=4", "trainer.eval_every=0"))
    cum = read_ledger(reference)["cum_flops"].to_numpy()
    assert read_ledger(reference)["flops_logprob"].gt(0).all()  # the default books the old-log-prob pass
    assert read_ledger(reference)["kl"].isna().all()  # kl_coef = 0: no reference policy, no KL measured
    budget, every = float(cum[1]) + 1.0, float(cum[0]) * 0.75  # step 2 is the first to reach the budget
    args = ["trainer.steps=10", f"trainer.flop_budget={budget!r}", f"trainer.eval_every_flops={every!r}",
            "trainer.eval_every=0", "trainer.checkpoint_every=0", f"trainer.checkpoint_every_flops={every!r}"]
    run_dir = tmp_path / "budget"
    ok(train(run_dir, cache_dir, *args, "backend.stop_after_steps=2"))
    assert not is_done(run_dir)
    ok(train(run_dir, cache_dir, *args))
    ledger = read_ledger(run_dir)
    assert ledger["step"].tolist() == [0, 1, 2] and ledger["cum_flops"].iloc[-2] < budget <= ledger["cum_flops"].iloc[-1]
    same = [c for c in LEDGER_COLUMNS if c not in TIME_COLUMNS and c != "heldout_accuracy"]
    pd.testing.assert_frame_equal(ledger[same], read_ledger(reference)[same].iloc[:3])
    before = np.concatenate([[0.0], cum[:2]])
    crossed = np.floor(cum[:3] / every) > np.floor(before / every)
    crossed[-1] = True  # the last step is always evaluated
    assert ledger["heldout_accuracy"].notna().tolist() == crossed.tolist()
    # checkpoints at the same FLOP marks (checkpoint_every_flops) and after the last step, nowhere else
    assert [s for s, _ in list_checkpoints(run_dir)] == [t + 1 for t in np.flatnonzero(crossed)]
    done = json.loads((run_dir / "DONE").read_text())
    assert done["stopped_by"] == "budget" and done["flop_budget"] == budget

    capped = tmp_path / "capped"
    ok(train(capped, cache_dir, "trainer.steps=2", "trainer.flop_budget=1e30"))
    assert json.loads((capped / "DONE").read_text())["stopped_by"] == "steps"
    assert read_ledger(capped)["heldout_accuracy"].notna().iloc[-1]


def test_openrlhf_refuses_held_out_evals_it_cannot_run(tmp_path):
    """backend=openrlhf honours trainer.flop_budget (tests/test_openrlhf_e2e.py) but runs no held-out eval while
    training: trainer.eval_every_flops is refused in one line pointing at FLOP checkpoints."""
    result = runner.invoke(app, ["train", "backend=openrlhf", "model=hf", "model.path=x", "backend.gpus_per_node=1",
                                 "trainer.flop_budget=1e12", "trainer.eval_every_flops=1e11", f"run_dir={tmp_path / 'x'}"])
    assert "trainer.eval_every_flops" in one_error_line(result)
    assert "trainer.checkpoint_every_flops" in one_error_line(result)


def test_a_resume_on_other_training_data_is_refused_in_one_line(tmp_path, cache_dir, resumable_run):
    """data.json records the rows the run started on; here it says 63 train prompts (as if the task's
    generator had changed since) and the same command now loads 64: the resume is refused, nothing cut."""
    import json

    from lze_bench.fingerprint import fingerprint
    from lze_bench.tasks.synthetic import SyntheticTaskConfig, load_split

    run_dir = tmp_path / "run"
    shutil.copytree(resumable_run, run_dir)
    record = json.loads((run_dir / "data.json").read_text())
    task = yaml.safe_load((run_dir / "config.yaml").read_text())["task"]
    rows = load_split("train", SyntheticTaskConfig(**task))
    assert record["train"] == fingerprint(rows) and record["train"]["rows"] == 64 and record["heldout"]["rows"] == 12
    record["train"] = fingerprint(rows[:-1])
    (run_dir / "data.json").write_text(json.dumps(record))
    ledger = (run_dir / "ledger.parquet").read_bytes()
    line = one_error_line(train(run_dir, cache_dir, *RESUMABLE))
    assert line.startswith(f"error: {run_dir / 'data.json'}: the run started on 63 (sha256 ")
    assert "train rows and task=synthetic now gives 64 (sha256 " in line and "new run_dir=PATH" in line
    assert (run_dir / "ledger.parquet").read_bytes() == ledger and not is_done(run_dir)


def test_a_resume_exactly_at_an_epoch_boundary_continues_with_the_next_epoch(tmp_path, cache_dir):
    """8 prompts, 4 a step: the checkpoint after step 2 ends epoch 0; the resumed steps 2-3 roll out
    epoch 1's order, as the unbroken run does."""
    from lze_bench.data_order import DataOrder

    common = ["task.num_train=8", "trainer.steps=4", "trainer.checkpoint_every=2", "trainer.eval_every=4"]
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    ok(train(unbroken, cache_dir, *common))
    ok(train(broken, cache_dir, *common, "backend.stop_after_steps=3"))  # step 2 is lost, checkpoint at 2
    ok(train(broken, cache_dir, *common))
    order = DataOrder(8, 0)
    expected = [sorted(order.permutation(epoch)[i:i + 4].tolist()) for epoch in (0, 1) for i in (0, 4)]
    for run_dir in (unbroken, broken):
        rollouts = read_rollouts(run_dir)
        assert [sorted(rollouts[rollouts["step"] == s]["prompt_id"].tolist()) for s in range(4)] == expected
        assert (read_ledger(run_dir)["prompts_dropped"] == 0).all()


@pytest.mark.slow  # two real runs (~16 s)
def test_a_preempted_sweep_job_saves_the_step_in_hand_and_its_ledger_equals_an_unbroken_run(tmp_path, cache_dir):
    """Slurm's warning signal (SIGUSR2) reaches a submitit job mid-run: it finishes the step in hand, saves a
    checkpoint there (no periodic one is due before the end) and is requeued; the requeued job resumes from
    that checkpoint, so at most the step in hand is redone, and the ledger equals an unbroken run's."""
    import signal

    import submitit

    from lze_bench.sweep.job import TrainJob

    common = [*TINY, f"backend.cache_dir={cache_dir}", "trainer.steps=8", "trainer.checkpoint_every=100",
              "trainer.eval_every=4"]
    unbroken = tmp_path / "unbroken"
    ok(runner.invoke(app, ["train", *common, f"run_dir={unbroken}"]))
    broken = tmp_path / "broken"
    executor = submitit.LocalExecutor(folder=tmp_path / "submitit", max_num_timeout=2)
    executor.update_parameters(timeout_min=10)
    job = executor.submit(TrainJob(common, str(broken)))
    rows = 0
    deadline = time.monotonic() + 300
    while rows < 2:  # the job is training: its ledger has rows
        assert not job.done() and time.monotonic() < deadline, job.stderr()
        time.sleep(0.2)
        rows = len(read_ledger(broken)) if (broken / "ledger.parquet").exists() else 0
    controller = job._process.pid  # submitit's local controller; the training process is its child
    task = int(open(f"/proc/{controller}/task/{controller}/children").read().split()[0])
    os.kill(task, signal.SIGUSR2)
    result = job.result()
    assert result["run_dir"] == str(broken) and is_done(broken)
    log = job.stderr() + job.stdout()
    saved = re.search(r"preemption warning: checkpoint step_(\d+) saved", log)
    assert saved, log[-3000:]
    step = int(saved.group(1))
    assert rows <= step <= rows + 2 and step < 8  # the rows seen when signalled, plus the step in hand
    assert f"resuming {broken} from checkpoint step_{step:06d}" in log
    assert [s for s, _ in list_checkpoints(broken)] == [step, 8]
    columns = [c for c in LEDGER_COLUMNS if c not in TIME_COLUMNS]
    pd.testing.assert_frame_equal(read_ledger(unbroken)[columns], read_ledger(broken)[columns])
    assert not (broken / "PREEMPT").exists()  # the requeued attempt cleared the marker


@pytest.mark.parametrize("where", ["trainer_state", "weights"])
def test_a_full_disk_while_checkpointing_is_one_line_saying_so_and_naming_the_file(tmp_path, cache_dir, monkeypatch,
                                                                                   where):
    """torch's zip writer reports a short write as "unexpected pos" and the weights' writer as ENOSPC: either is
    one line saying the disk is full, naming the file, and the unfinished checkpoint is removed."""
    import errno

    import torch

    from lze_bench.backends.local import model as local_model

    if where == "trainer_state":
        def short_write(obj, f, *args, **kwargs):
            raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 4416 vs 4310")

        monkeypatch.setattr(torch, "save", short_write)
    else:
        def no_space(model, tokenizer, directory):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(local_model, "save_policy", no_space)
    run_dir = tmp_path / "run"
    result = train(run_dir, cache_dir, "trainer.steps=2", "trainer.checkpoint_every=1")
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]  # after any progress bars
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    line = errors[0]
    checkpoint = run_dir / "checkpoints" / "step_000001"
    named = checkpoint / "trainer_state.pt" if where == "trainer_state" else checkpoint
    assert line.startswith(f"error: {named}: the disk is full") and "free space" in line, line
    assert not checkpoint.exists() and not list(run_dir.rglob(".*.tmp"))


def test_a_new_run_that_fails_before_its_first_step_leaves_no_run_directory(tmp_path, cache_dir):
    """Its config.yaml would make the corrected command, same run_dir=, refuse the directory as another run's."""
    run_dir = tmp_path / "new" / "run"
    result = train(run_dir, cache_dir, "trainer.max_new_tokens=100000")  # refused after the config is written
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "trainer.max_new_tokens=100000" in errors[0], result.output
    assert not (tmp_path / "new").exists()
    ok(train(run_dir, cache_dir, "trainer.steps=1"))  # the corrected command is not refused
