"""`selector=NAME` decides the same on a laptop and on a cluster: the local backend's step and the OpenRLHF
selection driver, fed the same recorded rewards and features, make the same rollout, keep and replay
decisions step by step (issue: every selector on OpenRLHF, "Equivalence across backends"), rollout by
rollout: how many rollouts each prompt got (ragged groups), which of them train (keep masks), and which
groups wait for the next step (held groups).

Each backend runs through its own wiring: the local `StepRunner.run` with only the model-bound parts
replaced (generation returns the recorded rewards; the GRPO update records what it was given), and
OpenRLHF's `StepDriver.run_step` with a rollout returning the same groups. What trains afterwards may
differ by design (OpenRLHF trims to whole micro-batches, trim.py); the decisions may not.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

import lze_bench.backends.local.step as local_step
import lze_bench.selectors  # noqa: F401  (registers them)
from lze_bench.backends.local.grpo import Group as LocalGroup
from lze_bench.backends.openrlhf.accounting import ledger_row, rollout_rows
from lze_bench.backends.openrlhf.selection import Group as OpenGroup
from lze_bench.backends.openrlhf.selection import StepDriver
from lze_bench.backends.openrlhf.trim import trained_masks
from lze_bench.data_order import DataOrder
from lze_bench.flops import FlopModel
from lze_bench.registry import SELECTORS
from lze_bench.rollout_store import RolloutStore
from lze_bench.selectors import RolloutBatch, build_selector

N_PROMPTS, BATCH, N, STEPS, SEED = 60, 4, 4, 6, 3
# the ledger columns both backends book from the decisions alone (rollouts generated and kept per prompt)
FLOPS = FlopModel(matmul_params=10, n_layer=1, d_attn=2)
LEDGER_KEYS = ("samples", "groups_kept", "responses_kept", "prompts_rolled_out", "kept_zero_variance")
# chunk scaled to S = 6; speed's continuation scaled to n = 4 so that its groups train within a few rounds
CONFIGS = {"astral": {"ref_size": 8, "buffer_size": 12}, "greso": {"chunk": 2},
           "speed": {"n_init": 2, "n_continue": 4}}
CASES = sorted(SELECTORS) + ["lze-align"]


class Recorded:
    """The recorded outcomes: rewards, response tokens and entropies of the k-th rollout of a prompt in a step
    (probes and rounds in the order the backend ran them; equal decisions give equal orders)."""

    def __init__(self):
        self.seen: dict = {}

    def outcome(self, pid: int, step: int, count: int = N):
        k = self.seen.get((pid, step), 0)
        self.seen[(pid, step)] = k + 1
        rng = np.random.default_rng([pid, step, k, 77])
        rate = ((pid * 7) % 11) / 10 * (1 + 0.05 * step)  # some always/never solved, drifting with the step
        rewards = (rng.random(count) < min(rate, 1.0)).astype(np.float32)
        return rewards, rng.integers(1, 9, count), rng.random(count).astype(np.float32)


class Features:
    """The same FeatureFn for both backends."""

    table = np.random.default_rng(5).random((N_PROMPTS, 6)).astype(np.float32)

    def __call__(self, name, ids):
        ids = np.asarray(ids, dtype=np.int64)
        return self.table[ids, 0] * 3 if name == "prompt_entropy" else self.table[ids]

    def take_costs(self):
        return 0, 0.0


# the per-prompt columns adarft and sec read (lze_bench.metadata): 6 levels of 10, as the synthetic task's
METADATA = {"level": np.arange(N_PROMPTS) % 6 + 1, "difficulty": (np.arange(N_PROMPTS) % 6) * 20.0}


def make_selector(case: str):
    name, _, variant = case.partition("-")
    extra = {"align_minibatch": True, "keep_ratio": 0.5, "align_mini_batch_prompts": 1} if variant else {}
    return build_selector(SELECTORS[name].Config(**CONFIGS.get(name, {}), **extra), num_prompts=N_PROMPTS,
                          batch_size=BATCH, metadata=METADATA)


def store_for(selector) -> RolloutStore:
    size = int(getattr(selector.config, "buffer_size", 0) or 0)
    return RolloutStore(size + BATCH if size else 0)


class RecordedRunner(local_step.StepRunner):
    """The local step with generation replaced by the recorded outcomes."""

    recorded: Recorded

    def rollout(self, ids, step, kind, round_index, counters, counts=None):
        counts = np.full(len(ids), N) if counts is None else np.asarray(counts)
        counters.samples += int(counts.sum())  # as the real rollout books them: every rollout when generated
        outcomes = [self.recorded.outcome(int(pid), step, int(c)) for pid, c in zip(ids, counts)]
        groups = [LocalGroup(int(pid), step, [1, 2], [[3]] * len(o[0]), [[0.0]] * len(o[0]), o[0])
                  for pid, o in zip(ids, outcomes)]
        width = int(counts.max())
        valid = np.arange(width)[None, :] < counts[:, None]
        padded = [np.stack([np.pad(o[j], (0, width - len(o[j]))) for o in outcomes]) for j in range(3)]
        batch = RolloutBatch(prompt_ids=ids, rewards=padded[0].astype(np.float32), step=step,
                             response_tokens=padded[1].astype(np.int32), prompt_tokens=np.full(len(ids), 2, np.int32),
                             response_entropy=padded[2].astype(np.float32), valid=None if valid.all() else valid)
        return groups, batch


def advantage(stats, eps) -> tuple:
    """Where a group's advantage statistics come from: its stats rollouts (None = all generated) and epsilon
    (None = the trainer's own, the local Group's default)."""
    return (None if stats is None else tuple(bool(x) for x in stats),
            LOCAL_EPS if eps is None else float(eps))


LOCAL_EPS = {f.name: f.default for f in dataclasses.fields(LocalGroup)}["adv_eps"]


def trains(mask, size: int) -> tuple:
    """The rollouts of a group that train, as a tuple of flags (None = all of them)."""
    return tuple(bool(x) for x in (np.ones(size, bool) if mask is None else mask))


def local_steps(case: str, monkeypatch) -> list:
    trained = []

    def update(model, optimizer, groups, *args, **kwargs):
        trained.append([(g.prompt_id, g.gen_step, g.replayed, advantage(g.stats_mask, g.adv_eps),
                         trains(g.train_mask, len(g.rewards))) for g in groups])
        return SimpleNamespace(trained_tokens=0, flops_logprob=0, flops_train=0, loss=0.0, kl=0.0, clip_frac=0.0,
                               grad_norm=0.0, lengths=[], time_logprob_s=0.0)

    monkeypatch.setattr(local_step, "grpo_update", update)
    cfg = OmegaConf.create({"seed": SEED, "data": {"candidates_per_step": None},
                            "trainer": {"batch_size": BATCH, "n_samples": N, "lr": 0.0},
                            "backend": {"max_gen_rounds": 4, "lr_warmup_steps": 0}})
    selector = make_selector(case)
    runner = RecordedRunner(cfg=cfg, selector=selector, stream=DataOrder(N_PROMPTS, SEED), model=None,
                            tokenizer=SimpleNamespace(pad_token_id=0), ref_model=None, grader=None, flop_model=None,
                            optimizer=SimpleNamespace(param_groups=[{"lr": 0.0}]), features=Features(),
                            store=store_for(selector), prompts=[[1, 2]] * N_PROMPTS, answers=[""] * N_PROMPTS,
                            device="cpu")
    runner.recorded = Recorded()
    steps = []
    for step in range(STEPS):
        row, rows = runner.run(step)
        steps.append({"rolled": [(r["prompt_id"], r["round"], r["kept"], tuple(r["kept_rollouts"]),
                                   tuple(r.get("rollout_steps", ()))) for r in rows], "epoch": row["epoch"],
                      "considered": row["prompts_considered"], "gen_rounds": row["gen_rounds"],
                      "dropped": row["prompts_dropped"],
                      "partial": row["partial"], "probed": row["prompts_probed"], "update": trained[-1],
                      "pending": [(h.prompt_id, len(h.group.rewards), h.extend) for h in runner.pending],
                      "ledger": {k: row[k] for k in LEDGER_KEYS}, "state": selector.state_dict()})
    return steps


def openrlhf_steps(case: str) -> list:
    selector = make_selector(case)
    driver = StepDriver(selector, DataOrder(N_PROMPTS, SEED), seed=SEED, batch_size=BATCH, candidates_per_step=None,
                        max_rounds=4, group_size=N, features=Features(), store=store_for(selector))
    recorded, steps = Recorded(), []

    def rollout(ids, counts=None):
        counts = np.full(len(ids), N) if counts is None else counts
        outcomes = [recorded.outcome(int(pid), driver.step, int(c)) for pid, c in zip(ids, counts)]
        return [OpenGroup(int(pid), o[0], o[1], o[1] + 2, response_entropy=o[2]) for pid, o in zip(ids, outcomes)]

    for _ in range(STEPS):
        record = driver.run_step(rollout)
        # the rollouts that train, with LZE's mini-batch alignment but without the trim to whole micro-batches
        # (unit 1), which only OpenRLHF needs
        masks = trained_masks(selector, choices=record.train_choices, kept_groups=record.train_kept, n=N,
                              rolled_out=record.prompts_rolled_out, unit=1, seed=SEED, step=record.step)
        groups = record.train_groups
        replayed = [g >= record.train_kept for g in range(len(groups))]
        row = ledger_row(record, {}, FLOPS, ppo_epochs=1, reference_pass=False)
        steps.append({"rolled": [(r["prompt_id"], r["round"], r["kept"], tuple(r["kept_rollouts"]),
                                  tuple(r.get("rollout_steps", ()))) for r in rollout_rows(record)],
                      "epoch": record.epoch, "considered": record.prompts_considered, "gen_rounds": record.gen_rounds,
                      "dropped": record.prompts_dropped,
                      "partial": record.partial, "probed": record.prompts_probed,
                      "update": [(g.prompt_id, g.gen_step, r, advantage(*a), trains(m, g.size))
                                 for g, r, a, m in zip(groups, replayed, record.train_advantage, masks) if m.any()],
                      "pending": [(h.prompt_id, len(h.group.rewards), h.extend) for h in driver.pending],
                      "ledger": {k: row[k] for k in LEDGER_KEYS}, "state": selector.state_dict()})
    return steps


@pytest.mark.parametrize("case", CASES)
def test_both_backends_make_the_same_decisions_step_by_step(case, monkeypatch):
    local, cluster = local_steps(case, monkeypatch), openrlhf_steps(case)
    assert any(step["rolled"] for step in local)
    for step, (a, b) in enumerate(zip(local, cluster)):
        for key in ("rolled", "epoch", "considered", "gen_rounds", "dropped", "partial", "probed", "update",
                    "pending", "ledger"):
            assert a[key] == b[key], f"{case} step {step}: {key} differs"
        assert a["state"].keys() == b["state"].keys()
        for key in a["state"]:
            np.testing.assert_equal(a["state"][key], b["state"][key], err_msg=f"{case} step {step}: state {key}")
    if case == "astral":
        assert any(replayed for step in cluster for _, _, replayed, _, _ in step["update"])  # replay decisions compared
    if case in ("dapo", "greso", "hive", "speed", "reinforce_ada"):
        assert any(step["gen_rounds"] > 1 for step in cluster)  # several rounds compared
    if SELECTORS[case.partition("-")[0]].keeps_rollouts:  # subsets of groups trained: the masks were compared
        assert any(not all(flags) for step in cluster for *_, flags in step["update"])
    if case == "pods":  # statistics over the kept subset, with PODS' epsilon, were compared
        assert any(stats is not None for step in cluster for *_, (stats, _), _ in step["update"])
    if case == "speed":  # groups carried over to the next step were compared, with their older rollouts' steps
        assert any(step["pending"] for step in cluster)
        assert any(min(steps) < t for t, step in enumerate(cluster) for *_, steps in step["rolled"] if steps)
    if SELECTORS[case.partition("-")[0]].extends_groups:  # ragged groups and their rollouts' steps were compared
        assert len({len(flags) for step in cluster for *_, flags, _ in step["rolled"]}) > 1
        assert all(len(steps) == len(flags) for step in cluster for *_, flags, steps in step["rolled"])


def test_the_comparison_sees_a_different_decision(monkeypatch):
    """A wiring that seeded one call differently would be caught (the test can fail)."""
    import lze_bench.step_rounds as rounds

    cluster = openrlhf_steps("hive")
    original = rounds.step_rng
    monkeypatch.setattr(rounds, "step_rng", lambda seed, step, tag, r=0: original(seed + 1, step, tag, r))
    local = local_steps("hive", monkeypatch)
    assert any(a["rolled"] != b["rolled"] or a["update"] != b["update"] for a, b in zip(local, cluster))
