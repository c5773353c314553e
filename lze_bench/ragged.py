"""Ragged rollout batches: groups with different numbers of rollouts (methods.md §4.1).

A selector that holds groups and extends them (`UpdateDecision.hold/extend`:
SPEED, Reinforce-Ada) sees batches whose rows have different lengths. They
stay `RolloutBatch`es of padded `[G, n_max]` arrays with a `valid` mask, so a
selector's arithmetic stays vectorized; padding is 0 and never counted.
These helpers build them for the harness (lze_bench.step_rounds); a batch of
equal-length, same-step rows is returned untouched (`valid` stays None), so
selectors that never hold a group see exactly the batches they saw before.
"""

from __future__ import annotations

import numpy as np

from lze_bench.selectors.base import RolloutBatch

ROLLOUT_FIELDS = ("rewards", "response_tokens", "response_entropy")
ROW_FIELDS = ("prompt_tokens", "prompt_entropy", "prompt_embedding")


def _steps(batch: RolloutBatch) -> np.ndarray:
    if batch.rollout_step is not None:
        return batch.rollout_step
    return np.full(batch.rewards.shape, batch.step, dtype=np.int32)


def _valid(batch: RolloutBatch) -> np.ndarray:
    return np.ones(batch.rewards.shape, dtype=bool) if batch.valid is None else batch.valid


def _plain(batches: list[RolloutBatch], step: int) -> bool:
    """Whether the rows need no mask: one width, every rollout present and generated at `step`."""
    widths = {b.group_size for b in batches}
    return len(widths) == 1 and all(b.valid is None and b.rollout_step is None and b.step == step for b in batches)


def _pad(values: np.ndarray | None, width: int) -> np.ndarray | None:
    if values is None:
        return None
    out = np.zeros((values.shape[0], width), dtype=values.dtype)
    out[:, :values.shape[1]] = values
    return out


def stack(batches: list[RolloutBatch], step: int) -> RolloutBatch:
    """The rows of `batches`, in order, as one batch of step `step` (padded when their widths differ)."""
    batches = [b for b in batches if b.num_groups] or batches[:1]
    plain = _plain(batches, step)
    if len(batches) == 1 and plain:
        return batches[0]
    width = max(b.group_size for b in batches)
    values = {"prompt_ids": np.concatenate([b.prompt_ids for b in batches]), "step": int(step)}
    for name in ROLLOUT_FIELDS:
        parts = [getattr(b, name) for b in batches]
        if all(p is not None for p in parts):
            values[name] = np.concatenate([_pad(p, width) for p in parts])
    for name in ROW_FIELDS:
        parts = [getattr(b, name) for b in batches]
        if all(p is not None for p in parts):
            values[name] = np.concatenate(parts)
    if not plain:
        values["valid"] = np.concatenate([_pad(_valid(b), width) for b in batches])
        values["rollout_step"] = np.concatenate([_pad(_steps(b), width) for b in batches])
    return RolloutBatch(**values)


def append_rollouts(old: RolloutBatch, new: RolloutBatch, step: int) -> RolloutBatch:
    """Each row of `old` followed by the same prompt's new rollouts in `new` (same prompt ids, in order)."""
    if old.prompt_ids.tolist() != new.prompt_ids.tolist():
        raise ValueError("append_rollouts: the new rollouts are for other prompts than the held groups")
    old_valid, new_valid = _valid(old), _valid(new)
    counts = old_valid.sum(axis=1) + new_valid.sum(axis=1)
    width = int(counts.max()) if counts.size else 0
    values = {"prompt_ids": old.prompt_ids, "step": int(step)}
    columns = {"valid": (old_valid, new_valid), "rollout_step": (_steps(old), _steps(new))}
    for name in ROLLOUT_FIELDS:
        a, b = getattr(old, name), getattr(new, name)
        if a is not None and b is not None:
            columns[name] = (a, b)
    for name, (a, b) in columns.items():
        out = np.zeros((old.num_groups, width), dtype=a.dtype)
        for row in range(old.num_groups):  # a handful of held groups per round: a loop is clearer than fancy indexing
            joined = np.concatenate([a[row][old_valid[row]], b[row][new_valid[row]]])
            out[row, :joined.size] = joined
        values[name] = out
    for name in ROW_FIELDS:
        values[name] = getattr(old, name)
    return RolloutBatch(**values)
