"""Contracts every registered selector owes (selectors.md §0), parametrized over sorted(SELECTORS).

A selector added to the registry is tested here on arrival: same seed ->
same decisions; an exact state round trip through save_state/load_state that
continues identically; select_rollout returns unique candidates within the
budget; select_update returns one keep flag per group; and `lze-bench check selector` passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lze_bench.registry import SELECTORS
from lze_bench.selectors import build_selector, load_state, save_state
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


# fixed per-prompt columns (lze_bench.metadata) for the selectors that read them (adarft, sec): 3 levels of 13-14 (SEC needs every arm >= the largest budget drawn, 12)
METADATA = {"level": np.arange(N_PROMPTS) % 3 + 1, "difficulty": np.random.default_rng(10).random(N_PROMPTS) * 100}


def build(name):
    return build_selector(SELECTORS[name].Config(), num_prompts=N_PROMPTS, batch_size=BATCH, metadata=METADATA)


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
            if decision.keep_rollouts is not None:  # a subset of each group's rollouts (pods), never an empty kept group
                assert sel.keeps_rollouts and decision.keep_rollouts.shape == (ids.size, N_SAMPLES)
                assert decision.rollout_mask(N_SAMPLES)[decision.keep].any(axis=1).all()
            self.log.append((step, ids.tolist(), decision.keep.tolist(), decision.more, decision.replay.tolist()))
            if decision.more == 0:
                return
            # a backend caps the rounds of a step (backend.max_gen_rounds); a selector that never stops is a bug
            assert round_index < 200, f"{sel.name} asked for more prompts in 200 rounds of one step"
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


@pytest.mark.parametrize("name", NAMES)
def test_passes_the_conformance_check(name):
    """`lze-bench check selector NAME` (lze_bench.conformance), the check a plug-in is held to, through the
    harness's own step (run_selection) with ragged, all-equal and short-pass batches."""
    from lze_bench.conformance import check_selector

    report = check_selector(name, sizes=())
    assert [f.prop for f in report.findings] == ["deterministic", "state", "decisions", "booked"]
    assert report.ok, [f.line() for f in report.findings if not f.ok]


# --- the interface every backend calls: RolloutBatch, UpdateDecision, construction, state files, rng ---------

def test_rollout_batch_zero_variance_and_subset():
    from lze_bench.selectors import RolloutBatch

    batch = RolloutBatch(prompt_ids=[4, 7, 9], rewards=[[1, 1], [0, 1], [0, 0]], step=3,
                         response_tokens=[[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(batch.zero_variance, [True, False, True])
    by_mask = batch.subset(np.array([False, True, True]))
    by_index = batch.subset(np.array([2, 0]))
    assert by_mask.prompt_ids.tolist() == [7, 9] and by_index.prompt_ids.tolist() == [9, 4]
    assert by_mask.response_tokens.tolist() == [[3, 4], [5, 6]] and by_index.rewards.tolist() == [[0, 0], [1, 1]]
    assert by_mask.step == by_index.step == 3 and by_mask.prompt_entropy is None


@pytest.mark.parametrize("field, value", [
    ("response_tokens", [1, 2, 3]),  # one dim, two wanted
    ("response_tokens", [[1, 2], [3, 4]]),  # two rows for three groups
    ("prompt_tokens", [[1], [2], [3]]),  # two dims, one wanted
    ("prompt_tokens", [1, 2]),
    ("prompt_embedding", [0.5, 0.5, 0.5]),
])
def test_rollout_batch_refuses_optional_fields_of_the_wrong_shape(field, value):
    from lze_bench.errors import LzeBenchError
    from lze_bench.selectors import RolloutBatch

    with pytest.raises(LzeBenchError, match=field):
        RolloutBatch(prompt_ids=[1, 2, 3], rewards=np.zeros((3, 2)), step=0, **{field: value})
    ok = RolloutBatch(prompt_ids=[1, 2, 3], rewards=np.zeros((3, 2)), step=0, prompt_tokens=(5, 6, 7))
    assert isinstance(ok.prompt_tokens, np.ndarray)


@pytest.mark.parametrize("rewards", [np.zeros(3), np.zeros((2, 4)), np.zeros((3, 4, 1))])
def test_rollout_batch_refuses_rewards_that_are_not_one_row_per_group(rewards):
    from lze_bench.errors import LzeBenchError
    from lze_bench.selectors import RolloutBatch

    with pytest.raises(LzeBenchError, match="shape"):
        RolloutBatch(prompt_ids=[1, 2, 3], rewards=rewards, step=0)


def test_update_decision_defaults_and_replay_keys():
    from lze_bench.selectors import UpdateDecision

    plain = UpdateDecision(keep=[1, 0])
    assert plain.keep.dtype == bool and plain.more == 0 and plain.partial is False
    assert plain.replay.shape == (0, 2) and plain.replay.dtype == np.int64
    flat = UpdateDecision(keep=[True], replay=[4, 0, 9, 2])
    assert flat.replay.tolist() == [[4, 0], [9, 2]]
    with pytest.raises(ValueError, match="more"):
        UpdateDecision(keep=[True], more=-1)


def test_selectors_need_at_least_one_prompt():
    from lze_bench.errors import LzeBenchError

    with pytest.raises(LzeBenchError, match="num_prompts"):
        SELECTORS["uniform"](num_prompts=0)
    assert SELECTORS["uniform"](num_prompts=1).num_prompts == 1


def test_state_files_never_unpickle(tmp_path):
    from lze_bench.selectors import load_state, save_state

    save_state(tmp_path / "ok.npz", {"a": np.arange(3), "b": 2.5})
    state = load_state(tmp_path / "ok.npz")
    assert state["a"].tolist() == [0, 1, 2] and state["b"] == 2.5
    save_state(tmp_path / "objects.npz", {"ragged": np.array([[1], [2, 3]], dtype=object)})
    with pytest.raises(ValueError):
        load_state(tmp_path / "objects.npz")  # an object array would need pickle: refused


def test_every_round_has_its_own_rng_stream():
    from lze_bench.selectors import step_rng

    draws = [step_rng(1, 2, 0, r).random(4).tolist() for r in range(3)]
    assert draws[0] != draws[1] != draws[2] and draws[0] != draws[2]
    assert step_rng(1, 2, 0).random(4).tolist() == draws[0]


def test_lze_counts_each_observation_once_on_large_batches():
    """A batch covering half the prompts, observed twice: n_obs counts each observation once, only its prompts."""
    from lze_bench.selectors import RolloutBatch

    for name in ("lze", "lze_full"):
        selector = build_selector(SELECTORS[name].Config(), num_prompts=8, batch_size=4)
        batch = RolloutBatch(prompt_ids=[0, 3, 5, 6], rewards=[[1, 0], [1, 1], [0, 0], [0, 1]], step=0)
        for _ in range(2):
            selector.observe(batch)
        assert selector.state_dict()["n_obs"].tolist() == [2, 0, 0, 2, 0, 2, 2, 0], name
