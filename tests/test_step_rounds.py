"""The rounds of one training step (lze_bench.step_rounds), shared by both backends: no prompt of a pass is
skipped (selectors.md §0, revised) and GRESO's rounds are built as its authors' loop builds them (§6 "Round
structure"). Driven through backend=openrlhf's StepDriver (no OpenRLHF import); the local backend runs the same
function (tests/test_cross_backend.py compares the two).
"""

from __future__ import annotations

import numpy as np
import pytest

from lze_bench.backends.openrlhf.accounting import ledger_row
from lze_bench.backends.openrlhf.selection import Group, StepDriver
from lze_bench.data_order import DataOrder
from lze_bench.flops import FlopModel
from lze_bench.registry import SELECTORS
from lze_bench.selectors import build_selector

N = 4  # responses per prompt


def rollout_of(rewards_of):
    """rollout(ids) -> Groups with rewards_of(prompt id) (a list of N rewards)."""

    def rollout(ids):
        return [Group(int(i), np.asarray(rewards_of(int(i)), dtype=np.float32), np.full(N, 3), np.full(N, 8))
                for i in ids]

    return rollout


class Recorder:
    """Wraps a selector: records the candidates of every select_rollout call and every begin_epoch."""

    def __init__(self, selector):
        self.inner, self.calls = selector, []  # calls: ("epoch", e) | ("offer", ids)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def begin_epoch(self, epoch, rng):
        self.calls.append(("epoch", int(epoch)))
        return self.inner.begin_epoch(epoch, rng)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        self.calls.append(("offer", np.asarray(candidate_ids).tolist()))
        return self.inner.select_rollout(candidate_ids, budget, step, rng, features)


def mixed(i: int) -> list:
    """Some prompts always solved, some never, some informative (a skip rule has work to do)."""
    kind = (i * 7) % 5
    return [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]][kind]


@pytest.mark.parametrize("name,config,candidates", [
    ("dapo", {}, None),
    ("dapo", {}, 5),  # data.candidates_per_step below gen_batch_size: later rounds ask for more than the first
    ("hive", {}, None),
    ("greso", {"chunk": 3}, None),
    ("greso", {"chunk": 32}, None),  # a chunk far larger than S
    ("lze", {}, None),
    ("uniform", {}, None),
])
def test_every_prompt_of_a_pass_is_offered_before_the_next_pass(name, config, candidates):
    """For each completed pass: the ids offered while it was the current pass (up to and including the call that
    entered the next one) cover the pass, but for a tail shorter than one step's first-round candidates."""
    num_prompts, batch = 50, 4
    selector = build_selector(SELECTORS[name].Config(**config), num_prompts=num_prompts, batch_size=batch)
    recorder = Recorder(selector)
    order = DataOrder(num_prompts, seed=1)
    features = lambda name, ids: (np.asarray(ids) % 7).astype(np.float32)  # noqa: E731  (hive's entropies)
    driver = StepDriver(recorder, order, seed=1, batch_size=batch, candidates_per_step=candidates, max_rounds=10,
                        group_size=N, features=features)
    first_count = selector.round_chunk() or candidates or selector.candidates_per_step(batch)
    records = [driver.run_step(rollout_of(mixed)) for _ in range(40)]
    assert order.epoch >= 3  # several passes
    offered, epoch_of_call, current = [], [], None
    for kind, value in recorder.calls:
        if kind == "epoch":
            current = value
        else:
            offered.append(value)
            epoch_of_call.append(current)
    dropped = 0
    for epoch in range(order.epoch):  # every pass the stream has left
        calls = [i for i, e in enumerate(epoch_of_call) if e == epoch]
        after = [i for i, e in enumerate(epoch_of_call) if e == epoch + 1][:1]  # the call that entered the next pass
        seen = {pid for i in calls + after for pid in offered[i]}
        perm = order.permutation(epoch).tolist()
        missing = [pos for pos, pid in enumerate(perm) if pid not in seen]
        assert all(pos >= num_prompts - (first_count - 1) for pos in missing), \
            f"pass {epoch}: ids at positions {missing} never offered (only a tail < {first_count} may be dropped)"
        dropped += len(missing)
    assert sum(r.prompts_dropped for r in records) >= dropped  # the ledger counts every id never offered
    row = ledger_row(records[-1], {}, FlopModel(matmul_params=10, n_layer=1, d_attn=2),
                     ppo_epochs=1, reference_pass=False)
    assert row["prompts_dropped"] == records[-1].prompts_dropped


def test_a_later_round_continues_into_the_next_pass_without_repeating_an_id():
    order = DataOrder(10, seed=0)
    order.take(7)
    across = order.take_across(6)  # 3 left in pass 0, then pass 1
    assert across[:3].tolist() == order.permutation(0)[7:].tolist() and order.epoch == 1
    assert len(set(across.tolist())) == 6 and order.dropped == 0
    head = [pid for pid in order.permutation(1)[:order.offset].tolist() if pid not in across[:3].tolist()]
    assert across[3:].tolist() == head  # passed-over repeats are consumed, the round still gets 6 ids
    state, left = order.state_dict(), 10 - order.offset
    again = DataOrder(10, seed=0)
    again.load_state_dict(state)
    assert again.take_across(2).tolist() == order.take_across(2).tolist()  # the position resumes exactly
    order.take(left)  # a first round that does not fit: the rest of pass 1 is dropped and counted
    assert order.epoch == 2 and order.dropped == left - 2


# --- GRESO's rounds on a recorded sequence (selectors.md §6 "Round structure", chunk = 1) ---------------------

REWARDS = {0: [1, 1, 1, 1], 1: [0, 0, 0, 0], 2: [1, 0, 0, 0], 3: [1, 1, 1, 1], 4: [1, 1, 1, 1], 5: [0, 1, 0, 0],
           6: [0, 0, 0, 0], 7: [1, 1, 1, 1], 8: [1, 1, 0, 0], 9: [1, 1, 1, 1], 10: [0, 0, 0, 0]}


class FixedOrder(DataOrder):
    """Every pass is 0, 1, ..., N-1: a sequence checkable by hand."""

    def permutation(self, epoch):
        return np.arange(self.num_prompts, dtype=np.int64)


def greso_driver(**config):
    cfg = {"chunk": 1, "min_round": 1, "p_easy": 0.0, "p_hard": 1.0, "keep_floor": 0.0, "p_min": 0.0, "p_max": 1.0,
           **config}  # keep probabilities 0 or 1: the draws cannot matter
    selector = build_selector(SELECTORS["greso"].Config(**cfg), num_prompts=11, batch_size=2)  # B = 2, S = 3
    recorder = Recorder(selector)
    driver = StepDriver(recorder, FixedOrder(11, seed=0), seed=0, batch_size=2, candidates_per_step=None,
                        max_rounds=20, group_size=N)
    return driver, recorder, selector


def test_greso_rounds_wait_for_survivors_chunk_by_chunk():
    """Step 0: round 0 examines 0, 1, 2 (all unseen: 3 = S survivors), keeps 2; T = floor(1.25 * 1 * 3 / 1) = 3,
    the last round; round 1 waits for 3 survivors: 3, 4, 5, keeps 5 -> B. Step 1: 6, 7, 8 (keeps 8), then 9,
    10, the pass ends (nothing dropped with chunk 1), pass 1 begins: 0 (solved last time: keep 0, skipped) and 1
    (failed: keep p_hard = 1) -> survivors 9, 10, 1; nothing informative; the last round: update on 1 group."""
    driver, recorder, selector = greso_driver()
    rollout = rollout_of(lambda i: REWARDS[i])
    step0 = driver.run_step(rollout)
    assert [[g.prompt_id for g in r] for r in _rounds(step0)] == [[0, 1, 2], [3, 4, 5]]
    assert step0.gen_rounds == 2 and step0.prompts_considered == 6 and step0.prompts_dropped == 0
    assert [g.prompt_id for g in step0.kept] == [2, 5]
    assert (selector.history.p_easy, selector.history.p_hard) == (0.0, 1.0)  # epoch 0: no adaptation
    step1 = driver.run_step(rollout)
    assert [[g.prompt_id for g in r] for r in _rounds(step1)] == [[6, 7, 8], [9, 10, 1]]
    assert step1.gen_rounds == 2 and step1.prompts_considered == 3 + 4 and step1.epoch == 0
    assert [g.prompt_id for g in step1.kept] == [8]  # fewer than B after the last round (the original's rule)
    assert ("epoch", 1) in recorder.calls  # pass 1 announced mid-step, before its first chunk was offered
    at = recorder.calls.index(("epoch", 1))
    assert recorder.calls[at - 2:at + 3] == [("offer", [9]), ("offer", [10]), ("epoch", 1), ("offer", [0]), ("offer", [1])]


def test_greso_adapts_in_the_step_whose_last_chunk_is_in_epoch_one():
    """The step's rolled-out groups 6, 7, 8, 9, 10, 1: 2/6 solved >= 1/12, 3/6 failed >= 1/6: both explore less,
    in step 1 already (its completing chunk is in pass 1; RT:974, 1207), not from step 2 on."""
    driver, _, selector = greso_driver(delta=0.25, p_easy=0.5, p_hard=1.0)
    rollout = rollout_of(lambda i: REWARDS[i])
    driver.run_step(rollout)
    assert (selector.history.p_easy, selector.history.p_hard) == (0.5, 1.0)
    driver.run_step(rollout)
    assert (selector.history.p_easy, selector.history.p_hard) == (0.25, 0.75)


@pytest.mark.parametrize("min_round,sizes", [(1, [6, 2]), (None, [6, 6])])
def test_greso_later_rounds_wait_for_max_t_floor_survivors(min_round, sizes):
    """B = 4, S = 6. Round 0: 0..5 survive, 0, 1, 2 informative: kept 3, need 1, Z = 3 -> T = floor(1.25*1*6/3)
    = 2, the last round. Round 1 waits for max(T, min_round) survivors: 2 (6, 7) with min_round 1; with the
    default floor min(64, S) = 6 it waits for 6: 6..10, then pass 1's 0 (informative last time: kept)."""
    cfg = {"chunk": 1, "p_easy": 0.0, "p_hard": 1.0, "keep_floor": 0.0, "p_min": 0.0, "p_max": 1.0,
           "min_round": min_round}
    selector = build_selector(SELECTORS["greso"].Config(**cfg), num_prompts=11, batch_size=4)
    assert selector.min_round == (min_round or 6)
    driver = StepDriver(selector, FixedOrder(11, seed=0), seed=0, batch_size=4, candidates_per_step=None,
                        max_rounds=20, group_size=N)
    record = driver.run_step(rollout_of(lambda i: [1, 0, 0, 0] if i in (0, 1, 2) else [1, 1, 1, 1]))
    assert [len(r) for r in _rounds(record)] == sizes
    assert [g.prompt_id for g in record.kept] == [0, 1, 2] + ([0] if min_round is None else [])


def _rounds(record) -> list:
    rounds = {}
    for group, index in zip(record.rolled, record.rounds):
        rounds.setdefault(index, []).append(group)
    return [rounds[k] for k in sorted(rounds)]


# --- ASTRAL's replay through the step (selectors.md §3 "Replay buffer", revised) ----------------------------


def test_astral_update_never_replays_an_all_correct_or_all_wrong_group():
    """Many all-0 / all-1 groups, 12 steps: every replayed group is mixed and the store still resolves each key."""
    from lze_bench.rollout_store import RolloutStore

    selector = build_selector(SELECTORS["astral"].Config(ref_size=6, buffer_size=12), num_prompts=40, batch_size=4)
    features = lambda name, ids: np.eye(40, 5)[np.asarray(ids)] + 0.1  # noqa: E731  (embeddings)
    driver = StepDriver(selector, DataOrder(40, seed=2), seed=2, batch_size=4, candidates_per_step=None,
                        max_rounds=1, group_size=N, features=features, store=RolloutStore(16))
    replayed = []
    for step in range(12):
        kind = lambda i, step=step: [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 1]][(i + step) % 3]  # noqa: E731
        record = driver.run_step(rollout_of(kind))
        replayed += [g.rewards.tolist() for g in record.replayed]
    assert len(replayed) >= 10  # rounds 1.. replay floor(0.5 * 4) = 2 groups a step when the pool has them
    assert all(0 < np.mean(r) < 1 for r in replayed)


def test_a_chunk_larger_than_the_task_is_refused_in_one_line():
    from lze_bench.errors import LzeBenchError

    selector = build_selector(SELECTORS["greso"].Config(chunk=32), num_prompts=20, batch_size=4)
    driver = StepDriver(selector, DataOrder(20, seed=0), seed=0, batch_size=4, candidates_per_step=None,
                        max_rounds=4, group_size=N)
    with pytest.raises(LzeBenchError, match="selector.chunk=32: more than the task's 20 train prompts"):
        driver.run_step(rollout_of(mixed))

