"""One training step's selector calls on backend=openrlhf (no OpenRLHF import; openrlhf.md §9).

`StepDriver.run_step(rollout)` runs lze_bench.step_rounds.run_selection, the
same selector calls in the same order as the local backend, and returns what
the update trains: the kept fresh groups, then the replayed groups, plus a
`StepRecord` of everything rolled out (for the ledger). `rollout(ids)` is the
backend's: it generates and grades `n` responses per id (generator.py); for a
selector that extends groups (`extends_groups`: speed, reinforce_ada) it is
called `rollout(ids, counts)` with the rollouts to generate per id (ragged
groups, methods.md §4.1).

Per-rollout decisions (methods.md §4.1-4.3), as the local backend makes them:
* a selector that keeps a subset of a group's rollouts (`keep_rollouts`: pods,
  reinforce_ada) has, per rolled group, `StepRecord.choices` (bool[k]: the
  rollouts that reach the update, all False for a dropped group), the rollouts
  the advantage mean and std come from (`stats_masks`: the kept ones, or None =
  every generated rollout) and the std's epsilon (`adv_eps`, None = the
  trainer's own);
* a held group (`UpdateDecision.hold`) comes back with its new rollouts
  appended (`merge_groups`); one still held when the step ends waits in
  `StepDriver.pending` for the next step (SPEED's queues) and is checkpointed
  with the run (context.py); each rollout keeps the step it was generated at
  (`Group.rollout_steps`), which the rollout log records;
* generation is booked when it happens: `StepRecord.generated` holds the
  groups each backend call returned, so a held group's rollouts are counted
  in the step that generated them, not in the step that trains them.

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

import dataclasses
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
    rollout_steps: np.ndarray | None = None  # int64[k]: the step each rollout was generated at (None = gen_step)
    # float32[n]: the 0/1 verdicts when `rewards` are shaped (trainer.reward_shape, reward_func.py); None: the
    # rewards are the verdicts. Selectors, reward_mean and the rollout log read `verdict_rewards`
    verdicts: np.ndarray | None = None

    @property
    def verdict_rewards(self) -> np.ndarray:  # float32[n]
        return self.rewards if self.verdicts is None else self.verdicts

    @property
    def prompt_tokens(self) -> np.ndarray:  # int64[n]
        return self.seq_lengths - self.response_tokens

    @property
    def size(self) -> int:
        return int(len(self.rewards))

    def steps(self) -> np.ndarray:
        """int64[k]: the step each rollout was generated at."""
        if self.rollout_steps is not None:
            return np.asarray(self.rollout_steps, dtype=np.int64)
        return np.full(self.size, self.gen_step, dtype=np.int64)


def _joined(a, b):
    return None if a is None or b is None else np.concatenate([np.asarray(a), np.asarray(b)])


def merge_groups(old: Group, new: Group) -> Group:
    """A held group with the rollouts just generated for it appended (SPEED, Reinforce-Ada).

    It keeps the held group's `gen_step` (its replay key and the step it was first rolled out, as the local
    backend's merge); every rollout keeps its own generation step in `rollout_steps`."""
    payload = None if old.payload is None and new.payload is None else list(old.payload or []) + list(new.payload or [])
    logprobs = (None if old.behaviour_logprobs is None or new.behaviour_logprobs is None
                else list(old.behaviour_logprobs) + list(new.behaviour_logprobs))
    return dataclasses.replace(
        old, rewards=_joined(old.rewards, new.rewards),
        # one side's verdicts may equal its rewards (None): join what each side's selectors saw
        verdicts=None if old.verdicts is None and new.verdicts is None
        else _joined(old.verdict_rewards, new.verdict_rewards),
        response_tokens=_joined(old.response_tokens, new.response_tokens),
        seq_lengths=_joined(old.seq_lengths, new.seq_lengths), payload=payload,
        grade_time_s=old.grade_time_s + new.grade_time_s, response_entropy=_joined(old.response_entropy,
                                                                                   new.response_entropy),
        behaviour_logprobs=logprobs, rollout_steps=np.concatenate([old.steps(), new.steps()]))


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
    rolled: list = field(default_factory=list)  # [Group] every group decided this step, in order
    kept_flags: list = field(default_factory=list)  # bool per rolled group: the selector kept it
    # bool[k] per rolled group: the rollouts that reach the update (the group kept and, with keep_rollouts, the
    # rollout flagged; all False for a dropped group); the rollout log's `kept_rollouts`
    choices: list = field(default_factory=list)
    stats_masks: list = field(default_factory=list)  # bool[k] or None per rolled group: advantage-stat rollouts
    adv_eps: list = field(default_factory=list)  # float or None per rolled group: the std's epsilon
    # [Group] as each backend call returned them (their generation is booked at this step); None = `rolled`
    generated: list | None = None
    pending: int = 0  # groups held for the next step when this one ended
    group_size: int = 0  # trainer.n_samples: OpenRLHF's group of consecutive samples (0 = not known: any)
    extends_groups: bool = False  # the selector holds and extends groups: the rollout log records rollout steps
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
        """The groups of the update: kept groups with at least one rollout to train, then the replayed ones."""
        return [g for g, _ in self._kept_pairs()] + list(self.replayed)

    def _kept_pairs(self) -> list:
        # a kept group none of whose rollouts was chosen trains nothing (and has no statistics; as local)
        return [(g, c) for g, k, c in zip(self.rolled, self.kept_flags, self.rollout_choices()) if k and c.any()]

    def rollout_choices(self) -> list:
        """bool[k] per rolled group: the rollouts that reach the update (`choices`; a hand-made record without
        them: every rollout of a kept group)."""
        if len(self.choices) == len(self.rolled):
            return self.choices
        return [np.full(g.size, bool(k)) for g, k in zip(self.rolled, self.kept_flags)]

    @property
    def train_kept(self) -> int:
        """Fresh groups among `train_groups` (the rest are replayed)."""
        return len(self._kept_pairs())

    @property
    def generated_groups(self) -> list:
        return list(self.rolled if self.generated is None else self.generated)

    @property
    def train_choices(self) -> list:
        """bool[k] per train group: the rollouts the selector sends to the update (every rollout of a replay)."""
        return [c for _, c in self._kept_pairs()] + [np.ones(g.size, dtype=bool) for g in self.replayed]

    @property
    def train_advantage(self) -> list:
        """(stats mask or None, eps or None) per train group: where its advantage mean and std come from."""
        stats = self.stats_masks if len(self.stats_masks) == len(self.rolled) else [None] * len(self.rolled)
        eps = self.adv_eps if len(self.adv_eps) == len(self.rolled) else [None] * len(self.rolled)
        pairs = [(s, e) for k, c, s, e in zip(self.kept_flags, self.rollout_choices(), stats, eps) if k and c.any()]
        return pairs + [(None, None)] * len(self.replayed)

    def update_samples(self) -> list:
        """The samples handed to OpenRLHF's experience maker: each train group's chosen rollouts, in order."""
        return [g.payload[j] for g, c in zip(self.train_groups, self.train_choices) for j in np.flatnonzero(c)]

    @property
    def per_rollout(self) -> bool:
        """Whether the update differs from whole groups of n = trainer.n_samples: a subset trains, stats or eps
        are the selector's, or groups are ragged or of another size (SPEED trains n_init + n_continue), so
        OpenRLHF's own group advantages (groups of n consecutive samples) cannot be used (update.py)."""
        n = {g.size for g in self.train_groups}
        other_size = bool(self.group_size) and bool(n - {int(self.group_size)})
        return (len(n) > 1 or other_size or not all(c.all() for c in self.train_choices)
                or any(s is not None or e is not None for s, e in self.train_advantage))


Rollout = Callable[..., list]  # ids int64[m][, counts int64[m]] -> [Group] in the same order


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
        # [step_rounds.Held] groups the last step held for this one (SPEED): its first batch; checkpointed by the
        # run (context.py) beside the selector state, since they carry the backend's samples (not plain scalars)
        self.pending: list = []

    def position(self) -> dict:
        """Plain scalars to resume from (kept in OpenRLHF's client_states); `pending` counts the held groups
        whose file (context.py) the resume must find."""
        return {"step": self.step, "epoch_started": self.epoch_started, "pending": len(self.pending),
                **self.order.state_dict()}

    def restore(self, position: dict, pending: list | None = None) -> None:
        """Resume at `position`, with the held groups saved beside it (`pending`, as `self.pending` was)."""
        expected = int(position.get("pending", 0))  # a checkpoint from before held groups existed has none
        pending = list(pending or [])
        if len(pending) != expected:
            raise LzeBenchError(f"resume at step {position['step']}: the checkpoint holds {expected} pending groups, "
                                f"{len(pending)} were found; use a new run_dir")
        self.step, self.epoch_started = int(position["step"]), int(position["epoch_started"])
        self.order.load_state_dict(position)
        self.pending = pending

    def run_step(self, rollout: Rollout) -> StepRecord:
        started = time.perf_counter()
        step = self.step

        generated = []

        def backend_rollout(ids, round_index, probe, counts=None):
            groups = rollout(ids) if counts is None else rollout(ids, np.asarray(counts, dtype=np.int64))
            if [g.prompt_id for g in groups] != ids.tolist():
                raise LzeBenchError("the backend returned groups for other prompts than it was asked to roll out")
            if counts is not None and [g.size for g in groups] != np.asarray(counts).tolist():
                raise LzeBenchError("the backend returned other numbers of rollouts than it was asked for")
            for group in groups:
                group.gen_step = step
            if not probe:
                generated.extend(groups)
            return groups, groups_batch(groups, step)

        selection, self.epoch_started = run_selection(
            self.selector, self.order, seed=self.seed, step=step, batch_size=self.batch_size,
            candidates_per_step=self.candidates_per_step, max_rounds=self.max_rounds, group_size=self.group_size,
            rollout=backend_rollout, features=self.features, begun_epoch=self.epoch_started,
            pending=self.pending, merge=merge_groups)
        self.pending = list(selection.pending)
        record = StepRecord(step=step, epoch=selection.epoch, prompts_considered=selection.considered,
                            prompts_rolled_out=selection.rolled_out, prompts_probed=int(selection.probe_ids.size),
                            prompts_dropped=selection.dropped, gen_rounds=selection.gen_rounds, partial=selection.partial,
                            probes=list(selection.probe_groups), time_rollout_s=selection.time_rollout_s,
                            time_select_s=selection.time_select_s, metrics=dict(self.selector.step_metrics()),
                            generated=generated, pending=len(self.pending), group_size=self.group_size,
                            extends_groups=bool(self.selector.extends_groups))
        for round_ in selection.rounds:
            decision, batch = round_.decision, round_.batch
            rollouts = decision.rollout_mask(batch.group_size, batch.valid)
            for g in np.flatnonzero(~decision.held):
                group, keep = round_.groups[g], bool(decision.keep[g])
                choice = rollouts[g, :group.size].copy()
                per_rollout = decision.keep_rollouts is not None
                record.rolled.append(group)
                record.kept_flags.append(keep)
                record.rounds.append(round_.index)
                record.choices.append(choice)
                record.stats_masks.append(choice if per_rollout and decision.advantage_stats == "kept" else None)
                record.adv_eps.append(None if not per_rollout or decision.advantage_eps is None
                                      else float(decision.advantage_eps))
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


def _rows(values: list, width: int, dtype) -> np.ndarray:
    """Per-group vectors as [G, width] rows, zero-padded (a ragged batch's padding; never counted)."""
    out = np.zeros((len(values), width), dtype=dtype)
    for row, value in enumerate(values):
        out[row, :len(value)] = value
    return out


def groups_batch(groups: list, step: int) -> RolloutBatch:
    """The selector's view of rolled-out groups (ragged, with a `valid` mask, when their sizes differ)."""
    if not groups:
        raise LzeBenchError("groups_batch needs at least one group")
    sizes = np.array([g.size for g in groups], dtype=np.int64)
    width = int(sizes.max())
    entropy = [g.response_entropy for g in groups]
    valid = np.arange(width)[None, :] < sizes[:, None]
    return RolloutBatch(
        prompt_ids=np.array([g.prompt_id for g in groups], dtype=np.int64),
        rewards=_rows([np.asarray(g.verdict_rewards, dtype=np.float32) for g in groups], width, np.float32),
        step=step,
        response_tokens=_rows([np.asarray(g.response_tokens, dtype=np.int32) for g in groups], width, np.int32),
        prompt_tokens=np.array([int(g.prompt_tokens[0]) for g in groups], dtype=np.int32),
        response_entropy=(_rows([np.asarray(e, dtype=np.float32) for e in entropy], width, np.float32)
                          if all(e is not None for e in entropy) else None),
        valid=None if valid.all() else valid,
    )
