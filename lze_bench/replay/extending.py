"""Replay of selectors that extend groups (speed, reinforce_ada) on a recorded log (selectors.md §8).

A logged row holds the rollouts its run generated for one prompt at one step. Such a selector asks
for rollouts a few at a time (`first_rollouts`, then `extend` for the groups it holds), so the
replay hands out each row's logged rollouts in generation order: a prompt's k-th requested rollout
is the k-th logged one. Where a selector asks for more than a row holds, the replay stops with one
line naming the prompt, the step, what was asked and what the log holds, since those rewards were
never generated. A uniform run with enough rollouts per prompt (`trainer.n_samples`) is such a log.

Choices (ours), in line with the replay of the other selectors:
- each logged step is one training step; its rows, in log order, are the candidates, offered once
  (`select_rollout(candidates, len(candidates))`); a decision asking for more fresh prompts
  (`more > 0`, SPEED's next call) ends the step, as the log holds no further candidates;
- held groups take their further rollouts from the row they started in, also at a later step
  (SPEED's carried queue), and come back first in the next batch, as in training;
- n (`selector.group_size`, Reinforce-Ada's kept rollouts per prompt) is `replay.group_size`
  (the compared run's `trainer.n_samples`; null = the log's first row's count); a row kept at a later step than its own is marked kept on its own row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.ragged import append_rollouts, stack
from lze_bench.selectors.base import TAG_SELECT_ROLLOUT, TAG_SELECT_UPDATE, RolloutBatch, step_rng

MAX_ROUNDS = 64  # a guard: a selector that holds forever without asking for rollouts


@dataclass
class HeldRow:
    row: int  # the log row the group's rollouts come from
    served: int  # logged rollouts handed out so far
    batch: RolloutBatch  # its one-row batch as the selector last saw it
    extend: int = 0


class LoggedRollouts:
    """Hands out each row's logged rewards in order; one line when a request runs past the row."""

    def __init__(self, log, name: str):
        self.log, self.name = log, name

    def take(self, row: int, start: int, count: int, step: int) -> RolloutBatch:
        length = int(self.log.lengths[row])
        if start + count > length:
            pid = int(self.log.prompt_id[row])
            raise LzeBenchError(
                f"replay: selector={self.name} asks for rollouts {start + 1}-{start + count} of prompt {pid} at step "
                f"{step}, and the log holds {length} for it ({self.log.row_names[row]}); those rewards were never "
                f"generated: replay it on a log with more rollouts per prompt (e.g. a uniform run with a larger "
                f"trainer.n_samples), or compare it by training (lze-bench train selector={self.name})")
        rewards = self.log.rewards[row, start:start + count][None, :]
        return RolloutBatch(prompt_ids=self.log.prompt_id[row:row + 1], rewards=rewards, step=step,
                            rollout_step=np.full(rewards.shape, step, dtype=np.int32))


def replay_extending_step(selector, log, rows, step, epoch, seed, n, pending: list, result) -> tuple[dict, list]:
    """One logged step of a selector that extends groups; returns (the summary dict, the groups still held)."""
    served = LoggedRollouts(log, selector.name)
    selector.group_size = int(n)
    candidates = log.prompt_id[rows]
    waiting = {int(log.prompt_id[h.row]) for h in pending}
    offered = np.flatnonzero(~np.isin(candidates, list(waiting)))
    chosen = np.asarray(selector.select_rollout(candidates[offered], offered.size, step,
                                                step_rng(seed, step, TAG_SELECT_ROLLOUT)), dtype=np.int64)
    row_of = dict(zip(candidates[offered].tolist(), rows[offered].tolist()))
    if not set(chosen.tolist()) <= set(row_of):
        raise LzeBenchError("the selector returned prompt ids that are not this step's candidates")
    fresh_rows = np.array([row_of[pid] for pid in chosen.tolist()], dtype=np.int64)
    first = int(selector.first_rollouts(n))
    held = list(pending)
    held_rows = [HeldRow(int(r), first, served.take(int(r), 0, first, step)) for r in fresh_rows]
    trained = generated = kept_groups = zero_var_kept = rounds = 0
    generated += first * len(held_rows)
    groups = [_extended(h, served, step) for h in held] + held_rows
    generated += sum(h.extend for h in held)
    while groups and rounds < MAX_ROUNDS:
        rounds += 1
        batch = stack([g.batch for g in groups], step)
        selector.observe(batch)
        decision = selector.select_update(batch, step, step_rng(seed, step, TAG_SELECT_UPDATE, rounds - 1))
        mask = decision.rollout_mask(batch.group_size, batch.valid)
        for g, group in enumerate(groups):
            result.rolled_out[group.row] = True
            if decision.keep[g]:
                result.kept[group.row] = True
                result.kept_rollouts[group.row, :group.served] = mask[g, :group.served]
                trained += int(mask[g].sum())
                kept_groups += 1
                zero_var_kept += bool(batch.zero_variance[g])
        held = [HeldRow(group.row, group.served, batch.subset([g]), int(decision.extension[g]))
                for g, group in enumerate(groups) if decision.held[g]]
        if decision.more > 0 or decision.defer or not any(h.extend > 0 for h in held):
            break
        groups = [_extended(h, served, step) for h in held]
        generated += sum(h.extend for h in held)
    summary = {"step": int(step), "epoch": int(epoch), "candidates": int(candidates.size), "rolled_out": int(fresh_rows.size),
               "kept": kept_groups, "zero_var_kept": zero_var_kept, "rollouts": generated, "rollouts_trained": trained,
               "more_asked": 0, "replayed": 0}
    return summary, held


def _extended(held: HeldRow, served: LoggedRollouts, step: int) -> HeldRow:
    """A held group with its next `extend` logged rollouts appended (as it comes back to the selector)."""
    if held.extend <= 0:
        return HeldRow(held.row, held.served, held.batch)
    new = served.take(held.row, held.served, held.extend, step)
    return HeldRow(held.row, held.served + held.extend, append_rollouts(held.batch, new, step))
