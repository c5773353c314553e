"""backend=openrlhf: the selector calls of one training step, the ledger rows and the run state.

No OpenRLHF needed: the rollout is a deterministic function of the prompt id
(response j of prompt i is correct iff j < round(n * p_i)), standing in for
vLLM; the selectors are the real registered ones.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from pathlib import Path

from lze_bench.backends.openrlhf.accounting import ledger_row, rollout_rows
from lze_bench.backends.openrlhf.context import RunContext, finish_run
from lze_bench.backends.openrlhf.selection import Group, StepDriver, StepRecord
from lze_bench.data_order import DATA_TAG, DataOrder
from lze_bench.config import compose
from lze_bench.errors import LzeBenchError
from lze_bench.flops import FlopModel
from lze_bench.ledger import LEDGER_COLUMNS, Ledger, read_ledger, read_rollouts
from lze_bench.registry import SELECTORS
from lze_bench.rundir import is_done, list_checkpoints
from lze_bench.selectors import build_selector

N_SAMPLES = 4
RECIPE = Path(__file__).resolve().parents[1] / "sweeps" / "qwen25_math_1p5b.yaml"


def make_rollout(pass_rate, calls=None):
    """rollout(ids) -> Groups; pass_rate(i) in [0, 1]."""

    def rollout(ids):
        if calls is not None:
            calls.append(list(map(int, ids)))
        groups = []
        for i in map(int, ids):
            correct = int(round(N_SAMPLES * pass_rate(i)))
            rewards = (np.arange(N_SAMPLES) < correct).astype(np.float32)
            response = 10 + np.arange(N_SAMPLES)
            groups.append(Group(i, rewards, response, response + 5 + i % 3, payload=[f"s{i}.{j}" for j in range(4)]))
        return groups

    return rollout


def driver_for(name, *, num_prompts=40, batch=4, seed=0, max_rounds=12, candidates=None, store=None, **config):
    cls = SELECTORS[name]
    selector = build_selector(cls.Config(**config), num_prompts=num_prompts, batch_size=batch)
    return StepDriver(selector, DataOrder(num_prompts, seed), seed=seed, batch_size=batch,
                      candidates_per_step=candidates, max_rounds=max_rounds, group_size=N_SAMPLES, store=store)


def run_step(driver, rollout):
    record = driver.run_step(rollout)
    return record.kept, record


def test_data_order_is_seeded_per_epoch_and_never_spans_epochs():
    order = DataOrder(10, seed=3)
    first = order.take(4)
    assert order.epoch == 0 and first.tolist() == np.random.default_rng([3, 0, DATA_TAG]).permutation(10)[:4].tolist()
    order.take(4)
    third = order.take(4)  # only 2 left in epoch 0: skipped, epoch 1 starts
    assert order.epoch == 1
    assert third.tolist() == np.random.default_rng([3, 1, DATA_TAG]).permutation(10)[:4].tolist()
    with pytest.raises(LzeBenchError, match="candidates_per_step"):
        order.take(11)


def test_uniform_one_round_exact_batch_in_data_order():
    driver = driver_for("uniform")
    calls = []
    kept, record = run_step(driver, make_rollout(lambda i: 0.5, calls))
    expected = DataOrder(40, 0).permutation(0)[:4].tolist()
    assert calls == [expected]
    assert [g.prompt_id for g in kept] == expected
    assert (record.prompts_considered, record.prompts_rolled_out, record.gen_rounds) == (4, 4, 1)
    assert record.kept_flags == [True] * 4 and not record.partial and driver.step == 1


def test_every_selector_sees_the_same_first_candidates():
    firsts = {}
    for name in ("uniform", "lze"):
        calls = []
        driver_for(name).run_step(make_rollout(lambda i: 0.5, calls))
        firsts[name] = calls[0]
    assert firsts["uniform"] == firsts["lze"]


def test_dapo_refills_until_the_batch_holds_informative_groups():
    informative = lambda i: 0.5 if i % 10 == 0 else float(i % 2)  # 1 prompt in 10 is informative
    driver = driver_for("dapo", num_prompts=200)
    calls = []
    kept, record = run_step(driver, make_rollout(informative, calls))
    perm = DataOrder(200, 0).permutation(0)
    assert len(calls[0]) == 12  # gen_batch_size = 3 x 4, all rolled out
    rolled = [i for call in calls for i in call]
    assert rolled == perm[: len(rolled)].tolist()
    expected_kept = [i for i in rolled if i % 10 == 0][:4]
    assert [g.prompt_id for g in kept] == expected_kept
    assert record.gen_rounds == len(calls) > 1 and record.prompts_rolled_out == len(rolled)
    assert sum(record.kept_flags) == 4 and not record.partial


def test_lze_rolls_out_once_and_trains_only_what_it_kept():
    # epoch 0: LZE keeps every group with 0 < p < 1; half the prompts are dead: the batch shrinks
    driver = driver_for("lze", num_prompts=100)
    calls = []
    kept, record = run_step(driver, make_rollout(lambda i: 0.5 if i % 2 else 1.0, calls))
    first = DataOrder(100, 0).permutation(0)[:4].tolist()
    assert calls == [first] and record.gen_rounds == 1  # no refill round
    assert [g.prompt_id for g in kept] == [i for i in first if i % 2] and record.train_groups == kept
    assert not record.partial
    rows = rollout_rows(record)
    assert [r["prompt_id"] for r in rows] == first and sum(r["kept"] for r in rows) == len(kept)


def test_dapo_at_its_cap_updates_on_what_it_kept_never_on_dropped_groups():
    dead = lambda i: 0.5 if i == 7 else 1.0
    driver = driver_for("dapo", num_prompts=40, max_gen_batches=1, on_exhaust="partial")
    kept, record = run_step(driver, make_rollout(dead))
    assert record.partial and record.gen_rounds == 1 and len(record.rolled) == 12
    assert all(np.ptp(g.rewards) > 0 for g in kept) and len(kept) == sum(g.prompt_id == 7 for g in record.rolled)
    capped = driver_for("dapo", num_prompts=40, max_rounds=2)  # the backend's cap before dapo's own
    kept, record = run_step(capped, make_rollout(dead))
    assert record.partial and record.gen_rounds == 2 and len(kept) < 4
    assert all(np.ptp(g.rewards) > 0 for g in kept)


class ReplayAsked(SELECTORS["uniform"]):  # a plug-in asking for ASTRAL-style replay of `self.ask` at step 1
    ask = None

    def select_update(self, batch, step, rng):
        from lze_bench.selectors.base import UpdateDecision

        replay = np.array([self.ask]) if step == 1 and self.ask is not None else np.zeros((0, 2))
        return UpdateDecision(keep=np.ones(batch.num_groups, bool), replay=replay)


def replay_driver(store):
    return StepDriver(ReplayAsked(num_prompts=10), DataOrder(10, 0), seed=0, batch_size=2, candidates_per_step=1,
                      max_rounds=2, group_size=N_SAMPLES, store=store)


def test_replayed_groups_come_from_the_store_after_the_fresh_ones():
    from lze_bench.rollout_store import RolloutStore

    driver = replay_driver(RolloutStore(8))
    first = driver.run_step(make_rollout(lambda i: 0.5))
    assert first.replayed == [] and first.rolled[0].gen_step == 0
    driver.selector.ask = (first.rolled[0].prompt_id, 0)
    second = driver.run_step(make_rollout(lambda i: 0.5))
    assert second.replayed == [first.rolled[0]] and second.rolled[0].gen_step == 1
    assert second.train_groups == second.kept + second.replayed
    no_store = replay_driver(None)
    no_store.run_step(make_rollout(lambda i: 0.5))
    no_store.selector.ask = (1, 0)
    with pytest.raises(LzeBenchError, match="no longer holds"):
        no_store.run_step(make_rollout(lambda i: 0.5))


def test_resume_reproduces_candidates_and_selector_state():
    rate = lambda i: (i % 5) / 4
    straight = driver_for("lze", num_prompts=30)
    calls_straight = []
    for _ in range(5):
        straight.run_step(make_rollout(rate, calls_straight))
    first = driver_for("lze", num_prompts=30)
    for _ in range(3):
        first.run_step(make_rollout(rate))
    position, state = first.position(), first.selector.state_dict()
    resumed = driver_for("lze", num_prompts=30)
    resumed.restore(position)
    resumed.selector.load_state_dict(state)
    calls_resumed = []
    for _ in range(2):
        resumed.run_step(make_rollout(rate, calls_resumed))
    assert calls_resumed == calls_straight[-len(calls_resumed):]
    assert resumed.position() == straight.position()


def hand_record():
    g1 = Group(3, np.array([1, 0], np.float32), np.array([2, 4]), np.array([7, 9]), grade_time_s=0.25)
    g2 = Group(5, np.array([0, 0], np.float32), np.array([1, 1]), np.array([6, 6]), grade_time_s=0.5)
    return StepRecord(step=2, epoch=1, prompts_considered=6, prompts_rolled_out=2, gen_rounds=1,
                      rolled=[g1, g2], kept_flags=[True, False], time_rollout_s=3.0, time_select_s=0.1,
                      time_step_s=1.0)


STATUS = {"timing/make_experience": 1.5, "timing/ppo_train": 2.0, "timing/broadcast": 0.5,
          "timing/generation": 9.0, "rollout/reward_mean": 0.5}


def test_ledger_row_hand_computed_flops():
    flops = FlopModel(matmul_params=100, n_layer=2, d_attn=8)  # F(L) = 200 L + 32 L (L + 1)
    row = ledger_row(hand_record(), STATUS, flops, ppo_epochs=1, reference_pass=False)
    assert row["flops_rollout"] == 5600 + 32 * (56 + 90 + 42 + 42) == 12960
    assert row["flops_logprob"] == 3200 + 32 * (56 + 90) == 7872
    assert row["flops_train"] == 3 * 7872
    assert (row["samples"], row["prompt_tokens"], row["generated_tokens"], row["trained_tokens"]) == (4, 20, 8, 16)
    assert (row["groups_kept"], row["prompts_considered"], row["prompts_rolled_out"]) == (1, 6, 2)
    assert row["time_update_s"] == 4.0 and row["time_step_s"] == 5.0 and row["time_grade_s"] == 0.75
    assert row["reward_mean"] == 0.25 and row["zero_variance_frac"] == 0.5 and row["kept_zero_variance"] == 0
    with_ref = ledger_row(hand_record(), STATUS, flops, ppo_epochs=2, reference_pass=True)
    assert with_ref["flops_logprob"] == 2 * 7872 and with_ref["flops_train"] == 2 * 3 * 7872


def test_ledger_row_update_diagnostics_from_openrlhf_status():
    flops = FlopModel(matmul_params=100, n_layer=2, d_attn=8)
    # keys of OpenRLHF 0.11.2's actor status (PolicyModelActor.fit / training_step)
    status = {**STATUS, "policy_loss": -0.02, "ppo_clip_ratio": 0.125, "actor_grad_norm": 3.5, "kl": 0.004,
              "ppo_kl": 1e-5, "actor_lr": 1e-6}
    row = ledger_row(hand_record(), status, flops, ppo_epochs=1, reference_pass=True)
    assert (row["loss"], row["clip_frac"], row["grad_norm"], row["kl"]) == (-0.02, 0.125, 3.5, 0.004)
    bare = ledger_row(hand_record(), STATUS, flops, ppo_epochs=1, reference_pass=False)  # no update reported, no KL
    assert all(np.isnan(bare[key]) for key in ("loss", "clip_frac", "grad_norm", "kl"))
    # without a reference model OpenRLHF still reports kl = 0 (make_experience's zeros): not a measurement
    no_reference = ledger_row(hand_record(), status, flops, ppo_epochs=1, reference_pass=False)
    assert np.isnan(no_reference["kl"]) and no_reference["clip_frac"] == 0.125


def recipe_cfg(run_dir, steps=3, every=2):
    spec = yaml.safe_load(RECIPE.read_text())
    return compose("train", [*spec["overrides"], "selector=lze", "seed=0", f"run_dir={run_dir}",
                             f"trainer.steps={steps}", f"trainer.checkpoint_every={every}", "trainer.batch_size=4"])


def test_run_context_ledger_checkpoint_resume_done(tmp_path):
    run = tmp_path / "run"
    cfg = recipe_cfg(run)
    flops = FlopModel(matmul_params=100, n_layer=2, d_attn=8)
    ctx = RunContext(cfg, num_prompts=30, flops=flops)
    rate = lambda i: (i % 5) / 4
    for global_step in (1, 2):
        _, record = run_step(ctx.driver, make_rollout(rate))
        row = ctx.write_step(record, STATUS)
        assert row["step"] == global_step - 1
        if ctx.checkpoint_due():
            ctx.save_selector_state(global_step)
            position = ctx.client_state()
            hf = run / "openrlhf" / "ckpt" / f"global_step{global_step}_hf"
            hf.mkdir(parents=True)
            (hf / "config.json").write_text("{}")
            ctx.adopt_checkpoint(global_step, hf)
    assert [s for s, _ in list_checkpoints(run)] == [2] and not hf.exists()
    ledger = read_ledger(run)
    assert list(ledger["step"]) == [0, 1] and set(LEDGER_COLUMNS) <= set(ledger.columns)
    assert ledger["cum_flops"].iloc[-1] == float(ledger["flops_total"].sum())
    # a third step that is lost (crash before its checkpoint), then resume from step 2
    _, record = run_step(ctx.driver, make_rollout(rate))
    ctx.write_step(record, STATUS)
    resumed = RunContext(cfg, num_prompts=30, flops=flops)
    resumed.restore({"global_step": 2, "lze": position})
    assert resumed.driver.position() == position and list(read_ledger(run)["step"]) == [0, 1]
    assert resumed.selector.state_dict().keys() == ctx.selector.state_dict().keys()
    with pytest.raises(LzeBenchError, match="stopped after 2 of 3 steps"):
        finish_run(run, cfg.trainer)
    _, record = run_step(resumed.driver, make_rollout(rate))
    resumed.write_step(record, STATUS)
    assert resumed.checkpoint_due() and resumed.finished  # the last step always checkpoints
    assert finish_run(run, cfg.trainer) == "steps"
    assert is_done(run) and sorted(read_rollouts(run)["step"].unique()) == [0, 1, 2]


def test_resume_without_lze_position_is_refused(tmp_path):
    ctx = RunContext(recipe_cfg(tmp_path / "run"), num_prompts=30, flops=FlopModel(1, 1, 1))
    with pytest.raises(LzeBenchError, match="not written by lze-bench"):
        ctx.restore({"global_step": 4})
    ctx.restore({"global_step": 0})
    assert Ledger(tmp_path / "run").last_step == -1


def test_a_damaged_replay_store_fails_the_resume_in_one_line_and_is_left_as_is(tmp_path):
    run = tmp_path / "run"
    spec = yaml.safe_load(RECIPE.read_text())
    cfg = compose("train", [*spec["overrides"], "selector=uniform", "seed=0", f"run_dir={run}", "trainer.steps=3",
                            "trainer.checkpoint_every=1", "trainer.batch_size=4",
                            "backend.rollout_store_groups=8"])  # a store asked for, without astral's feature passes
    ctx = RunContext(cfg, num_prompts=30, flops=FlopModel(1, 1, 1))
    assert ctx.replays
    _, record = run_step(ctx.driver, make_rollout(lambda i: (i % 5) / 4))
    ctx.write_step(record, STATUS)
    ctx.save_selector_state(1)
    position = ctx.client_state()
    path = run / "replay_store" / "step_000001.pt"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    damaged = path.read_bytes()
    resumed = RunContext(cfg, num_prompts=30, flops=FlopModel(1, 1, 1))
    with pytest.raises(LzeBenchError) as caught:
        resumed.restore({"global_step": 1, "lze": position})
    message = str(caught.value)
    assert message.startswith(f"{path} is damaged and was left as is (") and "\n" not in message
    assert "restore it from a copy, or start the run over" in message
    assert path.read_bytes() == damaged and list(read_ledger(run)["step"]) == [0]  # nothing cut back either


class Planted:
    """An object whose unpickling creates `marker` (as a planted file could run anything)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.mark.parametrize("kind", ["replay_store", "pending"])
def test_a_planted_replay_store_or_held_groups_file_is_refused_in_one_line_and_runs_nothing(tmp_path, kind):
    """The trainer actor's resume reads these with torch.load(weights_only=True) (lze_bench.state_file)."""
    import torch

    run = tmp_path / "run"
    spec = yaml.safe_load(RECIPE.read_text())
    cfg = compose("train", [*spec["overrides"], "selector=uniform", "seed=0", f"run_dir={run}", "trainer.steps=3",
                            "trainer.checkpoint_every=1", "trainer.batch_size=4", "backend.rollout_store_groups=8"])
    ctx = RunContext(cfg, num_prompts=30, flops=FlopModel(1, 1, 1))
    _, record = run_step(ctx.driver, make_rollout(lambda i: (i % 5) / 4))
    ctx.write_step(record, STATUS)
    ctx.save_selector_state(1)
    position, marker = ctx.client_state(), tmp_path / "marker"
    if kind == "pending":  # as if a selector had held one group (SPEED)
        position["pending"] = 1
    path = run / kind / "step_000001.pt"
    path.parent.mkdir(exist_ok=True)
    torch.save({"capacity": 8, "groups": [Planted(marker)]} if kind == "replay_store" else [Planted(marker)], path)
    with pytest.raises(LzeBenchError) as caught:
        RunContext(cfg, num_prompts=30, flops=FlopModel(1, 1, 1)).restore({"global_step": 1, "lze": position})
    message = str(caught.value)
    assert not marker.exists() and "\n" not in message
    assert message.startswith(f"{path} names io.open, which loading would run; it was not loaded")
    assert list(read_ledger(run)["step"]) == [0]  # nothing cut back


def test_a_preemption_warning_checkpoints_the_step_just_written_and_stops(tmp_path):
    """The PREEMPT marker (written by the job's rank 0 on Slurm's warning signal, lze_bench.preemption): the
    step just written is checkpointed although none is due, and no further step starts."""
    from lze_bench.preemption import MARKER

    run = tmp_path / "run"
    ctx = RunContext(recipe_cfg(run, steps=6, every=4), num_prompts=30, flops=FlopModel(1, 1, 1))
    _, record = run_step(ctx.driver, make_rollout(lambda i: (i % 5) / 4))
    ctx.write_step(record, STATUS)
    assert not ctx.checkpoint_due() and not ctx.finished
    (run / MARKER).write_text("signal 12\n")
    assert ctx.checkpoint_due() and ctx.stop_reason is None
    assert not ctx.finished  # the step just written is not saved yet: the trainer checkpoints it first
    ctx.save_selector_state(1)
    assert ctx.finished  # stopped, not done
    with pytest.raises(LzeBenchError, match="stopped after 1 of 6 steps"):
        finish_run(run, ctx.cfg.trainer)


def counted_rollout(pass_rate, calls):
    """rollout(ids, counts) -> Groups of counts[i] responses; the first round(counts[i] * p_i) are correct."""

    def rollout(ids, counts=None):
        counts = np.full(len(ids), N_SAMPLES) if counts is None else counts
        calls.append((list(map(int, ids)), list(map(int, counts))))
        groups = []
        for i, k in zip(map(int, ids), map(int, counts)):
            rewards = (np.arange(k) < int(round(k * pass_rate(i)))).astype(np.float32)
            response = 10 + np.arange(k)
            groups.append(Group(i, rewards, response, response + 5, payload=[f"s{i}.{j}" for j in range(k)]))
        return groups

    return rollout


def test_held_groups_are_checkpointed_and_a_resume_goes_on_as_the_unbroken_run(tmp_path):
    """SPEED carries screened prompts over to the next step: the checkpoint keeps them (with their samples), and
    a resumed run generates and trains exactly what the unbroken run did."""
    spec = yaml.safe_load(RECIPE.read_text())
    cfg = compose("train", [*spec["overrides"], "selector=speed", "selector.n_init=2", "selector.n_continue=4",
                            "seed=0", f"run_dir={tmp_path / 'run'}", "trainer.steps=8", "trainer.batch_size=4"])
    flops, rate = FlopModel(matmul_params=100, n_layer=2, d_attn=8), lambda i: (i % 5) / 4
    ctx, calls, positions = RunContext(cfg, num_prompts=40, flops=flops), [], {}
    for done in range(1, 7):
        ctx.driver.run_step(counted_rollout(rate, calls))
        ctx.save_selector_state(done)
        positions[done] = (ctx.client_state(), len(calls), [h.prompt_id for h in ctx.driver.pending])
    held = [done for done, (position, _, pending) in positions.items() if pending and done < 6]
    assert held, "SPEED held no group over a step boundary in this run"
    done = held[0]
    position, seen, pending = positions[done]
    assert position["pending"] == len(pending)
    resumed = RunContext(cfg, num_prompts=40, flops=flops)
    resumed.restore({"global_step": done, "lze": position})
    assert [h.prompt_id for h in resumed.driver.pending] == pending
    assert all(h.group.payload for h in resumed.driver.pending)  # the samples to train came back too
    again, rows = [], []
    for _ in range(done, 6):
        rows += rollout_rows(resumed.driver.run_step(counted_rollout(rate, again)))
    assert again == calls[seen:]
    # the carried-over groups' rows say how stale their rollouts were
    assert {row["prompt_id"] for row in rows if min(row["rollout_steps"]) < row["step"]} >= set(pending)
    assert resumed.driver.position() == ctx.driver.position()
    # a checkpoint whose held groups are gone is refused in one line, not resumed without them
    (tmp_path / "run" / "pending" / f"step_{done:06d}.pt").unlink()
    with pytest.raises(LzeBenchError, match="missing held groups"):
        RunContext(cfg, num_prompts=40, flops=flops).restore({"global_step": done, "lze": position})


def test_ledger_books_generation_for_every_rollout_and_the_update_for_the_chosen_ones():
    """PODS-like: 4 rollouts generated per prompt, 2 chosen (log-prob pass), 1 of them left by the trim (trained);
    plus a held group's 2 rollouts generated this step but decided later (booked now, trained never here)."""
    flops = FlopModel(matmul_params=100, n_layer=2, d_attn=8)  # F(L) = 200 L + 32 L (L + 1)
    kept = Group(3, np.array([1, 0, 0, 1], np.float32), np.array([2, 4, 1, 3]), np.array([7, 9, 6, 8]), gen_step=2)
    dropped = Group(5, np.array([0, 0, 0, 0], np.float32), np.array([1, 1, 1, 1]), np.array([6, 6, 6, 6]), gen_step=2)
    held = Group(6, np.array([1, 1], np.float32), np.array([1, 1]), np.array([6, 6]), gen_step=2)
    choices = [np.array([True, False, False, True]), np.zeros(4, bool)]
    record = StepRecord(step=2, rolled=[kept, dropped], kept_flags=[True, False], choices=choices,
                        stats_masks=[choices[0], None], adv_eps=[1e-4, None], generated=[kept, dropped, held],
                        train_masks=[np.array([True, False, False, False])])
    row = ledger_row(record, STATUS, flops, ppo_epochs=1, reference_pass=False)
    assert row["samples"] == 10 and row["generated_tokens"] == 10 + 4 + 2
    assert row["flops_logprob"] == flops.logprob(np.array([7, 8]))  # the chosen two, not all four
    assert row["flops_train"] == flops.train(np.array([7])) and row["trained_tokens"] == 7
    assert (row["groups_kept"], row["responses_kept"], row["responses_trained"]) == (1, 2, 1)
    # the advantage statistics are the kept subset's (rewards 1 and 1): zero advantage, though the group's
    # four rewards are not all equal
    assert row["kept_zero_variance"] == 1
