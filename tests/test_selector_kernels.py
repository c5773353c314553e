"""The selector kernels equal their straightforward formulas bit for bit (same decisions).

Covers `selectors/stats.py` (reward statistics vs row reductions), GRESO's and
HIVE's skip rules against the spec formulas, `selectors/topk.py` (Gumbel top-k
vs one `rng.gumbel` vector + stable top-k, including ties, tiny scales and
NumPy's rejection of a zero uniform) and LZE's observe (a batch observed whole
vs in pieces; the pruner's replay rule).
"""

from __future__ import annotations

import numpy as np
import pytest

from lze_bench.registry import SELECTORS
from lze_bench.selectors import RolloutBatch, build_selector
from lze_bench.selectors.stats import binary_ones, group_stats, reward_stats
from lze_bench.selectors.topk import gumbel_noise, gumbel_top_k, gumbel_where, top_k_mask

PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341  # PCG64's 128-bit LCG multiplier


def einsum_stats(rewards):
    """The general path's formulas (float32 row sums, first-column comparison)."""
    rewards = np.asarray(rewards, dtype=np.float32)
    return np.einsum("ij->i", rewards).astype(np.float64) / rewards.shape[1], rewards.max(axis=1) > rewards.min(axis=1)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 24])
@pytest.mark.parametrize("kind", ["binary", "half", "negzero", "strided", "float64"])
def test_group_stats_equals_row_reductions(n, kind):
    rng = np.random.default_rng([n, len(kind)])
    rewards = (rng.random((3000, n)) < rng.random((3000, 1))).astype(np.float32)
    if kind == "half":
        rewards[rng.random(rewards.shape) < 0.01] = 0.5
    if kind == "negzero":
        rewards[rewards == 0] = -0.0  # equal to 0.0 as a float, not as bits: must not take the binary path
    if kind == "strided":
        rewards = np.repeat(rewards, 2, axis=0)[::2]
    if kind == "float64":
        rewards = rewards.astype(np.float64)
    pass_rate, varied, binary = reward_stats(rewards)
    expected_rate, expected_varied = einsum_stats(rewards)
    assert np.array_equal(pass_rate, expected_rate) and pass_rate.dtype == np.float64
    assert np.array_equal(varied, expected_varied) and varied.dtype == bool
    is_binary = bool(np.all((rewards == 1) | ((rewards == 0) & ~np.signbit(rewards))))
    assert binary == is_binary
    assert [a.tolist() for a in group_stats(rewards)] == [pass_rate.tolist(), varied.tolist()]
    if binary:
        assert np.array_equal(binary_ones(np.asarray(rewards, dtype=np.float32)), rewards.sum(axis=1))


def test_binary_ones_rejects_a_single_non_binary_reward_anywhere():
    rewards = np.ones((70000, 8), dtype=np.float32)
    assert binary_ones(rewards) is not None
    for position, value in ((0, 0.5), (-1, 2.0), (300000, -0.0), (555555, 1e-45)):
        bad = rewards.copy().reshape(-1)
        bad[position] = value
        assert binary_ones(bad.reshape(rewards.shape)) is None


def test_top_k_mask_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        top_k_mask(np.array([0.5, np.nan, 1.0]), 1)


def reference_top_k(rng, scale, size, idx, base, k):
    """The spec's formula: one rng.gumbel vector, -inf off `idx`, stable top-k."""
    key = np.full(size, -np.inf)
    key[idx] = base + rng.gumbel(0.0, scale, size)[idx]
    return top_k_mask(key, k)[idx]


@pytest.mark.parametrize("trial", range(40))
def test_gumbel_top_k_equals_one_gumbel_vector_and_stable_top_k(trial):
    rng = np.random.default_rng(trial)
    size = int(rng.choice([50, 4095, 4103, 20000]))
    idx = np.flatnonzero(rng.random(size) < rng.uniform(0.3, 1.0))
    levels = rng.choice([3, 40, 10**6])  # few levels: many exact ties in base
    base = np.round(rng.random(idx.size) * 1.3 * levels) / levels
    scale = float(rng.choice([1e-8, 1e-3, 0.05 * 1.3, 2.0, 50.0]))
    k = int(rng.integers(0, idx.size + 1))
    seed = [trial, 7]
    got = gumbel_top_k(np.random.default_rng(seed), scale, size, idx, base, k)
    expected = reference_top_k(np.random.default_rng(seed), scale, size, idx, base, k)
    assert np.array_equal(got, expected)
    after_got, after_ref = np.random.default_rng(seed), np.random.default_rng(seed)
    gumbel_top_k(after_got, scale, size, idx, base, k)
    after_ref.gumbel(0.0, scale, size)
    assert after_got.random() == after_ref.random()  # the same stream consumed


def rng_drawing_zero_first(seed: int) -> np.random.Generator:
    """A PCG64 generator whose next double is exactly 0.0 (state chosen so hi == lo after one step)."""
    rng = np.random.default_rng(seed)
    state = rng.bit_generator.state
    target = (12345 << 64) | 12345  # XSL-RR output of a state with equal halves is 0
    inc = state["state"]["inc"]
    state["state"]["state"] = ((target - inc) * pow(PCG_MULT, -1, 1 << 128)) % (1 << 128)
    rng.bit_generator.state = state
    return rng


def test_gumbel_helpers_follow_numpys_rejection_of_a_zero_uniform():
    assert rng_drawing_zero_first(1).random() == 0.0  # the test really draws a zero
    size = 8192
    where = np.random.default_rng(2).random(size) < 0.8
    idx = np.flatnonzero(where)
    base = np.random.default_rng(3).random(idx.size)
    expected_noise = rng_drawing_zero_first(1).gumbel(0.0, 0.1, size)
    ours = rng_drawing_zero_first(1)
    assert np.array_equal(gumbel_where(ours, 0.1, size, where), np.where(where, expected_noise, 0.0))
    reference = rng_drawing_zero_first(1)
    reference.gumbel(0.0, 0.1, size)
    assert ours.random() == reference.random()
    got = gumbel_top_k(rng_drawing_zero_first(1), 0.1, size, idx, base, idx.size // 3)
    assert np.array_equal(got, reference_top_k(rng_drawing_zero_first(1), 0.1, size, idx, base, idx.size // 3))


def test_gumbel_noise_draws_numpys_stream_and_values_up_to_the_last_bit():
    """`gumbel_noise` consumes what one `rng.gumbel` call does; its values differ at most in the last bits."""
    ours, numpy = np.random.default_rng(3), np.random.default_rng(3)
    noise, expected = gumbel_noise(ours, 0.07, 50000), numpy.gumbel(0.0, 0.07, 50000)
    assert np.abs(noise - expected).max() <= 1e-14 * 0.07  # a few ulp of the log-log, times the scale
    assert ours.random() == numpy.random()


def lze_observe(selector, ids, rewards, step=0):
    batch = RolloutBatch(prompt_ids=ids, rewards=rewards, step=step)
    selector.observe(batch)
    return selector.state_dict()["cache_energy"]


@pytest.mark.parametrize("name", ["lze", "lze_full"])
def test_lze_batch_observed_whole_equals_the_batch_in_pieces(name):
    """Each group's update reads only its own prompt's state: a batch in eight pieces leaves the same state."""
    num = 5000
    config = SELECTORS[name].Config(prune_after=1) if name == "lze_full" else SELECTORS[name].Config()
    whole, pieces = (build_selector(config, num_prompts=num, batch_size=num) for _ in range(2))
    replay = np.random.default_rng(11).random(num) < 0.05
    for selector in (whole, pieces):
        selector.state.replay[replay] = True
    for epoch in range(4):
        ids = np.random.default_rng(epoch).permutation(num)[: num * 3 // 4]
        rewards = (np.random.default_rng([epoch, 1]).random((ids.size, 4)) < 0.6).astype(np.float32)
        for selector in (whole, pieces):
            selector.state.epoch = epoch
        energy = lze_observe(whole, ids, rewards)
        parts = [lze_observe(pieces, chunk, part)
                 for chunk, part in zip(np.array_split(ids, 8), np.array_split(rewards, 8))]
        assert np.array_equal(energy, np.concatenate(parts))
        for key, value in whole.state_dict().items():
            if isinstance(value, np.ndarray) and not key.startswith("cache"):
                assert np.array_equal(value, getattr(pieces.state, key), equal_nan=value.dtype.kind == "f"), key


def test_lze_replayed_prompt_follows_the_replay_rule_whatever_its_streak():
    """A replayed prompt stays pruned exactly while solved, even below prune_after (a state resumed with a
    larger prune_after); a prompt outside the pool prunes only at prune_after solved observations."""
    selector = build_selector(SELECTORS["lze_full"].Config(prune_after=3), num_prompts=4, batch_size=4)
    selector.state.pruned[:] = [True, True, False, False]
    selector.state.replay[:] = [True, True, False, False]
    selector.state.streak[:] = [0, 5, 1, 2]
    lze_observe(selector, np.arange(4), np.array([[1, 1], [1, 0], [1, 1], [1, 1]], dtype=np.float32))
    assert selector.state.pruned.tolist() == [True, False, False, True]
    assert selector.state.streak.tolist() == [1, 0, 2, 3]


# --- GRESO / HIVE --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 8])
@pytest.mark.parametrize("kind", ["binary", "half", "negzero"])
def test_greso_classes_and_pass_rates_equal_the_row_reductions(n, kind):
    from lze_bench.selectors.greso_state import group_classes
    from lze_bench.selectors.stats import pass_rates

    rng = np.random.default_rng([n, len(kind), 5])
    rewards = (rng.random((5000, n)) < rng.random((5000, 1))).astype(np.float32)
    if kind == "half":
        rewards[rng.random(rewards.shape) < 0.01] = 0.5
    if kind == "negzero":
        rewards[rewards == 0] = -0.0
    solved, failed, informative = group_classes(rewards, "test")
    low, high = rewards.min(axis=1), rewards.max(axis=1)
    assert np.array_equal(solved, low == 1) and np.array_equal(failed, high == 0)
    assert np.array_equal(informative, high > low)
    assert np.array_equal(pass_rates(rewards), rewards.mean(axis=1, dtype=np.float64))


def greso_state(num_prompts, seed, p_easy=0.37, p_hard=0.61, keep_floor=0.01):
    from lze_bench.selectors.greso import GresoConfig
    from lze_bench.selectors.greso_state import SkipHistory

    rng = np.random.default_rng(seed)
    history = SkipHistory(num_prompts, GresoConfig(p_easy=p_easy, p_hard=p_hard, keep_floor=keep_floor))
    runs = (rng.integers(0, 60, num_prompts) * (rng.random(num_prompts) < 0.4)).astype(np.int32)
    easy = rng.random(num_prompts) < 0.5
    history.easy_run, history.hard_run = np.where(easy, runs, 0), np.where(easy, 0, runs)
    return history


@pytest.mark.parametrize("seed", range(4))
def test_greso_keep_probability_and_skip_mask_equal_the_spec_formula(seed):
    """max(p ** run, floor) per run, skip iff u < 1 - keep (selectors.md §6), on every candidate."""
    history = greso_state(20000, seed, keep_floor=0.01 if seed % 2 else 0.0)
    ids = np.random.default_rng(seed).permutation(20000)[:15000]
    easy, hard = history.easy_run[ids], history.hard_run[ids]
    expected = np.ones(ids.size)
    expected = np.where(easy > 0, np.maximum(history.p_easy ** easy.astype(np.float64), history.cfg.keep_floor),
                        expected)
    expected = np.where(hard > 0, np.maximum(history.p_hard ** hard.astype(np.float64), history.cfg.keep_floor),
                        expected)
    assert np.array_equal(history.keep_probability(ids), expected)
    drawn, alone = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
    assert np.array_equal(history.survivors(ids, drawn), ids[~(alone.random(ids.size) < 1.0 - expected)])
    assert drawn.bit_generator.state == alone.bit_generator.state  # one draw per candidate


def test_greso_observe_runs_equal_two_counters():
    history = greso_state(3000, 7)
    easy, hard = history.easy_run.copy(), history.hard_run.copy()
    ids = np.random.default_rng(3).permutation(3000)[:2000]
    kind = np.random.default_rng(4).integers(0, 3, ids.size)  # 0 solved, 1 failed, 2 informative
    history.observe(ids, kind == 0, kind == 1)
    easy[ids] = np.where(kind == 0, easy[ids] + 1, 0)
    hard[ids] = np.where(kind == 1, hard[ids] + 1, 0)
    assert np.array_equal(history.easy_run, easy) and np.array_equal(history.hard_run, hard)


@pytest.mark.parametrize("shift", [-2, -1, 0, 1, 5])
def test_keep_first_informative_equals_the_running_count_rule(shift):
    """dapo's rule `informative & (cumsum <= room)`, with room around the number of informative groups
    (at or above it: every one, as a new array)."""
    from lze_bench.selectors.dapo import keep_first_informative

    informative = np.random.default_rng(shift + 9).random(1000) < 0.4
    room = int(informative.sum()) + shift
    kept = keep_first_informative(informative, room)
    assert np.array_equal(kept, informative & (np.cumsum(informative) <= room))
    assert kept.dtype == bool and not np.shares_memory(kept, informative)


@pytest.mark.parametrize("size", [1, 2, 7, 10, 1001, 40000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_median_equals_numpy_median(size, dtype):
    from lze_bench.selectors.topk import median

    rng = np.random.default_rng(size)
    for values in (rng.random(size), rng.integers(0, 5, size).astype(float), np.full(size, 0.3)):
        values = values.astype(dtype)
        assert median(values) == float(np.median(values.astype(np.float64)))


def test_hive_screen_equals_the_spec_formula():
    """Stage 1 (selectors.md §4): q = 1 if unseen else k * e; shortlist = not (v < 1 - q)."""
    from lze_bench.selectors.hive import HiveConfig, HiveSelector

    sel = HiveSelector(HiveConfig(), num_prompts=20000, batch_size=64)
    rng = np.random.default_rng(11)
    runs = greso_state(20000, 11)
    sel.history.easy_run, sel.history.hard_run = runs.easy_run, runs.hard_run
    sel.history.p_easy, sel.history.p_hard = 0.37, 0.61
    seen = rng.random(20000) < 0.8
    sel.p_hist = np.where(seen, rng.integers(0, 9, 20000) / 8, np.nan)
    sel.h_hist = np.where(seen & (rng.random(20000) < 0.7), rng.random(20000) * 2, np.nan)
    sel._mean_entropy()
    ids = rng.permutation(20000)
    p, h = sel.p_hist[ids], sel.h_hist[ids]
    known = ~np.isnan(sel.h_hist)
    u = np.where(np.isnan(h), 1.0, np.minimum(1.0, h / float(sel.h_hist[known].mean())))
    e = 0.5 + (1.0 - 0.5) * (4.0 * p * (1.0 - p)) * u
    easy, hard = sel.history.easy_run[ids], sel.history.hard_run[ids]
    k = np.where(easy > 0, np.maximum(0.37 ** easy.astype(np.float64), 0.01), 1.0)
    k = np.where(hard > 0, np.maximum(0.61 ** hard.astype(np.float64), 0.01), k)
    q = np.where(np.isnan(p), 1.0, k * e)
    assert np.array_equal(sel.select_probability(ids), q)
    # the shortlist (not (v < 1 - q), one draw per candidate) with no budget cut: V = 1 for every prompt
    drawn, alone = np.random.default_rng(12), np.random.default_rng(12)
    listed = ids[~(alone.random(ids.size) < 1.0 - q)]
    chosen = sel.select_rollout(ids, ids.size, 0, drawn, lambda name, x: np.ones(x.size, np.float32))
    assert np.array_equal(chosen, listed) and drawn.bit_generator.state == alone.bit_generator.state


def test_astral_pool_from_the_last_pool_equals_the_general_dedup_and_filter():
    """selectors.md §3 buffer steps 1-2 on the whole buffer (newest_per_prompt, then the all-0/1 filter) give
    the pool the selector builds from its last pool plus the appended groups, step after step."""
    from lze_bench.selectors import RolloutBatch
    from lze_bench.selectors.astral import AstralConfig, AstralSelector, newest_per_prompt, replayable

    sel = AstralSelector(AstralConfig(buffer_size=40, sigma=0.5), num_prompts=60, batch_size=24)
    rng = np.random.default_rng(3)
    for step in range(12):
        ids = rng.choice(60, 20, replace=False)
        rewards = (rng.random((20, 4)) < rng.choice([0.0, 0.5, 1.0], (20, 1))).astype(np.float32)
        pid, stp, mean = newest_per_prompt(sel.buf_pid, sel.buf_step, 60, sel.buf_mean)
        mixed = replayable(mean)
        sel.observe(RolloutBatch(prompt_ids=ids, rewards=rewards, step=step))
        assert sel.pool_pid.tolist() == pid[mixed].tolist() and sel.pool_step.tolist() == stp[mixed].tolist()
    sel.buf_split = -1  # unknown split (e.g. a hand-made state): the general path
    pid, stp, mean = newest_per_prompt(sel.buf_pid, sel.buf_step, 60, sel.buf_mean)
    sel.observe(RolloutBatch(prompt_ids=[0, 1], rewards=np.ones((2, 4), np.float32), step=12))
    assert sel.pool_pid.tolist() == pid[replayable(mean)].tolist()


@pytest.mark.parametrize("size", [1, 5, 1000])
def test_average_ranks_equal_the_unique_based_mean_ranks(size):
    from lze_bench.selectors.astral_predict import average_ranks

    rng = np.random.default_rng(size)
    for values in (rng.random(size), rng.integers(0, 4, size) / 4.0, np.zeros(size)):
        _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
        ends = np.cumsum(counts)
        assert np.array_equal(average_ranks(values), ((ends - counts + ends - 1) / 2.0)[inverse])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hive_stage_two_equals_the_float64_median_rule(dtype):
    """Stage 2 (selectors.md §4): keep V >= median(V) over the shortlist, computed in float64, top `budget` by V
    (ties by candidate order); float32 entropies are compared without a float32 rounding of the median."""
    from lze_bench.selectors.hive import HiveConfig, HiveSelector

    rng = np.random.default_rng(21)
    for size, budget in ((1001, 600), (1000, 400), (1000, 501)):
        values = (rng.integers(0, 50, size) / 7).astype(dtype)  # ties; medians between two float32 values
        sel = HiveSelector(HiveConfig(), num_prompts=size, batch_size=4)  # unseen: every candidate shortlisted
        ids = sel.select_rollout(np.arange(size), budget, 0, np.random.default_rng(0), lambda name, x: values[x])
        v64 = values.astype(np.float64)
        passed = v64 >= np.median(v64)
        if passed.sum() > budget:
            key = np.where(passed, v64, -np.inf)
            order = np.lexsort((np.arange(size), -key))[:budget]
            passed = np.zeros(size, bool)
            passed[order] = True
        assert ids.tolist() == np.flatnonzero(passed).tolist()


@pytest.mark.parametrize("runs", [[2, 3, 5], [-1, -3, -2], [4]])  # signed: +easy, -hard; none at 0
def test_greso_keep_probability_without_a_zero_run(runs):
    history = greso_state(10, 0)
    history.easy_run[:len(runs)] = np.maximum(runs, 0)
    history.hard_run[:len(runs)] = np.maximum(np.negative(runs), 0)
    ids = np.arange(len(runs))
    run = np.asarray(runs)
    expected = np.where(run > 0, np.maximum(history.p_easy ** np.abs(run).astype(np.float64), 0.01),
                        np.maximum(history.p_hard ** np.abs(run).astype(np.float64), 0.01))
    assert np.array_equal(history.keep_probability(ids), expected)


@pytest.mark.parametrize("name", ["greso", "hive"])
def test_single_response_groups_are_refused(name):
    from lze_bench.errors import LzeBenchError
    from lze_bench.registry import SELECTORS
    from lze_bench.selectors import RolloutBatch

    sel = SELECTORS[name](SELECTORS[name].Config(), num_prompts=10, batch_size=4)
    with pytest.raises(LzeBenchError, match="n >= 2"):
        sel.observe(RolloutBatch(prompt_ids=[0, 1], rewards=[[1.0], [0.0]], step=0))


@pytest.mark.parametrize("name", ["greso", "hive"])
def test_a_state_with_both_runs_on_one_prompt_is_refused(name):
    from lze_bench.errors import LzeBenchError
    from lze_bench.registry import SELECTORS

    sel = SELECTORS[name](SELECTORS[name].Config(), num_prompts=10, batch_size=4)
    state = sel.state_dict()
    state["easy_run"][3], state["hard_run"][3] = 1, 1
    with pytest.raises(LzeBenchError, match="both an easy and a hard run"):
        sel.load_state_dict(state)




def _ragged_rewards(rng, groups, width, kind):
    rewards = (rng.random((groups, width)) < rng.random((groups, 1))).astype(np.float32)
    if kind == "half":
        rewards[rng.random(rewards.shape) < 0.01] = 0.5
    if kind == "negzero":
        rewards[rewards == 0] = -0.0
    valid = rng.random((groups, width)) < 0.8 if kind != "full" else None
    return rewards, valid


@pytest.mark.parametrize("width", [1, 3, 4, 8, 12, 16, 40])
@pytest.mark.parametrize("kind", ["binary", "half", "negzero", "full"])
def test_zero_variance_equals_the_row_max_and_min(width, kind):
    """RolloutBatch.zero_variance (stats.varied_rows): not max > min over each group's rollouts, ragged or not."""
    from lze_bench.selectors.base import RolloutBatch

    rng = np.random.default_rng([width, len(kind)])
    rewards, valid = _ragged_rewards(rng, 3000, width, kind)
    rewards[:5] = 1.0  # all right, all wrong, and a group with no rollout at all when ragged
    rewards[5:10] = 0.0
    if valid is not None:
        valid[10] = False
    batch = RolloutBatch(prompt_ids=np.arange(3000), rewards=rewards, step=0, valid=valid)
    every = np.ones(rewards.shape, dtype=bool) if valid is None else valid
    high = np.where(every, rewards, -np.inf).max(axis=1, initial=-np.inf)
    low = np.where(every, rewards, np.inf).min(axis=1, initial=np.inf)
    assert np.array_equal(batch.zero_variance, ~(high > low))


@pytest.mark.parametrize("width", [1, 5, 8, 9, 16, 24, 70, 254, 255, 300])
@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("limits", ["int16", "uint8"])
def test_first_of_each_equals_the_cumulative_counts(width, ragged, limits):
    """Any integer limits, negative or past the row's entries."""
    from lze_bench.selectors.stats import first_of_each, row_counts

    rng = np.random.default_rng([width, ragged, len(limits)])
    groups = 2000
    valid = rng.random((groups, width)) < 0.7 if ragged else None
    positive = rng.random((groups, width)) < rng.random((groups, 1))
    if valid is not None:
        positive &= valid
    positive[:2] = valid[:2] if ragged else True  # rows of positives only: counts up to the width
    negative = ~positive if valid is None else valid & ~positive
    low = 0 if limits == "uint8" else -2
    pos_limit, neg_limit = rng.integers(low, width + 3, groups), rng.integers(low, width + 3, groups)
    pos_limit[:3] = 255  # at and above the byte counts' range
    neg_limit[3:6] = 255
    if limits == "uint8":
        pos_limit, neg_limit = np.minimum(pos_limit, 255).astype(np.uint8), np.minimum(neg_limit, 255).astype(np.uint8)
    expected = ((positive & (np.cumsum(positive, axis=1) <= pos_limit[:, None]))
                | (negative & (np.cumsum(negative, axis=1) <= neg_limit[:, None])))
    assert np.array_equal(first_of_each(positive, valid, pos_limit, neg_limit), expected)
    assert np.array_equal(row_counts(positive).astype(np.int64), positive.sum(axis=1))


@pytest.mark.parametrize("ragged, n", [(False, 8), (True, 8), (True, 256)])
@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
def test_reinforce_ada_on_a_large_batch_equals_the_row_formulas(ragged, n, choice):
    """A large batch keeps what the cumulative-count formulas keep, also with n = 256 kept per prompt (more
    than the rows hold: only the last round's groups, ragged, are kept then)."""
    from lze_bench.registry import SELECTORS
    from lze_bench.selectors import RolloutBatch, build_selector
    from lze_bench.selectors.reinforce_ada import kept_counts

    rng = np.random.default_rng([7, ragged, len(choice), n])
    groups, width = 40000, 16
    config = SELECTORS["reinforce_ada"].Config(choice=choice, round_repeat=8)  # rows of 32 rollouts: the last round
    selector = build_selector(config, num_prompts=groups)
    selector.group_size = n
    rewards = (rng.random((groups, width)) < rng.random((groups, 1))).astype(np.float32)
    valid = None
    if ragged:  # prompts at different rounds: 8, 16 or 32 (the last round) rollouts
        rewards = np.concatenate([rewards, rewards[::-1]], axis=1)
        rounds = rng.integers(1, 5, groups)
        valid = np.arange(2 * width)[None, :] < 8 * rounds[:, None]
        rewards[~valid] = 0.0
    batch = RolloutBatch(prompt_ids=np.arange(groups), rewards=rewards, step=0, valid=valid)
    decision = selector.select_update(batch, 0, np.random.default_rng(0))
    every = np.ones(rewards.shape, dtype=bool) if valid is None else valid
    positive = (rewards > selector.config.positive_threshold) & every
    negative = every & ~positive
    pos, neg = positive.sum(axis=1), negative.sum(axis=1)
    finished = (pos >= n // 2) & (neg >= n - n // 2) if choice == "balanced" else pos >= 1
    keep = finished | (every.sum(axis=1) >= selector.config.max_rounds * selector.round_repeat(n))
    kept_pos, kept_neg = kept_counts(pos, neg, n, finished)
    rollouts = ((positive & (np.cumsum(positive, axis=1) <= kept_pos[:, None]))
                | (negative & (np.cumsum(negative, axis=1) <= kept_neg[:, None]))) & keep[:, None]
    assert keep.any() and (~keep).any()
    assert np.array_equal(decision.keep, keep) and np.array_equal(decision.keep_rollouts, rollouts)
    assert np.array_equal(decision.hold, ~keep)
    assert np.array_equal(decision.extension, np.where(keep, 0, 8))


@pytest.mark.parametrize("shape", [(3, 0), (0, 8), (4, 256), (4, 255), (4, 264), (5, 1), (5, 2), (5, 4)])
def test_row_counts_and_varied_rows_at_the_edges(shape):
    """Rows of no column, no row, and 255-264 True entries (past a byte), against the row reductions."""
    from lze_bench.selectors.stats import row_counts, varied_rows

    flags = np.ones(shape, dtype=bool)
    flags[1:2, ::3] = False
    assert np.array_equal(row_counts(flags).astype(np.int64), flags.sum(axis=1))
    rewards = flags.astype(np.float32)
    ones = binary_ones(rewards)
    assert ones is None or np.array_equal(ones.astype(np.int64), flags.sum(axis=1))
    every = np.ones(shape, dtype=bool)
    for valid in (None, every):
        varied = varied_rows(rewards, valid)
        assert np.array_equal(varied, np.array([len(set(row)) > 1 for row in rewards.tolist()], dtype=bool))
