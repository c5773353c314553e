"""mopps, adarft and sec against their authors' rules (selectors.md §10-§12).

Hand-computed numbers where a rule is a formula; elsewhere a plain-Python transcription of the
authors' loop (dicts and lists, one prompt at a time, as their code is written) fed the same rng
draws and recorded rewards, compared decision by decision over several steps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.selectors import build_selector
from lze_bench.selectors.base import RolloutBatch, step_rng


def make(name, num_prompts, batch_size, metadata=None, **overrides):
    return build_selector(SELECTORS[name].Config(**overrides), num_prompts=num_prompts, batch_size=batch_size,
                          metadata=metadata)


def batch(ids, rewards, step=0):
    return RolloutBatch(prompt_ids=np.asarray(ids), rewards=np.asarray(rewards, dtype=np.float32), step=step)


def recorded(ids, step, n=4):
    """Recorded 0/1 rewards of prompts `ids` at `step`: each prompt has its own pass rate (pid % 5) / 4."""
    rate = (np.asarray(ids) % 5) / 4
    return (np.random.default_rng([step, 31]).random((len(ids), n)) < rate[:, None]).astype(np.float32)


# --- MoPPS ----------------------------------------------------------------------------------------------

def test_m1_mopps_posterior_update_by_hand():
    """alpha <- lam*alpha + (1-lam)*alpha0 + n*s; beta likewise with 1-s (mopps.py L77-78)."""
    sel = make("mopps", 5, 2)
    sel.observe(batch([1, 3], [[1, 1, 0, 1], [0, 0, 0, 0]]))
    assert sel.alpha.tolist() == [1, 4, 1, 1, 1] and sel.beta.tolist() == [1, 2, 1, 5, 1]  # lambda = 1
    sel = make("mopps", 5, 2, decay=0.5, prior_alpha=2.0, prior_beta=1.0)
    sel.observe(batch([1], [[1, 1, 0, 1]]))  # 0.5*2 + 0.5*2 + 3 = 5; 0.5*1 + 0.5*1 + 1 = 2
    sel.observe(batch([1], [[1, 0, 0, 0]]))  # 0.5*5 + 1 + 1 = 4.5; 0.5*2 + 0.5 + 3 = 4.5
    assert (sel.alpha[1], sel.beta[1]) == (4.5, 4.5)
    assert sel.alpha[0] == 2.0 and sel.beta[0] == 1.0  # prompts not rolled out keep their posterior


def test_m2_mopps_single_rollout_quirk_sets_both_to_eight():
    """`... + s * n if n > 1 else 8` binds to the whole right-hand side (selectors.md §10)."""
    sel = make("mopps", 4, 2)
    sel.observe(batch([0, 2], [[1, 1, 1, 1], [0, 1, 0, 1]]))
    sel.observe(batch([0, 1], [[1], [0]]))
    assert sel.alpha.tolist() == [8, 8, 3, 1] and sel.beta.tolist() == [8, 8, 3, 1]
    fixed = make("mopps", 4, 2, n1_quirk=False)
    fixed.observe(batch([0, 1], [[1], [0]]))
    assert fixed.alpha.tolist() == [2, 1, 1, 1] and fixed.beta.tolist() == [1, 2, 1, 1]


def test_m3_mopps_pool_is_ts_ratio_times_the_batch_capped_at_the_data():
    assert make("mopps", 1000, 4).candidates_per_step(4) == 64
    assert make("mopps", 60, 4).candidates_per_step(4) == 60  # min(16 B, N): our_ray_trainer.py L175-177
    assert make("mopps", 1000, 3, ts_ratio=2.5).candidates_per_step(3) == 7  # int(2.5 * 3)


def mopps_reference(alpha: dict, beta: dict, observed: set, candidates, budget, rng, n, lam=1.0, target=0.5):
    """The authors' sample_batch (topk) and train, transcribed: per-prompt dicts, created at the prior."""
    for pid in candidates:
        alpha.setdefault(pid, 1.0)
        beta.setdefault(pid, 1.0)
    # Beta(1, 1) is uniform: ours draws one uniform per candidate, then redraws the ones observed with rng.beta
    draws = dict(zip(candidates, rng.random(len(candidates)).tolist()))
    rest = [p for p in candidates if p in observed]
    if rest:
        draws.update(zip(rest, rng.beta(np.array([alpha[p] for p in rest]), np.array([beta[p] for p in rest]))))
    sampled = [draws[p] for p in candidates]
    order = sorted(range(len(candidates)), key=lambda i: ((sampled[i] - target) ** 2, i))[:budget]
    chosen = [candidates[i] for i in sorted(order)]

    def train(rewards):
        for pid, row in zip(chosen, rewards):
            observed.add(pid)
            s = float(np.mean(row))
            alpha[pid] = alpha[pid] * lam + 1.0 * (1 - lam) + s * n
            beta[pid] = beta[pid] * lam + 1.0 * (1 - lam) + (1 - s) * n

    return chosen, train


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_m4_mopps_recorded_sequence_matches_the_authors_loop(lam):
    num, budget, n = 40, 4, 4
    sel = make("mopps", num, budget, decay=lam, ts_ratio=3)
    alpha, beta, observed = {}, {}, set()
    for step in range(12):
        candidates = np.random.default_rng([step, 5]).permutation(num)[: sel.candidates_per_step(budget)]
        ids = sel.select_rollout(candidates, budget, step, step_rng(0, step, 0))
        expected, train = mopps_reference(alpha, beta, observed, candidates.tolist(), budget, step_rng(0, step, 0), n, lam)
        assert ids.tolist() == expected, step
        rewards = recorded(ids, step, n)
        sel.observe(batch(ids, rewards, step))
        train(rewards)
        assert sel.select_update(batch(ids, rewards, step), step, step_rng(0, step, 1)).keep.all()
    for pid in range(num):
        assert (sel.alpha[pid], sel.beta[pid]) == pytest.approx((alpha.get(pid, 1.0), beta.get(pid, 1.0)), abs=1e-12)
    assert len(alpha) > 12  # several prompts were offered and trained


def test_m5_mopps_thompson_prefers_prompts_near_the_target():
    """A prompt with a sharp posterior at 0.5 beats ones sharp at 0 and 1; the batch keeps candidate order."""
    sel = make("mopps", 6, 2)
    sel.observed[:] = True  # posteriors set by hand: every prompt draws from its Beta
    sel.alpha[:] = [1e4, 1, 5e3, 1, 1e4, 5e3]
    sel.beta[:] = [1, 1e4, 5e3, 1e4, 1, 5e3]
    ids = sel.select_rollout(np.array([5, 0, 1, 2, 3, 4]), 2, 0, step_rng(0, 0, 0))
    assert ids.tolist() == [5, 2]


def test_m6_mopps_threshold_takes_a_random_in_range_subset_or_the_nearest_to_the_interval():
    sel = make("mopps", 6, 2, strategy="threshold")
    sel.observed[:] = True
    sel.alpha[:] = [1e5 * p for p in (0.4, 0.5, 0.6, 0.9, 0.1, 0.65)]
    sel.beta[:] = [1e5 * (1 - p) for p in (0.4, 0.5, 0.6, 0.9, 0.1, 0.65)]
    rng = step_rng(0, 3, 0)
    ids = sel.select_rollout(np.arange(6), 3, 3, rng)
    check = step_rng(0, 3, 0)
    check.random(6)
    check.beta(sel.alpha, sel.beta)
    inside = np.array([0, 1, 2, 5])  # 0.4, 0.5, 0.6, 0.65 lie in [0.3, 0.7]
    assert ids.tolist() == sorted(inside[check.permutation(4)[:3]].tolist())
    sel.alpha[:] = [1e5 * p for p in (0.95, 0.5, 0.05, 0.8, 0.15, 0.99)]
    sel.beta[:] = [1e5 * (1 - p) for p in (0.95, 0.5, 0.05, 0.8, 0.15, 0.99)]
    ids = sel.select_rollout(np.arange(6), 3, 3, step_rng(0, 3, 0))
    assert ids.tolist() == [1, 3, 4]  # in range: 0.5; then 0.8 (0.1 above) and 0.15 (0.15 below)


# --- AdaRFT ---------------------------------------------------------------------------------------------

LEVELS = np.array([1, 2, 3, 4, 5, 6] * 5)  # prompt i has level i % 6 + 1


def adarft(num=30, budget=4, **overrides):
    from lze_bench.metadata import synthetic_difficulty

    return make("adarft", num, budget, metadata={"difficulty": synthetic_difficulty(LEVELS[:num])}, **overrides)


def test_r1_adarft_target_update_by_hand():
    """T <- clip(T + 50 tanh(2 (R - 0.5)), 0, 100), R = the mean reward of every rollout of the batch."""
    sel = adarft()
    sel.observe(batch([0, 1], [[1, 1, 1, 0], [1, 1, 0, 1]]))  # R = 0.75
    assert sel.target == pytest.approx(50 * math.tanh(0.5), abs=1e-12)
    sel.observe(batch([0, 1], [[1, 0, 0, 0], [0, 1, 0, 0]]))  # R = 0.25: back by the same amount
    assert sel.target == pytest.approx(0.0, abs=1e-12)
    sel.observe(batch([0], [[0, 0, 0, 0]]))  # below d_min: clipped
    assert sel.target == 0.0
    for _ in range(4):
        sel.observe(batch([0], [[1, 1, 1, 1]]))  # + 50 tanh(1) = 38.08 per step, clipped at 100
    assert sel.target == 100.0


def test_r2_adarft_picks_the_nearest_difficulty_ties_by_a_fixed_seeded_rank():
    sel = adarft(budget=7)
    ids = sel.select_rollout(np.arange(30), 7, 0, step_rng(4, 0, 0))
    rank = step_rng(4, 0, 0).permutation(30)  # drawn once, from the first step's rng
    level1 = [p for p in range(30) if LEVELS[p] == 1]  # T = 0: the 5 level-1 prompts, then 2 of level 2
    level2 = sorted([p for p in range(30) if LEVELS[p] == 2], key=lambda p: rank[p])[:2]
    assert ids.tolist() == sorted(level1 + level2)
    sel.target = 47.0  # level 3 is 40 (7 away), level 4 is 60 (13 away)
    ids = sel.select_rollout(np.arange(30), 7, 1, step_rng(4, 1, 0))
    level4 = sorted([p for p in range(30) if LEVELS[p] == 4], key=lambda p: rank[p])[:2]
    assert ids.tolist() == sorted([p for p in range(30) if LEVELS[p] == 3] + level4)


def test_r3_adarft_repeats_the_same_batch_while_the_target_stays():
    """No memory of used prompts (custom_sampler.py L14-22): the quirk kept."""
    sel = adarft()
    first = sel.select_rollout(np.arange(30), 4, 0, step_rng(0, 0, 0))
    sel.observe(batch(first, [[0, 0, 0, 0]] * 4))  # R = 0 at T = 0: T stays 0
    again = sel.select_rollout(np.arange(30), 4, 1, step_rng(0, 1, 0))
    assert again.tolist() == first.tolist() and sel.target == 0.0


def test_r4_adarft_recorded_sequence_matches_the_authors_loop():
    """Ten steps against a transcription of CurriculumSampler + the trainer's update (ties by the rank)."""
    from lze_bench.metadata import synthetic_difficulty

    sel, d, target, rank = adarft(budget=5), synthetic_difficulty(LEVELS), 0.0, None
    targets = []
    for step in range(10):
        ids = sel.select_rollout(np.arange(30), 5, step, step_rng(1, step, 0))
        rank = step_rng(1, 0, 0).permutation(30) if rank is None else rank
        expected = sorted(sorted(range(30), key=lambda i: (abs(d[i] - target), rank[i]))[:5])
        assert ids.tolist() == expected, step
        rewards = (np.random.default_rng([step, 8]).random((5, 4)) < 1 - d[ids, None] / 120).astype(np.float32)
        sel.observe(batch(ids, rewards, step))
        target = float(np.clip(target + 50 * np.tanh(2 * (rewards.mean(dtype=np.float64) - 0.5)), 0, 100))
        assert sel.target == pytest.approx(target, abs=1e-9)
        targets.append(target)
    assert len(set(round(t, 6) for t in targets)) > 3  # the target moved, so several batches were compared


def test_r5_synthetic_levels_map_linearly_onto_the_0_to_100_scale():
    from lze_bench.metadata import synthetic_difficulty

    assert synthetic_difficulty(np.array([1, 2, 3, 6])).tolist() == [0.0, 20.0, 40.0, 100.0]


def test_r6_a_missing_column_is_one_line_naming_the_field():
    with pytest.raises(LzeBenchError, match=r"selector.column='difficulty'.*it has: level"):
        make("adarft", 6, 2, metadata={"level": np.arange(6)})
    with pytest.raises(LzeBenchError, match=r"selector.column='level'.*it has: none"):
        make("sec", 6, 2)


# --- SEC ------------------------------------------------------------------------------------------------

def sec(num=24, budget=3, levels=None, **overrides):
    levels = np.arange(num) % 3 if levels is None else levels
    return make("sec", num, budget, metadata={"level": levels}, **overrides)


def test_s1_sec_mean_absolute_advantage_by_hand():
    from lze_bench.selectors.sec import mean_abs_advantage

    # [1,0,0,0]: mean 0.25, unbiased std 0.5, |A| = 1.5, .5, .5, .5 -> mean 0.75 (with std + 1e-6)
    values = mean_abs_advantage(np.array([[1, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 0]], dtype=np.float32))
    # [1,0,1,0]: centred +-0.5, unbiased std sqrt(1/3)
    assert values.tolist() == pytest.approx([0.375 / (0.5 + 1e-6), 0.0, 0.5 / (math.sqrt(1 / 3) + 1e-6)], rel=1e-12)
    assert mean_abs_advantage(np.array([[1.0], [0.0]])).tolist() == [1 / (1 + 1e-6), 0.0]  # verl: mean 0, std 1


def test_s2_sec_q_update_decays_arms_absent_from_the_batch():
    """Q <- (1 - lr) Q + lr r for every arm, r = 0 for an arm without groups (priority.py L181-187)."""
    sel = sec()
    sel.observe(batch([0, 3], [[1, 0, 0, 0], [1, 1, 1, 1]]))  # both arm 0: mean |A| over 8 rollouts = g / 2
    g = 0.375 / (0.5 + 1e-6)  # mean |A| of [1, 0, 0, 0]
    assert sel.q.tolist() == pytest.approx([0.5 * g / 2, 0.0, 0.0], rel=1e-9)
    sel.observe(batch([1], [[1, 0, 0, 0]]))  # arm 1 only: arm 0 halves towards 0
    assert sel.q.tolist() == pytest.approx([g / 8, 0.5 * g, 0.0], rel=1e-9)


def test_s3_sec_arm_probabilities_are_a_boltzmann_over_q():
    sel = sec(temperature=0.4)
    sel.q = np.array([0.2, 0.0, -0.1])
    weights = np.exp(np.array([0.2, 0.0, -0.1]) / 0.4)
    assert sel.probabilities().tolist() == pytest.approx((weights / weights.sum()).tolist(), rel=1e-12)


def sec_reference(levels, budget, steps, seed, rewards_of, lr=0.5, temperature=0.4, q0=None):
    """The authors' BanditDataloader (perpetual) + BanditPriority, transcribed with lists and dicts.

    Randomness from the same rng calls as ours (queue shuffles: one permutation of all prompts per
    refill, taken arm by arm; arms: rng.choice); a pop that repeats a prompt of this batch is skipped."""
    arms = sorted(set(levels.tolist()))
    members = {a: [p for p in range(len(levels)) if levels[p] == a] for a in arms}
    queue = {a: [] for a in arms}
    q = {a: (0.0 if q0 is None else q0[i]) for i, a in enumerate(arms)}
    out, skipped = [], 0
    for step in range(steps):
        rng = step_rng(seed, step, 0)
        if any(len(queue[a]) < budget for a in arms):
            shuffled = rng.permutation(len(levels)).tolist()
            for a in arms:
                queue[a] = queue[a] + [p for p in shuffled if levels[p] == a]
        weights = np.exp((np.array([q[a] for a in arms]) - max(q.values())) / temperature)
        draws = rng.choice(len(arms), size=budget, p=weights / weights.sum())
        chosen = []
        for k in draws:
            pid = queue[arms[k]].pop(0)
            while pid in chosen:
                pid, skipped = queue[arms[k]].pop(0), skipped + 1
            chosen.append(pid)
        chosen.sort()
        out.append(chosen)
        rewards = rewards_of(chosen, step)
        per_arm = {a: [] for a in arms}
        for pid, row in zip(chosen, rewards):
            row = np.asarray(row, dtype=np.float64)
            adv = (row - row.mean()) / (row.std(ddof=1) + 1e-6)
            per_arm[levels[pid]].extend(np.abs(adv).tolist())
        for a in arms:
            q[a] = (1 - lr) * q[a] + lr * (float(np.mean(per_arm[a])) if per_arm[a] else 0.0)
    return out, q, skipped


@pytest.mark.parametrize("levels,budget,q0", [(np.arange(24) % 3, 3, None),
                                               (np.array([0] * 5 + [1] * 9 + [2] * 10), 5, [1.0, 0.0, 0.0])])
def test_s4_sec_recorded_sequence_matches_the_authors_loop(levels, budget, q0):
    """Refills (remaining + fresh shuffle, when any arm holds < B), draws, pops and Q over 15 steps; in the second
    case the 5-prompt arm, drawn most (Q starts high), refills behind its leftovers and repeats are passed over."""
    sel = sec(num=levels.size, budget=budget, levels=levels)
    if q0 is not None:
        sel.q = np.array(q0)
    expected, q, skipped = sec_reference(levels, budget, 15, 2, lambda ids, step: recorded(ids, step), q0=q0)
    for step in range(15):
        ids = sel.select_rollout(np.arange(levels.size), budget, step, step_rng(2, step, 0))
        assert ids.tolist() == expected[step], step
        sel.observe(batch(ids, recorded(ids, step), step))
    assert sel.q.tolist() == pytest.approx([q[a] for a in sorted(q)], rel=1e-9)
    assert len(set(map(tuple, expected))) > 10
    assert skipped > 0 or q0 is None


def test_s5_sec_a_batch_never_repeats_a_prompt_across_a_refill():
    """An arm of 6 with B = 4 drawn every time: its queue is 2 leftovers + a fresh 6 every other step, and a
    pop that repeats a leftover of this batch is passed over (the original could pick it twice)."""
    sel = sec(num=12, budget=4, levels=np.array([0] * 6 + [1] * 6), temperature=1e-3)
    sel.q = np.array([1.0, 0.0])  # arm 0, every draw (its probability is 1 - e^-1000)
    batches = []
    for step in range(8):
        ids = sel.select_rollout(np.arange(12), 4, step, step_rng(0, step, 0))
        assert len(set(ids.tolist())) == 4 and set(ids.tolist()) <= set(range(6))
        batches.append(ids.tolist())
    assert len(set(map(tuple, batches))) > 2


def test_s6_sec_refuses_an_arm_smaller_than_the_batch():
    with pytest.raises(LzeBenchError, match=r"selector.column=level: arm '2' has 2 prompts, fewer than the batch of 3"):
        sec(num=8, budget=3, levels=np.array([0, 0, 0, 1, 1, 1, 2, 2]))


def test_s7_sec_joint_arms_over_two_columns():
    meta = {"level": np.array([1, 1, 2, 2, 1, 2]), "subject": np.array(["a", "b", "a", "b", "a", "a"], dtype=object)}
    sel = make("sec", 6, 1, metadata=meta, column="level,subject")
    assert sel.arm_names == ["1-a", "1-b", "2-a", "2-b"]
    assert sel.arm_of.tolist() == [0, 1, 2, 3, 0, 2]


def test_s8_sec_state_round_trip_continues_identically(tmp_path):
    from lze_bench.selectors import load_state, save_state

    one, two = sec(), sec()
    for step in range(5):
        ids = one.select_rollout(np.arange(24), 3, step, step_rng(0, step, 0))
        one.observe(batch(ids, recorded(ids, step), step))
    save_state(tmp_path / "s.npz", one.state_dict())
    two.load_state_dict(load_state(tmp_path / "s.npz"))
    for step in range(5, 9):
        a = one.select_rollout(np.arange(24), 3, step, step_rng(0, step, 0))
        b = two.select_rollout(np.arange(24), 3, step, step_rng(0, step, 0))
        assert a.tolist() == b.tolist()
        one.observe(batch(a, recorded(a, step), step))
        two.observe(batch(b, recorded(b, step), step))


@pytest.mark.parametrize("prior", [(2.0, 1.0), (1.0, 3.0)])
def test_m7_mopps_other_priors_draw_every_candidate_from_its_beta(prior):
    """The uniform shortcut is for the Beta(1, 1) prior only: with another prior every candidate draws rng.beta."""
    sel = make("mopps", 8, 3, prior_alpha=prior[0], prior_beta=prior[1])
    ids = sel.select_rollout(np.arange(8), 3, 0, step_rng(0, 0, 0))
    sampled = step_rng(0, 0, 0).beta(np.full(8, prior[0]), np.full(8, prior[1]))
    assert ids.tolist() == sorted(np.argsort((sampled - 0.5) ** 2, kind="stable")[:3].tolist())


def test_s9_sec_probabilities_stay_finite_for_large_q_over_temperature():
    """softmax(Q / T) computed shifted by max Q: exp(2500) would overflow unshifted."""
    sel = sec(temperature=0.4)
    sel.q = np.array([1000.0, 0.0, 999.6])
    weights = np.exp(np.array([0.0, -1000.0, -0.4]) / 0.4)
    assert sel.probabilities().tolist() == pytest.approx((weights / weights.sum()).tolist(), rel=1e-12)


def test_s10_sec_takes_up_to_65536_arms():
    sel = sec(num=1 << 16, budget=1, levels=np.arange(1 << 16))
    assert sel.num_arms == 1 << 16 and sel.arm_of[-1] == (1 << 16) - 1
    with pytest.raises(LzeBenchError, match="65537 arms; SEC's bandit takes at most 65536"):
        sec(num=(1 << 16) + 1, budget=1, levels=np.arange((1 << 16) + 1))


@pytest.mark.parametrize("name", ["mopps", "adarft"])
def test_a_budget_beyond_the_candidates_rolls_out_every_candidate(name):
    sel = make(name, 10, 4, metadata={"difficulty": np.arange(10) * 10.0})
    candidates = np.array([7, 2, 5])
    assert sel.select_rollout(candidates, 5, 0, step_rng(0, 0, 0)).tolist() == [7, 2, 5]
    assert sel.select_rollout(candidates, 0, 0, step_rng(0, 0, 0)).tolist() == []


def test_r7_adarft_nearest_equals_a_full_sort_with_distinct_and_tied_labels():
    """The O(m) partition path against sorting every candidate by (|d - T|, rank), k from 1 to m; 3000
    candidates, so NumPy's partition does not happen to sort them all (it does for small arrays)."""
    rng = np.random.default_rng(3)
    for labels in (rng.random(4000) * 100, np.round(rng.random(4000) * 10) * 10):  # distinct; heavily tied
        sel = make("adarft", 4000, 5, metadata={"difficulty": labels})
        candidates = rng.permutation(4000)[:3000]
        for step, target in enumerate((0.0, 33.3, 71.2)):
            sel.target = target
            for k in (1, 2, 37, 1500, 2999, 3000):
                ids = sel.select_rollout(candidates, k, step, step_rng(0, step, 0))
                rank = sel.tie_rank
                order = np.lexsort((rank[candidates], np.abs(labels[candidates] - target)))
                best = set(candidates[order[:k]].tolist())
                assert len(ids) == k and set(ids.tolist()) == best
                assert ids.tolist() == [c for c in candidates.tolist() if c in best]  # candidate order
