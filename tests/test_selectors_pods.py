"""PODS max-variance down-sampling (selectors.md §14) and the per-rollout keep it needs.

Pinned by hand on recorded reward batches, then cross-checked against a line-by-line reading of the
authors' loop (`YixuanEvenXu/pods` @ 187f43b6, `trainer/maxvargrpo_trainer.py:516-524`) on random
rewards with ties, on both of our paths (0/1 rewards without a sort, any rewards through one).
"""

from __future__ import annotations

from fractions import Fraction
from statistics import variance

import numpy as np
import pytest

from lze_bench.config import compose
from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.selectors import build_selector
from lze_bench.selectors.base import RolloutBatch, UpdateDecision, step_rng
from lze_bench.selectors.pods import max_variance_subset


def make(num_prompts=20, batch_size=4, **overrides):
    return build_selector(SELECTORS["pods"].Config(**overrides), num_prompts=num_prompts, batch_size=batch_size)


def decide(rewards, step=0, **overrides):
    rewards = np.asarray(rewards, dtype=np.float32)
    batch = RolloutBatch(prompt_ids=np.arange(len(rewards)), rewards=rewards, step=step)
    return make(**overrides).select_update(batch, step, step_rng(0, step, 1))


def kept(decision) -> list[list[int]]:
    return [np.flatnonzero(row).tolist() for row in decision.keep_rollouts]


def authors_loop(rewards, m: int) -> np.ndarray:
    """A line-by-line reading of maxvargrpo_trainer.py:516-524, one group at a time.

    Sort descending (our stable order: ties by generation index), start from the m highest, then
    for i in 0..m-1 try sorted[:i] + sorted[i - m:] and move on a strictly larger sample variance.
    Variances are exact (fractions): the rule compares real variances; torch's float32 `.var()` ties
    exactly on the 0/1 subsets the grader produces (2 vs 3 correct of 5 and the like).
    """
    values = [Fraction(float(r)) for r in rewards]
    sorted_indices = sorted(range(len(values)), key=lambda j: -values[j])  # Python's sort is stable
    indices = sorted_indices[:m]
    best = variance([values[j] for j in indices])
    for i in range(m):
        candidate = sorted_indices[:i] + sorted_indices[i - m:]
        var = variance([values[j] for j in candidate])
        if var > best:
            best, indices = var, candidate
    keep = np.zeros(len(values), dtype=bool)
    keep[indices] = True
    return keep


# --- pinned by hand ---------------------------------------------------------------------------------------


def test_p1_default_m_is_a_quarter_of_n_and_keeps_one_correct_and_one_wrong():
    """n = 8 -> m = max(2, 8 // 4) = 2: the first correct (the top) and the last wrong (the bottom) in generation order."""
    decision = decide([[0, 1, 1, 0, 0, 0, 1, 0],
                       [1, 1, 1, 1, 1, 1, 1, 1],   # all tied: the all-top subset, the first two generated
                       [0, 0, 0, 0, 0, 0, 0, 0],
                       [1, 1, 1, 1, 1, 1, 1, 0]])
    assert decision.keep.tolist() == [True] * 4  # every group reaches the update, zero-variance ones too
    # 7 correct: i = 2 has variance 0, i = 0 (the two lowest: the last correct and the wrong one) is tried
    # before i = 1 and wins the tie
    assert kept(decision) == [[1, 7], [0, 1], [0, 1], [6, 7]]
    assert decision.advantage_stats == "kept" and decision.advantage_eps == 1e-4
    assert decision.more == 0 and decision.replay.size == 0


def test_p2_ties_start_from_the_all_top_subset():
    """n = 6, m = 3, 2 correct: i = 3 (2 correct + 1 wrong), i = 1 and i = 2 all have variance 1/3;
    the authors' loop starts from the all-top subset and keeps it. Starting at i = 0 would keep {1, 3, 5}."""
    assert kept(decide([[0, 1, 0, 0, 1, 0]], num_kept=3)) == [[0, 1, 4]]
    # 4 correct of 8, m = 3: i = 3 and i = 0 have variance 0, i = 1 and i = 2 tie at 1/3: the smaller i wins
    assert kept(decide([[1, 0, 0, 1, 0, 1, 1, 0]], num_kept=3)) == [[0, 4, 7]]


def test_p3_multi_component_rewards_keep_the_extremes():
    """The authors' rewards are sums (accuracy + format + tags): sorted 2.0, 2.0, 1.0, 0.5, 0.0; m = 2 keeps one
    2.0 (the first generated) and the 0.0."""
    assert kept(decide([[0.5, 2.0, 0.0, 2.0, 1.0]], num_kept=2)) == [[1, 2]]
    # m = 3: {2, 2, 0} (variance 4/3) beats {2, 0.5, 0} and {2, 2, 1}
    assert kept(decide([[0.5, 2.0, 0.0, 2.0, 1.0]], num_kept=3)) == [[1, 2, 3]]


def test_p4_recorded_steps_of_a_tiny_run():
    """A two-step sequence of 4 prompts x 4 rollouts (m = 2), each decision worked out by hand."""
    recorded = {0: [[0, 0, 1, 0], [1, 1, 0, 1], [0, 0, 0, 0], [0, 1, 1, 0]],
                1: [[1, 0, 1, 1], [0, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 1]]}
    expected = {0: [[0, 2], [2, 3], [0, 1], [1, 3]], 1: [[1, 3], [0, 1], [0, 1], [0, 2]]}
    sel = make()
    for step, rewards in recorded.items():
        batch = RolloutBatch(prompt_ids=np.arange(4) + 4 * step, rewards=np.asarray(rewards, np.float32), step=step)
        assert sel.select_rollout(np.arange(10), 4, step, step_rng(0, step, 0)).tolist() == [0, 1, 2, 3]
        assert kept(sel.select_update(batch, step, step_rng(0, step, 1))) == expected[step]
    assert sel.state_dict() == {}  # stateless


@pytest.mark.parametrize("n, ratio, m", [(8, 4, 2), (16, 4, 4), (32, 4, 8), (4, 4, 2), (2, 4, 2), (12, 3, 4), (12, 5, 2)])
def test_p5_kept_count_maps_the_authors_ratio(n, ratio, m):
    rewards = (np.random.default_rng(n).random((6, n)) < 0.5).astype(np.float32)
    decision = decide(rewards, down_sample_ratio=ratio)
    assert (decision.keep_rollouts.sum(axis=1) == m).all()


def test_p5b_kept_count_is_a_whole_number_rounded_down():
    sel = make(down_sample_ratio=5)
    assert [sel.kept_per_group(n) for n in (12, 14, 16, 40)] == [2, 2, 3, 8]
    assert all(type(sel.kept_per_group(n)) is int for n in (12, 16))


def test_p6_num_kept_overrides_the_ratio_and_more_than_n_is_one_line():
    assert (decide(np.ones((3, 8)), num_kept=5).keep_rollouts.sum(axis=1) == 5).all()
    assert decide(np.ones((3, 8)), num_kept=8).keep_rollouts.all()  # m = n: every rollout
    with pytest.raises(LzeBenchError, match=r"selector.num_kept=9 exceeds the 8 rollouts per prompt"):
        decide(np.ones((3, 8)), num_kept=9)


@pytest.mark.parametrize("override, needle", [("selector.num_kept=1", "selector.num_kept"),
                                              ("selector.down_sample_ratio=0", "selector.down_sample_ratio"),
                                              ("selector.adv_eps=-1", "selector.adv_eps")])
def test_p7_config_mistakes_name_the_field(override, needle):
    with pytest.raises(LzeBenchError, match=needle):
        compose("train", ["selector=pods", override])


def test_p8_selects_prompts_like_uniform():
    sel = make()
    assert sel.select_rollout(np.array([7, 3, 9, 1]), 3, 0, step_rng(0, 0, 0)).tolist() == [7, 3, 9]
    assert SELECTORS["pods"].keeps_rollouts and not SELECTORS["uniform"].keeps_rollouts


# --- the authors' loop, line by line, on random rewards ---------------------------------------------------------


def random_cases(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for t in range(count):
        n = int(rng.integers(2, 13))
        m = int(rng.integers(2, n + 1))
        groups = int(rng.integers(1, 6))
        kind = t % 4
        if kind == 0:  # the grader's 0/1: many ties, the path without a sort
            rewards = (rng.random((groups, n)) < rng.random((groups, 1))).astype(np.float32)
        elif kind == 1:  # multi-component rewards in halves (0 .. 2): ties across values
            rewards = rng.integers(0, 5, size=(groups, n)) * 0.5
        elif kind == 2:  # a few distinct levels incl. negatives
            rewards = rng.choice([-1.0, 0.0, 0.25, 1.0], size=(groups, n))
        else:  # continuous: no ties
            rewards = rng.normal(size=(groups, n))
        yield rewards, m


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_q1_matches_the_authors_loop_on_random_rewards_with_ties(seed):
    for rewards, m in random_cases(seed, 400):
        expected = np.stack([authors_loop(row, m) for row in rewards])
        assert np.array_equal(max_variance_subset(rewards, m), expected), (rewards, m)


def test_q2_large_groups_and_batches():
    """n = 64 (the paper's GSM8K n), m = 16 and n = 126, 130, m = 20, 32, on 0/1 and on levels."""
    rng = np.random.default_rng(5)
    for n, m in [(64, 16), (126, 20), (130, 32)]:
        binary = (rng.random((40, n)) < rng.random((40, 1))).astype(np.float32)
        binary[0], binary[1] = 1, 0  # all correct and all wrong among them
        for rewards in [binary, rng.integers(0, 3, size=(40, n)) * 0.5]:
            expected = np.stack([authors_loop(row, m) for row in rewards])
            assert np.array_equal(max_variance_subset(rewards, m), expected)


def test_q3_equal_rewards_keep_the_earliest_generated():
    """All-equal groups: every subset has variance 0, the authors keep their first (i = m, the m highest),
    and the stable sort makes those the earliest generated."""
    for value in (1.0, 0.0, 2.0):
        assert np.array_equal(max_variance_subset(np.full((4, 8), value), 3), np.tile(np.arange(8) < 3, (4, 1)))


def test_q4_single_rollout_groups_keep_their_rollout():
    assert decide(np.ones((2, 1))).keep_rollouts.all()  # m = min(2, n) = 1: a group of one trains it (advantage 0)


def test_q5_an_empty_batch_keeps_nothing():
    assert max_variance_subset(np.zeros((0, 8), np.float32), 2).shape == (0, 8)
    assert max_variance_subset(np.zeros((0, 8)) + 0.5, 2).shape == (0, 8)


# --- the decision's per-rollout keep --------------------------------------------------------------------------


def test_d1_update_decision_rollout_mask():
    keep = np.array([True, False, True])
    assert UpdateDecision(keep=keep).rollout_mask(2).tolist() == [[True, True], [False, False], [True, True]]
    rows = np.array([[True, False], [True, True], [False, True]])
    assert UpdateDecision(keep=keep, keep_rollouts=rows).rollout_mask(2).tolist() == [
        [True, False], [False, False], [False, True]]
    with pytest.raises(ValueError, match="keep_rollouts has 2 rollouts per group; the batch has 3"):
        UpdateDecision(keep=keep, keep_rollouts=rows).rollout_mask(3)
    with pytest.raises(ValueError, match=r"bool\[G, n\] with G=3"):
        UpdateDecision(keep=keep, keep_rollouts=rows[:2])
    with pytest.raises(ValueError, match=r"bool\[G, n\] with G=3"):
        UpdateDecision(keep=keep, keep_rollouts=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="advantage_stats"):
        UpdateDecision(keep=keep, advantage_stats="pool")
    assert UpdateDecision(keep=keep, advantage_stats="generated").advantage_stats == "generated"
    default = UpdateDecision(keep=keep)
    assert default.keep_rollouts is None and default.advantage_stats == "kept" and default.advantage_eps is None


def test_d2_advantages_over_the_kept_subset_or_every_rollout():
    from lze_bench.backends.local.grpo import Group, _flatten, group_advantages

    rewards = np.array([1, 0, 0, 1, 0, 0, 0, 0], dtype=np.float32)
    mask = np.array([1, 0, 0, 0, 0, 0, 0, 1], dtype=bool)  # PODS's m = 2: one correct, one wrong
    std = float(np.std([1.0, 0.0], ddof=1))
    assert np.allclose(group_advantages(rewards, "grpo", mask, 1e-4)[mask], [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)])
    # over every rollout: mean 1/4, the unbiased std of the 8
    full = float(np.std(rewards, ddof=1))
    assert np.allclose(group_advantages(rewards, "grpo")[mask], [0.75 / (full + 1e-6), -0.25 / (full + 1e-6)])
    assert np.allclose(group_advantages(rewards, "dr_grpo", mask)[mask], [0.5, -0.5])  # Dr.GRPO: no std
    # the default is the trainer's formula bit for bit
    expected = ((rewards - rewards.astype(np.float64).mean()) / (rewards.astype(np.float64).std(ddof=1) + 1e-6))
    assert np.array_equal(group_advantages(rewards, "grpo"), expected.astype(np.float32))
    responses = [np.array([5 + j], dtype=np.int64) for j in range(8)]
    logprobs = [np.zeros(1, np.float32)] * 8
    group = Group(0, 0, [1, 2], responses, logprobs, rewards, train_mask=mask, stats_mask=mask, adv_eps=1e-4)
    seqs, plens, advs, _, _ = _flatten([group], "grpo")
    assert [s.tolist() for s in seqs] == [[1, 2, 5], [1, 2, 12]] and plens.tolist() == [2, 2]
    assert np.allclose(advs, [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)])
    generated = Group(0, 0, [1, 2], responses, logprobs, rewards, train_mask=mask)  # Reinforce-Ada's statistics
    assert np.allclose(_flatten([generated], "grpo")[2], [0.75 / (full + 1e-6), -0.25 / (full + 1e-6)])
