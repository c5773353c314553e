"""Contracts every registered selector owes (selectors.md §0), parametrized over sorted(SELECTORS).

A selector added to the registry is tested here on arrival: same seed ->
same decisions; an exact state round trip through save_state/load_state that
continues identically; select_rollout returns unique candidates within the
budget; select_update returns one keep flag per group.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lze_bench.registry import SELECTORS
from lze_bench.selectors import load_state, save_state
from lze_bench.selectors.base import (
    TAG_BEGIN_EPOCH,
    TAG_PROBE,
    TAG_SELECT_ROLLOUT,
    TAG_SELECT_UPDATE,
    RolloutBatch,
    step_rng,
)

NAMES = sorted(SELECTORS)
N_PROMPTS, BATCH, N_SAMPLES = 40, 6, 4
TRUE_PASS = np.random.default_rng(7).random(N_PROMPTS)  # the "policy": each prompt's pass rate
ENTROPY = np.random.default_rng(8).random(N_PROMPTS)
EMBEDDING = np.random.default_rng(9).normal(size=(N_PROMPTS, 5))


def features(name, ids):
    return {"prompt_entropy": ENTROPY, "prompt_embedding": EMBEDDING}[name][ids]


def grade(ids, step):
    """0/1 rewards drawn from each prompt's true pass rate (independent of the selector)."""
    draws = np.random.default_rng([99, step]).random((N_PROMPTS, N_SAMPLES))
    return (draws[ids] < TRUE_PASS[ids, None]).astype(np.float32)


def build(name):
    return SELECTORS[name](num_prompts=N_PROMPTS, batch_size=BATCH)


class Harness:
    """A minimal training loop in the spec's call order (selectors.md §0), recording every decision."""

    def __init__(self, selector, seed):
        self.sel, self.seed, self.cursor, self.epoch = selector, seed, 0, -1
        self.log = []

    def stream(self, count, step):
        """`count` candidates of the seeded data order (an epoch = one pass over a permutation)."""
        if self.sel.candidate_mode == "full":
            return np.arange(N_PROMPTS)
        epoch, pos = divmod(self.cursor, N_PROMPTS)
        if epoch != self.epoch:
            self.epoch = epoch
            self.sel.begin_epoch(epoch, step_rng(self.seed, step, TAG_BEGIN_EPOCH))
        out = np.random.default_rng([self.seed, epoch]).permutation(N_PROMPTS)[pos : pos + count]
        self.cursor += out.size  # a call stops at the epoch's end: no prompt twice in one batch
        return out.astype(np.int64)

    def step(self, step):
        sel = self.sel
        if self.epoch < 0:
            self.epoch = 0
            sel.begin_epoch(0, step_rng(self.seed, step, TAG_BEGIN_EPOCH))
        probe = sel.probe(step, step_rng(self.seed, step, TAG_PROBE))
        if probe is not None:
            sel.observe_probe(RolloutBatch(prompt_ids=probe, rewards=grade(probe, step), step=step))
        count, budget, round_index = sel.candidates_per_step(BATCH), sel.rollout_budget(BATCH), 0
        while True:
            candidates = self.stream(count, step)
            rng = step_rng(self.seed, step, TAG_SELECT_ROLLOUT, round_index)
            ids = sel.select_rollout(candidates, budget, step, rng, features)
            check_rollout(sel, candidates, ids, budget)
            batch = RolloutBatch(prompt_ids=ids, rewards=grade(ids, step), step=step)
            sel.observe(batch)
            decision = sel.select_update(batch, step, step_rng(self.seed, step, TAG_SELECT_UPDATE, round_index))
            assert decision.keep.dtype == bool and decision.keep.shape == (ids.size,)
            self.log.append((step, ids.tolist(), decision.keep.tolist(), decision.more, decision.replay.tolist()))
            if decision.more == 0:
                return
            count, budget, round_index = sel.round_candidates(decision.more), decision.more, round_index + 1


def check_rollout(sel, candidates, ids, budget):
    assert ids.dtype.kind == "i" and ids.ndim == 1
    assert len(ids) <= budget and len(set(ids.tolist())) == len(ids)
    assert set(ids.tolist()) <= set(candidates.tolist())
    if sel.name != "astral":  # ASTRAL returns its round's shuffled slice (selectors.md §3)
        position = {c: i for i, c in enumerate(candidates.tolist())}
        assert [position[i] for i in ids.tolist()] == sorted(position[i] for i in ids.tolist())


def run(name, seed, steps, selector=None, start=0, harness=None):
    harness = harness or Harness(selector or build(name), seed)
    for step in range(start, start + steps):
        harness.step(step)
    return harness


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_decisions(name):
    assert run(name, 3, 12).log == run(name, 3, 12).log


def assert_states_equal(left: dict, right: dict):
    assert sorted(left) == sorted(right)
    for key in left:
        a, b = np.asarray(left[key]), np.asarray(right[key])
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), key


@pytest.mark.parametrize("name", NAMES)
def test_state_round_trip_is_exact_and_continues_identically(name, tmp_path):
    harness = run(name, 5, 9)
    path = tmp_path / f"{name}.npz"
    save_state(path, harness.sel.state_dict())
    restored = build(name)
    restored.load_state_dict(load_state(path))
    assert_states_equal(restored.state_dict(), harness.sel.state_dict())
    twin = Harness(restored, 5)
    twin.cursor, twin.epoch = harness.cursor, harness.epoch
    tail = len(harness.log)
    run(name, 5, 6, start=9, harness=harness)
    run(name, 5, 6, start=9, harness=twin)
    assert twin.log == harness.log[tail:]


@pytest.mark.parametrize("name", NAMES)
def test_loaded_state_is_a_copy(name):
    """Changing the dict a state was loaded from (or one state_dict returned) leaves the selector unchanged."""
    harness = run(name, 4, 5)
    state = harness.sel.state_dict()
    restored = build(name)
    restored.load_state_dict(state)
    before = restored.state_dict()
    for value in list(state.values()) + list(restored.state_dict().values()):
        if isinstance(value, np.ndarray) and value.size and value.dtype.kind in "biuf":
            value[...] = 1 if value.dtype.kind != "b" else ~value
    assert_states_equal(restored.state_dict(), before)


@pytest.mark.parametrize("name", NAMES)
def test_config_defaults_compose_and_name_comes_first(name):
    import dataclasses

    from lze_bench.config import compose

    fields = dataclasses.fields(SELECTORS[name].Config)
    assert fields[0].name == "name" and fields[0].default == name
    cfg = compose("train", [f"selector={name}"])
    assert cfg.selector.name == name


@pytest.mark.parametrize("name", NAMES)
def test_requires_are_enforced(name):
    sel = build(name)
    if not sel.requires:
        return
    with pytest.raises(Exception, match="needs"):
        sel.select_rollout(np.arange(N_PROMPTS), BATCH, 0, step_rng(0, 0, 0), None)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rollout_is_a_budgeted_subset_and_keep_matches_batch(name, data):
    """Property: after a random history, any candidate list gives a valid rollout and keep mask."""
    seed = data.draw(st.integers(0, 2**16))
    harness = run(name, seed, data.draw(st.integers(0, 6)))
    sel = harness.sel
    candidates = np.array(data.draw(st.permutations(range(N_PROMPTS))), dtype=np.int64)
    if sel.candidate_mode != "full":
        candidates = candidates[: data.draw(st.integers(0, N_PROMPTS))]
    budget = data.draw(st.integers(0, 12))
    step = 20
    ids = sel.select_rollout(candidates, budget, step, step_rng(seed, step, 0), features)
    check_rollout(sel, candidates, ids, budget)
    batch = RolloutBatch(prompt_ids=ids, rewards=grade(ids, step), step=step)
    sel.observe(batch)
    decision = sel.select_update(batch, step, step_rng(seed, step, 1))
    assert decision.keep.shape == (ids.size,) and decision.more >= 0
