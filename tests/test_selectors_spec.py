"""Every line of the reference printout, selectors.md §7 (numbers copied from the spec).

Harness seed 0; rng = default_rng([0, step, CALL_TAG]) as in selectors.md §0.
"""

from __future__ import annotations

import numpy as np
import pytest

from lze_bench.registry import SELECTORS
from lze_bench.selectors import load_state, save_state
from lze_bench.selectors.astral_predict import dots_draw, kernel_predict
from lze_bench.selectors.base import RolloutBatch, step_rng


def r4(values, digits=4):
    return [round(float(v), digits) for v in values]


def make(name, num_prompts, batch_size, **overrides):
    cls = SELECTORS[name]
    return cls(cls.Config(**overrides), num_prompts=num_prompts, batch_size=batch_size)


def batch(ids, rewards, step=0):
    return RolloutBatch(prompt_ids=np.asarray(ids), rewards=np.asarray(rewards, dtype=np.float32), step=step)


def test_u1_uniform_rolls_out_first_budget_and_keeps_all():
    sel = make("uniform", 10, 3)
    ids = sel.select_rollout(np.array([7, 3, 9, 1]), 3, 0, step_rng(0, 0, 0))
    assert ids.tolist() == [7, 3, 9]
    decision = sel.select_update(batch(ids, [[1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 1]]), 0, step_rng(0, 0, 1))
    assert decision.keep.tolist() == [True, True, True]


D1_ROUND1 = ([10, 11, 12, 13], [[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]])
D1_ROUND2 = ([14, 15, 16, 17], [[1, 1, 0, 1], [0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0]])


def dapo_round(sel, ids, rewards, round_index):
    candidates = sel.select_rollout(np.array(ids), sel.rollout_budget(3), 0, step_rng(0, 0, 0, round_index))
    assert candidates.tolist() == ids
    return sel.select_update(batch(candidates, rewards), 0, step_rng(0, 0, 1, round_index))


def test_d1_dapo_refills_until_batch_full():
    sel = make("dapo", 20, 3, train_batch_size=3, gen_batch_size=4)
    assert sel.candidates_per_step(3) == 4
    first = dapo_round(sel, *D1_ROUND1, 0)
    assert first.keep.astype(int).tolist() == [0, 1, 0, 1] and first.more == 4
    second = dapo_round(sel, *D1_ROUND2, 1)
    assert second.keep.astype(int).tolist() == [1, 0, 0, 0] and second.more == 0
    update = [i for ids, d in ((D1_ROUND1[0], first), (D1_ROUND2[0], second)) for i, k in zip(ids, d.keep) if k]
    assert update == [11, 13, 14]
    assert not second.partial


def test_d2_dapo_partial_update_when_generation_cap_hit():
    sel = make("dapo", 20, 3, train_batch_size=3, gen_batch_size=4, max_gen_batches=1, on_exhaust="partial")
    first = dapo_round(sel, *D1_ROUND1, 0)
    assert first.keep.astype(int).tolist() == [0, 1, 0, 1] and first.more == 0
    assert first.partial
    assert [i for i, k in zip(D1_ROUND1[0], first.keep) if k] == [11, 13]


def test_d3_dapo_drops_constant_non_binary_group():
    sel = make("dapo", 4, 1)
    assert sel.select_update(batch([0], [[0.5] * 4]), 0, step_rng(0, 0, 1)).keep.tolist() == [False]


A1_P_HAT = np.array([0.50, 0.45, 0.90, 0.10, 0.52, 0.00])


@pytest.mark.parametrize("count,expected", [(2, [(0, 4)]), (3, [(0, 1, 4)])])
def test_a1_astral_draw_concentrates_on_alpha(count, expected):
    outcomes = {
        tuple(sorted(dots_draw(A1_P_HAT, count, 0.5, 1e-3, np.random.default_rng([s, 0, 0])).tolist()))
        for s in range(200)
    }
    assert sorted(outcomes) == expected


A2_EMB = np.array([[1, 0], [0, 1], [1, 1], [0.9, 0.1], [0.1, 0.9], [0.6, 0.4]])


def test_a2_astral_kernel_predictor():
    base, p_hat = kernel_predict(A2_EMB, A2_EMB[[0, 1, 2]], np.array([0.9, 0.1, 0.5]), 0.1)
    assert r4(base) == [0.8797, 0.1203, 0.5, 0.8574, 0.1426, 0.5685]
    assert r4(p_hat) == [0.9, 0.1, 0.5, 0.8766, 0.1234, 0.5721]
    assert sorted(dots_draw(p_hat, 2, 0.5, 1e-3, step_rng(0, 0, 0)).tolist()) == [2, 5]


A3_EXPECTED = {
    0: ([0, 1, 2, 3], [], [(0, 0), (1, 0), (2, 0), (3, 0)]),
    1: ([4, 5], [[0, 0], [3, 0]], [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1), (5, 1)]),
    2: ([6, 1], [[5, 1], [1, 0]], [(2, 0), (3, 0), (4, 1), (5, 1), (6, 2), (1, 2)]),
    3: ([7, 8], [[1, 2], [5, 1]], [(4, 1), (5, 1), (6, 2), (1, 2), (7, 3), (8, 3)]),
}


def test_a3_astral_replay_buffer():
    sel = make("astral", 10, 4, mu=1, sigma=0.5, buffer_size=6)
    for step, (fresh, replay, buffer_after) in A3_EXPECTED.items():
        group = batch(fresh, np.ones((len(fresh), 4)), step)
        sel.observe(group)
        decision = sel.select_update(group, step, step_rng(0, step, 1))
        assert decision.replay.tolist() == replay
        assert decision.keep.all()
        assert list(zip(sel.buf_pid.tolist(), sel.buf_step.tolist())) == buffer_after


A4_EMB = np.array([[1, 0], [0, 1], [1, 1], [0.9, 0.1], [0.1, 0.9], [0.6, 0.4], [0.4, 0.6], [0.8, 0.3]])
A4_TRUTH = np.array([1, 0, 0.5, 0.75, 0.25, 0.5, 0.5, 0.75])
A4_EXPECTED = [  # step: (probe, y_ref, p_hat) or None, rollout, replay
    ([7, 4, 5], [0.75, 0.25, 0.5], [0.698, 0.234, 0.559, 0.686, 0.239, 0.61, 0.449, 0.65], [6, 5], []),
    (None, None, None, [2, 7], []),
    ([1, 4, 3], [0.0, 0.25, 0.75], [0.752, 0.12, 0.404, 0.751, 0.128, 0.689, 0.189, 0.747], [2], [[5, 0]]),
    (None, None, None, [5], [[5, 0]]),
]


def test_a4_astral_end_to_end_rounds_probe_and_replay():
    rewards = (np.arange(4)[None, :] < np.round(4 * A4_TRUTH)[:, None]).astype(np.float32)
    sel = make("astral", 8, 2, mu=2, sigma=0.5, ref_size=3, buffer_size=4)
    features = lambda name, ids: A4_EMB[ids]  # noqa: E731
    for step, (probe, y_ref, p_hat, rollout, replay) in enumerate(A4_EXPECTED):
        ref = sel.probe(step, step_rng(0, step, 3))
        assert (None if ref is None else ref.tolist()) == probe
        if ref is not None:
            sel.observe_probe(batch(ref, rewards[ref], step))
            assert sel.y_ref.tolist() == y_ref
            assert r4(sel.predict(np.arange(8), features), 3) == p_hat
        ids = sel.select_rollout(np.arange(8), 2, step, step_rng(0, step, 0), features)
        assert ids.tolist() == rollout
        group = batch(ids, rewards[ids], step)
        sel.observe(group)
        assert sel.select_update(group, step, step_rng(0, step, 1)).replay.tolist() == replay
    assert list(zip(sel.buf_pid.tolist(), sel.buf_step.tolist())) == [(5, 0), (7, 1), (2, 2), (5, 3)]


def test_h1_hive_two_stage_screen():
    sel = make("hive", 6, 2, explore_prob=0.0)
    state = sel.state_dict()
    state["p_hist"] = np.array([0.5, 0.9, 0.0, np.nan, 0.3, 1.0])
    sel.load_state_dict(state)
    asked = []
    entropy = {0: 0.2, 3: 0.9, 4: 0.6}

    def features(name, ids):
        asked.append((name, ids.tolist()))
        return np.array([entropy[i] for i in ids])

    assert sel.select_rollout(np.arange(6), 2, 0, step_rng(0, 0, 0), features).tolist() == [3, 4]
    assert asked == [("prompt_entropy", [0, 3, 4])]


L1_REWARDS = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0]]
L1_E = [0.8625, 0.5, 0.1875, 0.0, 0.5625]
L1_EMA_AFTER = [0.025, 0.5, 0.75, 1.0, 0.25]
L1_D_INIT = [1.0, 0.5, 0.25, 0.05, 0.75]


def l1_selector(epoch, **overrides):
    sel = make("lze", 5, 5, **overrides)
    state = sel.state_dict()
    state["d_init"] = np.array([1.0, 0.5, 0.25, 0.05, -1.0])  # E=4 unseen
    state["ema"] = np.array([0.0, 0.5, 0.75, 1.0, 0.5])
    state["epoch"] = epoch
    sel.load_state_dict(state)
    return sel


@pytest.mark.parametrize(
    "label,epoch,overrides,keep",
    [
        ("epoch1", 1, {"exploration_noise": 0.0}, [0, 4]),
        ("epoch0", 0, {"exploration_noise": 0.0}, [0, 1, 2, 4]),
        ("transition3", 1, {"exploration_noise": 0.0, "transition_epochs": 3}, [0, 1, 2, 4]),
        ("noisy(seed0,step10)", 1, {}, [0, 4]),
    ],
)
def test_l1_lze_energy_and_keep(label, epoch, overrides, keep):
    sel = l1_selector(epoch, **overrides)
    group = batch(np.arange(5), L1_REWARDS, 10)
    sel.observe(group)
    decision = sel.select_update(group, 10, step_rng(0, 10, 1))
    assert np.flatnonzero(decision.keep).tolist() == keep
    state = sel.state_dict()
    assert r4(state["cache_energy"]) == L1_E
    assert r4(state["ema"]) == L1_EMA_AFTER
    assert r4(state["d_init"]) == L1_D_INIT


def l2_selector():
    sel = make("lze_full", 10, 4)
    for epoch in (0, 1):  # 7, 8, 9 all-correct in epochs 0 and 1
        sel.begin_epoch(epoch, step_rng(0, epoch, 2))
        group = batch([7, 8, 9], np.ones((3, 4)), epoch)
        sel.observe(group)
        sel.select_update(group, epoch, step_rng(0, epoch, 1))
    sel.begin_epoch(2, step_rng(0, 2, 2))
    return sel


def test_l2_lze_pruner_replays_and_unprunes():
    sel = l2_selector()
    state = sel.state_dict()
    assert np.flatnonzero(state["pruned"]).tolist() == [7, 8, 9]
    assert np.flatnonzero(state["replay"]).tolist() == [7]
    rollout = sel.select_rollout(np.array([6, 7, 8, 9]), 4, 2, step_rng(0, 2, 0))
    assert rollout.tolist() == [6, 7]
    sel.observe(batch(rollout, [[1, 0, 1, 0], [1, 1, 1, 0]], 2))  # 7 scores p = 0.75
    assert np.flatnonzero(sel.state_dict()["pruned"]).tolist() == [8, 9]


def test_l_state_round_trip_ok(tmp_path):
    sel = l2_selector()
    save_state(tmp_path / "lze.npz", sel.state_dict())
    again = make("lze_full", 10, 4)
    again.load_state_dict(load_state(tmp_path / "lze.npz"))
    for name in ("d_init", "ema", "pruned", "replay", "streak", "n_obs"):
        assert np.array_equal(again.state_dict()[name], sel.state_dict()[name])
    candidates = np.array([6, 7, 8, 9])
    assert again.select_rollout(candidates, 4, 2, None).tolist() == sel.select_rollout(candidates, 4, 2, None).tolist()
