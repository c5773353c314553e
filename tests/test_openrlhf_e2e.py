"""backend=openrlhf end to end on CPU: our entry point, OpenRLHF 0.11.2's real controller loop, a private Ray cluster.

Each run starts the job's own driver command (the argv `prepare` saves in
`openrlhf/command.json`, i.e. `python -m lze_bench.backends.openrlhf.entry
--lze-config ... -- <OpenRLHF flags>`) through tests/openrlhf_cpu/run_entry.py,
which swaps in the two CPU stand-ins (tests/openrlhf_cpu/lze_cpu_standins: a
transformers "vLLM" engine and a torch policy actor with OpenRLHF's own loss)
and then runs that module unchanged. Everything else is OpenRLHF's: argparse,
`train()`, placement group, `PPOTrainer.fit` (our `LzePPOTrainer`), the
samples generator with our selection hook, the agent executor calling our
reward_func file, the experience maker (log-probs, group advantages),
checkpoint save and `--ckpt.load_enable` resume.

Per selector the backend runs (the registry minus what it refuses): 3 steps,
then the run-directory schema, ledger counts against the rollout log and
against what the policy actor received (whole micro-batches, samples, tokens of
every PPO epoch), and a run crashed before update 3 and rerun whose ledger
equals the unbroken one (steps, counts, tokens, FLOPs). One more run checks
that an interrupted first checkpoint no longer blocks the run.

Skips only when OpenRLHF does not import; CI (.ci/run) sets
LZE_BENCH_REQUIRE_OPENRLHF=1 after installing it, and then a missing import fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "openrlhf_cpu"
STUBS = REPO / "tests" / "stubs"
sys.path.insert(0, str(STANDINS))
from lze_cpu_standins.fixtures import RayCluster, save_tiny_policy, write_prompts  # noqa: E402

sys.path.remove(str(STANDINS))


def _import_error() -> str | None:
    probe = "import openrlhf.cli.train_ppo_ray, lze_bench.backends.openrlhf.trainer, lze_cpu_standins.policy"
    done = subprocess.run([sys.executable, "-c", probe], env=child_env(), capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def child_env(**extra) -> dict:
    """PYTHONPATH for the driver and every Ray process: this checkout, the stand-ins, the import stubs if needed."""
    import importlib.util

    paths = [str(REPO), str(STANDINS)]
    if any(importlib.util.find_spec(name) is None for name in ("vllm", "flash_attn")):
        paths.append(str(STUBS))
    old = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths + ([old] if old else [])), TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0")
    env.update(extra)
    return env


# Every skip for a missing OpenRLHF names the command that installs it.
INSTALL_HINT = "install it: bash .ci/openrlhf.sh (CPU, these tests) or pip install 'lze-bench[openrlhf]' (GPU nodes)"

IMPORT_ERROR = _import_error()
if IMPORT_ERROR and os.environ.get("LZE_BENCH_REQUIRE_OPENRLHF") == "1":
    raise RuntimeError(f"LZE_BENCH_REQUIRE_OPENRLHF=1 but OpenRLHF does not import: {IMPORT_ERROR}")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(IMPORT_ERROR is not None,
                                 reason=f"OpenRLHF 0.11.2 does not import ({IMPORT_ERROR}); {INSTALL_HINT}")]


def backend_selectors() -> list[str]:
    from lze_bench.backends.openrlhf.command import runnable_selectors

    return runnable_selectors()


# n = 3 with micro-batches of 2: a shrunk update of one group (3 responses) is trimmed to 2 (trim.py)
STEPS, BATCH, N, MICRO, EPOCHS = 3, 2, 3, 2, 2
COMPARED = ["step", "epoch", "prompts_considered", "prompts_rolled_out", "groups_kept", "gen_rounds", "samples",
            "prompt_tokens", "generated_tokens", "trained_tokens", "flops_rollout", "flops_logprob", "flops_train",
            "flops_total", "cum_flops", "partial", "groups_replayed", "flops_select", "responses_trained"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE

    root = tmp_path_factory.mktemp("e2e")
    data = write_prompts(root / "data", 10)
    problems = [f"Is {i} odd? Reply 1 for yes, 0 for no." for i in range(4)]
    model = save_tiny_policy(root / "tiny", [PROMPT_TEMPLATE.format(problem=p) for p in problems])
    cluster = RayCluster(child_env())
    try:
        yield {"root": root, "data": data, "model": model, "cluster": cluster}
    finally:
        cluster.stop()


def overrides(world, selector: str, run_dir: Path) -> list[str]:
    return [
        "backend=openrlhf", f"model={world['model']}", "task=gsm8k", f"data.root={world['data']}",
        f"selector={selector}", "seed=0", f"run_dir={run_dir}",
        f"trainer.steps={STEPS}", f"trainer.batch_size={BATCH}", f"trainer.n_samples={N}",
        "trainer.max_new_tokens=4", "trainer.lr=0.01", "trainer.checkpoint_every=1", f"trainer.ppo_epochs={EPOCHS}",
        "backend.gpus_per_node=1", "backend.max_len=400", "backend.packing_samples=false",
        "backend.attn_implementation=eager", "backend.apply_chat_template=false", "backend.gradient_checkpointing=false",
        f"backend.train_micro_batch_size={MICRO}", f"backend.rollout_micro_batch_size={MICRO}",
        "backend.grade_workers=1", "backend.max_gen_rounds=3", "backend.placement_timeout_s=120",
    ]


def run_job(world, selector: str, run_dir: Path, crash_at_update: int | None = None) -> subprocess.CompletedProcess:
    """Prepare the run directory as `lze-bench train` does, then run the saved driver argv with the stand-ins."""
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.config import compose

    paths, argv = prepare(compose("train", overrides(world, selector, run_dir)))
    crash = paths.work / "crash_at_update"  # read by the stand-in policy actor (lze_cpu_standins/policy.py)
    crash.write_text(str(crash_at_update)) if crash_at_update is not None else crash.unlink(missing_ok=True)
    assert argv[1:3] == ["-m", "lze_bench.backends.openrlhf.entry"]
    command = [sys.executable, str(STANDINS / "run_entry.py"), *argv[3:]]
    environment = child_env(LZE_RAY_ADDRESS=world["cluster"].address)
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)


def ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


@pytest.mark.parametrize("selector", backend_selectors())
def test_openrlhf_fit_loop_on_cpu(world, selector, tmp_path):
    from lze_bench.ledger import LEDGER_COLUMNS, ROLLOUT_COLUMNS, read_ledger, read_rollouts
    from lze_bench.rundir import checkpoint_dir

    run = tmp_path / "run"
    ok(run_job(world, selector, run))
    # the run directory: the local backend's schema
    assert (run / "DONE").exists() and (run / "rollouts.parquet").exists()
    ledger = read_ledger(run)
    assert list(ledger["step"]) == list(range(STEPS))
    assert set(LEDGER_COLUMNS) <= set(ledger.columns)
    # counts: ledger == rollout log == what the policy actor trained
    rollouts = read_rollouts(run)
    assert set(ROLLOUT_COLUMNS) <= set(rollouts.columns)
    for row in ledger.itertuples():
        rows = rollouts[rollouts["step"] == row.step]
        assert len(rows) == row.prompts_rolled_out
        assert int(rows["kept"].sum()) == row.groups_kept <= BATCH  # never padded with dropped groups
        assert row.groups_kept + row.groups_replayed <= BATCH
        assert row.samples == N * (row.prompts_rolled_out + row.prompts_probed)
        assert row.generated_tokens >= sum(sum(t) for t in rows["response_tokens"])
        assert row.responses_kept == N * row.groups_kept
        if selector == "uniform":
            assert row.prompts_rolled_out == row.groups_kept == BATCH and row.gen_rounds == 1
        if selector in ("dapo", "greso", "hive"):  # dynamic sampling keeps informative groups only
            kept = rows[rows["kept"]]
            assert all(max(r) > min(r) for r in kept["rewards"])
        if selector.startswith("lze"):
            assert row.gen_rounds == 1  # one rollout, the update shrinks
    if selector in ("hive", "astral"):  # entropies / embeddings from the policy actor, booked
        assert (ledger["flops_select"] > 0).any()
    if selector == "astral":  # round 1 (step mu = 2) replays stored groups
        assert ledger["groups_replayed"].iloc[2] > 0 and ledger["prompts_probed"].iloc[0] > 0
    # what OpenRLHF delivered to the policy actor: whole micro-batches of the trimmed update, every PPO epoch
    trained = [json.loads(line) for line in (run / "openrlhf" / "policy_log.jsonl").read_text().splitlines()]
    updating = ledger[ledger["trained_tokens"] > 0]
    assert [t["update"] for t in trained] == list(range(1, len(updating) + 1))
    for row, update in zip(updating.itertuples(), trained):
        replayed = row.groups_replayed * N  # unit 2 may trim them too: at most one response less in all
        assert row.responses_trained + replayed - 1 <= update["samples"] <= row.responses_trained + replayed
        assert update["samples"] % MICRO == 0 and update["epochs"] == EPOCHS
        assert update["micro_batches"] == [MICRO] * (update["samples"] // MICRO) * EPOCHS
        assert row.trained_tokens == update["tokens"] > 0
        assert update["recentred"] == (selector == "astral")  # replay re-centres every sample, nothing else does
    for step in range(1, STEPS + 1):
        if step == STEPS or ledger["trained_tokens"].iloc[step - 1] > 0:
            assert (checkpoint_dir(run, step) / "COMPLETE").exists()
            assert (checkpoint_dir(run, step) / "config.json").exists()
    # the weights changed
    import torch
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(world["model"]).state_dict()
    after = AutoModelForCausalLM.from_pretrained(checkpoint_dir(run, STEPS)).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)

    # crash before the last update (astral: its replay store, hive: its entropy history resume too), then again
    crashed = tmp_path / "crashed"
    done = run_job(world, selector, crashed, crash_at_update=len(trained) - 1)
    assert done.returncode != 0 and not (crashed / "DONE").exists()
    assert "injected crash" in done.stdout + done.stderr
    before = read_ledger(crashed)
    assert len(before) < STEPS and before["step"].tolist() == list(range(len(before)))
    ok(run_job(world, selector, crashed))
    resumed = read_ledger(crashed)
    pd.testing.assert_frame_equal(resumed[COMPARED], ledger[COMPARED])
    a, b = read_rollouts(run), read_rollouts(crashed)
    assert a[["step", "prompt_id", "kept"]].equals(b[["step", "prompt_id", "kept"]])


def test_interrupted_first_checkpoint_is_set_aside_and_the_run_starts_over(world, tmp_path):
    """A job killed during its first DeepSpeed save leaves `_actor/` without `latest`; OpenRLHF's fit would
    fail on every rerun (KeyError 'episode'); the entry sets it aside and the run starts from scratch."""
    from lze_bench.ledger import read_ledger

    run = tmp_path / "run"
    partial = run / "openrlhf" / "ckpt" / "_actor" / "global_step1"
    partial.mkdir(parents=True)
    (partial / "state.pt").write_bytes(b"cut short")
    done = run_job(world, "uniform", run)
    ok(done)
    assert list(read_ledger(run)["step"]) == list(range(STEPS)) and (run / "DONE").exists()
    assert [p.name.startswith("_actor.unloadable-") for p in (run / "openrlhf" / "ckpt").iterdir()].count(True) == 1
    assert "no loadable state" in done.stdout + done.stderr
