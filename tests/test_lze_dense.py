"""LZE's prompt-order observe and its one-byte-code ranking equal the per-batch path bit for bit (issue 29, item 6).

The fast path (`selectors/lze_dense.py`, `topk.gumbel_top_k_codes`) is taken for batches covering >= 1/4 of the
prompts with 0/1 rewards. These tests run the same selector with the fast path switched off (the per-batch path,
`LzeState.observe` + `gumbel_top_k_dense`) and compare every decision and every state array, and check the ranking
kernel against one `rng.gumbel` vector + stable top-k, including inputs built to defeat its sample.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lze_bench.registry import SELECTORS
from lze_bench.selectors import RolloutBatch, build_selector
from lze_bench.selectors import lze as lze_module
from lze_bench.selectors import stats, topk
from lze_bench.selectors.base import step_rng
from lze_bench.selectors.lze import LzeConfig
from lze_bench.selectors.lze_dense import CODE_LEVELS, energy_bound, energy_codes
from lze_bench.selectors.lze_state import ema_update, energy_and_ema, energy_of
from lze_bench.selectors.topk import SAMPLE, gumbel_top_k_codes, top_k_mask

BIG = 4 * SAMPLE + 4465  # enough groups for the threshold kernel (below 4 * SAMPLE it ranks every key)


def run(name, num, n, fractions, overrides, seed=0, checkpoint_at=(), ordered=False, state=None):
    """Decisions and final state of LZE steps on batches of `fraction * num` prompts (0/1 rewards).

    ordered: the candidates in prompt order (a part batch leaves whole blocks of prompts unmarked);
    state: a function that edits the selector's state dict before the first step.
    """
    selector = build_selector(SELECTORS[name].Config(**overrides), num_prompts=num, batch_size=num)
    if state is not None:
        selector.load_state_dict(state(selector.state_dict()))
    rate = np.random.default_rng([seed, num]).random(num)
    decisions = []
    for step, fraction in enumerate(fractions):
        if step in (2, 5):  # epoch 1 from step 2: the top-k path
            selector.begin_epoch(step // 2, step_rng(seed, step, 2))
        rng = np.random.default_rng([seed, step])
        candidates = np.arange(num) if ordered else rng.permutation(num)
        ids = selector.select_rollout(candidates, max(1, int(num * fraction)), step, step_rng(seed, step, 0))
        width = n[step] if isinstance(n, tuple) else n  # responses per group: one n, or one per step
        rewards = (rng.random((ids.size, width), dtype=np.float32) < rate[ids, None]).astype(np.float32)
        batch = RolloutBatch(prompt_ids=ids, rewards=rewards, step=step)
        selector.observe(batch)
        if step in checkpoint_at:  # a checkpoint between observe and select_update reads the cached energies
            selector.load_state_dict(selector.state_dict())
        decisions.append((ids, selector.select_update(batch, step, step_rng(seed, step, 1)).keep))
    return decisions, selector.state_dict()


def assert_same(fast, slow):
    for (ids_fast, keep_fast), (ids_slow, keep_slow) in zip(fast[0], slow[0]):
        assert np.array_equal(ids_fast, ids_slow) and np.array_equal(keep_fast, keep_slow)
    assert fast[1].keys() == slow[1].keys()
    for key, value in slow[1].items():
        if isinstance(value, np.ndarray):
            assert value.dtype == fast[1][key].dtype and np.array_equal(value.view(np.uint8),
                                                                        fast[1][key].view(np.uint8)), key
        else:
            assert fast[1][key] == value, key


class Spy:
    """Counts the fast paths taken: prompt-order observes, and rankings decided by the threshold kernel."""

    def __init__(self, monkeypatch):
        self.dense = self.threshold = 0
        observe, threshold = lze_module.observe_dense, topk._threshold_top_k

        def spy_observe(*args):
            result = observe(*args)
            self.dense += result is not None
            return result

        def spy_threshold(*args):
            result = threshold(*args)
            self.threshold += result is not None
            return result

        monkeypatch.setattr(lze_module, "observe_dense", spy_observe)
        monkeypatch.setattr(topk, "_threshold_top_k", spy_threshold)


CASES = [
    ("lze", BIG, 8, (1.0, 0.5, 1.0, 0.3, 1.0, 1.0), {}),
    ("lze", BIG, 32, (1.0, 1.0, 1.0, 1.0, 1.0), {"d_init_min": 0.0}),  # energies below one code unit
    ("lze_full", 5 * SAMPLE, 8, (1.0, 1.0, 1.0, 0.6, 1.0, 1.0), {}),  # pruned prompts: partly marked blocks
    ("lze", BIG, 4, (0.5, 1.0, 1.0, 0.26, 1.0), {"d_init_min": 0.0}),  # anchors d_init = 0 beside unanchored
    ("lze", 9000, 24, (1.0, 1.0, 1.0, 1.0), {}),  # c / 24 is not c * (1 / 24) for some c
    ("lze", 9000, 16, (1.0, 0.4, 1.0, 1.0), {"momentum_weight": 1e-300}),  # the unfolded energy branch
    ("lze", 9000, 1, (1.0, 1.0, 0.5, 1.0), {"exploration_noise": 0.0}),
    ("lze_full", 9000, 4, (0.9, 0.9, 0.9, 0.9, 0.9), {"prune_after": 1, "replay_ratio": 0.5}),
    ("lze", 9000, 8, (1.0, 0.1, 0.6, 1.0, 0.2, 0.5, 0.5), {}),  # small batches between: deferred updates written
    ("lze", 9000, (8, 8, 4, 4, 2, 8), (1.0, 0.6, 0.5, 1.0, 0.7, 0.4), {}),  # another n: deferred rates written first
]


@pytest.mark.parametrize("name, num, n, fractions, overrides", CASES)
def test_prompt_order_path_equals_the_per_batch_path(monkeypatch, name, num, n, fractions, overrides):
    spy = Spy(monkeypatch)
    fast = run(name, num, n, fractions, overrides, checkpoint_at=(3,))
    large = sum(fraction >= 0.25 for fraction in fractions)
    assert spy.dense >= large - 1  # the fast observe ran (a 0.26 batch of a pruned pool may not)
    if num >= 4 * SAMPLE:
        assert spy.threshold >= 2  # and the threshold kernel decided full batches after epoch 0
    with monkeypatch.context() as off:
        off.setattr(lze_module, "observe_dense", lambda *args: None)
        slow = run(name, num, n, fractions, overrides, checkpoint_at=(3,))
    assert_same(fast, slow)


def test_pruner_of_a_loaded_state_equals_the_per_batch_path(monkeypatch):
    """Pruned and replayed prompts whose streak is below prune_after (a state resumed with a larger prune_after):
    the replay rule alone decides them, in whole batches (every block fully marked) and in part batches."""
    def resumed(state):
        chosen = np.zeros(state["pruned"].size, dtype=bool)
        chosen[::3] = True
        state["pruned"], state["replay"] = chosen.copy(), chosen.copy()  # all replayed: every prompt rolls out
        state["streak"][::2] = 1
        return state

    spy = Spy(monkeypatch)
    args = ("lze_full", 9000, 4, (1.0, 0.5, 1.0), {"prune_after": 3})
    fast = run(*args, state=resumed)
    assert spy.dense == 3
    with monkeypatch.context() as off:
        off.setattr(lze_module, "observe_dense", lambda *args: None)
        slow = run(*args, state=resumed)
    assert_same(fast, slow)


@pytest.mark.parametrize("name, num, n, fractions, overrides", CASES[:4])
def test_energy_summary_is_that_of_the_exact_energies(monkeypatch, name, num, n, fractions, overrides):
    """A prompt-order observe's top, low and live: the batch's largest energy, smallest positive one, #E > 0."""
    seen, observe = [], lze_module.observe_dense

    def spy(*args):
        result = observe(*args)
        if result is not None and result.codes is not None:
            energy = result.exact()
            positive = energy[energy > 0]
            seen.append(((result.top, result.low, result.live),
                         (energy.max(), positive.min() if positive.size else None, positive.size)))
        return result

    monkeypatch.setattr(lze_module, "observe_dense", spy)
    run(name, num, n, fractions, overrides)
    assert len(seen) >= len(fractions) - 1
    for summary, exact in seen:
        assert summary == exact


def test_a_block_without_positive_energy(monkeypatch):
    """Prompts with d_init = 0 have energy 0: the first block holds no positive energy, the others do."""
    def zero_difficulty(state):
        state["d_init"][:40000] = 0.0  # anchored (>= 0), so observe keeps it
        return state

    seen, observe = [], lze_module.observe_dense

    def spy(*args):
        result = observe(*args)
        if result is not None and result.codes is not None:
            energy = result.exact()
            seen.append((result.low, energy[energy > 0].min()))
        return result

    monkeypatch.setattr(lze_module, "observe_dense", spy)
    fast = run("lze", BIG, 8, (1.0, 1.0, 1.0), {}, ordered=True, state=zero_difficulty)
    assert seen and all(low == exact for low, exact in seen)
    with monkeypatch.context() as off:
        off.setattr(lze_module, "observe_dense", lambda *args: None)
        slow = run("lze", BIG, 8, (1.0, 1.0, 1.0), {}, ordered=True, state=zero_difficulty)
    assert_same(fast, slow)


def test_counts_of_many_prompt_order_observes(monkeypatch):
    """More observes than a deferred one-byte count holds (255) between two reads of the state."""
    fractions = (1.0,) * 260 + (0.5, 1.0) * 10
    fast = run("lze", 300, 2, fractions, {})
    with monkeypatch.context() as off:
        off.setattr(lze_module, "observe_dense", lambda *args: None)
        slow = run("lze", 300, 2, fractions, {})
    assert fast[1]["n_obs"].max() > 255
    assert_same(fast, slow)


def test_whole_blocks_of_unmarked_prompts(monkeypatch):
    """A batch of the first prompts in prompt order: the later blocks hold no batch prompt."""
    fractions = (0.3, 0.5, 0.3, 0.3)
    spy = Spy(monkeypatch)
    fast = run("lze", BIG, 8, fractions, {}, ordered=True)
    assert spy.dense == len(fractions)
    with monkeypatch.context() as off:
        off.setattr(lze_module, "observe_dense", lambda *args: None)
        slow = run("lze", BIG, 8, fractions, {}, ordered=True)
    assert_same(fast, slow)


def test_the_card_variant_keeps_the_per_batch_path(monkeypatch):
    """The card variant ranks by the EMA after the update: its large batches are observed per batch."""
    spy = Spy(monkeypatch)
    decisions, _ = run("lze", 5000, 8, (1.0, 1.0, 1.0, 1.0), {"variant": "card"})
    assert spy.dense == 0 and all(keep.sum() < keep.size for _, keep in decisions[2:])


def test_energies_outside_the_code_range_rank_exactly(monkeypatch):
    """A loaded state with d_init > 1 (energies above the codes' bound): no codes, the exact ranking."""
    def inflated(state):
        state["d_init"][: BIG // 3] = 1.02  # anchored, above the largest the rules write (1): codes would wrap
        state["ema"][: BIG // 3] = 0.0
        return state

    fractions = (1.0, 1.0, 1.0, 1.0)
    spy = Spy(monkeypatch)
    fast = run("lze", BIG, 8, fractions, {}, state=inflated)
    assert spy.dense == len(fractions) and spy.threshold == 0
    with monkeypatch.context() as off:
        off.setattr(lze_module, "observe_dense", lambda *args: None)
        slow = run("lze", BIG, 8, fractions, {}, state=inflated)
    assert_same(fast, slow)


def coded(energy: np.ndarray, weight: float = 0.3):
    """LZE's codes of non-negative energies (`lze_dense.energy_codes`) and their unit."""
    bound = energy_bound(LzeConfig(momentum_weight=weight))
    codes = np.empty(energy.size, dtype=np.uint8)
    energy_codes(energy, CODE_LEVELS / bound, np.empty(energy.size), codes)
    return codes, bound / CODE_LEVELS


def reference(seed, scale, energy, k):
    key = np.where(energy > 0, energy, -np.inf) + np.random.default_rng(seed).gumbel(0.0, scale, energy.size)
    return top_k_mask(key, k)


@pytest.mark.parametrize("trial", range(16))
def test_code_ranking_equals_one_gumbel_vector_and_stable_top_k(trial):
    rng = np.random.default_rng([trial, 11])
    levels = int(rng.choice([4, 37, 10**6]))  # few levels: many exact ties in the energies
    energy = np.round(rng.random(BIG) * 1.3 * levels) / levels
    energy[rng.random(BIG) < rng.uniform(0.0, 0.5)] = 0.0
    energy[: 3 + trial] = 1.3  # LZE's largest energy (d_init 1, p 1/2, momentum 1): the top code
    if trial % 4 == 3:  # defeat the stride sample: every sampled position low, every other one high
        energy = np.where(np.arange(BIG) % (BIG // SAMPLE) == 0, 0.01, 1.2)
    codes, unit = coded(energy)
    live = int(np.count_nonzero(energy))
    scale = float(rng.choice([1e-8, 1e-3, 0.065, 2.0]))
    for k in (1, live // 3, live // 2 + 1, live - 1, live):
        seed = [trial, k]
        ours = np.random.default_rng(seed)
        got = gumbel_top_k_codes(ours, scale, codes, unit, lambda at: energy.copy() if at is None else energy[at], k)
        assert np.array_equal(got, reference(seed, scale, energy, k)), k
        after = np.random.default_rng(seed)
        after.gumbel(0.0, scale, BIG)
        assert ours.random() == after.random()  # the same stream consumed


def test_code_ranking_follows_numpys_rejection_of_a_zero_uniform():
    from tests.test_selector_kernels import rng_drawing_zero_first

    energy = np.where(np.arange(BIG) % 3 == 0, 0.0, np.linspace(0.0, 1.0, BIG))
    codes, unit = coded(energy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the zero is never put through a logarithm (no RuntimeWarning)
        got = gumbel_top_k_codes(rng_drawing_zero_first(4), 0.1, codes, unit,
                                 lambda at: energy.copy() if at is None else energy[at], BIG // 3)
    key = np.where(energy > 0, energy, -np.inf) + rng_drawing_zero_first(4).gumbel(0.0, 0.1, BIG)
    assert np.array_equal(got, top_k_mask(key, BIG // 3))


def rng_drawing_zero_at(position: int) -> np.random.Generator:
    """A PCG64 generator whose draw number `position` (from 0) is exactly 0.0."""
    from tests.test_selector_kernels import rng_drawing_zero_first

    rng = rng_drawing_zero_first(4)
    rng.bit_generator.advance((1 << 128) - position)  # back `position` draws (mod 2^128)
    return rng


@pytest.mark.parametrize("position, live_k", [(1, False), (60001, False), (BIG - 2, False), (5, True)])
def test_code_ranking_with_a_zero_uniform_between_the_sample(position, live_k):
    """A zero uniform the stride sample does not read (or with k = every positive code): NumPy's redraw."""
    assert rng_drawing_zero_at(position).random(position + 1)[position] == 0.0
    assert position not in np.arange(SAMPLE) * BIG // SAMPLE  # not a sampled position
    energy = np.where(np.arange(BIG) % 3 == 0, 0.0, np.linspace(0.0, 1.0, BIG))
    codes, unit = coded(energy)
    k = int(np.count_nonzero(codes)) if live_k else BIG // 3
    ours = rng_drawing_zero_at(position)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = gumbel_top_k_codes(ours, 0.1, codes, unit, lambda at: energy.copy() if at is None else energy[at], k)
    numpy = rng_drawing_zero_at(position)
    key = np.where(energy > 0, energy, -np.inf) + numpy.gumbel(0.0, 0.1, BIG)
    assert np.array_equal(got, top_k_mask(key, k))
    assert ours.random() == numpy.random()  # the same draws consumed, the redraw included


@pytest.mark.parametrize("weight", [0.0, 0.3, 1e-300, 7.5])
def test_widened_energy_arithmetic_gives_the_same_bits(weight):
    rng = np.random.default_rng(5)
    p = rng.integers(0, 9, 5000) / 8
    d_init = rng.random(p.size).astype(np.float32)
    ema = rng.random(p.size).astype(np.float32)
    cfg = LzeConfig(momentum_weight=weight)
    results = []
    for wide in (None, np.empty(p.size)):
        energy, state = np.empty(p.size), ema.copy()
        energy_and_ema(p, d_init, state, cfg, energy, np.empty(p.size), wide)
        results.append((energy.view(np.uint64), state.view(np.uint32)))
    # lze_dense's order: the EMA first, into a copy, then the energy with three float64 arrays (p overwritten)
    energy, new, rates = np.empty(p.size), np.empty_like(ema), p.copy()
    ema_update(rates, ema, cfg.ema_decay, np.empty(p.size), wide=energy, target=new)
    energy_of(rates, d_init, ema, weight, energy, np.empty(p.size), wide_ema=energy, wide_d=rates)
    results.append((energy.view(np.uint64), new.view(np.uint32)))
    assert all(np.array_equal(a, b) for a, b in zip(results[0], results[1]))
    assert all(np.array_equal(a, b) for a, b in zip(results[0], results[2]))


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_row_counts_without_popcount_equal_the_popcount(monkeypatch, n):
    rewards = (np.random.default_rng(n).random((70000, n)) < 0.4).astype(np.float32)
    with_popcount = stats.binary_ones(rewards)
    monkeypatch.setattr(stats, "POPCOUNT", False)
    assert np.array_equal(stats.binary_ones(rewards), with_popcount)
    assert np.array_equal(with_popcount, rewards.sum(axis=1))
