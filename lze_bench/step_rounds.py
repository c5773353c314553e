"""The selector calls of one training step, shared by every backend (selectors.md §0, design.md "One training step").

`run_selection(...)` does, for training step `t`:
`[begin_epoch]` -> `[probe -> roll out -> observe_probe]` -> round r = 0, 1, ...:
candidates -> `select_rollout` -> roll out n samples + grade -> `observe` ->
`select_update`, with more rounds while the decision asks for `more > 0` and
the backend cap `max_rounds` allows. It returns every decision; what reaches
the update (kept groups + replayed keys) is the backend's to train. Both
backends call this one function, so `selector=NAME` makes the same rollout,
keep and replay decisions on a laptop and on a cluster for the same rewards
(tests/test_cross_backend.py checks it through each backend's own wiring).

Data order (lze_bench.data_order.DataOrder, seeded by the run seed only; no
prompt is skipped at a pass's end, selectors.md §0):
- a step's first round takes `candidates_per_step` ids of one pass (config
  `data.candidates_per_step`, else the selector's `candidates_per_step(B)`),
  with budget `rollout_budget(B)`; fewer left in the pass are dropped
  (`drop_last`) and counted (`Selection.dropped`, ledger `prompts_dropped`);
- a later round offers `round_candidates(more)` ids (HIVE: `pool_factor x more`)
  with budget `more`: the rest of this pass, then the next pass (`take_across`);
- chunked selectors (`round_chunk() > 0`: GRESO, selectors.md §6 "Round
  structure") examine the stream chunk by chunk, each chunk one pass's
  `drop_last` batch, one `select_rollout(chunk, len(chunk))` per chunk with one
  rng per round (so the draws are those of one vector over every examined
  candidate), until at least `want` survivors wait: `want = rollout_budget(B)`
  in round 0, `more` later. Every survivor is rolled out; unexamined ids stay
  in the stream. A survivor already waiting in this round (the round crossed
  into a new pass) is not added twice. A round that examined N candidates in a
  row without a new survivor stops and rolls out what it has (ours: the
  original would loop forever when every keep probability is 0);
- `begin_epoch(e)` runs once per pass, before the first candidates of pass `e`
  are offered: at the start of a step, or inside a step when a later round (or
  a chunk) enters pass `e` (rng `[seed, t, TAG_BEGIN_EPOCH, r + 1]` in round
  r; GRESO's exploration adaptation then reads the epoch the step ends in,
  selectors.md §6); `Selection.epoch` is the pass the step started in;
- `candidate_mode="full"` selectors (astral) see all ids each round and
  consume `len(ids)` of the stream.

Other choices where the specs are silent (ours):
- a round in which the selector rolls out nothing ends the step (no observe /
  select_update on an empty batch), except for selectors that sample in
  rounds (`samples_in_rounds`: greso, hive), whose skip rules can empty a
  round: they see the empty batch and say how many more to examine;
- when `max_rounds` stops a selector that still wants more, the step updates
  on what it kept and `partial` is true; a decision flagged `partial` (the
  selector's own cap) is passed on;
- rng: `step_rng(seed, t, TAG, round)` for every selector call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.ragged import append_rollouts, stack
from lze_bench.selectors.base import (TAG_BEGIN_EPOCH, TAG_PROBE, TAG_SELECT_ROLLOUT, TAG_SELECT_UPDATE,
                                     RolloutBatch, UpdateDecision, step_rng)

# rollout(ids, round_index, probe[, counts]) -> (groups, batch): the backend's groups (any type) in the order of
# `ids`; `counts` (int[m], rollouts per id) is passed only for selectors that extend groups
Rollout = Callable[[np.ndarray, int, bool], "tuple[list, RolloutBatch]"]


@dataclass
class Held:
    """A group a selector held (`UpdateDecision.hold`): its backend group, its batch row, rollouts to add."""

    group: object
    row: RolloutBatch
    extend: int = 0

    @property
    def prompt_id(self) -> int:
        return int(self.row.prompt_ids[0])


@dataclass
class Round:
    index: int
    ids: np.ndarray  # int64[m] fresh prompts rolled out this round, in the selector's order
    groups: list  # the backend's groups, one per batch row: held groups (extended) first, then one per id
    batch: RolloutBatch
    decision: UpdateDecision


@dataclass
class Selection:
    """Everything the selector decided in one step."""

    step: int
    epoch: int
    considered: int = 0
    probe_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    probe_groups: list = field(default_factory=list)
    rounds: list = field(default_factory=list)  # [Round]
    partial: bool = False
    gen_rounds: int = 0  # rollout rounds (a round that rolled out nothing counts; GRESO's chunks do not)
    dropped: int = 0  # ids of a pass's end left unoffered by this step's first-round take (drop_last)
    time_select_s: float = 0.0
    time_rollout_s: float = 0.0
    pending: list = field(default_factory=list)  # [Held] the last round held: the next step's first batch

    @property
    def rolled_out(self) -> int:
        return int(sum(r.ids.size for r in self.rounds))

    def fresh(self) -> list:
        """(group, kept, round index) for every group decided this step (a held group: where it was let go), in order."""
        return [(g, bool(k), r.index) for r in self.rounds
                for g, k, h in zip(r.groups, r.decision.keep, r.decision.held) if not h]

    def kept(self) -> list:
        return [group for group, keep, _ in self.fresh() if keep]

    def replay_keys(self) -> list:
        """(prompt_id, gen_step) of stored groups to add, first ask first, each once."""
        keys = [tuple(map(int, key)) for r in self.rounds for key in r.decision.replay.tolist()]
        return list(dict.fromkeys(keys))


def empty_batch(step: int, n: int) -> RolloutBatch:
    """The batch of a round that rolled out nothing (samples_in_rounds selectors)."""
    return RolloutBatch(prompt_ids=np.zeros(0, dtype=np.int64), rewards=np.zeros((0, n), dtype=np.float32),
                        step=step, response_tokens=np.zeros((0, n), dtype=np.int32),
                        prompt_tokens=np.zeros(0, dtype=np.int32), response_entropy=np.zeros((0, n), dtype=np.float32))


class _Clock:
    def __init__(self, selection: Selection):
        self.selection = selection

    def select(self, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.selection.time_select_s += time.perf_counter() - start

    def rollout(self, rollout: Rollout, ids: np.ndarray, round_index: int, probe: bool, *counts):
        start = time.perf_counter()
        try:
            return rollout(ids, round_index, probe, *counts)
        finally:
            self.selection.time_rollout_s += time.perf_counter() - start


def begin_step(selector, order, *, seed: int, step: int, first_count: int, begun_epoch: int,
               selection: Selection) -> int:
    """Move the data order to this step's epoch and announce a new one; returns the epoch begun."""
    full = selector.candidate_mode == "full"
    epoch = order.prepare(0 if full else int(first_count))
    selection.epoch = epoch
    if epoch != begun_epoch:
        _Clock(selection).select(selector.begin_epoch, epoch, step_rng(seed, step, TAG_BEGIN_EPOCH))
    return epoch


class _Stream:
    """The step's view of the data order: takes candidates, announces a pass entered mid-step."""

    def __init__(self, selector, order, seed: int, step: int, begun_epoch: int, clock: _Clock):
        self.selector, self.order, self.seed, self.step = selector, order, seed, step
        self.begun_epoch, self.clock = begun_epoch, clock

    def take(self, count: int, round_index: int, across: bool) -> np.ndarray:
        ids = self.order.take_across(count) if across else self.order.take(count)
        if self.order.epoch != self.begun_epoch:  # the first candidates of a new pass: announce it first
            self.begun_epoch = self.order.epoch
            self.clock.select(self.selector.begin_epoch, self.begun_epoch,
                              step_rng(self.seed, self.step, TAG_BEGIN_EPOCH, round_index + 1))
        return ids


def run_selection(selector, order, *, seed: int, step: int, batch_size: int, candidates_per_step: int | None,
                  max_rounds: int, group_size: int, rollout: Rollout, features=None,
                  begun_epoch: int = -1, pending: list | None = None,
                  merge: Callable | None = None) -> tuple[Selection, int]:
    """One step's selector calls; returns (the decisions, the epoch begun: pass it back next step).

    `pending` are the groups an earlier step held (`Selection.pending`), `merge(old, new)` the backend's
    joining of a held group with its new rollouts; both only matter for selectors that extend groups."""
    chunk = int(selector.round_chunk())
    if chunk > order.num_prompts:
        raise LzeBenchError(f"selector.chunk={chunk}: more than the task's {order.num_prompts} train prompts; "
                            "lower it (the authors' 32 is for S = 384)")
    first_count = chunk or int(candidates_per_step or selector.candidates_per_step(int(batch_size)))
    selector.group_size = int(group_size)
    selection = Selection(step=int(step), epoch=order.epoch)
    clock = _Clock(selection)
    dropped_before = order.dropped
    begun_epoch = begin_step(selector, order, seed=seed, step=step, first_count=first_count,
                             begun_epoch=begun_epoch, selection=selection)
    stream = _Stream(selector, order, seed, step, begun_epoch, clock)
    _probe(selector, seed, step, rollout, clock, selection)
    count, budget, round_index = first_count, int(selector.rollout_budget(int(batch_size))), 0
    # a selector with enough carried-over work takes no candidates: none leaves the pass unoffered
    held, want_fresh = list(pending or []), bool(selector.takes_candidates(int(step)))
    while True:
        selection.gen_rounds = round_index + 1
        ids = np.zeros(0, dtype=np.int64)
        if want_fresh and chunk:
            ids = _examine_chunks(selector, stream, chunk, budget, seed, step, round_index, features, clock, selection)
        elif want_fresh:
            candidates = (np.arange(order.num_prompts, dtype=np.int64) if selector.candidate_mode == "full"
                          else stream.take(count, round_index, across=round_index > 0))
            selection.considered += int(candidates.size)
            if held:  # a prompt whose group is still being built is not started again beside it
                candidates = candidates[~np.isin(candidates, [h.prompt_id for h in held])]
            ids = _select(selector, order, candidates, budget, seed, step, round_index, features, clock)
        if ids.size == 0 and not held and not selector.samples_in_rounds:
            break
        groups, batch = _roll_round(selector, rollout, clock, held, ids, step, round_index, group_size, merge)
        clock.select(selector.observe, batch)
        decision = clock.select(selector.select_update, batch, step,
                                step_rng(seed, step, TAG_SELECT_UPDATE, round_index))
        if decision.keep.size != batch.num_groups:
            raise LzeBenchError(f"selector {selector.name!r}: keep mask has {decision.keep.size} entries "
                                f"for {batch.num_groups} groups")
        selection.rounds.append(Round(round_index, ids, list(groups), batch, decision))
        selection.partial |= bool(decision.partial)
        held = [Held(groups[g], batch.subset([g]), int(decision.extension[g]))
                for g in np.flatnonzero(decision.held)]
        extending = any(h.extend > 0 for h in held) and not decision.defer
        if decision.more <= 0 and not extending:
            break
        if round_index + 1 >= int(max_rounds):
            selection.partial = True
            break
        budget, want_fresh = int(decision.more), decision.more > 0
        count = selector.round_candidates(budget)
        round_index += 1
    selection.pending = held
    selection.dropped = int(order.dropped - dropped_before)
    return selection, stream.begun_epoch


def _roll_round(selector, rollout: Rollout, clock: _Clock, held: list, ids: np.ndarray, step: int,
                round_index: int, group_size: int, merge) -> tuple[list, RolloutBatch]:
    """The round's groups and batch: the held groups first (with their new rollouts), then the fresh ones.

    The held groups' new rollouts and the fresh groups are generated in one backend call, so one
    sampling seed per round serves both."""
    growing = [h for h in held if h.extend > 0]
    roll_ids = np.concatenate([np.array([h.prompt_id for h in growing], dtype=np.int64), ids])
    if roll_ids.size == 0:
        groups, batch = [], empty_batch(step, group_size)
    elif selector.extends_groups:
        counts = np.concatenate([np.array([h.extend for h in growing], dtype=np.int64),
                                 np.full(ids.size, selector.first_rollouts(group_size), dtype=np.int64)])
        groups, batch = clock.rollout(rollout, roll_ids, round_index, False, counts)
    else:
        groups, batch = clock.rollout(rollout, roll_ids, round_index, False)
    if batch.prompt_ids.tolist() != roll_ids.tolist() or len(groups) != roll_ids.size:
        raise LzeBenchError("the backend returned groups for other prompts than it was asked to roll out")
    if not held:
        return list(groups), batch
    new_rows = iter(range(len(growing)))
    held_groups, held_rows = [], []
    for h in held:
        if h.extend > 0:
            g = next(new_rows)
            held_groups.append(merge(h.group, groups[g]))
            held_rows.append(append_rollouts(h.row, batch.subset([g]), step))
        else:
            held_groups.append(h.group)
            held_rows.append(h.row)
    fresh = batch.subset(np.arange(len(growing), roll_ids.size))
    return held_groups + list(groups[len(growing):]), stack(held_rows + [fresh], step)


def _examine_chunks(selector, stream: _Stream, chunk: int, want: int, seed, step, round_index, features, clock,
                    selection: Selection) -> np.ndarray:
    """A chunked round (GRESO): examine chunks until >= `want` survivors wait; returns them in examination order."""
    rng = step_rng(seed, step, TAG_SELECT_ROLLOUT, round_index)  # one stream of draws across the round's chunks
    waiting = np.zeros(stream.order.num_prompts, dtype=bool)
    survivors, found, barren = [], 0, 0
    while found < want and barren < stream.order.num_prompts:
        candidates = stream.take(chunk, round_index, across=False)
        selection.considered += int(candidates.size)
        ids = np.asarray(clock.select(selector.select_rollout, candidates, int(candidates.size), step, rng, features),
                         dtype=np.int64).reshape(-1)
        _check_ids(selector, ids, candidates, candidates.size, step)
        new = ids[~waiting[ids]]
        waiting[new] = True
        survivors.append(new)
        found += int(new.size)
        barren = 0 if new.size else barren + int(candidates.size)
    return np.concatenate(survivors) if survivors else np.zeros(0, dtype=np.int64)


def _check_ids(selector, ids, candidates, budget, step) -> None:
    if ids.size > budget or not np.isin(ids, candidates).all() or np.unique(ids).size != ids.size:
        raise LzeBenchError(f"selector {selector.name!r} returned ids that are not distinct candidates "
                            f"within budget {budget} at step {step}")


def _select(selector, order, candidates, budget, seed, step, round_index, features, clock) -> np.ndarray:
    rng = step_rng(seed, step, TAG_SELECT_ROLLOUT, round_index)
    ids = np.asarray(clock.select(selector.select_rollout, candidates, budget, step, rng, features),
                     dtype=np.int64).reshape(-1)
    _check_ids(selector, ids, candidates, budget, step)
    if selector.candidate_mode == "full":
        order.advance(ids.size)
    return ids


def _probe(selector, seed, step, rollout, clock, selection: Selection) -> None:
    ids = clock.select(selector.probe, step, step_rng(seed, step, TAG_PROBE))
    if ids is None or len(ids) == 0:
        return
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    groups, batch = clock.rollout(rollout, ids, 0, True)
    selection.probe_ids, selection.probe_groups = ids, list(groups)
    clock.select(selector.observe_probe, batch)

