"""backend=openrlhf: what a step's update trains (trim.py) and how it reaches the DP ranks (update.py).

The update batch of a shrinking, filling or replaying selector has any size;
DeepSpeed needs whole micro-batches, the same number on every rank. These
tests pin the trim rule (a seeded random subset of responses in whole units,
LZE's own alignment first) and the experience surgery on OpenRLHF's own
`Experience` (trimmed responses dropped, replay re-centred, one batch per rank).
"""

from __future__ import annotations

import numpy as np
import pytest

from lze_bench.backends.openrlhf.selection import Group, StepRecord
from lze_bench.backends.openrlhf.trim import balanced_chunks, trained_masks
from lze_bench.registry import SELECTORS
from lze_bench.selectors import build_selector
from lze_bench.selectors.base import TAG_SELECT_UPDATE, step_rng

# Every skip for a missing OpenRLHF names the command that installs it.
INSTALL_HINT = "install it: bash .ci/openrlhf.sh (CPU, these tests) or pip install 'lze-bench[openrlhf]' (GPU nodes)"


def masks_for(name="uniform", kept=3, replayed=0, n=4, unit=8, rolled_out=4, step=5, seed=1, **config):
    selector = build_selector(SELECTORS[name].Config(**config), num_prompts=20, batch_size=8)
    return trained_masks(selector, kept_groups=kept, replayed_groups=replayed, n=n, rolled_out=rolled_out,
                         unit=unit, seed=seed, step=step)


def test_trim_keeps_whole_units_of_a_seeded_random_subset():
    mask = masks_for(kept=3, n=4, unit=8)  # 12 responses -> 8
    assert mask.shape == (3, 4) and mask.sum() == 8
    expected = np.zeros(12, bool)
    expected[np.sort(step_rng(1, 5, TAG_SELECT_UPDATE, 98).permutation(12)[:8])] = True
    np.testing.assert_array_equal(mask.reshape(-1), expected)
    assert not np.array_equal(mask, masks_for(kept=3, n=4, unit=8, step=6))  # a new draw each step
    assert masks_for(kept=4, n=4, unit=8).all()  # already whole units: nothing cut
    assert masks_for(kept=1, n=4, unit=8).sum() == 0  # less than one unit: no update
    assert masks_for(kept=2, replayed=1, n=4, unit=8).sum() == 8  # replayed responses count too


def test_lze_alignment_runs_first_then_the_unit_trim():
    aligned = masks_for("lze", kept=5, n=4, unit=1, rolled_out=8, align_minibatch=True, keep_ratio=0.5,
                        align_mini_batch_prompts=2)
    assert aligned.sum() == 16  # 20 responses -> whole mini-batches of 2 x 4
    selector = build_selector(SELECTORS["lze"].Config(align_minibatch=True, keep_ratio=0.5,
                                                      align_mini_batch_prompts=2), num_prompts=20, batch_size=8)
    own = selector.align_mask(5, 4, 32, step_rng(1, 5, TAG_SELECT_UPDATE, 99))
    np.testing.assert_array_equal(aligned, own)  # the local backend's cut, same rng
    both = masks_for("lze", kept=5, n=4, unit=12, rolled_out=8, align_minibatch=True, keep_ratio=0.5,
                     align_mini_batch_prompts=2)
    assert both.sum() == 12 and not (both & ~own).any()


@pytest.mark.parametrize("count,ranks,micro", [(12, 4, 2), (7, 2, 4), (5, 5, 1), (64, 8, 8), (9, 2, 16)])
def test_forward_chunks_give_every_rank_the_same_number(count, ranks, micro):
    bounds = balanced_chunks(count, ranks, micro)
    sizes = [b - a for a, b in bounds]
    assert len(bounds) % ranks == 0 and sum(sizes) == count and bounds[0][0] == 0
    assert all(a == prev for (a, _), (_, prev) in zip(bounds[1:], bounds)) and max(sizes) <= micro
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    with pytest.raises(ValueError):
        balanced_chunks(ranks - 1, ranks, micro)


def _experience(prompt_id: int, j: int, length: int):
    import torch
    from openrlhf.trainer.ppo_utils.experience import Experience

    tokens = torch.arange(length) + 10 * prompt_id + j
    return Experience(sequences=tokens, attention_mask=torch.ones(length, dtype=torch.long),
                      action_mask=torch.ones(length - 1, dtype=torch.bool),
                      action_log_probs=torch.full((length - 1,), -0.1 * (prompt_id + 1) - 0.01 * j),
                      rollout_log_probs=torch.zeros(length - 1), rewards=torch.tensor(float(j % 2)),
                      advantages=torch.zeros(length - 1), index=[0], info={})


def made_experiences(groups, n, micro=3):
    """What make_experience_batch returns: batched Experiences of `micro` samples, numbered in order."""
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch

    items = [_experience(g.prompt_id, j, 4 + g.prompt_id % 3) for g in groups for j in range(n)]
    out = []
    for start in range(0, len(items), micro):
        batch = make_experience_batch(items[start:start + micro])
        batch.index = list(range(start, min(start + micro, len(items))))
        out.append(batch)
    return out[::-1]  # dealt back in any order: the index puts them right


def group(pid, n=2):
    return Group(pid, np.zeros(n, np.float32), np.full(n, 3), np.full(n, 4 + pid % 3), gen_step=0)


def test_update_drops_trimmed_responses_and_deals_one_batch_per_rank():
    pytest.importorskip("openrlhf", reason=f"OpenRLHF does not import; {INSTALL_HINT}")
    from lze_bench.backends.openrlhf.update import shape_update

    groups = [group(1), group(2), group(3)]
    record = StepRecord(step=0, rolled=groups, kept_flags=[True] * 3,
                        train_masks=[np.array([True, False]), np.array([True, True]), np.array([False, True])])
    out = shape_update(made_experiences(groups, 2), record, n=2, dp_ranks=2, replay=False)
    assert len(out) == 2 and [len(e.sequences) for e in out] == [2, 2]
    firsts = [int(seq[0]) for e in out for seq in e.sequences]
    assert firsts == [10, 20, 21, 31]  # prompt*10 + response j, in order, trimmed ones gone
    nothing = StepRecord(step=0, rolled=groups, kept_flags=[True] * 3, train_masks=[np.zeros(2, bool)] * 3)
    assert shape_update(made_experiences(groups, 2), nothing, n=2, dp_ranks=2, replay=False) == []


def test_replay_recentres_fresh_on_their_own_and_replayed_on_stored_logprobs():
    pytest.importorskip("openrlhf", reason=f"OpenRLHF does not import; {INSTALL_HINT}")
    import torch

    from lze_bench.backends.openrlhf.update import shape_update

    old = group(4)
    old.behaviour_logprobs = [torch.full((4,), -2.0), torch.full((4,), -3.0)]  # mu of an older policy
    fresh = [group(1), group(2)]
    record = StepRecord(step=3, rolled=fresh, kept_flags=[True, True], replayed=[old],
                        train_masks=[np.ones(2, bool)] * 3)
    out = shape_update(made_experiences(record.train_groups, 2), record, n=2, dp_ranks=1, replay=True)
    batch = out[0]
    torch.testing.assert_close(batch.rollout_log_probs[:4], batch.action_log_probs[:4])  # r_old = 1
    assert torch.all(batch.rollout_log_probs[4, :4] == -2.0) and torch.all(batch.rollout_log_probs[5, :4] == -3.0)
    assert fresh[0].behaviour_logprobs is not None  # kept for the next replay
    torch.testing.assert_close(fresh[1].behaviour_logprobs[1], batch.action_log_probs[3][:5])


def test_a_subset_selector_hands_over_only_its_chosen_rollouts_and_trains_what_the_trim_leaves():
    """PODS-like: 4 rollouts per group generated, the chosen 2 reach the experience maker (and its log-prob
    pass); the trim then draws among those."""
    pytest.importorskip("openrlhf", reason=f"OpenRLHF does not import; {INSTALL_HINT}")
    from lze_bench.backends.openrlhf.update import shape_update

    groups = [group(1, 4), group(2, 4)]
    for g in groups:
        g.payload = [f"{g.prompt_id}.{j}" for j in range(4)]
    choices = [np.array([True, False, False, True]), np.array([False, True, True, False])]
    record = StepRecord(step=0, rolled=groups, kept_flags=[True, True], choices=choices,
                        stats_masks=list(choices), adv_eps=[1e-4, 1e-4])
    assert record.update_samples() == ["1.0", "1.3", "2.1", "2.2"] and record.per_rollout
    record.train_masks = [np.array([True, False, False, False]), np.array([False, True, True, False])]
    chosen = [_experience(g.prompt_id, j, 5) for g, c in zip(groups, choices) for j in np.flatnonzero(c)]
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch

    batch = make_experience_batch(chosen)
    batch.index = list(range(4))
    out = shape_update([batch], record, n=4, dp_ranks=1, replay=False)
    assert [int(seq[0]) for seq in out[0].sequences] == [10, 21, 22]  # prompt*10 + rollout j: 1.3 trimmed


def _maker_class():
    """OpenRLHF's RemoteExperienceMaker (vllm / flash_attn stubbed while importing where they cannot be installed,
    as tests/test_openrlhf_replay_loss.py does)."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    stubs = str(Path(__file__).resolve().parent / "stubs")
    missing = [name for name in ("vllm", "flash_attn") if importlib.util.find_spec(name) is None]
    if missing:
        sys.path.insert(0, stubs)
    try:
        return importlib.import_module("openrlhf.trainer.ppo_utils.experience_maker").RemoteExperienceMaker
    finally:
        if missing:
            sys.path.remove(stubs)
            for name in list(sys.modules):
                if name.split(".")[0] in missing:
                    del sys.modules[name]


def maker_for(estimator="group_norm"):
    """OpenRLHF's experience maker with only what `compute_advantages_and_returns` reads."""
    from types import SimpleNamespace as NS

    RemoteExperienceMaker = _maker_class()

    args = NS(rollout=NS(n_samples_per_prompt=4),
              algo=NS(advantage=NS(estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=False)),
              reward=NS(clip_range=(-10.0, 10.0), overlong_buffer_len=None, stop_properly_penalty_coef=None))
    maker = object.__new__(RemoteExperienceMaker)
    maker.strategy, maker.args, maker.advantage_estimator = NS(args=args), args, estimator
    maker.kl_ctl = NS(value=0.0)
    return maker


def experiences_of(rewards: list, micro=3):
    import torch
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch

    items = [_experience(0, j, 5) for j in range(len(rewards))]
    for item, reward in zip(items, rewards):
        item.rewards = torch.tensor(float(reward))
    out = []
    for start in range(0, len(items), micro):
        batch = make_experience_batch(items[start:start + micro])
        batch.index = list(range(start, min(start + micro, len(items))))
        batch.kl = torch.zeros_like(batch.action_log_probs)
        out.append(batch)
    return out


def advantages_of(experiences) -> np.ndarray:
    """The advantage each sample trains with (its last response token's), in sample order."""
    values = {}
    for e in experiences:
        for index, row in zip(e.index, e.advantages):
            values[int(index)] = float(row[-1])
    return np.array([values[i] for i in range(len(values))])


@pytest.mark.parametrize("stats", ["kept", "generated"])
def test_per_rollout_advantages_are_the_local_backends_over_the_chosen_statistics(stats):
    """Ragged groups (5 and 3 rollouts), a subset trained, statistics over the kept or every generated rollout:
    each trained sample's advantage is the local backend's group_advantages of its group."""
    pytest.importorskip("openrlhf", reason=f"OpenRLHF does not import; {INSTALL_HINT}")
    from lze_bench.backends.local.grpo import group_advantages as local_advantages
    from lze_bench.backends.openrlhf.update import per_rollout_advantages

    rewards = [np.array([1, 0, 0, 1, 1], np.float32), np.array([0, 1, 0], np.float32)]
    groups = [Group(p, r, np.full(r.size, 3), np.full(r.size, 5), gen_step=0) for p, r in zip((1, 2), rewards)]
    choices = [np.array([True, True, False, True, False]), np.array([True, True, True])]
    masks = list(choices) if stats == "kept" else [None, None]
    record = StepRecord(step=0, rolled=groups, kept_flags=[True, True], choices=choices, stats_masks=masks,
                        adv_eps=[1e-4, 1e-4])
    maker = maker_for()
    handed = np.concatenate([r[c] for r, c in zip(rewards, choices)])
    out = per_rollout_advantages(experiences_of(handed), record, maker.compute_advantages_and_returns, maker.args)
    expected = np.concatenate([local_advantages(r, "grpo", m, 1e-4)[c] for r, c, m in zip(rewards, choices, masks)])
    np.testing.assert_allclose(advantages_of(out), expected, rtol=1e-6, atol=1e-7)
    assert maker.args.rollout.n_samples_per_prompt == 4 and maker.args.algo.advantage.estimator == "group_norm"


@pytest.mark.parametrize("estimator", ["group_norm", "dr_grpo", "rloo"])
def test_per_rollout_advantages_on_whole_groups_are_openrlhfs_own(estimator):
    """The same rule on whole groups of n with OpenRLHF's epsilon gives what OpenRLHF's own estimator gives
    (trainer.advantage_estimator grpo, dr_grpo, rloo)."""
    pytest.importorskip("openrlhf", reason=f"OpenRLHF does not import; {INSTALL_HINT}")
    from lze_bench.backends.openrlhf.update import per_rollout_advantages

    rewards = [np.array([1, 0, 0, 1], np.float32), np.array([0, 1, 1, 1], np.float32)]
    groups = [Group(p, r, np.full(4, 3), np.full(4, 5), gen_step=0) for p, r in zip((1, 2), rewards)]
    record = StepRecord(step=0, rolled=groups, kept_flags=[True, True], group_size=4)
    assert not record.per_rollout  # whole groups of n go through OpenRLHF's own function
    # whole groups of another size (SPEED trains n_init + n_continue) cannot be OpenRLHF's groups of n
    assert StepRecord(step=0, rolled=groups, kept_flags=[True, True], group_size=2).per_rollout
    theirs = maker_for(estimator).compute_advantages_and_returns(experiences_of(np.concatenate(rewards)))
    maker = maker_for(estimator)
    ours = per_rollout_advantages(experiences_of(np.concatenate(rewards)), record,
                                  maker.compute_advantages_and_returns, maker.args)
    np.testing.assert_allclose(advantages_of(ours), advantages_of(theirs), rtol=1e-5)
