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


MIXED = [1, 0, 1, 0]  # a group ASTRAL may replay (mean reward neither 0 nor 1)


def test_a3_astral_replay_buffer():
    """A3 assumes every group is mixed (selectors.md §3: the revised filter drops nothing there)."""
    sel = make("astral", 10, 4, mu=1, sigma=0.5, buffer_size=6)
    for step, (fresh, replay, buffer_after) in A3_EXPECTED.items():
        group = batch(fresh, [MIXED] * len(fresh), step)
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


def test_a4_astral_records_its_predictor_accuracy():
    """The predictor is ours: each step compares p_hat (round draw) with the measured pass rates."""
    import pandas as pd

    rewards = (np.arange(4)[None, :] < np.round(4 * A4_TRUTH)[:, None]).astype(np.float32)
    sel = make("astral", 8, 2, mu=2, sigma=0.5, ref_size=3, buffer_size=4)
    features = lambda name, ids: A4_EMB[ids]  # noqa: E731
    assert np.isnan(list(sel.step_metrics().values())).all()
    for step in range(4):
        ref = sel.probe(step, step_rng(0, step, 3))
        if ref is not None:
            sel.observe_probe(batch(ref, rewards[ref], step))
        ids = sel.select_rollout(np.arange(8), 2, step, step_rng(0, step, 0), features)
        p_hat = sel.p_hat[ids].copy()
        sel.observe(batch(ids, rewards[ids], step))
        metrics = sel.step_metrics()
        assert metrics["astral_pred_mae"] == pytest.approx(np.abs(p_hat - A4_TRUTH[ids]).mean())
        if ids.size >= 2 and np.ptp(A4_TRUTH[ids]) > 0:
            rho = pd.Series(p_hat).rank().corr(pd.Series(A4_TRUTH[ids]).rank())
            assert metrics["astral_pred_spearman"] == pytest.approx(rho)
        else:
            assert np.isnan(metrics["astral_pred_spearman"])  # constant or single: no ranking
        if step == 0:  # rollout [6, 5] with p_hat .449, .61 and true .5, .5
            assert round(metrics["astral_pred_mae"], 3) == round((0.051 + 0.11) / 2, 3)


def test_prediction_accuracy_spearman_with_ties():
    from lze_bench.selectors.astral_predict import average_ranks, prediction_accuracy

    assert average_ranks(np.array([0.3, 0.1, 0.3, 0.9])).tolist() == [1.5, 0.0, 1.5, 3.0]
    mae, rho = prediction_accuracy(np.array([0.2, np.nan, 0.4, 0.9]), np.array([0.0, 1.0, 0.5, 0.5]))
    assert mae == pytest.approx((0.2 + 0.1 + 0.4) / 3)  # the NaN prediction is left out
    assert rho == pytest.approx(np.corrcoef([0, 1, 2], [0, 1.5, 1.5])[0, 1])
    assert prediction_accuracy(np.array([0.5]), np.array([1.0])) == (0.5, pytest.approx(np.nan, nan_ok=True))
    assert average_ranks(np.zeros(0)).shape == (0,)


def test_prediction_metrics_pearson_is_the_correlation_of_the_finite_predictions():
    from lze_bench.selectors.astral_predict import prediction_metrics

    predicted = np.array([0.2, np.nan, 0.4, 0.9, 0.45, 0.1])
    measured = np.array([0.0, 1.0, 0.5, 0.5, 0.75, 0.25])
    known = np.isfinite(predicted)
    metrics = prediction_metrics(predicted, measured)
    assert metrics["pearson"] == pytest.approx(np.corrcoef(predicted[known], measured[known])[0, 1])
    assert metrics["mae"] == pytest.approx(np.abs(predicted[known] - measured[known]).mean())
    assert prediction_metrics(np.array([0.1, 0.3]), np.array([0.9, 0.2]))["pearson"] == pytest.approx(-1.0)  # 2 points
    for one_sided in (([0.5], [1.0]), ([0.3, 0.3, 0.3], [0.1, 0.2, 0.3]), ([np.nan, 0.2], [0.5, 0.5])):
        assert np.isnan(prediction_metrics(*map(np.array, one_sided))["pearson"])  # 1 point, or a constant side


H1_P_HIST = [0.5, 0.9, 1.0, np.nan, 0.3, 0.0, 0.6, 0.2]
H1_H_HIST = [1.2, 1.0, 0.2, np.nan, 0.6, 0.2, 1.0, np.nan]


def h1_selector():
    sel = make("hive", 8, 2)
    state = sel.state_dict()
    state["p_hist"], state["h_hist"] = np.array(H1_P_HIST), np.array(H1_H_HIST)
    state["easy_run"][2], state["hard_run"][5] = 2, 1
    state["n_obs"][[0, 1, 2, 4, 5, 6, 7]] = 1
    sel.load_state_dict(state)
    return sel


def test_h1_hive_probabilistic_screen_then_entropy_median():
    sel = h1_selector()
    candidates = np.arange(8)
    edge = sel.edge(candidates)
    assert np.isnan(edge[3])
    assert r4(np.nan_to_num(edge, nan=-1)) == [1.0, 0.68, 0.5, -1, 0.86, 0.5, 0.98, 0.82]
    assert r4(sel.select_probability(candidates)) == [1.0, 0.68, 0.125, 1.0, 0.86, 0.25, 0.98, 0.82]
    assert r4(step_rng(0, 4, 0).random(8)) == [0.8831, 0.2286, 0.4106, 0.4467, 0.7713, 0.2196, 0.6894, 0.8265]
    entropy = {0: 0.2, 3: 0.9, 4: 0.6, 6: 0.5, 7: 0.4}
    asked = []

    def features(name, ids):
        asked.append((name, ids.tolist()))
        return np.array([entropy[i] for i in ids])

    assert sel.select_rollout(candidates, 4, 4, step_rng(0, 4, 0), features).tolist() == [3, 4, 6]
    assert asked == [("prompt_entropy", [0, 3, 4, 6, 7])]  # shortlist only; median 0.5


@pytest.mark.parametrize("values,first,expected", [
    ([0.3, 0.9, 0.5, 0.5, 0.1], 30, [31, 32]),  # median 0.5: 31, 32, 33 at/above; cap 2, tie by order
    ([0.2, 0.8, 0.4, 0.6], 40, [41, 43]),  # median 0.5 (mean of the middle two)
])
def test_h2_hive_median_over_shortlist_and_budget_cap(values, first, expected):
    sel = make("hive", 50, 2)
    ids = np.arange(first, first + len(values))
    table = dict(zip(ids.tolist(), values))
    rollout = sel.select_rollout(ids, 2, 0, step_rng(0, 0, 0), lambda name, x: np.array([table[i] for i in x]))
    assert rollout.tolist() == expected


H3_ROUNDS = [  # candidates, V, rollout, rewards, keep, more
    (list(range(50, 56)), [0.1, 0.7, 0.3, 0.9, 0.5, 0.2], [51, 53, 54],
     [[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], [0, 1, 0], 3),
    (list(range(56, 62)), [0.6, 0.2, 0.8, 0.4, 0.9, 0.1], [56, 58, 60],
     [[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1]], [1, 0, 0], 0),
]


def test_h3_hive_end_to_end_rounds_with_dynamic_sampling():
    sel = make("hive", 70, 2)
    assert sel.rollout_batch_size == 3 and sel.candidates_per_step(2) == 6 and sel.rollout_budget(2) == 3
    sel.begin_epoch(0, step_rng(0, 0, 2))
    update, budget = [], sel.rollout_budget(2)
    for round_index, (candidates, values, rollout, rewards, keep, more) in enumerate(H3_ROUNDS):
        assert len(candidates) == (sel.candidates_per_step(2) if round_index == 0 else sel.round_candidates(budget))
        table = dict(zip(candidates, values))
        ids = sel.select_rollout(np.array(candidates), budget, 0, step_rng(0, 0, 0, round_index),
                                 lambda name, x: np.array([table[i] for i in x]))
        assert ids.tolist() == rollout
        group = batch(ids, rewards)
        sel.observe(group)
        decision = sel.select_update(group, 0, step_rng(0, 0, 1, round_index))
        assert decision.keep.astype(int).tolist() == keep and decision.more == more
        update += ids[decision.keep].tolist()
        budget = decision.more
    assert update == [53, 56]
    assert sel.history.p_easy == 0.5 and sel.history.p_hard == 0.5  # epoch 0: no adaptation
    state = sel.state_dict()  # the update is decided: the step's counters are reset
    assert (state["kept_so_far"], state["gen_rounds"], state["cand_step"], state["rolled_step"]) == (0, 0, 0, 0)


# --- GRESO ---------------------------------------------------------------------


def g1_selector(num_prompts=10, **overrides):
    sel = make("greso", num_prompts, 4, **overrides)
    state = sel.state_dict()
    state["easy_run"][[2, 3, 6]] = [1, 3, 10]
    state["hard_run"][[4, 5]] = [1, 2]
    state["n_obs"][1:7] = 1
    sel.load_state_dict(state)
    return sel


def test_g1_greso_keep_probability_and_skip_draws():
    sel = g1_selector()
    candidates = np.arange(7)
    keep = sel.history.keep_probability(candidates)
    assert r4(keep) == [1.0, 1.0, 0.5, 0.125, 0.5, 0.25, 0.01]
    assert r4(sel.skip_probability(candidates)) == [0.0, 0.0, 0.5, 0.875, 0.5, 0.75, 0.99]
    assert r4(step_rng(0, 4, 0).random(7)) == [0.8831, 0.2286, 0.4106, 0.4467, 0.7713, 0.2196, 0.6894]
    assert sel.select_rollout(candidates, 7, 4, step_rng(0, 4, 0)).tolist() == [0, 1, 4]
    assert sel.history.cand_step == 7


def test_g1_greso_floor0_variant_is_deterministic():
    sel = g1_selector(p_easy=0.0, p_hard=1.0, keep_floor=0.0)
    assert r4(sel.history.keep_probability(np.arange(7))) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    for seed in range(20):
        assert sel.select_rollout(np.arange(7), 7, 4, step_rng(seed, 4, 0)).tolist() == [0, 1, 4, 5]


G2_ROUND0 = ([8, 10, 11, 12, 13, 14], [10, 11, 12, 13, 14],
             [[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 0, 1]], [0, 1, 0, 1, 1])
G2_ROUND1 = {
    "G2": ([[1, 1, 1, 1], [0, 1, 1, 0], [1, 0, 0, 0]], [0, 1, 0], [11, 13, 14, 16], (0.49, 0.51)),
    "G2b": ([[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]], [0, 0, 0], [11, 13, 14], (0.49, 0.49)),
    "G2 epoch0": ([[1, 1, 1, 1], [0, 1, 1, 0], [1, 0, 0, 0]], [0, 1, 0], [11, 13, 14, 16], (0.5, 0.5)),
}


def g2_run(label):
    """G2's groups with the revised rules (selectors.md §6, revised 2026-11-24): `more` is T itself (survivors
    the next round waits for), and the later round's candidates are one chunk of 3 (its budget is the chunk)."""
    sel = make("greso", 20, 4, min_round=1)  # the default floor min(64, S) = S = 6 would hide T
    assert sel.round_size == 6 and sel.min_round == 1
    state = sel.state_dict()
    state["easy_run"][8], state["n_obs"][8] = 10, 10
    sel.load_state_dict(state)
    epoch = 0 if label == "G2 epoch0" else 1
    sel.begin_epoch(epoch, step_rng(0, 7, 2))
    candidates, rollout, rewards, keep = G2_ROUND0
    assert step_rng(0, 7, 0).random(1)[0] < 0.99 and r4(step_rng(0, 7, 0).random(1)) == [0.0389]
    ids = sel.select_rollout(np.array(candidates), sel.rollout_budget(4), 7, step_rng(0, 7, 0))
    assert ids.tolist() == rollout
    sel.observe(batch(ids, rewards, 7))
    assert (sel.history.cand_step, sel.history.rolled_step) == (6, 5)
    assert (sel.history.solved_step, sel.history.failed_step, sel.history.kept_so_far) == (1, 1, 0)
    first = sel.select_update(batch(ids, rewards, 7), 7, step_rng(0, 7, 1))
    assert first.keep.astype(int).tolist() == keep and first.more == 2 and sel.history.last_round  # T = 2
    rewards1, keep1, update, (p_easy, p_hard) = G2_ROUND1[label]
    ids1 = sel.select_rollout(np.array([15, 16, 17]), 3, 7, step_rng(0, 7, 0, 1))
    assert ids1.tolist() == [15, 16, 17]
    group = batch(ids1, rewards1, 7)
    sel.observe(group)
    second = sel.select_update(group, 7, step_rng(0, 7, 1, 1))
    assert second.keep.astype(int).tolist() == keep1 and second.more == 0 and not second.partial
    assert ids[first.keep].tolist() + ids1[second.keep].tolist() == update
    assert (round(sel.history.p_easy, 4), round(sel.history.p_hard, 4)) == (p_easy, p_hard)
    return sel


def test_g2_round_estimate_is_the_last_round():
    from lze_bench.selectors.greso_state import round_estimate

    assert round_estimate(1, 5, 2, 6, 1.25) == (2, True)  # floor(1.25 * 1 * 5 / 3) = 2 <= S = 6
    assert round_estimate(3, 4, 4, 6, 1.25) == (6, False)  # no informative group: a full round
    assert round_estimate(3, 8, 2, 20, 1.25) == (5, True)  # 1.25 * 3 * 8 / 6 = 5 exactly
    assert round_estimate(4, 5, 0, 5, 1.25) == (5, True)  # T == S is still the last round
    assert round_estimate(7, 9, 3, 6, 1.25) == (13, False)  # floor(13.125) > S: not the last
    assert round_estimate(5, 6, 1, 100, 1.5) == (9, True)  # margin is a parameter


@pytest.mark.parametrize("label", sorted(G2_ROUND1))
def test_g2_greso_adaptive_rounds_and_adaptation(label):
    sel = g2_run(label)
    state = sel.state_dict()
    if label == "G2":
        assert state["easy_run"][8:18].tolist() == [10, 0, 1, 0, 0, 0, 0, 1, 0, 0]
        assert state["hard_run"][8:18].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert (state["kept_so_far"], state["gen_rounds"], state["cand_step"], state["rolled_step"]) == (0, 0, 0, 0)
    assert (state["solved_step"], state["failed_step"], state["last_round"]) == (0, 0, False)


@pytest.mark.parametrize("name", ["greso", "hive"])
def test_g_state_round_trip_ok(name, tmp_path):
    sel = g2_run("G2") if name == "greso" else h1_selector()
    sel.history.kept_so_far, sel.history.last_round = 2, True  # mid-step transient state survives too
    save_state(tmp_path / "s.npz", sel.state_dict())
    again = make(name, sel.num_prompts, 4 if name == "greso" else 2)
    again.load_state_dict(load_state(tmp_path / "s.npz"))
    for key, value in sel.state_dict().items():
        assert np.array_equal(np.asarray(again.state_dict()[key]), np.asarray(value), equal_nan=True), key
    candidates = np.arange(sel.num_prompts)
    feats = lambda name, ids: np.asarray(ids, dtype=float)  # noqa: E731
    assert (again.select_rollout(candidates, 8, 9, step_rng(0, 9, 0), feats).tolist()
            == sel.select_rollout(candidates, 8, 9, step_rng(0, 9, 0), feats).tolist())


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


# --- every default of the spec's tables (selectors.md §2-§6) -------------------------------------------

SPEC_DEFAULTS = {
    "uniform": {},
    "dapo": {"train_batch_size": None, "gen_batch_size": None, "max_gen_batches": 10, "metric": "acc",
             "on_exhaust": "partial"},
    "astral": {"alpha": 0.5, "tau": 1e-3, "mu": 2, "sigma": 0.5, "ref_size": 256, "buffer_size": 512,
               "replay_strategy": "random", "predictor": "kernel", "t_att": 0.1, "predictor_path": None,
               "predictor_encoder": None},
    "hive": {"train_batch_size": None, "rollout_batch_size": None, "use_response_entropy": True, "edge_floor": 0.5,
             "beta": 0.5, "pool_factor": 2.0, "p_easy": 0.5, "p_hard": 0.5, "target_zero_variance": 0.25,
             "delta": 0.01, "p_min": 0.05, "p_max": 0.95, "keep_floor": 0.01, "max_gen_batches": 10,
             "on_exhaust": "partial"},
    "greso": {"train_batch_size": None, "round_size": None, "p_easy": 0.5, "p_hard": 0.5,
              "target_zero_variance": 0.25, "delta": 0.01, "p_min": 0.05, "p_max": 0.95, "keep_floor": 0.01,
              "margin": 1.25, "min_round": None, "chunk": 32, "max_gen_batches": 0, "on_exhaust": "partial"},
    "lze": {"keep_ratio": 0.4, "min_keep_ratio": 0.3, "warmup_epochs": 0, "transition_epochs": 0, "ema_decay": 0.9,
            "d_init_min": 0.05, "momentum_weight": 0.3, "exploration_noise": 0.05, "prune_enabled": False,
            "prune_after": 2, "use_replay": True, "replay_ratio": 0.1, "anchor": "first_seen", "variant": "code",
            "tau": 0.2, "align_minibatch": False, "align_mini_batch_prompts": None},
    # selectors.md §10 (MoPPS math scripts), §11 (AdaRFT script), §12 (SEC README math settings)
    "mopps": {"ts_ratio": 16.0, "prior_alpha": 1.0, "prior_beta": 1.0, "decay": 1.0, "target": 0.5,
              "strategy": "topk", "lower": 0.3, "upper": 0.7, "n1_quirk": True},
    "adarft": {"column": "difficulty", "labels": None, "target": 0.0, "beta": 0.5, "alpha": 2.0, "eta": 50.0,
               "d_min": 0.0, "d_max": 100.0},
    "sec": {"column": "level", "labels": None, "temperature": 0.4, "lr": 0.5},
    # selectors.md §14: the authors' n / m = 4 (32/8, 64/16, 128/32) and TRL's epsilon
    "pods": {"num_kept": None, "down_sample_ratio": 4, "adv_eps": 1e-4},
    # selectors.md §15 (Reinforce-Ada: algorithm.py:89-95, run_reinforce_ada.sh), §16 (SPEED: run_fast_rloo_7b.sh)
    "reinforce_ada": {"choice": "balanced", "positive_threshold": 0.7, "max_rounds": 4, "round_repeat": None,
                      "global_stat_est": True},
    "speed": {"n_init": 4, "n_continue": 20, "gen_batch_size": None, "n_gpus": 1, "max_num_gen_batches": 50},
}
SPEC_DEFAULTS["lze_full"] = {**SPEC_DEFAULTS["lze"], "prune_enabled": True}


@pytest.mark.parametrize("name", sorted(SPEC_DEFAULTS))
def test_config_defaults_are_the_spec_tables(name):
    import dataclasses

    config = SELECTORS[name].Config()
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "name"}
    assert values == SPEC_DEFAULTS[name]
    assert sorted(SPEC_DEFAULTS) == sorted(SELECTORS)  # a new selector brings its table here


def test_derived_sizes_from_the_batch():
    """dapo gen = 3B; hive R = ceil(1.5 B), 2R candidates; greso S = ceil(1.5 B), min_round = min(64, S)."""
    assert make("dapo", 100, 5).gen_batch_size == 15
    hive = make("hive", 100, 5)
    assert (hive.rollout_batch_size, hive.candidates_per_step(5), hive.round_candidates(5)) == (8, 16, 10)
    greso = make("greso", 100, 5)
    assert (greso.round_size, greso.min_round, greso.round_chunk()) == (8, 8, 32)
    assert make("greso", 1000, 128).min_round == 64 and make("greso", 1000, 256).min_round == 64  # RT:1162
    assert make("greso", 1000, 40).min_round == 60 and make("greso", 1000, 43).min_round == 64  # S = 60, 65
    # rounds whose skip rule left nothing to roll out go on (the backend passes them an empty batch)
    assert sorted(name for name in SELECTORS if SELECTORS[name].samples_in_rounds) == ["greso", "hive"]


# --- LZE rules beyond L1/L2 -----------------------------------------------------------------------------


def lze_epoch_keep(epoch, groups=10, **overrides):
    """Keep count of a batch of `groups` distinct alive groups (no noise) in `epoch`."""
    sel = make("lze", 100, groups, exploration_noise=0.0, **overrides)
    sel.begin_epoch(epoch, step_rng(0, 0, 2))
    rewards = (np.arange(4)[None, :] < (1 + np.arange(groups) % 3)[:, None]).astype(np.float32)  # p = .25/.5/.75
    group = batch(np.arange(groups), rewards)
    sel.observe(group)
    return int(sel.select_update(group, 0, step_rng(0, 0, 1)).keep.sum())


def test_lze_warmup_keeps_alive_until_warmup_ends():
    assert lze_epoch_keep(1, warmup_epochs=2) == 10  # epoch < warmup: every alive group
    assert lze_epoch_keep(2, warmup_epochs=2) == 4  # warmup over: k = max(floor(10 * .4), floor(10 * .3))
    assert lze_epoch_keep(0, warmup_epochs=0) == 10  # epoch 0 always records only


def test_lze_transition_is_measured_from_the_end_of_warmup():
    # prog = min((epoch - warmup) / transition, 1); k = max(floor(G ratio), floor(G rmin))
    assert lze_epoch_keep(2, warmup_epochs=1, transition_epochs=2) == 7  # prog .5: ratio .7, rmin .65
    assert lze_epoch_keep(3, warmup_epochs=1, transition_epochs=2) == 4  # prog 1
    assert lze_epoch_keep(5, warmup_epochs=1, transition_epochs=2) == 4  # prog capped at 1
    assert lze_epoch_keep(1, transition_epochs=4) == 8  # prog .25: ratio .85, rmin .825 -> 8


def test_lze_keep_count_uses_the_larger_ratio_and_at_least_one():
    assert lze_epoch_keep(1, groups=10, keep_ratio=0.2, min_keep_ratio=0.5) == 5  # max of the two floors
    assert lze_epoch_keep(1, groups=3, keep_ratio=0.1, min_keep_ratio=0.1) == 1  # never below 1
    sel = make("lze", 100, 10)
    sel.begin_epoch(1, step_rng(0, 0, 2))
    assert [sel.keep_count(g) for g in (1, 2, 5, 10, 11)] == [1, 1, 2, 4, 4]


def lze_pruned(count, **overrides):
    sel = make("lze_full", 100, 4, **overrides)
    state = sel.state_dict()
    state["pruned"][:count] = True
    sel.load_state_dict(state)
    sel.begin_epoch(1, step_rng(0, 1, 2))
    return int(sel.state_dict()["replay"].sum())


def test_lze_replay_count_is_max_one_floor_capped_by_pruned():
    assert lze_pruned(25) == 2  # floor(2.5)
    assert lze_pruned(3) == 1  # max(1, floor(0.3))
    assert lze_pruned(0) == 0  # nothing pruned: no pool
    assert lze_pruned(4, replay_ratio=1.0) == 4  # min(|pruned|, ...)
    assert lze_pruned(5, replay_ratio=0.0) == 0 and lze_pruned(5, use_replay=False) == 0
    assert lze_pruned(5, prune_enabled=False) == 0


def test_lze_momentum_uses_the_absolute_change_both_ways():
    """m = min(2 |p - ema|, 1): a drop earns the same momentum as a rise; capped at 1."""
    sel = make("lze", 10, 4, exploration_noise=0.0)
    state = sel.state_dict()
    state["d_init"][:4] = 1.0
    state["ema"][:4] = [0.0, 1.0, 0.25, 0.75]
    sel.load_state_dict(state)
    sel.observe(batch(np.arange(4), [[1, 1, 0, 0]] * 4))  # p = 0.5 for all
    assert r4(sel.state_dict()["cache_energy"]) == [1.3, 1.3, 1.15, 1.15]  # m = 1, 1, .5, .5


def test_lze_gumbel_noise_scales_with_the_energy_spread():
    """Noise scale = exploration_noise * max(spread, 0.01): the same draws rank differently as the spread grows."""
    def keep(energies, noise, seed):
        sel = make("lze", 10, 4, exploration_noise=noise)
        state = sel.state_dict()
        state["epoch"] = 1
        sel.load_state_dict(state)
        group = batch(np.arange(4), [[1, 0, 0, 0]] * 4)
        sel.observe(group)
        sel.state.cache_energy = np.asarray(energies, dtype=np.float64)
        return np.flatnonzero(sel.select_update(group, 0, step_rng(seed, 0, 1)).keep).tolist()

    outcomes = set()
    for seed in range(12):
        gumbel = step_rng(seed, 0, 1).gumbel(0.0, 1.0, 4)
        for energies, noise in (([0.5, 0.4, 0.3, 0.2], 0.3), ([0.5, 0.49, 0.48, 0.47], 0.5),
                                ([0.3, 0.3, 0.3, 0.3], 2.0), ([0.9, 0.3, 0.2, 0.1], 0.1),
                                ([0.3, 0.298, 0.296, 0.294], 0.3),  # spread below the 0.01 floor
                                ([0.5, 0.5 + 1e-8, 0.5 - 1e-8, 0.1], 0.0)):  # no noise: the 1e-8 scale floor
            spread = max(max(energies) - min(energies), 0.01)
            key = np.asarray(energies) + max(noise * spread, 1e-8) * gumbel
            expected = np.lexsort((np.arange(4), -key))[:1].tolist()
            assert keep(energies, noise, seed) == expected, (energies, noise, seed)
            outcomes.add((tuple(energies), expected[0]))
    assert len(outcomes) > 6  # the draws do move the choice


# --- GRESO / HIVE rules beyond G1-G2 and H1-H3 ------------------------------------------------------------


@pytest.mark.parametrize("solved,failed,rolled,p_easy,p_hard", [
    (1, 2, 12, 0.49, 0.49),  # exactly 1/12 solved and 1/6 failed: at the targets -> explore less
    (1, 1, 13, 0.51, 0.51),  # below both targets -> explore more
    (0, 3, 13, 0.51, 0.49),  # 3/13 >= 1/6 failed
    (1, 0, 1, 0.49, 0.51),  # a single rolled-out group still adapts
])
def test_greso_adaptation_targets_are_a_third_and_two_thirds(solved, failed, rolled, p_easy, p_hard):
    sel = make("greso", 50, 4)
    sel.begin_epoch(1, step_rng(0, 0, 2))
    sel.history.solved_step, sel.history.failed_step, sel.history.rolled_step = solved, failed, rolled
    sel.finish_update()
    assert (round(sel.history.p_easy, 6), round(sel.history.p_hard, 6)) == (p_easy, p_hard)


def test_greso_adaptation_clamps_to_p_min_and_p_max():
    sel = make("greso", 50, 4, p_easy=0.055, p_hard=0.945)
    sel.begin_epoch(2, step_rng(0, 0, 2))
    sel.history.solved_step, sel.history.failed_step, sel.history.rolled_step = 5, 0, 10
    sel.finish_update()  # easy above target: down, floored at 0.05; hard below: up, capped at 0.95
    assert (round(sel.history.p_easy, 6), round(sel.history.p_hard, 6)) == (0.05, 0.95)
    sel.history.solved_step, sel.history.failed_step, sel.history.rolled_step = 0, 5, 10
    sel.finish_update()
    assert (round(sel.history.p_easy, 6), round(sel.history.p_hard, 6)) == (0.06, 0.94)
    sel.finish_update()  # nothing rolled out this step: no adaptation
    assert (round(sel.history.p_easy, 6), round(sel.history.p_hard, 6)) == (0.06, 0.94)


def test_greso_round_floor_is_min_round_in_survivors():
    sel = make("greso", 100, 8, min_round=2)  # S = 12
    ids = sel.select_rollout(np.arange(8), 8, 3, step_rng(0, 3, 0))  # all unseen: every one rolled out
    rewards = np.array([[1, 0, 0, 0]] * 7 + [[1, 1, 1, 1]], dtype=np.float32)  # 7 kept, need 1, Z = 1
    sel.observe(batch(ids, rewards, 3))
    decision = sel.select_update(batch(ids, rewards, 3), 3, step_rng(0, 3, 1))
    assert decision.more == 2 and sel.history.last_round  # T = floor(1.25 * 8 / 7) = 1 -> min_round 2


def test_greso_floor_is_64_survivors_at_b_128():
    """RT:1161-1162: T = max(min(T, S), 64), whatever B (their B = 128 script keeps 64; ceil(B / 4) was 32)."""
    sel = make("greso", 1000, 128)  # S = 192
    ids = np.arange(192)
    rewards = np.array([[1, 0, 0, 0]] * 120 + [[1, 1, 1, 1]] * 72, dtype=np.float32)  # 120 kept, need 8
    sel.observe(batch(ids, rewards, 0))
    decision = sel.select_update(batch(ids, rewards, 0), 0, step_rng(0, 0, 1))
    assert decision.more == 64 and sel.history.last_round  # T = floor(1.25 * 8 * 192 / 120) = 16 -> 64


def test_greso_empty_round_asks_for_a_full_round():
    sel = g1_selector(100, p_easy=0.0, p_hard=1.0, keep_floor=0.0)  # prompts 2, 3, 6 are always skipped
    ids = sel.select_rollout(np.array([2, 3, 6]), 6, 4, step_rng(0, 4, 0))
    assert ids.tolist() == []
    empty = batch(ids, np.zeros((0, 4)), 4)
    sel.observe(empty)
    decision = sel.select_update(empty, 4, step_rng(0, 4, 1))
    assert decision.more == 6 and not sel.history.last_round  # T = S = 6 survivors
    assert decision.keep.shape == (0,)


def test_hive_rounds_round_the_candidate_pool_up():
    sel = make("hive", 100, 4, pool_factor=1.5)  # R = 6
    assert (sel.candidates_per_step(4), sel.round_candidates(3), sel.round_candidates(1)) == (9, 5, 2)


def test_hive_passing_exactly_budget_needs_no_cap():
    sel = make("hive", 100, 4)
    values = {10: 0.9, 11: 0.1, 12: 0.8, 13: 0.2}  # median 0.5: 10 and 12 pass, exactly the budget
    ids = sel.select_rollout(np.arange(10, 14), 2, 0, step_rng(0, 0, 0), lambda n, x: np.array([values[i] for i in x]))
    assert ids.tolist() == [10, 12]


def test_step_rng_appends_the_round_from_round_one():
    """Section 0: default_rng([seed, step, TAG]) for round 0, [seed, step, TAG, r] for r >= 1."""
    draw = lambda rng: rng.random(3).tolist()  # noqa: E731
    assert draw(step_rng(5, 7, 1)) == draw(np.random.default_rng([5, 7, 1])) == draw(step_rng(5, 7, 1, 0))
    assert draw(step_rng(5, 7, 1, 1)) == draw(np.random.default_rng([5, 7, 1, 1]))
    assert draw(step_rng(5, 7, 1, 2)) == draw(np.random.default_rng([5, 7, 1, 2]))


def test_dapo_keeps_single_response_groups_only():
    sel = make("dapo", 10, 2)
    assert sel.select_update(batch([0, 1], [[1.0], [0.0]]), 0, step_rng(0, 0, 1)).keep.tolist() == [True, True]
    sel = make("dapo", 10, 2)
    pairs = batch([0, 1, 2], [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    assert sel.select_update(pairs, 0, step_rng(0, 0, 1)).keep.tolist() == [False, True, False]


def test_dapo_round_counter_restarts_each_step():
    sel = make("dapo", 50, 2, gen_batch_size=2, max_gen_batches=2)
    assert sel.select_update(batch([0, 1], [[1, 0], [0, 1]]), 0, step_rng(0, 0, 1)).more == 0  # step 0 full
    second = sel.select_update(batch([2, 3], [[1, 0], [0, 0]]), 1, step_rng(0, 1, 1))
    assert (second.keep.tolist(), second.more, second.partial) == ([True, False], 2, False)  # 1 of 2, round 1 of 2
    third = sel.select_update(batch([4, 5], [[1, 1], [0, 0]]), 1, step_rng(0, 1, 1, 1))
    assert (third.more, third.partial) == (0, True)
    full = make("dapo", 50, 2, max_gen_batches=1).select_update(batch([0, 1], [[1, 0], [0, 1]]), 0, step_rng(0, 0, 1))
    assert (full.more, full.partial) == (0, False)  # filled in the last allowed round: not partial
    tiny = make("dapo", 50, 2, gen_batch_size=1, max_gen_batches=1)  # a request of one prompt still hits the cap
    assert (lambda d: (d.more, d.partial))(tiny.select_update(batch([0], [[1, 1]]), 0, step_rng(0, 0, 1))) == (0, True)


def test_hive_stage_two_edges():
    sel = make("hive", 50, 2)
    calls = []

    def features(name, ids):
        calls.append(ids.tolist())
        return np.full(ids.size, 0.5)

    assert sel.select_rollout(np.array([7]), 1, 0, step_rng(0, 0, 0), features).tolist() == [7]  # one listed
    assert sel.select_rollout(np.array([8, 9]), 0, 0, step_rng(0, 0, 0), features).tolist() == []  # budget 0
    assert calls == [[7]]  # no feature call without a budget
    state = sel.state_dict()
    state["p_hist"][20:24] = 1.0
    state["easy_run"][20:24] = 60  # keep probability floor 0.01, times e = 0.5
    state["n_obs"][20:24] = 1
    sel.load_state_dict(state)
    assert sel.select_rollout(np.arange(20, 24), 2, 1, step_rng(0, 1, 0), features).tolist() == []
    assert calls == [[7]]  # empty shortlist: no feature call
    for bad in (lambda n, ids: np.zeros(ids.size + 1), lambda n, ids: np.full(ids.size, np.nan),
                lambda n, ids: np.array([0.5, np.nan]), lambda n, ids: np.array([np.inf, 0.5]),
                lambda n, ids: np.array([0.5, -np.inf], dtype=np.float32)):
        with pytest.raises(Exception, match="prompt_entropy"):
            make("hive", 50, 2).select_rollout(np.array([1, 2]), 2, 0, step_rng(0, 0, 0), bad)


def test_lze_init_probe_anchors_every_prompt_once():
    sel = make("lze", 6, 2, anchor="init_probe")
    ids = sel.probe(0, step_rng(0, 0, 3))
    assert ids.tolist() == list(range(6))
    sel.observe_probe(batch(ids, [[1, 1, 1, 1], [1, 0, 0, 0]] * 3))
    state = sel.state_dict()
    assert r4(state["d_init"]) == [0.05, 0.75] * 3 and state["n_obs"].tolist() == [0] * 6  # anchored, not observed
    assert sel.probe(1, step_rng(0, 1, 3)) is None  # once
    plain = make("lze", 6, 2)
    assert plain.probe(0, step_rng(0, 0, 3)) is None
    plain.observe_probe(batch(np.arange(6), np.ones((6, 4))))
    assert (plain.state_dict()["d_init"] == -1).all()  # first_seen: a probe anchors nothing


def test_lze_one_epoch_transition_starts_at_the_end_of_warmup():
    assert lze_epoch_keep(1, warmup_epochs=1, transition_epochs=1) == 10  # prog 0: ratio 1, every alive group
    assert lze_epoch_keep(2, warmup_epochs=1, transition_epochs=1) == 4


def test_lze_keeps_every_alive_group_when_k_covers_the_batch():
    """k >= G keeps `alive`, even a group whose energy is 0 (d_init_min = 0 and a first sight at p = 1)."""
    sel = make("lze", 10, 1, d_init_min=0.0, exploration_noise=0.0)
    sel.observe(batch([0], [[1, 1, 1, 1]]))  # d_init = 0 forever
    sel.begin_epoch(1, step_rng(0, 1, 2))
    group = batch([0], [[1, 0, 0, 0]])
    sel.observe(group)
    assert sel.state_dict()["cache_energy"].tolist() == [0.0]
    assert sel.select_update(group, 1, step_rng(0, 1, 1)).keep.tolist() == [True]  # k = max(.., 1) = 1 = G


def test_lze_noise_never_spends_a_slot_on_a_dead_group():
    """Only E > 0 groups are ranked: with loud noise, k alive groups are still kept among many dead ones."""
    rewards = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]] + [[1, 1, 1, 1]] * 4 + [[0, 0, 0, 0]] * 3
    for seed in range(10):
        sel = make("lze", 20, 10, exploration_noise=50.0)
        sel.begin_epoch(1, step_rng(seed, 1, 2))
        group = batch(np.arange(10), rewards)
        sel.observe(group)
        keep = sel.select_update(group, 1, step_rng(seed, 1, 1)).keep
        assert keep.sum() == 3 and keep[:3].all()  # k = max(floor(4), floor(3)) = 4 > 3 alive: all alive


def test_lze_card_variant_samples_by_distance_to_half_over_tau():
    rewards = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    for tau in (0.05, 0.2, 1.0):
        for seed in range(8):
            sel = make("lze", 10, 6, variant="card", tau=tau)
            sel.begin_epoch(1, step_rng(seed, 1, 2))
            group = batch(np.arange(6), rewards)
            sel.observe(group)
            ema = sel.state_dict()["ema"][:6].astype(np.float64)
            key = -np.abs(ema - 0.5) / tau + step_rng(seed, 1, 1).gumbel(size=6)
            key[5] = -np.inf  # all solved: dead
            expected = sorted(np.lexsort((np.arange(6), -key))[:2].tolist())  # k = max(floor(2.4), floor(1.8)) = 2
            assert np.flatnonzero(sel.select_update(group, 1, step_rng(seed, 1, 1)).keep).tolist() == expected


def test_lze_fresh_state_is_the_spec_s_unseen_values():
    state = make("lze", 4, 2).state_dict()
    assert state["d_init"].tolist() == [-1.0] * 4 and state["ema"].tolist() == [0.5] * 4
    assert state["first_epoch"].tolist() == [-1] * 4 and np.isnan(state["last_p"]).all()
    assert state["n_obs"].tolist() == state["streak"].tolist() == [0] * 4
    assert not state["pruned"].any() and not state["replay"].any()
    assert (state["epoch"], state["anchored"]) == (0, False)
    assert all(state[key].size == 0 for key in ("cache_ids", "cache_energy", "cache_alive", "cache_card"))
    sel = make("lze", 10, 5, exploration_noise=0.0)  # no begin_epoch call: epoch 0 keeps every alive group
    group = batch(np.arange(5), L1_REWARDS)
    sel.observe(group)
    assert np.flatnonzero(sel.select_update(group, 0, step_rng(0, 0, 1)).keep).tolist() == [0, 1, 2, 4]


def test_lze_energy_with_an_extreme_momentum_weight():
    """The energy formula holds for any weight (the code has a second path outside [2^-600, 2^600])."""
    for weight in (1e200, 0.3, 0.0):
        sel = l1_selector(1, exploration_noise=0.0, momentum_weight=weight)
        sel.observe(batch(np.arange(5), L1_REWARDS, 10))
        p = np.array([0.25, 0.5, 0.75, 1.0, 0.25])
        d = np.array([1.0, 0.5, 0.25, 0.05, 0.75])
        m = np.minimum(2 * np.abs(p - np.array([0.0, 0.5, 0.75, 1.0, 0.25])), 1)
        expected = d * 4 * p * (1 - p) * (1 + weight * m)
        assert sel.state_dict()["cache_energy"] == pytest.approx(expected, rel=1e-12), weight


def test_lze_noise_free_ties_are_broken_at_the_1e8_scale():
    """exploration_noise = 0 still draws Gumbel noise at scale 1e-8 (never 0), so near-ties are random."""
    sel = make("lze", 10, 4, exploration_noise=0.0)
    state = sel.state_dict()
    state["epoch"] = 1
    sel.load_state_dict(state)
    group = batch(np.arange(4), [[1, 0, 0, 0]] * 4)
    energies = np.array([0.5, 0.5 + 1.5e-8, 0.1, 0.1])
    picks = []
    for seed in range(60):
        sel.observe(group)
        sel.state.cache_energy = energies.copy()
        key = energies + 1e-8 * step_rng(seed, 0, 1).gumbel(0.0, 1.0, 4)
        expected = np.lexsort((np.arange(4), -key))[:1].tolist()
        assert np.flatnonzero(sel.select_update(group, 0, step_rng(seed, 0, 1)).keep).tolist() == expected
        picks.append(expected[0])
    assert set(picks) == {0, 1}


def test_lze_momentum_is_capped_at_one():
    for weight in (0.3, 1e200):  # both code paths of the energy
        sel = make("lze", 10, 2, exploration_noise=0.0, momentum_weight=weight)
        state = sel.state_dict()
        state["d_init"][:2], state["ema"][:2] = 1.0, [0.0, 0.5]
        sel.load_state_dict(state)
        sel.observe(batch([0, 1], [[1, 1, 1, 0], [1, 1, 1, 0]]))  # p = .75: |p - ema| = .75 and .25
        expected = 0.75 * np.array([1 + weight * 1.0, 1 + weight * 0.5])  # m = min(1.5, 1) and 0.5
        assert sel.state_dict()["cache_energy"] == pytest.approx(expected, rel=1e-12)


def test_astral_recalibration_of_a_constant_base_is_the_mean():
    from lze_bench.selectors.astral_predict import recalibrate

    assert recalibrate(np.full(3, 0.4), np.array([0.2, 0.4, 0.9])) == (0.0, pytest.approx(0.5))
    slope, intercept = recalibrate(np.array([0.1, 0.5, 0.9]), np.array([0.0, 0.5, 1.0]))
    assert (slope, intercept) == (pytest.approx(1.25), pytest.approx(-0.125))


def test_astral_buffer_cap_floors_the_fresh_share():
    """cap' = buffer_size - floor(sigma * budget): 6 - floor(1.2) = 5 older groups survive each step."""
    sel = make("astral", 40, 4, mu=1, sigma=0.3, buffer_size=6)
    for step in range(3):
        ids = np.arange(4) + 4 * step
        sel.observe(batch(ids, [MIXED] * 4, step))
    assert sel.buf_pid.tolist() == [3, 4, 5, 6, 7, 8, 9, 10, 11]  # newest 5 of 8, then this step's 4


def test_astral_run_starting_at_a_later_round_draws_that_round():
    """A run that starts (or resumes) at step k*mu, k >= 1, draws round k on its first call: floor(sigma * B) ids."""
    sel = make("astral", 8, 4, mu=2, sigma=0.5)
    no_embeddings = lambda name, ids: None  # noqa: E731
    first = sel.select_rollout(np.arange(8), 4, 2, step_rng(0, 2, 0), no_embeddings)
    second = sel.select_rollout(np.arange(8), 4, 3, step_rng(0, 3, 0), no_embeddings)
    assert first.size == second.size == 2  # B_fresh = floor(0.5 * 4) in round 1
    assert len(set(first.tolist()) | set(second.tolist())) == 4  # two slices of one draw without replacement


def test_astral_budget_zero_rolls_out_and_replays_nothing():
    sel = make("astral", 8, 4, mu=1, sigma=0.5)
    for step in range(2):
        assert sel.select_rollout(np.arange(8), 0, step, step_rng(0, step, 0), lambda name, ids: None).size == 0
        group = batch(np.zeros(0, dtype=np.int64), np.zeros((0, 4)), step)
        sel.observe(group)
        decision = sel.select_update(group, step, step_rng(0, step, 1))
        assert decision.replay.shape == (0, 2)  # R = floor(0.5 * 0) = 0, keys int64[R, 2]


def test_astral_round_zero_replay_keys_are_an_empty_r_by_2_array():
    sel = make("astral", 8, 2, mu=2)
    group = batch([0, 1], np.ones((2, 4)), 0)
    sel.observe(group)
    replay = sel.select_update(group, 0, step_rng(0, 0, 1)).replay
    assert replay.shape == (0, 2) and replay.dtype == np.int64


def test_astral_buffer_is_cleared_when_the_cap_is_zero():
    """cap' = buffer_size - floor(0.5 * 4) = 0: step 4 of §3 "Replay buffer" clears, then this step's groups go in."""
    sel = make("astral", 20, 4, mu=1, sigma=0.5, buffer_size=2)
    for step in range(3):
        ids = np.arange(4) + 4 * step
        sel.observe(batch(ids, [MIXED] * 4, step))
        assert sel.buf_pid.tolist() == ids.tolist()
        assert sel.buf_step.tolist() == [step] * 4


def test_astral_negative_cap_is_refused():
    """cap' = 1 - floor(0.5 * 4) < 0: the original would keep the oldest groups (a negative slice); refused."""
    from lze_bench.errors import LzeBenchError

    with pytest.raises(LzeBenchError, match="selector.buffer_size=1"):
        make("astral", 20, 4, mu=1, sigma=0.5, buffer_size=1)
    sel = make("astral", 20, None, mu=1, sigma=0.5, buffer_size=1)  # batch unknown: refused at the first call
    with pytest.raises(LzeBenchError, match="selector.buffer_size=1"):
        sel.select_rollout(np.arange(20), 4, 0, step_rng(0, 0, 0), lambda name, ids: None)


A3_FILTER = {  # step: fresh ids with their rewards (a: all correct, 0: none, m: mixed)
    0: {0: [1, 1, 1, 1], 1: MIXED, 2: [0, 0, 0, 0], 3: MIXED},
    1: {4: MIXED, 5: [1, 1, 1, 1]},
    2: {1: [0, 0, 0, 0], 6: MIXED},
    3: {7: MIXED, 8: MIXED},
}
A3_FILTER_POOL = {  # the replay pool of each step: deduplicated, then every all-0 / all-1 group dropped
    0: [], 1: [(1, 0), (3, 0)], 2: [(1, 0), (3, 0), (4, 1)],
    3: [(3, 0), (4, 1), (6, 2)],  # prompt 1's newest group (step 2) is all-0: dropped, no fall back to step 0
}


def test_a3_astral_never_replays_an_all_correct_or_all_wrong_group():
    """ray_trainer.py select_buffer L87-95 (paper Alg. 1 l.18): A3's sizes, groups that are all 0 or all 1."""
    sel = make("astral", 10, 4, mu=1, sigma=0.5, buffer_size=6)  # cap' = 4, R = 2
    for step, fresh in A3_FILTER.items():
        group = batch(list(fresh), list(fresh.values()), step)
        sel.observe(group)
        pool = A3_FILTER_POOL[step]
        assert list(zip(sel.pool_pid.tolist(), sel.pool_step.tolist())) == pool
        replay = sel.select_update(group, step, step_rng(0, step, 1)).replay.tolist()
        pick = np.random.default_rng([0, step, 1]).permutation(len(pool))[:2] if step else []
        assert replay == [list(pool[i]) for i in pick]
    assert sel.buf_pid.tolist() == [3, 4, 6, 7, 8]  # pool of step 3 (<= cap' 4) plus the fresh 7, 8


def test_astral_budget_unknown_without_batch_size_until_select_rollout():
    from lze_bench.errors import LzeBenchError

    sel = make("astral", 8, None)
    with pytest.raises(LzeBenchError, match="budget unknown"):
        sel.observe(batch([0, 1], np.ones((2, 4)), 0))
    sel.select_rollout(np.arange(8), 2, 0, step_rng(0, 0, 0), lambda name, ids: None)
    sel.observe(batch([0, 1], np.ones((2, 4)), 0))  # the budget is known now


def test_astral_kernel_zero_embedding_has_similarity_zero():
    """A zero embedding stays zero (ours): cosine 0 to every reference prompt, uniform weights, base = mean(y_ref)."""
    emb = np.vstack([A2_EMB, [0.0, 0.0]])
    base, p_hat = kernel_predict(emb, A2_EMB[[0, 1, 2]], np.array([0.9, 0.1, 0.5]), 0.1)
    assert r4(base) == [0.8797, 0.1203, 0.5, 0.8574, 0.1426, 0.5685, 0.5]
    assert r4(p_hat) == [0.9, 0.1, 0.5, 0.8766, 0.1234, 0.5721, 0.5]


def test_astral_kernel_softmax_is_stable_at_small_t_att():
    """t_att = 0.01: cosines / t_att span [-100, 100]; the softmax still gives weight ~1 to the nearest reference."""
    base, _ = kernel_predict(np.array([[1.0, 0.0], [-1.0, 0.0]]), np.array([[1.0, 0.0], [-1.0, 0.0]]),
                             np.array([1.0, 0.0]), 0.01)
    assert r4(base) == [1.0, 0.0]


def test_astral_kernel_rows_beyond_one_chunk():
    """More rows than one chunk (CHUNK_ROWS): every row gets the same base as its single-row computation."""
    from lze_bench.selectors.astral_predict import CHUNK_ROWS, attention_base

    emb = np.tile(A2_EMB, (CHUNK_ROWS // len(A2_EMB) + 2, 1))
    base = attention_base(emb, A2_EMB[[0, 1, 2]], np.array([0.9, 0.1, 0.5]), 0.1)
    assert emb.shape[0] > CHUNK_ROWS and np.isfinite(base).all()
    assert r4(base[-6:]) == r4(base[:6]) == [0.8797, 0.1203, 0.5, 0.8574, 0.1426, 0.5685]
    assert (base.reshape(-1, 6) == base[:6]).all()


def test_astral_kernel_softmax_is_per_row():
    """One prompt that is no reference prompt: its own softmax over the references (A2 row 3: base 0.8574)."""
    from lze_bench.selectors.astral_predict import attention_base

    assert r4(attention_base(A2_EMB[[3]], A2_EMB[[0, 1, 2]], np.array([0.9, 0.1, 0.5]), 0.1)) == [0.8574]


def test_astral_recalibration_with_unit_variance_is_a_fit():
    """base_ref = [0, 1, 0, 1]: sum of squared deviations exactly 1.0, not constant: a = 1, c = 0."""
    from lze_bench.selectors.astral_predict import recalibrate

    assert recalibrate(np.array([0.0, 1.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0, 1.0])) == (1.0, 0.0)


@pytest.mark.parametrize("name", ["lze", "lze_full"])
@pytest.mark.parametrize("num_prompts", [40, 4])  # a batch of 4 below / at a quarter of N: per-id and whole-N counts
def test_l_observe_counts_each_observation(name, num_prompts):
    """§5 observe step 4: n_obs += 1 for every observed prompt, 0 for the others."""
    sel = make(name, num_prompts, 4)
    for step, ids in enumerate(([0, 1, 2, 3], [1, 3, 0, 2], [2, 0, 3, 1])):
        sel.observe(batch(ids, [[1, 0, 1, 0]] * 4, step))
    expected = np.zeros(num_prompts, dtype=int)
    expected[:4] = 3
    assert sel.state_dict()["n_obs"].tolist() == expected.tolist()


@pytest.mark.parametrize("num_prompts", [40, 4])  # per-id and whole-N pruner updates
def test_l_pruner_streak_prunes_after_prune_after_solved_steps(num_prompts):
    """§5 step 5 (lze_full, prune_after = 2): streak + 1 while solved, else 0; pruned once streak >= 2."""
    sel = make("lze_full", num_prompts, 4, prune_after=2)
    rewards = [[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]]
    for step, (streak, pruned) in enumerate((([1, 1, 0, 0], []), ([2, 2, 0, 0], [0, 1]))):
        sel.observe(batch([0, 1, 2, 3], rewards, step))
        state = sel.state_dict()
        assert state["streak"][:4].tolist() == streak
        assert np.flatnonzero(state["pruned"]).tolist() == pruned


def test_l_select_update_accepts_an_equal_copy_of_the_observed_batch():
    """select_update needs the batch observe() saw: equal ids in another array object are that batch."""
    sel = make("lze", 10, 2)
    sel.observe(batch([3, 5], [[1, 0, 1, 0], [1, 1, 0, 0]], 0))
    decision = sel.select_update(batch([3, 5], [[1, 0, 1, 0], [1, 1, 0, 0]], 0), 0, step_rng(0, 0, 1))
    assert decision.keep.size == 2


def test_rng_call_tags_and_rounds_follow_section_0():
    """§0: CALL_TAG 0 select_rollout, 1 select_update, 2 begin_epoch, 3 probe; the round is appended from 1 on."""
    from lze_bench.selectors import base

    assert (base.TAG_SELECT_ROLLOUT, base.TAG_SELECT_UPDATE, base.TAG_BEGIN_EPOCH, base.TAG_PROBE) == (0, 1, 2, 3)
    draw = lambda rng: rng.integers(0, 2**62, size=4).tolist()  # noqa: E731
    assert draw(step_rng(7, 3, 1, 0)) == draw(np.random.default_rng([7, 3, 1]))
    assert draw(step_rng(7, 3, 1, 2)) == draw(np.random.default_rng([7, 3, 1, 2]))


@pytest.mark.parametrize("ids", [[3, 3], [0, 9, 5, 9], [10**7, 2, 10**7]])
def test_rollout_batch_rejects_duplicate_prompt_ids(ids):
    from lze_bench.errors import LzeBenchError

    with pytest.raises(LzeBenchError, match="duplicate"):
        batch(ids, np.ones((len(ids), 2)))
    batch(sorted(set(ids)), np.ones((len(set(ids)), 2)))  # unique ids are fine
