"""Selector behaviour (selectors.md §1-5), beyond the §7 printout.

LZE ranks the learning zone first and an all-solved group last; DAPO never
keeps a zero-variance group and says how many more prompts it needs; uniform
keeps everything; the forward pruner re-checks pruned prompts every epoch;
HIVE and ASTRAL fall back as §8 says when an extra is unavailable; config
values are validated in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lze_bench.config import compose
from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.selectors.base import RolloutBatch, SelectorExhausted, group_stats, step_rng, top_k, top_k_mask


def make(name, num_prompts=64, batch_size=8, **overrides):
    cls = SELECTORS[name]
    return cls(cls.Config(**overrides), num_prompts=num_prompts, batch_size=batch_size)


def batch(ids, rewards, step=0):
    return RolloutBatch(prompt_ids=np.asarray(ids), rewards=np.asarray(rewards, dtype=np.float32), step=step)


def ladder(n=8):
    """Rewards float32[n+1, n]: group i has i correct responses (p = i/n, 0 .. 1)."""
    return (np.arange(n)[None, :] < np.arange(n + 1)[:, None]).astype(np.float32)


# --- LZE ---------------------------------------------------------------------


def test_lze_energy_peaks_at_half_and_all_solved_is_last():
    sel = make("lze", exploration_noise=0.0)
    ids = np.arange(9)
    state = sel.state_dict()
    state["d_init"][ids] = 0.5  # same anchor for all, and ema = p: no momentum
    state["ema"][ids] = np.arange(9) / 8
    state["epoch"] = 1
    sel.load_state_dict(state)
    group = batch(ids, ladder())
    sel.observe(group)
    energy = sel.state_dict()["cache_energy"]
    assert int(np.argmax(energy)) == 4  # p = 0.5
    assert np.allclose(energy, energy[::-1])  # symmetric around the learning zone
    assert np.all(np.diff(energy[:5]) > 0)
    assert energy[8] == 0 and energy[0] == 0  # all-solved / all-failed: dead
    order = top_k(energy, 9)
    assert order[-2:].tolist() == [0, 8]  # ties by position: all-solved ranked last
    keep = sel.select_update(group, 0, step_rng(0, 0, 1)).keep
    assert np.flatnonzero(keep).tolist() == [3, 4, 5]  # k = max(floor(9*.4), floor(9*.3)) = 3, nearest 0.5


def test_lze_first_sight_anchor_prefers_harder_prompts():
    sel = make("lze", exploration_noise=0.0)
    sel.begin_epoch(1, step_rng(0, 0, 2))
    group = batch(np.arange(9), ladder())
    sel.observe(group)
    energy = sel.state_dict()["cache_energy"]
    expected = np.maximum(1 - np.arange(9) / 8, 0.05) * 4 * (np.arange(9) / 8) * (1 - np.arange(9) / 8)
    assert np.allclose(energy, expected)
    assert energy[8] == 0 and sel.state_dict()["d_init"][8] == pytest.approx(0.05)


def test_lze_never_keeps_dead_groups_even_when_few_are_alive():
    sel = make("lze", batch_size=10)
    sel.begin_epoch(3, step_rng(0, 0, 2))
    rewards = np.ones((10, 4))
    rewards[0, 0] = 0  # one alive group among ten
    group = batch(np.arange(10), rewards)
    sel.observe(group)
    assert np.flatnonzero(sel.select_update(group, 0, step_rng(0, 0, 1)).keep).tolist() == [0]


def test_lze_keep_ratio_one_keeps_everything_including_dead():
    sel = make("lze", keep_ratio=1.0)
    sel.begin_epoch(2, step_rng(0, 0, 2))
    group = batch(np.arange(9), ladder())
    sel.observe(group)
    assert sel.select_update(group, 0, step_rng(0, 0, 1)).keep.all()


def test_lze_rejects_rewards_outside_unit_interval_and_unobserved_batches():
    sel = make("lze")
    just_above = float(np.nextafter(np.float32(1), np.float32(2)))
    for bad in ([[2.0, 0.0]], [[just_above, 0.5]], [[0.5, -0.25]], [[0.5, 0.0], [1.0, just_above]]):
        with pytest.raises(LzeBenchError, match=r"\[0, 1\]"):
            sel.observe(batch(np.arange(len(bad)), bad))
    sel.observe(batch([0, 1], [[0.5, 1.0], [0.0, 0.25]]))  # in range, not 0/1: accepted
    sel.observe(batch([2, 3], [[-0.0, 1.0], [0.5, 0.5]]))  # -0.0 (sign bit set) is 0: accepted
    with pytest.raises(LzeBenchError, match="observe"):
        sel.select_update(batch([1], [[1.0, 0.0]]), 0, step_rng(0, 0, 1))


def test_lze_card_variant_keeps_alive_groups_near_half():
    sel = make("lze", variant="card", tau=0.01)
    sel.begin_epoch(1, step_rng(0, 0, 2))
    group = batch(np.arange(9), ladder())
    sel.observe(group)
    keep = sel.select_update(group, 0, step_rng(0, 0, 1)).keep
    assert keep.sum() == 3 and not keep[0] and not keep[8] and keep[4]


def test_lze_full_pruner_rechecks_pruned_prompts_every_epoch():
    """Solved prompts leave the rollout; each epoch ceil-ish 10% of them come back for a re-check."""
    sel = make("lze_full", num_prompts=40, batch_size=40)
    solved = np.arange(20)  # always all-correct; 20..39 half-correct
    rewards = np.zeros((40, 4), dtype=np.float32)
    rewards[:20] = 1
    rewards[20:, :2] = 1
    rechecked = []
    for epoch in range(6):
        sel.begin_epoch(epoch, step_rng(0, epoch, 2))
        replay = np.flatnonzero(sel.state.replay)
        ids = sel.select_rollout(np.arange(40), 40, epoch, step_rng(0, epoch, 0))
        pruned_before = set(np.flatnonzero(sel.state.pruned).tolist())
        assert set(ids.tolist()) == set(range(40)) - (pruned_before - set(replay.tolist()))
        if epoch >= 2:  # pruned after two all-correct observations (epochs 0, 1)
            assert pruned_before == set(solved.tolist())
            assert replay.size == 2  # max(1, floor(20 * 0.1))
            rechecked += replay.tolist()
        group = batch(ids, rewards[ids], epoch)
        sel.observe(group)
        sel.select_update(group, epoch, step_rng(0, epoch, 1))
        assert set(np.flatnonzero(sel.state.pruned).tolist()) == (set(solved.tolist()) if epoch >= 1 else set())
    assert len(set(rechecked)) > 2  # different prompts re-checked across epochs
    # a re-checked prompt that is no longer solved is re-activated
    sel.begin_epoch(6, step_rng(0, 6, 2))
    back = np.flatnonzero(sel.state.replay)
    ids = sel.select_rollout(np.arange(40), 40, 6, step_rng(0, 6, 0))
    flipped = rewards[ids].copy()
    flipped[np.isin(ids, back), 0] = 0
    sel.observe(batch(ids, flipped, 6))
    assert not sel.state.pruned[back].any() and sel.state.pruned[np.setdiff1d(solved, back)].all()


def test_lze_without_pruner_never_drops_candidates():
    sel = make("lze")
    sel.begin_epoch(5, step_rng(0, 0, 2))
    for step in range(3):
        ids = sel.select_rollout(np.arange(10), 10, step, step_rng(0, step, 0))
        assert ids.tolist() == list(range(10))
        sel.observe(batch(ids, np.ones((10, 4)), step))


def test_lze_align_minibatch_reproduces_the_authors_trimming():
    """Spec §5 "Authors' trainer alignment": launcher B = 1024, mini-batch 256, n = 8, 409 kept groups."""
    sel = make("lze", num_prompts=2048, batch_size=1024, align_minibatch=True, align_mini_batch_prompts=256)
    rng = step_rng(0, 5, 1, 99)
    mask = sel.align_mask(409, 8, 8192, rng)
    expected = np.sort(step_rng(0, 5, 1, 99).permutation(409 * 8)[:2048])  # a random 2048 of 3272, in order
    assert mask.shape == (409, 8) and np.flatnonzero(mask.reshape(-1)).tolist() == expected.tolist()
    assert mask.sum() == 2048 and 0 < mask.sum(axis=1).min() < 8  # responses, not whole groups
    assert sel.align_mask(300, 8, 8192, rng).sum() == 2048  # 2400 -> one unit of 2048
    assert sel.align_mask(256, 8, 8192, rng) is None  # exactly one unit: nothing cut
    assert sel.align_mask(200, 8, 8192, rng) is None  # 1600 < unit: min(unit, K_raw) = K_raw, nothing cut
    assert sel.align_mask(0, 8, 8192, rng) is None and sel.align_mask(1024, 8, 8192, rng) is None  # 0 or all
    assert sel.align_mask(409, 8, 3272, rng) is None  # every response kept: not cut, even off a unit
    assert sel.align_mask(600, 8, 8192, step_rng(0, 5, 1, 99)).sum() == 4096  # floor(4800 / 2048) = 2 units
    assert make("lze", batch_size=8).align_mask(3, 4, 32, rng) is None  # off by default
    assert make("lze", batch_size=8, align_minibatch=True, keep_ratio=1.0).align_mask(3, 4, 32, rng) is None
    default = make("lze", batch_size=12, align_minibatch=True)  # mini-batch floor(12 / 4) = 3 prompts
    assert default.align_mask(5, 2, 24, step_rng(0, 0, 1, 99)).sum() == 6  # unit 6: 10 -> 6
    small = make("lze", batch_size=3, align_minibatch=True)  # floor(3 / 4) = 0: at least 1 prompt
    assert small.align_mask(3, 2, 8, step_rng(0, 0, 1, 99)) is None  # unit 2: 6 responses are whole units


def test_local_grpo_trims_responses_after_the_advantages():
    from lze_bench.backends.local.grpo import Group, _flatten, group_advantages

    rewards = np.array([1, 0, 0, 1], dtype=np.float32)
    group = Group(3, 0, [1, 2], [np.array([5]), np.array([6, 7]), np.array([8]), np.array([9])],
                  [np.zeros(1)] * 4, rewards, train_mask=np.array([True, False, True, False]))
    seqs, plens, advs, _, _ = _flatten([group], "grpo")
    assert [s.tolist() for s in seqs] == [[1, 2, 5], [1, 2, 8]]
    assert advs.tolist() == group_advantages(rewards, "grpo")[[0, 2]].tolist()  # the full group's advantages


# --- DAPO / uniform ----------------------------------------------------------


reward_matrices = st.integers(1, 9).flatmap(
    lambda n: arrays(np.float32, st.tuples(st.integers(1, 30), st.just(n)),
                     elements=st.sampled_from([0.0, 1.0, 0.5, 0.25]))
)


@settings(max_examples=200, deadline=None)
@given(rewards=reward_matrices, train=st.integers(1, 40), kept_before=st.integers(0, 40))
def test_dapo_never_keeps_constant_groups_and_asks_for_more(rewards, train, kept_before):
    sel = make("dapo", num_prompts=64, batch_size=train, gen_batch_size=7, max_gen_batches=0)
    sel.kept_so_far = min(kept_before, train - 1)
    room = train - sel.kept_so_far
    decision = sel.select_update(batch(np.arange(len(rewards)), rewards), 0, step_rng(0, 0, 1))
    informative = (rewards.max(axis=1) > rewards.min(axis=1)) | (rewards.shape[1] == 1)
    assert not (decision.keep & ~informative).any()
    assert decision.keep.sum() == min(informative.sum(), room)
    assert np.flatnonzero(decision.keep).tolist() == np.flatnonzero(informative)[:room].tolist()  # generation order
    assert decision.more == (0 if informative.sum() >= room else 7)


def test_dapo_error_on_exhaust_and_needs_a_batch_size():
    sel = make("dapo", batch_size=4, max_gen_batches=2, on_exhaust="error")
    dead = batch(np.arange(12), np.ones((12, 4)))
    assert sel.select_update(dead, 0, step_rng(0, 0, 1)).more == 12  # 3 x 4 by default
    with pytest.raises(SelectorExhausted, match="max_gen_batches=2"):
        sel.select_update(dead, 0, step_rng(0, 0, 1, 1))
    with pytest.raises(LzeBenchError, match="train_batch_size"):
        SELECTORS["dapo"](num_prompts=10)


@settings(max_examples=50, deadline=None)
@given(rewards=reward_matrices)
def test_uniform_keeps_every_group(rewards):
    sel = make("uniform")
    decision = sel.select_update(batch(np.arange(len(rewards)), rewards), 0, step_rng(0, 0, 1))
    assert decision.keep.all() and decision.more == 0 and decision.replay.shape == (0, 2)


# --- HIVE / ASTRAL fallbacks and checks --------------------------------------


def test_hive_uncertainty_needs_known_positive_entropy():
    sel = make("hive", num_prompts=4, batch_size=2)
    rewards = np.array([[1, 0, 1, 0]] * 3, dtype=np.float32)  # p = 0.5: d = 1
    entropy = np.array([[0.2] * 4, [0.4] * 4, [0.9] * 4], dtype=np.float32)  # h_bar = 0.5
    sel.observe(RolloutBatch(prompt_ids=[0, 1, 2], rewards=rewards, step=0, response_entropy=entropy))
    assert np.allclose(sel.edge(np.arange(3)), [0.5 + 0.5 * 0.4, 0.5 + 0.5 * 0.8, 1.0])  # u = min(1, h / h_bar)
    off = make("hive", num_prompts=4, batch_size=2, use_response_entropy=False)
    off.observe(RolloutBatch(prompt_ids=[0, 1, 2], rewards=rewards, step=0, response_entropy=entropy))
    assert np.allclose(off.edge(np.arange(3)), 1.0) and off.requires == ("prompt_entropy",)
    assert make("hive").requires == ("prompt_entropy", "response_entropy")
    zero = make("hive", num_prompts=4, batch_size=2)
    zero.observe(RolloutBatch(prompt_ids=[0, 1], rewards=rewards[:2], step=0, response_entropy=0 * entropy[:2]))
    assert np.allclose(zero.edge(np.arange(2)), 1.0)  # h_bar <= 0: u = 1


def test_hive_ema_of_pass_rate_and_entropy():
    sel = make("hive", num_prompts=4, batch_size=2)
    ones, half = np.ones((1, 4), dtype=np.float32), np.array([[1, 0, 1, 0]], dtype=np.float32)
    sel.observe(RolloutBatch(prompt_ids=[0], rewards=half, step=0, response_entropy=np.full((1, 4), 0.8)))
    assert sel.p_hist[0] == 0.5 and sel.h_hist[0] == pytest.approx(0.8)  # first sight: the value itself
    sel.observe(RolloutBatch(prompt_ids=[0], rewards=ones, step=1, response_entropy=np.full((1, 4), 0.4)))
    assert sel.p_hist[0] == 0.75 and sel.h_hist[0] == pytest.approx(0.6)  # beta = 0.5
    assert sel.history.easy_run[0] == 1 and sel.history.n_obs[0] == 2


def test_hive_and_greso_round_sizes_and_caps():
    hive = make("hive", num_prompts=100, batch_size=5)
    assert (hive.rollout_batch_size, hive.candidates_per_step(5), hive.round_candidates(3)) == (8, 16, 6)
    greso = make("greso", num_prompts=100, batch_size=5)
    assert (greso.round_size, greso.min_round, greso.candidates_per_step(5), greso.rollout_budget(5)) == (8, 8, 32, 8)
    assert greso.round_candidates(7) == 7 and greso.config.max_gen_batches == 0
    dead = batch(np.arange(8), np.ones((8, 4)))
    for round_index in range(9):  # hive: dapo's cap of 10 rounds, then a partial update
        decision = hive.select_update(dead, 0, step_rng(0, 0, 1, round_index))
        assert decision.more == 8 and not decision.partial
    last = hive.select_update(dead, 0, step_rng(0, 0, 1, 9))
    assert last.partial and last.more == 0
    full = make("hive", num_prompts=100, batch_size=2, max_gen_batches=1)
    decision = full.select_update(batch([0, 1], [[1, 0, 0, 0], [0, 1, 1, 0]]), 0, step_rng(0, 0, 1))
    assert decision.more == 0 and not decision.partial  # filled in the last allowed round: not partial
    strict = make("hive", num_prompts=100, batch_size=5, max_gen_batches=1, on_exhaust="error")
    with pytest.raises(SelectorExhausted, match="max_gen_batches=1"):
        strict.select_update(dead, 0, step_rng(0, 0, 1))
    capped = make("greso", num_prompts=100, batch_size=4, max_gen_batches=1)  # a request of 1 still hits the cap
    ids = capped.select_rollout(np.arange(4), 6, 0, step_rng(0, 0, 0))
    group = batch(ids, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]])  # need 1: T = 1, more = 1
    capped.observe(group)
    decision = capped.select_update(group, 0, step_rng(0, 0, 1))
    assert (decision.more, decision.partial) == (0, True)
    greso = make("greso", num_prompts=400, batch_size=5)
    for round_index in range(30):  # greso: no cap by default; no informative group asks for a full round
        ids = greso.select_rollout(np.arange(8) + 8 * round_index, 8, 0, step_rng(0, 0, 0, round_index))
        greso.observe(batch(ids, np.ones((8, 4))))
        assert greso.select_update(batch(ids, np.ones((8, 4))), 0, step_rng(0, 0, 1, round_index)).more == 8


def test_greso_rejects_bad_rewards_and_single_responses():
    sel = make("greso")
    with pytest.raises(LzeBenchError, match="n >= 2"):
        sel.observe(batch([0], [[1.0]]))
    for bad in ([[1.0, 2.0]], [[0.0, 1.0], [0.0, 2.0]], [[-1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [-1.0, 0.0]]):
        with pytest.raises(LzeBenchError, match=r"\[0, 1\]"):
            sel.observe(batch(np.arange(len(bad)), bad))


def test_greso_fresh_state_and_no_adaptation_in_epoch_zero():
    sel = make("greso", num_prompts=50, batch_size=2)
    state = sel.state_dict()
    assert (state["epoch"], state["p_easy"], state["p_hard"]) == (0, 0.5, 0.5)
    assert all(state[key] == 0 for key in ("kept_so_far", "gen_rounds", "cand_step", "rolled_step",
                                           "solved_step", "failed_step")) and not state["last_round"]
    ids = sel.select_rollout(np.arange(4), 4, 0, step_rng(0, 0, 0))  # no begin_epoch call: epoch 0
    group = batch(ids, [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]])
    sel.observe(group)
    assert sel.select_update(group, 0, step_rng(0, 0, 1)).more == 0  # B = 2 kept: the update is decided
    assert (sel.history.p_easy, sel.history.p_hard) == (0.5, 0.5)  # epoch 0: no adaptation
    sel.begin_epoch(1, step_rng(0, 1, 2))
    ids = sel.select_rollout(np.arange(4, 8), 4, 1, step_rng(0, 1, 0))
    group = batch(ids, [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]])
    sel.observe(group)
    sel.select_update(group, 1, step_rng(0, 1, 1))
    assert (sel.history.p_easy, sel.history.p_hard) == (0.49, 0.49)  # 1/4 solved >= 1/12, 1/4 failed >= 1/6


def test_astral_history_predictor_without_embeddings():
    sel = make("astral", num_prompts=6, batch_size=2, alpha=0.5)
    no_embeddings = lambda name, ids: None  # noqa: E731
    assert np.allclose(sel.predict(np.arange(6), no_embeddings), 0.5)  # alpha before any observation
    sel.observe(batch([0, 1], [[1, 1, 1, 1], [1, 0, 0, 0]], 0))
    assert sel.predict(np.arange(4), no_embeddings).tolist() == [1.0, 0.25, 0.625, 0.625]
    ids = sel.select_rollout(np.array([5, 0, 2, 1]), 2, 1, step_rng(0, 1, 0), no_embeddings)
    assert ids.tolist() == [5, 2]  # restricted candidates: nearest alpha, in candidate order


def test_astral_rejects_checkpoint_predictor():
    with pytest.raises(LzeBenchError, match="predictor"):
        make("astral", predictor="checkpoint")


# --- config ------------------------------------------------------------------


def test_lze_full_preset_composes():
    cfg = compose("train", ["selector=lze_full"])
    assert cfg.selector.prune_enabled is True and cfg.selector.prune_after == 2 and cfg.selector.replay_ratio == 0.1
    assert compose("train", ["selector=lze"]).selector.prune_enabled is False


@pytest.mark.parametrize(
    "override,key",
    [
        ("selector=lze selector.keep_ratio=0", "selector.keep_ratio"),
        ("selector=lze selector.keep_ratio=1.5", "selector.keep_ratio"),
        ("selector=dapo selector.on_exhaust=crash", "selector.on_exhaust"),
        ("selector=hive selector.pool_factor=0.5", "selector.pool_factor"),
        ("selector=hive selector.edge_floor=1.5", "selector.edge_floor"),
        ("selector=greso selector.p_min=0.9 selector.p_max=0.5", "selector.p_min"),
        ("selector=greso selector.on_exhaust=crash", "selector.on_exhaust"),
        ("selector=astral selector.tau=0", "selector.tau"),
        ("selector=astral selector.replay_strategy=teacher", "selector.replay_strategy"),
    ],
)
def test_bad_selector_values_fail_in_one_line(override, key):
    with pytest.raises(LzeBenchError) as info:
        compose("train", override.split())
    assert key in str(info.value) and "\n" not in str(info.value)


# --- shared helpers ----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(key=arrays(np.float64, st.integers(0, 40), elements=st.sampled_from([0.0, 1.0, 2.0, -np.inf, np.inf, 0.5])),
       k=st.integers(-2, 45))
def test_top_k_mask_matches_stable_sort(key, k):
    expected = np.zeros(key.size, dtype=bool)
    expected[np.lexsort((np.arange(key.size), -key))[: max(k, 0)]] = True
    assert np.array_equal(top_k_mask(key, k), expected)
    assert top_k(key, k).tolist() == np.lexsort((np.arange(key.size), -key))[: max(k, 0)].tolist()


@settings(max_examples=200, deadline=None)
@given(rewards=reward_matrices)
def test_group_stats_matches_row_reductions(rewards):
    pass_rate, varied = group_stats(rewards)
    assert np.allclose(pass_rate, rewards.mean(axis=1, dtype=np.float64))
    assert np.array_equal(varied, rewards.max(axis=1) > rewards.min(axis=1))


def test_bench_selectors_measures_every_selector(tmp_path):
    """`lze-bench bench selectors` on a tiny pool: one row per selector (two for astral), figures in JSON."""
    import json

    from typer.testing import CliRunner

    from lze_bench.cli import app

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "selectors", "sizes=300", "repeats=1", "warmup=1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    names = [row["selector"] for row in rows]
    assert sorted(names) == sorted([n for n in SELECTORS if n != "astral"]
                                   + ["astral:start", "astral:mid", "speed:next", "reinforce_ada:next"])
    for row in rows:
        assert row["prompts"] == 300 and row["step"] >= 0 and row["batch"] > 0
        assert row["x sort"] >= 0  # the step in units of np.sort(10^6) on the same machine
    assert {row["selector"]: row["batch"] for row in rows if row["selector"] in ("mopps", "adarft", "sec")} == {
        "mopps": 18, "adarft": 18, "sec": 18}  # B = N/16: mopps' pool of 16 B; adarft, sec choose B of all N


def test_bench_selectors_times_the_first_call_of_selectors_that_extend_groups():
    """SPEED screens with n_init rollouts per prompt and Reinforce-Ada starts with round_repeat = 2n: the bench
    times a step's first call with those, as the backend rolls them out; every other selector gets n."""
    from lze_bench.bench.selectors import Pool, make_selector, one_step

    pool = Pool(300, 8, 4, 0)
    for name, width in (("speed", 4), ("reinforce_ada", 16), ("lze", 8), ("pods", 8)):
        sel, widths = make_selector(name, 300), []
        sel.group_size = 8
        decide = sel.select_update
        sel.select_update = lambda batch, step, rng, decide=decide: widths.append(batch.rewards.shape[1]) or decide(
            batch, step, rng)
        one_step(sel, pool, 0)
        assert widths == [width], name


def test_bench_selectors_times_the_next_call_on_the_held_groups_with_the_rollouts_they_asked_for():
    """The `:next` row of SPEED and Reinforce-Ada: the groups the first call held, each with its first call's
    rewards followed by `extension` more (SPEED: 4 screening + 20), decided as one batch."""
    from lze_bench.bench.selectors import Pool, first_call, next_call

    pool = Pool(300, 8, 4, 0)
    for name, width in (("speed", 24), ("reinforce_ada", 32)):
        sel, seen = _bench_selector(name), []
        observe = sel.observe
        sel.observe = lambda batch, observe=observe: seen.append(batch) or observe(batch)
        _, first, decision = first_call(sel, pool, 0)
        held = np.flatnonzero(decision.held)
        assert 0 < held.size < first.num_groups, name
        cpu, wall, groups = next_call(sel, pool, 0, first, decision)
        nxt = seen[-1]
        assert groups == nxt.num_groups == held.size and nxt.group_size == width, name
        assert np.array_equal(nxt.prompt_ids, first.prompt_ids[held])
        assert np.array_equal(nxt.rewards[:, :first.group_size], first.rewards[held])  # the first call's, then more
        assert np.array_equal(nxt.counts, first.group_size + decision.extension[held]), name
        assert cpu[0] == 0 and (cpu >= 0).all() and (wall >= 0).all()


def _bench_selector(name):
    from lze_bench.bench.selectors import make_selector

    sel = make_selector(name, 300)
    sel.group_size = 8
    return sel


def test_bench_selectors_history_full_times_every_selector_after_seeing_every_prompt():
    """`history=full` observes every prompt once before the timed steps (mopps then draws a Beta for each
    candidate, its costliest state); an unknown history is one line naming the key."""
    from typer.testing import CliRunner

    from lze_bench.bench.selectors import Pool, make_selector, observe_all
    from lze_bench.cli import app

    result = CliRunner().invoke(app, ["bench", "selectors", "sizes=300", "repeats=1", "warmup=0", "history=full"])
    assert result.exit_code == 0, result.output
    assert "then one observation of every prompt (history=full)" in " ".join(result.output.split())
    sel = make_selector("mopps", 300)
    observe_all(sel, Pool(300, 8, 4, 0), 0)
    assert sel.observed.all() and (sel.alpha + sel.beta == 2 + 8).all()  # prior 1 + 1, then 8 rollouts each
    bad = CliRunner().invoke(app, ["bench", "selectors", "sizes=300", "history=some"])
    assert bad.exit_code == 2 and "history='some' is unknown; use one of warm, full" in bad.output
