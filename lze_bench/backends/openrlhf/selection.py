"""One training step's selector calls on backend=openrlhf (no OpenRLHF import; openrlhf.md §9).

`StepDriver.run_step(rollout)` runs lze_bench.step_rounds.run_selection, the
same selector calls in the same order as the local backend, and returns what
the update trains: the kept fresh groups, then the replayed groups, plus a
`StepRecord` of everything rolled out (for the ledger). `rollout(ids)` is the
backend's: it generates and grades `n` responses per id (generator.py).

What reaches the update is the selector's own choice on every backend
(openrlhf.md §9 "Batch sizes (revised)"):
* fill selectors (dapo, greso, hive) roll out rounds until B groups are kept
  or their cap is hit and then update on what was kept; never on dropped groups;
* shrink selectors (lze, lze_full) roll out once and train on the kept groups
  only: the update batch is smaller than B;
* replay (astral) adds stored groups (with their generation-time log-probs)
  to the fresh ones.
Nothing is padded. The trainer then trims the trained responses to whole
micro-batches over the data-parallel ranks (trim.py) and books what trained.
A step whose update would be empty (nothing kept) gets its ledger row and no
optimizer step (as on the local backend).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from lze_bench.data_order import DataOrder
from lze_bench.errors import LzeBenchError
from lze_bench.rollout_store import RolloutStore
from lze_bench.selectors.base import RolloutBatch
from lze_bench.step_rounds import run_selection


@dataclass
class Group:
    """One rolled-out prompt with its n responses."""

    prompt_id: int
    rewards: np.ndarray  # float32[n]
    response_tokens: np.ndarray  # int64[n] generated tokens per response
    seq_lengths: np.ndarray  # int64[n] prompt + response tokens per response (as trained)
    payload: Any = None  # the backend's samples (OpenRLHF: list[Experience])
    grade_time_s: float = 0.0  # summed over responses (grading runs inside the vLLM actors)
    gen_step: int = -1  # the training step that generated it (replay key)
    response_entropy: np.ndarray | None = None  # float32[n], when the selector uses it (hive; features.py)
    behaviour_logprobs: list | None = None  # n x log mu per response token, kept for replay (update.py)

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
    prompts_dropped: int = 0  # ids of a pass's end never offered (the first round's drop_last; data_order.py)
    gen_rounds: int = 0
    partial: bool = False
    rolled: list = field(default_factory=list)  # [Group] every training rollout, in order
    kept_flags: list = field(default_factory=list)  # bool per rolled group: the selector kept it
    rounds: list = field(default_factory=list)  # int per rolled group: the generation round it came from
    probes: list = field(default_factory=list)  # [Group] measurement-only rollouts
    replayed: list = field(default_factory=list)  # [Group] stored groups the update adds (astral)
    # bool[n] per group of `train_groups` (kept, then replayed): the responses that trained, set by the
    # trainer after trimming (trim.py); None until then = every response of every train group
    train_masks: list | None = None
    metrics: dict = field(default_factory=dict)  # the selector's step_metrics()
    flops_select: int = 0  # feature passes run for the selector this step
    time_rollout_s: float = 0.0
    time_select_s: float = 0.0
    time_step_s: float = 0.0

    @property
    def kept(self) -> list:
        return [g for g, k in zip(self.rolled, self.kept_flags) if k]

    @property
    def train_groups(self) -> list:
        return self.kept + list(self.replayed)


Rollout = Callable[[np.ndarray], list]  # ids int64[m] -> [Group] in the same order


class StepDriver:
    """Calls the selector for each training step; owns the data order and the replay store."""

    def __init__(self, selector, order: DataOrder, *, seed: int, batch_size: int, candidates_per_step: int | None,
                 max_rounds: int, group_size: int, features=None, store: RolloutStore | None = None):
        self.selector, self.order, self.seed = selector, order, int(seed)
        self.batch_size, self.max_rounds, self.group_size = int(batch_size), int(max_rounds), int(group_size)
        self.candidates_per_step = candidates_per_step
        self.features = features
        self.store = store if store is not None else RolloutStore(0)
        self.step = 0  # training steps completed = index of the next one
        self.epoch_started = -1  # last epoch announced with begin_epoch

    def position(self) -> dict:
        """Plain scalars to resume from (kept in OpenRLHF's client_states)."""
        return {"step": self.step, "epoch_started": self.epoch_started, **self.order.state_dict()}

    def restore(self, position: dict) -> None:
        self.step, self.epoch_started = int(position["step"]), int(position["epoch_started"])
        self.order.load_state_dict(position)

    def run_step(self, rollout: Rollout) -> StepRecord:
        started = time.perf_counter()
        step = self.step

        def backend_rollout(ids, round_index, probe):
            groups = rollout(ids)
            if [g.prompt_id for g in groups] != ids.tolist():
                raise LzeBenchError("the backend returned groups for other prompts than it was asked to roll out")
            for group in groups:
                group.gen_step = step
            return groups, groups_batch(groups, step)

        selection, self.epoch_started = run_selection(
            self.selector, self.order, seed=self.seed, step=step, batch_size=self.batch_size,
            candidates_per_step=self.candidates_per_step, max_rounds=self.max_rounds, group_size=self.group_size,
            rollout=backend_rollout, features=self.features, begun_epoch=self.epoch_started)
        record = StepRecord(step=step, epoch=selection.epoch, prompts_considered=selection.considered,
                            prompts_rolled_out=selection.rolled_out, prompts_probed=int(selection.probe_ids.size),
                            prompts_dropped=selection.dropped, gen_rounds=selection.gen_rounds, partial=selection.partial,
                            probes=list(selection.probe_groups), time_rollout_s=selection.time_rollout_s,
                            time_select_s=selection.time_select_s, metrics=dict(self.selector.step_metrics()))
        for group, keep, round_index in selection.fresh():
            record.rolled.append(group)
            record.kept_flags.append(keep)
            record.rounds.append(round_index)
        # replay keys resolve before this step's groups enter the store (as on the local backend)
        record.replayed = [self.store.get(pid, gen_step) for pid, gen_step in selection.replay_keys()]
        for group in record.rolled:
            self.store.put(group)
        if len(record.train_groups) > self.batch_size:
            raise LzeBenchError(
                f"step {step}: selector={self.selector.name} sends {len(record.train_groups)} groups to one update "
                f"of at most trainer.batch_size={self.batch_size} (OpenRLHF would train the surplus a step later)"
            )
        record.time_step_s = time.perf_counter() - started
        self.step += 1
        return record


def groups_batch(groups: list, step: int) -> RolloutBatch:
    """The selector's view of rolled-out groups."""
    if not groups:
        raise LzeBenchError("groups_batch needs at least one group")
    return RolloutBatch(
        prompt_ids=np.array([g.prompt_id for g in groups], dtype=np.int64),
        rewards=np.stack([np.asarray(g.rewards, dtype=np.float32) for g in groups]),
        step=step,
        response_tokens=np.stack([np.asarray(g.response_tokens, dtype=np.int32) for g in groups]),
        prompt_tokens=np.array([int(g.prompt_tokens[0]) for g in groups], dtype=np.int32),
        response_entropy=(np.stack([np.asarray(g.response_entropy, dtype=np.float32) for g in groups])
                          if all(g.response_entropy is not None for g in groups) else None),
    )
