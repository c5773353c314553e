"""One training step's selector calls, in the order of selectors.md §0 (no OpenRLHF import).

`StepDriver.run_step(rollout)` does, for training step `t`:
`[begin_epoch]` -> `[probe -> rollout -> observe_probe]` -> rounds of
`select_rollout -> rollout -> observe -> select_update` until `batch_size`
groups are kept, and returns exactly `batch_size` groups plus a `StepRecord`
of everything that was rolled out (for the ledger). `rollout(ids)` is the
backend's: it generates and grades `n` responses per id (generator.py).

Choices where the specs are silent (ours):
* Data order: lze_bench.data_order.DataOrder, the one the local backend uses
  (seeded by `seed` only, a round never spans two epochs); `begin_epoch(e + 1)`
  runs when a round starts a new pass. Candidates of `candidate_mode="full"`
  selectors are all ids every round.
* Round sizes: round 0 offers `data.candidates_per_step` (else the selector's
  `candidates_per_step(B)`) candidates with budget `rollout_budget(B)`; a later
  round offers `round_candidates(decision.more)` candidates (HIVE: `pool_factor`
  times more) with budget `more` when the selector
  asked for more (DAPO), else a fresh round like round 0 (a selector that keeps
  fewer groups than the batch, e.g. LZE). A decision flagged `partial` (the
  selector's own generation cap) ends the rounds.
* Exact batch (openrlhf.md §9): OpenRLHF trains `rollout.batch_size` groups per
  optimizer step, so kept groups beyond it are discarded (rollout row
  `kept=false`; their generation FLOPs still count) and a short batch after
  `max_rounds` rounds is topped up with rolled-out groups the selector did not
  keep, informative ones first (`short_batch="fill"`, ledger `partial=true`) or
  is an error (`short_batch="error"`).
* rng: `step_rng(seed, t, TAG, round)`; `begin_epoch` uses the current step `t`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from lze_bench.data_order import DataOrder
from lze_bench.errors import LzeBenchError
from lze_bench.selectors.base import (
    TAG_BEGIN_EPOCH,
    TAG_PROBE,
    TAG_SELECT_ROLLOUT,
    TAG_SELECT_UPDATE,
    RolloutBatch,
    step_rng,
)


@dataclass
class Group:
    """One rolled-out prompt with its n responses."""

    prompt_id: int
    rewards: np.ndarray  # float32[n]
    response_tokens: np.ndarray  # int64[n] generated tokens per response
    seq_lengths: np.ndarray  # int64[n] prompt + response tokens per response (as trained)
    payload: Any = None  # the backend's samples (OpenRLHF: list[Experience])
    grade_time_s: float = 0.0  # summed over responses (grading runs inside the vLLM actors)

    @property
    def prompt_tokens(self) -> np.ndarray:  # int64[n]
        return self.seq_lengths - self.response_tokens


@dataclass
class StepRecord:
    """Counters of one training step (all rounds, probes included where named)."""

    step: int
    epoch: int = 0
    prompts_considered: int = 0
    prompts_rolled_out: int = 0
    prompts_probed: int = 0
    gen_rounds: int = 0
    partial: bool = False
    rolled: list = field(default_factory=list)  # [Group] every training rollout, in order
    kept_flags: list = field(default_factory=list)  # bool per rolled group: reached the update
    rounds: list = field(default_factory=list)  # int per rolled group: the generation round it came from
    probes: list = field(default_factory=list)  # [Group] measurement-only rollouts
    time_rollout_s: float = 0.0
    time_select_s: float = 0.0
    time_step_s: float = 0.0

    @property
    def kept(self) -> list:
        return [g for g, k in zip(self.rolled, self.kept_flags) if k]


Rollout = Callable[[np.ndarray], list]  # ids int64[m] -> [Group] in the same order


class StepDriver:
    """Calls the selector for each training step; owns the data order."""

    def __init__(self, selector, order: DataOrder, *, seed: int, batch_size: int, candidates_per_step: int | None,
                 max_rounds: int, short_batch: str = "fill"):
        self.selector, self.order, self.seed = selector, order, int(seed)
        self.batch_size, self.max_rounds, self.short_batch = int(batch_size), int(max_rounds), short_batch
        self.candidates_per_step = int(candidates_per_step or selector.candidates_per_step(self.batch_size))
        self.first_budget = int(selector.rollout_budget(self.batch_size))
        self.step = 0  # training steps completed = index of the next one
        self.epoch_started = -1  # last epoch announced with begin_epoch

    def position(self) -> dict:
        """Plain scalars to resume from (kept in OpenRLHF's client_states)."""
        return {"step": self.step, "epoch_started": self.epoch_started, **self.order.state_dict()}

    def restore(self, position: dict) -> None:
        self.step, self.epoch_started = int(position["step"]), int(position["epoch_started"])
        self.order.load_state_dict(position)

    def run_step(self, rollout: Rollout) -> tuple[list, StepRecord]:
        started = time.perf_counter()
        record = StepRecord(step=self.step)
        self._announce_epoch(record)
        self._probe(record, rollout)
        kept: list = []
        more = 0
        while len(kept) < self.batch_size and record.gen_rounds < self.max_rounds:
            budget = more if more > 0 else self.first_budget
            count = self.selector.round_candidates(more) if more > 0 else self.candidates_per_step
            more = self._round(record, rollout, kept, budget, count)
            if record.partial:  # the selector's own cap: no further rounds this step
                break
        if len(kept) < self.batch_size:
            self._short_batch(record, kept)
        record.epoch = self.order.epoch
        record.time_step_s = time.perf_counter() - started
        self.step += 1
        return kept, record

    def _round(self, record: StepRecord, rollout: Rollout, kept: list, budget: int, count: int) -> int:
        round_index = record.gen_rounds
        candidates = self._candidates(count, record)
        record.prompts_considered += len(candidates)
        t0 = time.perf_counter()
        rng = step_rng(self.seed, self.step, TAG_SELECT_ROLLOUT, round_index)
        ids = np.asarray(self.selector.select_rollout(candidates, budget, self.step, rng), dtype=np.int64)
        record.time_select_s += time.perf_counter() - t0
        record.gen_rounds += 1
        if ids.size == 0:
            return 0
        groups = self._timed_rollout(rollout, ids, record)
        batch = _batch(groups, self.step)
        t0 = time.perf_counter()
        self.selector.observe(batch)
        rng = step_rng(self.seed, self.step, TAG_SELECT_UPDATE, round_index)
        decision = self.selector.select_update(batch, self.step, rng)
        record.time_select_s += time.perf_counter() - t0
        if decision.replay.size:
            raise LzeBenchError(
                f"selector={self.selector.name} asked to replay stored groups; backend=openrlhf has no rollout store "
                "(use backend=local for replay selectors)"
            )
        record.prompts_rolled_out += len(groups)
        for group, keep in zip(groups, decision.keep):
            take = bool(keep) and len(kept) < self.batch_size  # surplus kept groups are discarded
            if take:
                kept.append(group)
            record.rolled.append(group)
            record.kept_flags.append(take)
            record.rounds.append(round_index)
        record.partial = record.partial or bool(decision.partial)
        return int(decision.more)

    def _candidates(self, count: int, record: StepRecord) -> np.ndarray:
        if getattr(self.selector, "candidate_mode", "stream") == "full":
            return np.arange(self.order.num_prompts, dtype=np.int64)
        epoch_before = self.order.epoch
        ids = self.order.take(count)
        if self.order.epoch != epoch_before:
            self._announce_epoch(record)
        return ids

    def _announce_epoch(self, record: StepRecord) -> None:
        if self.order.epoch > self.epoch_started:
            self.epoch_started = self.order.epoch
            t0 = time.perf_counter()
            self.selector.begin_epoch(self.order.epoch, step_rng(self.seed, self.step, TAG_BEGIN_EPOCH))
            record.time_select_s += time.perf_counter() - t0

    def _probe(self, record: StepRecord, rollout: Rollout) -> None:
        ids = self.selector.probe(self.step, step_rng(self.seed, self.step, TAG_PROBE))
        if ids is None or len(ids) == 0:
            return
        groups = self._timed_rollout(rollout, np.asarray(ids, dtype=np.int64), record)
        record.probes.extend(groups)
        record.prompts_probed += len(groups)
        self.selector.observe_probe(_batch(groups, self.step))

    @staticmethod
    def _timed_rollout(rollout: Rollout, ids: np.ndarray, record: StepRecord) -> list:
        t0 = time.perf_counter()
        groups = rollout(ids)
        record.time_rollout_s += time.perf_counter() - t0
        if [g.prompt_id for g in groups] != ids.tolist():
            raise LzeBenchError("the backend returned groups for other prompts than it was asked to roll out")
        return groups

    def _short_batch(self, record: StepRecord, kept: list) -> None:
        missing = self.batch_size - len(kept)
        if self.short_batch == "error":
            raise LzeBenchError(
                f"step {self.step}: selector={self.selector.name} kept {len(kept)} of {self.batch_size} groups in "
                f"{record.gen_rounds} rounds; OpenRLHF trains exact batches: raise backend.max_gen_rounds or set "
                "backend.short_batch=fill"
            )
        spare = [i for i, k in enumerate(record.kept_flags) if not k]
        informative = [i for i in spare if np.ptp(record.rolled[i].rewards) > 0]
        order = informative + [i for i in spare if i not in set(informative)]
        if len(order) < missing:
            raise LzeBenchError(
                f"step {self.step}: only {len(kept) + len(order)} groups were rolled out for a batch of "
                f"{self.batch_size}; raise backend.max_gen_rounds"
            )
        for index in order[:missing]:
            kept.append(record.rolled[index])
            record.kept_flags[index] = True
        record.partial = True


def _batch(groups: list, step: int) -> RolloutBatch:
    return RolloutBatch(
        prompt_ids=np.array([g.prompt_id for g in groups], dtype=np.int64),
        rewards=np.stack([np.asarray(g.rewards, dtype=np.float32) for g in groups]),
        step=step,
        response_tokens=np.stack([np.asarray(g.response_tokens, dtype=np.int32) for g in groups]),
        prompt_tokens=np.array([int(g.prompt_tokens[0]) for g in groups], dtype=np.int32),
    )
