"""backend=openrlhf with OpenRLHF's real rollout engines on vLLM's CPU build: seeded rollouts make a run repeatable.

OpenRLHF 0.11.2 sends every rollout request unseeded, so with the real engine two identical runs, or a crashed
run and its resume, drew different responses and ended with different rewards, ledgers and weights (the
transformers stand-in engine used to hide that by seeding itself). lze-bench now seeds every sample's request
(generator.rollout_seed); here an unbroken run and a run crashed before its last update and resumed, each with
OpenRLHF's own `create_vllm_engines` / `RolloutRayActor` (an `AsyncLLMEngine` per Ray actor, vLLM 0.29.0's CPU
build), must end identical: ledger, every rollout's rewards and response tokens, final weights. The crashed
run is itself a second run from scratch, in its own process with its own engine, unbroken until its last update:
the steps before the crash are two independent runs compared, the steps after it a resume. The unbroken run
also gets every check tests/test_openrlhf_e2e.py makes of a selector's run (harness.check_fit_loop): that
file leaves uniform to this one where vLLM's CPU build is installed.

The CPU-only shims (tests/openrlhf_cpu/lze_cpu_standins/vllm_cpu.py, each with its reason): the weight sync is a
state dict loaded with one `reload_weights` (OpenRLHF's NCCL/CUDA-IPC broadcast needs GPUs), our worker
extension, no sleep mode, eager mode, a 1 GiB KV cache, head_dim 32, no stub `vllm` on the path. The policy
actor is the torch stand-in (policy.py): what this test checks is the rollout side, and an engine start
(~30 s here) per run is its cost.

Skips (naming the install command) where OpenRLHF or vLLM's CPU build is missing; CI sets
LZE_BENCH_REQUIRE_OPENRLHF=1 and LZE_BENCH_REQUIRE_VLLM=1 after installing them, and then a skip is a failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "openrlhf_cpu"
sys.path.insert(0, str(STANDINS))
from lze_cpu_standins import harness  # noqa: E402
from lze_cpu_standins.harness import ok  # noqa: E402

sys.path.remove(str(STANDINS))


VLLM_ERROR = harness.vllm_cpu_error()
if VLLM_ERROR and os.environ.get("LZE_BENCH_REQUIRE_VLLM") == "1":
    raise RuntimeError(f"LZE_BENCH_REQUIRE_VLLM=1 but vLLM's CPU build is missing ({VLLM_ERROR})")
pytestmark = [*harness.slow_openrlhf_marks(),
              pytest.mark.skipif(VLLM_ERROR is not None,
                                 reason=f"{VLLM_ERROR}; install it with bash .ci/vllm_cpu.sh (docs/cluster.md)")]

STEPS, BATCH, N, MICRO, EPOCHS = 3, 2, 3, 2, 2  # as tests/test_openrlhf_e2e.py, whose uniform case this is
COMPARED = ["step", "prompts_considered", "prompts_rolled_out", "groups_kept", "samples", "prompt_tokens",
            "generated_tokens", "trained_tokens", "flops_rollout", "flops_logprob", "flops_train", "flops_total",
            "cum_flops", "responses_trained"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with harness.tiny_world(tmp_path_factory.mktemp("vllm"), hidden_size=harness.hidden_size_for("vllm"),
                            engine="vllm") as world:
        yield world


def run_job(world, run_dir: Path, crash_at_update: int | None = None):
    overrides = harness.overrides(world["model"], world["data"], "uniform", run_dir, steps=STEPS, batch=BATCH, n=N,
                                  micro=MICRO, epochs=EPOCHS, extra=harness.VLLM_CPU_OVERRIDES)
    return harness.run_job(overrides, world["cluster"].address, crash_at_update, engine="vllm")


def test_a_run_and_a_crashed_and_resumed_run_with_real_engines_are_the_same_run(world, tmp_path):
    """Two runs from scratch, "first" unbroken and "resumed" crashed before its last update and rerun, end
    identical over every step: ledger, rollouts (ids, kept, rewards, response tokens), final weights. The crashed
    run's steps before the crash are a second unbroken run in its own driver process with its own engine, after
    weight syncs as in "first" (seeded rollouts repeat from run to run); its last step is drawn by a fresh engine
    after the resume (they repeat across a restart). So a separate second unbroken run, which this test made
    until 2026-11 (one more engine job, ~130 s on 2 cores), proved nothing these two runs do not."""
    import torch
    from transformers import AutoModelForCausalLM

    from lze_bench.ledger import read_ledger, read_rollouts
    from lze_bench.rundir import checkpoint_dir

    runs = {name: tmp_path / name for name in ("first", "resumed")}
    ok(run_job(world, runs["first"]))
    done = run_job(world, runs["resumed"], crash_at_update=STEPS - 1)
    assert done.returncode != 0 and "injected crash" in done.stdout + done.stderr
    before_crash = read_ledger(runs["resumed"])
    assert 0 < len(before_crash) < STEPS  # some steps run unbroken from scratch, the rest after the resume
    ok(run_job(world, runs["resumed"]))

    # the checks tests/test_openrlhf_e2e.py makes of every selector's run (it leaves uniform to this test)
    harness.check_fit_loop(world["model"], "uniform", runs["first"], steps=STEPS, batch=BATCH, n=N, micro=MICRO,
                           epochs=EPOCHS)
    ledgers = {name: read_ledger(run) for name, run in runs.items()}
    rollouts = {name: read_rollouts(run) for name, run in runs.items()}
    weights = {name: AutoModelForCausalLM.from_pretrained(checkpoint_dir(run, STEPS)).state_dict()
               for name, run in runs.items()}
    first = ledgers["first"]
    assert list(first["step"]) == list(range(STEPS)) and (first["generated_tokens"] > 0).all()
    rewards = [r for group in rollouts["first"]["rewards"] for r in group]
    assert 0 < sum(rewards) < len(rewards)  # sampled: some right, some wrong (so the seeds matter)
    # the steps the crashed run made before its crash: a second run from scratch, equal to the first as it went
    pd.testing.assert_frame_equal(before_crash[COMPARED], first[COMPARED].iloc[:len(before_crash)],
                                  obj="ledger before the crash")
    # the whole run, the steps after the resume included
    pd.testing.assert_frame_equal(ledgers["resumed"][COMPARED], first[COMPARED], obj="resumed ledger")
    columns = ["step", "prompt_id", "kept"]
    assert rollouts["resumed"][columns].equals(rollouts["first"][columns])
    assert [list(r) for r in rollouts["resumed"]["rewards"]] == [list(r) for r in rollouts["first"]["rewards"]]
    assert ([list(t) for t in rollouts["resumed"]["response_tokens"]]
            == [list(t) for t in rollouts["first"]["response_tokens"]])
    assert all(torch.equal(weights["resumed"][k], weights["first"][k]) for k in weights["first"])
    initial = AutoModelForCausalLM.from_pretrained(world["model"]).state_dict()
    assert any(not torch.equal(initial[k], weights["first"][k]) for k in initial)  # it trained


SYNC_TOLERANCE_NATS = 0.05  # bf16 engine against a float32 forward of the same bf16 weights (0.011 seen)


def test_engine_holds_the_actors_weights_after_every_sync(world):
    """One of OpenRLHF's `RolloutRayActor`s (our CPU subclass, vllm_cpu.py) and two syncs of an updated policy
    (the actor's weights plus seeded noise, as an update changes them): after each sync the engine's readable
    tensors (embeddings, norms, LM head) equal the actor's bf16 weights bit for bit, and its greedy log-probs
    match the actor's forward within SYNC_TOLERANCE_NATS; before the sync they differ by more than that."""
    import ray
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE

    sys.path.insert(0, str(STANDINS))
    try:
        from lze_cpu_standins.vllm_cpu import WORKER_EXTENSION, _VllmCpuRolloutActor
    finally:
        sys.path.remove(str(STANDINS))
    env = harness.child_env("vllm")
    ray.init(address=world["cluster"].address, runtime_env={"env_vars": {"PYTHONPATH": env["PYTHONPATH"]}})
    try:
        engine = ray.remote(_VllmCpuRolloutActor).options(num_cpus=0, num_gpus=0).remote(
            model=str(world["model"]), enforce_eager=True, worker_extension_cls=WORKER_EXTENSION, seed=0,
            tensor_parallel_size=1, distributed_executor_backend="uni", max_model_len=128, dtype="bfloat16",
            num_gpus=0, enable_sleep_mode=False, enable_prefix_caching=False)
        tokenizer = AutoTokenizer.from_pretrained(world["model"])
        prompts = [tokenizer(PROMPT_TEMPLATE.format(problem=harness.PROBLEM.format(i=i)))["input_ids"]
                   for i in range(4)]
        actor = AutoModelForCausalLM.from_pretrained(world["model"], dtype=torch.float32).eval()
        generator = torch.Generator().manual_seed(0)
        readable = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                    "model.layers.0.input_layernorm.weight"]

        def gaps() -> list[float]:
            """Per prompt, the largest |engine - actor| log-prob over the engine's greedy tokens."""
            out = []
            for ids in prompts:
                tokens, engine_logprobs = ray.get(engine.greedy_logprobs.remote(ids, 6))
                with torch.no_grad():
                    logits = actor(torch.tensor([ids + tokens])).logits[0, len(ids) - 1 : -1].float()
                ours = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
                out.append(float((ours - torch.tensor(engine_logprobs)).abs().max()))
            return out

        for sync in (1, 2):
            with torch.no_grad():  # an update: new weights, rounded to bf16 as the actor's param_dtype is
                for param in actor.parameters():
                    param.add_(param.std() * torch.randn(param.shape, generator=generator))
                    param.copy_(param.to(torch.bfloat16).float())
            before = gaps()
            assert max(before) > 2 * SYNC_TOLERANCE_NATS, f"sync {sync}: the engine already matched ({before})"
            state = {name: tensor.to(torch.bfloat16) for name, tensor in actor.state_dict().items()}
            assert ray.get(engine.load_weights.remote(state)) == f"sync {sync}"
            held = ray.get(engine.readable_weights.remote(readable))
            assert sorted(held) == sorted(readable)
            for name in readable:  # vLLM pads the vocabulary rows of embeddings and LM head: the real rows compare
                ours, theirs = state[name].float(), held[name][: state[name].shape[0]]
                assert torch.equal(theirs, ours), (f"sync {sync}: {name} differs: {tuple(held[name].shape)} vs "
                                                   f"{tuple(ours.shape)}, max {float((theirs - ours).abs().max())}")
            after = gaps()
            print(f"sync {sync}: max |log-prob gap| before {max(before):.3f}, after {max(after):.4f} nats")
            assert max(after) < SYNC_TOLERANCE_NATS, f"sync {sync}: {after}"
        ray.kill(engine)
    finally:
        ray.shutdown()


def test_bench_overhead_times_lze_bench_against_plain_openrlhf(world, tmp_path):
    """`lze-bench bench overhead`: the same CPU job (OpenRLHF's real engines and its DeepSpeed policy actor, 3 steps)
    run by lze-bench (selector=uniform) and by OpenRLHF's own train_ppo_ray with the same flags, one round; each job
    logs one TensorBoard step per step. The table has the round's medians and ratio, OpenRLHF's phase timers for
    both drivers, and the load. What the ratio is on this machine goes in the bench's output, not in an assertion
    (time goals live in benchmarks). rounds=1, steps=3 with skip=1 is the fewest the bench accepts (2 timed
    intervals a job); the interval over rounds and the alternating order are computed from timings alone and
    checked in tests/test_bench_overhead.py; a benchmark run of the command takes more (rounds=4, steps=6 by
    default)."""
    import json
    import subprocess

    wrapper = f"backend.driver_wrapper=[{sys.executable},{STANDINS / 'run_entry.py'}]"
    overrides = harness.overrides(world["model"], world["data"], "uniform", tmp_path / "unused", steps=3, batch=BATCH,
                                  n=N, micro=MICRO, checkpoint_every=0, extra=(*harness.VLLM_CPU_OVERRIDES, wrapper))
    overrides = [o for o in overrides if not o.startswith(("selector=", "run_dir=", "trainer.steps="))]
    (tmp_path / "job.yaml").write_text("".join(f"- {json.dumps(o)}\n" for o in overrides))
    env = harness.child_env("vllm", LZE_RAY_ADDRESS=world["cluster"].address, COLUMNS="200",
                            **{harness.ENV_ENGINE: "vllm", harness.ENV_POLICY: "deepspeed"})
    done = subprocess.run([sys.executable, "-m", "lze_bench.cli", "bench", "overhead",
                           f"overrides={tmp_path / 'job.yaml'}", f"out={tmp_path / 'out'}", "rounds=1", "steps=3",
                           "skip=1", "--json", str(tmp_path / "overhead.json")],
                          env=env, capture_output=True, text=True, timeout=1500)
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "overhead.json").read_text())
    rows = {row["row"]: row for row in result["rows"]}
    assert list(rows) == ["round 1 (lze-bench first)", "step (mean over rounds)",
                          *(f"phase {p}" for p in ("generation", "make_experience", "ppo_train", "broadcast",
                                                   "outside_timers"))]
    r = rows["round 1 (lze-bench first)"]
    assert r["steps_timed"] == "2/2"  # 3 steps a job, the first (warm-up) untimed
    assert 0 < r["lze_bench_s"] and 0 < r["openrlhf_s"] and r["ratio"] == pytest.approx(r["lze_bench_s"] /
                                                                                         r["openrlhf_s"])
    assert r["load_1m_before"] >= 0 and r["load_1m_after"] >= 0
    summary = rows["step (mean over rounds)"]
    assert summary["ratio"] == pytest.approx(r["ratio"])
    assert summary["ratio_ci95_low"] is None and summary["ratio_ci95_high"] is None  # one round: no interval
    assert summary["extra_s"] == pytest.approx(summary["lze_bench_s"] - summary["openrlhf_s"])
    for phase in ("generation", "make_experience", "ppo_train", "broadcast", "outside_timers"):  # both log them
        assert rows[f"phase {phase}"]["lze_bench_s"] is not None and rows[f"phase {phase}"]["openrlhf_s"] is not None
    assert any("one round: no interval" in note for note in result["notes"])
    # plain OpenRLHF ran in its own folder and saved its final model there; lze-bench's run is a normal run dir
    assert any((tmp_path / "out" / "round_1" / "openrlhf" / "final").rglob("*.safetensors"))
    assert (tmp_path / "out" / "round_1" / "lze" / "DONE").exists()
    with pytest.raises(subprocess.CalledProcessError):  # out= exists: refused, nothing overwritten
        subprocess.run([sys.executable, "-m", "lze_bench.cli", "bench", "overhead",
                        f"overrides={tmp_path / 'job.yaml'}", f"out={tmp_path / 'out'}"], env=env, check=True,
                       capture_output=True, text=True, timeout=300)
