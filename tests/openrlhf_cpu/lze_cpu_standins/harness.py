"""Running lze-bench's OpenRLHF job on CPU from a test: environment, overrides, the driver subprocess (tests only).

Shared by tests/test_openrlhf_e2e.py (stand-in policy) and
tests/test_openrlhf_deepspeed.py (OpenRLHF's real policy actor on DeepSpeed).
`run_job` prepares the run directory exactly as `lze-bench train` does, then
runs the saved driver argv (`openrlhf/command.json`) through
tests/openrlhf_cpu/run_entry.py, which swaps in the CPU stand-ins named by
`policy` ("standin" or "deepspeed") and runs lze_bench's entry module unchanged.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
STANDINS = REPO / "tests" / "openrlhf_cpu"
STUBS = REPO / "tests" / "stubs"
ENV_POLICY = "LZE_TEST_POLICY"  # read by run_entry.py in the driver process


ENV_ENGINE = "LZE_TEST_ENGINE"  # read by run_entry.py: "standin" (transformers) or "vllm" (vllm_cpu.py)
# What OpenRLHF's real engines need in the config on CPU (vllm_cpu.py says why): no sleep mode, eager mode, the
# weight sync broadcast over gloo (with colocate_all, "nccl" means CUDA IPC)
VLLM_CPU_OVERRIDES = ("backend.vllm_enable_sleep=false", "backend.vllm_enforce_eager=true",
                      "backend.vllm_sync_backend=gloo")


def stub_path() -> str | None:
    """A folder holding the import stubs of only the packages that are really missing (tests/stubs has both
    vllm and flash_attn): with vLLM's CPU build installed, a stub `vllm` first on every Ray process's path would
    shadow the real engine."""
    missing = [name for name in ("vllm", "flash_attn") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    if len(missing) == 2:
        return str(STUBS)
    import hashlib
    import tempfile

    # Keyed on this checkout's path: a folder left in /tmp by another clone (a CI machine reuses /tmp) holds links
    # to a tree that may be gone, and os.path.exists is False for such a dangling link.
    checkout = hashlib.sha256(str(STUBS).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"lze_stubs_{'_'.join(missing)}_{os.getuid()}_{checkout}"
    folder.mkdir(exist_ok=True)
    for name in missing:
        _link(folder / name, STUBS / name)
    return str(folder)


def _link(link: Path, target: Path) -> None:
    """Point `link` at `target`, replacing a stale or dangling link; atomic (os.replace), so two test processes
    making the same link at once both succeed."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    fresh = link.with_name(f".{link.name}.{os.getpid()}")
    if fresh.is_symlink():
        fresh.unlink()
    fresh.symlink_to(target, target_is_directory=True)
    os.replace(fresh, link)


def child_env(engine: str = "standin", **extra) -> dict:
    """PYTHONPATH for the driver and every Ray process: this checkout, the stand-ins, the import stubs; DeepSpeed
    on its CPU accelerator (gloo), one thread per process (2 shared cores); vLLM's CPU KV cache at 1 GiB per
    engine (it reserves a share of RAM, ~10 GiB, otherwise).

    VLLM_ENABLE_V1_MULTIPROCESSING=0: OpenRLHF's AsyncLLMEngine still runs its engine core in its own process
    (AsyncLLM always does), but vLLM's CPU platform then keeps OpenRLHF's `uni` executor for tensor parallel 1
    instead of turning it into `mp`, so the model runs inside the engine-core process rather than in one more
    spawned `VLLM::Worker` (which re-imports torch and vLLM: ~10 s per engine here; a 3-step job went from 37.5 s
    to 27.7 s with the same policy losses to the last digit). On a GPU OpenRLHF's `uni` is what runs anyway.

    Stubs: with the transformers stand-in engine, both stubs whenever either package is missing (nothing
    generates with vLLM there, and its stub imports in no time where the real one takes seconds in every Ray
    process); with `engine="vllm"`, stubs of only what is missing (stub_path)."""
    paths = [str(REPO), str(STANDINS)]
    if engine == "vllm":
        stubs = stub_path()
    else:
        stubs = str(STUBS) if any(importlib.util.find_spec(n) is None for n in ("vllm", "flash_attn")) else None
    if stubs:
        paths.append(stubs)
    old = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths + ([old] if old else [])), TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0", DS_ACCELERATOR="cpu", VLLM_CPU_KVCACHE_SPACE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0")
    env.update(extra)
    return env


def vllm_cpu_error() -> str | None:
    """Why vLLM's CPU build (vllm-cpu 0.29.0, OpenRLHF 0.11.2's vLLM) is not there, or None. From the installed
    distributions: importing vllm takes seconds."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "vllm-cpu is not installed"
    return None if version.startswith("0.29.") else f"vllm-cpu {version} is installed; OpenRLHF 0.11.2 pins 0.29.0"


def engine_under_test() -> str:
    """The rollout engine a controller-loop test runs: "vllm" (OpenRLHF's own engines on vLLM's CPU build) where that
    build is installed, else "standin" (transformers); with LZE_BENCH_REQUIRE_VLLM=1 (CI, after installing it) a
    missing build is an error instead of a fallback."""
    error = vllm_cpu_error()
    if error and os.environ.get("LZE_BENCH_REQUIRE_VLLM") == "1":
        raise RuntimeError(f"LZE_BENCH_REQUIRE_VLLM=1 but vLLM's CPU build is missing ({error})")
    return "standin" if error else "vllm"


def engine_overrides(engine: str) -> tuple:
    """The config a run needs on CPU with `engine` (VLLM_CPU_OVERRIDES for the real one)."""
    return VLLM_CPU_OVERRIDES if engine == "vllm" else ()


def hidden_size_for(engine: str) -> int:
    """The tiny policy's hidden size with `engine`: 64 (head_dim 32) for vLLM's CPU attention, which refuses
    head_dim 16; else 32 (head_dim 16, what the stand-in tests were measured with)."""
    return 64 if engine == "vllm" else 32


def import_error() -> str | None:
    """Why OpenRLHF's CLI, our trainer or the stand-ins do not import in a child process (None: they do)."""
    probe = ("import openrlhf.cli.train_ppo_ray, lze_bench.backends.openrlhf.trainer, lze_cpu_standins.policy, "
             "lze_cpu_standins.ds_policy")
    done = subprocess.run([sys.executable, "-c", probe], env=child_env(), capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


# Every skip for a missing OpenRLHF names the command that installs it.
INSTALL_HINT = "install it: bash .ci/openrlhf.sh (CPU, these tests) or pip install 'lze-bench[openrlhf]' (GPU nodes)"
PROBLEM = "Is {i} odd? Reply 1 for yes, 0 for no."  # the tiny policy's task (fixtures.write_prompts)


EVERY_SELECTOR = "LZE_BENCH_EVERY_SELECTOR"  # =1: the OpenRLHF tests' longer runs for every selector, not a subset


# selectors that keep some of a group's rollouts or extend groups, at the OpenRLHF tests' scale (n = 4):
# PODS keeps 2 of 4, Reinforce-Ada rolls out rounds of 4 (two at most), SPEED screens with 2 and continues
# with 4 more (groups of 6)
PER_ROLLOUT = {"pods": ("selector.down_sample_ratio=2",),
               "reinforce_ada": ("selector.round_repeat=4", "selector.max_rounds=2"),
               "speed": ("selector.n_init=2", "selector.n_continue=4")}


def every_selector() -> bool:
    return os.environ.get(EVERY_SELECTOR) == "1"


def slow_openrlhf_marks() -> list:
    """`pytestmark` of a test file that runs OpenRLHF's job on CPU: slow, and the session fixture
    `openrlhf_importable` (tests/conftest.py), which calls `require_openrlhf` once, when the first such test runs:
    probing at import time cost ~8 s of a child process per file in every collection, the default run's too,
    whose selection drops these tests."""
    import pytest

    return [pytest.mark.slow, pytest.mark.usefixtures("openrlhf_importable")]


def require_openrlhf() -> None:
    """Skip (naming the install command) when OpenRLHF does not import; with LZE_BENCH_REQUIRE_OPENRLHF=1 (CI after
    installing it) an import failure is an error instead."""
    import pytest

    error = import_error()
    if error and os.environ.get("LZE_BENCH_REQUIRE_OPENRLHF") == "1":
        raise RuntimeError(f"LZE_BENCH_REQUIRE_OPENRLHF=1 but OpenRLHF does not import: {error}")
    if error is not None:
        pytest.skip(f"OpenRLHF 0.11.2 does not import ({error}); {INSTALL_HINT}")


@contextlib.contextmanager
def tiny_world(root: Path, num_gpus: int = 1, num_cpus: int = 2, hidden_size: int = 32, engine: str = "standin"):
    """A prompt set (10 prompts), the tiny warm-started policy and a private Ray cluster with `num_gpus` fake GPUs:
    {"root", "data", "model", "cluster", "runs"}; the cluster stops on exit."""
    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE

    from lze_cpu_standins.fixtures import RayCluster, save_tiny_policy, write_prompts

    data = write_prompts(root / "data", 10)
    model = save_tiny_policy(root / "tiny", [PROMPT_TEMPLATE.format(problem=PROBLEM.format(i=i)) for i in range(4)],
                             hidden_size=hidden_size)
    cluster = RayCluster(child_env(engine), num_cpus=num_cpus, num_gpus=num_gpus)
    try:
        yield {"root": root, "data": data, "model": model, "cluster": cluster, "runs": {}}
    finally:
        cluster.stop()


def overrides(model: Path, data: Path, selector: str, run_dir: Path, *, steps: int, batch: int, n: int, micro: int,
              epochs: int = 1, gpus: int = 1, zero_stage: int = 2, checkpoint_every: int = 1,
              extra: tuple = ()) -> list[str]:
    return [
        "backend=openrlhf", f"model={model}", "task=gsm8k", f"data.root={data}",
        f"selector={selector}", "seed=0", f"run_dir={run_dir}",
        f"trainer.steps={steps}", f"trainer.batch_size={batch}", f"trainer.n_samples={n}",
        "trainer.max_new_tokens=4", "trainer.lr=0.01", f"trainer.checkpoint_every={checkpoint_every}", f"trainer.ppo_epochs={epochs}",
        f"backend.gpus_per_node={gpus}", f"backend.zero_stage={zero_stage}", "backend.max_len=400",
        "backend.packing_samples=false", "backend.attn_implementation=eager", "backend.apply_chat_template=false",
        "backend.gradient_checkpointing=false",
        f"backend.train_micro_batch_size={micro}", f"backend.rollout_micro_batch_size={micro}",
        "backend.grade_workers=1", "backend.max_gen_rounds=3", "backend.placement_timeout_s=120",
        # GRESO examines the stream in chunks of its dataloader batch (32 of S = 384 in the authors' scripts);
        # the tiny task has 10 prompts, so one prompt a chunk (selectors.md §6 "Round structure")
        *(["selector.chunk=1"] if selector == "greso" else []), *extra,
    ]


def run_job(cfg_overrides: list[str], ray_address: str, crash_at_update: int | None = None,
            policy: str = "standin", timeout_s: int = 900, preempted: bool = False,
            engine: str = "standin") -> subprocess.CompletedProcess:
    """Prepare the run directory as `lze-bench train` does, then run the saved driver argv with the stand-ins.

    `crash_at_update=K` makes the policy actor raise before update K+1 (a crash after step K). `preempted`:
    the PREEMPT marker a Slurm job's rank 0 writes on the warning signal (lze_bench.preemption) is there
    before the driver starts, as if the signal came during the first step."""
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.config import compose
    from lze_bench.preemption import MARKER

    paths, argv = prepare(compose("train", cfg_overrides))
    if preempted:
        (paths.run_dir / MARKER).write_text("signal 12\n")
    crash = paths.work / "crash_at_update"  # read by the stand-in policy actors
    crash.write_text(str(crash_at_update)) if crash_at_update is not None else crash.unlink(missing_ok=True)
    assert argv[1:3] == ["-m", "lze_bench.backends.openrlhf.entry"]
    command = [sys.executable, str(STANDINS / "run_entry.py"), *argv[3:]]
    environment = child_env(engine, LZE_RAY_ADDRESS=ray_address, **{ENV_POLICY: policy, ENV_ENGINE: engine})
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout_s)


def ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def check_fit_loop(model: Path, selector: str, run: Path, *, steps: int, batch: int, n: int, micro: int,
                   epochs: int):
    """A finished run of `selector` (tests/test_openrlhf_e2e.py, and tests/test_openrlhf_vllm.py for uniform with
    the real engines): the run-directory schema, ledger counts against the rollout log and against what the policy
    actor received (policy.py's log), checkpoints, changed weights. Returns (ledger, the policy actor's updates)."""
    import json

    from lze_bench.ledger import LEDGER_COLUMNS, ROLLOUT_COLUMNS, read_ledger, read_rollouts
    from lze_bench.rundir import checkpoint_dir

    STEPS, BATCH, N, MICRO, EPOCHS = steps, batch, n, micro, epochs
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

    before = AutoModelForCausalLM.from_pretrained(model).state_dict()
    after = AutoModelForCausalLM.from_pretrained(checkpoint_dir(run, STEPS)).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    return ledger, trained
