"""Per-group reward statistics shared by selectors: pass rate, "varied" (non-zero GRPO advantage), counts.

Rewards are float32[G, n], one row per group; `valid` (bool[G, n]) marks the columns of a ragged
group that hold a rollout. Rewards are finite (RolloutBatch refuses others), so "max > min" is "some
reward differs from the row's first".
"""

from __future__ import annotations

import numpy as np

from lze_bench.errors import LzeBenchError

ONE_BITS = 0x3F800000  # the float32 bit pattern of 1.0


def binary_ones(rewards: np.ndarray) -> np.ndarray | None:
    """Correct responses per group (unsigned ints[G]) if every reward is exactly +0.0 or 1.0, else None.

    Compared bit for bit, so -0.0 (or any other value) makes the rewards non-binary. Counts are unsigned
    (uint8 for n <= 8, uint32 beyond), so callers may test 0 < count < n as count - 1 < n - 1.
    """
    rewards = np.asarray(rewards)
    if rewards.dtype != np.float32 or rewards.ndim != 2 or rewards.size == 0:
        return None
    bits = rewards.view(np.uint32)
    ones = bits == ONE_BITS
    if np.count_nonzero(bits) != np.count_nonzero(ones):
        return None
    return ones.sum(axis=1, dtype=np.uint8 if rewards.shape[1] <= 8 else np.uint32)


def reward_stats(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """`group_stats` plus whether every reward is exactly +0.0 or 1.0 (which proves them in [0, 1])."""
    rewards = np.asarray(rewards, dtype=np.float32)
    n = rewards.shape[1]
    if n == 0:
        raise LzeBenchError("rewards have zero responses per group; every group needs n >= 1")
    # einsum: one sequential float32 sum per row (exact for 0/1 rewards up to 2^24 responses)
    pass_rate = np.divide(np.einsum("ij->i", rewards), n, dtype=np.float64)
    varied = np.any(rewards != rewards[:, :1], axis=1)
    return pass_rate, varied, binary_ones(rewards) is not None


def group_stats(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pass rate float64[G], varied bool[G]) of rewards float32[G, n]: the mean reward (from the float32
    row sum) and max > min (the group has a non-zero GRPO advantage)."""
    pass_rate, varied, _ = reward_stats(rewards)
    return pass_rate, varied


def pass_rates(rewards: np.ndarray) -> np.ndarray:
    """float64[G]: `rewards.mean(axis=1, dtype=float64)`, RolloutBatch.pass_rate of a full batch."""
    return np.asarray(rewards, dtype=np.float32).mean(axis=1, dtype=np.float64)


def row_counts(flags: np.ndarray) -> np.ndarray:
    """int[G]: True entries per row of bool[G, m]."""
    return np.count_nonzero(flags, axis=1)


def varied_rows(rewards: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """bool[G]: max > min of each group's rewards (over its `valid` columns when ragged): a non-zero GRPO
    advantage (what `RolloutBatch.zero_variance` negates)."""
    rewards = np.asarray(rewards, dtype=np.float32)
    if valid is None:
        return np.any(rewards != rewards[:, :1], axis=1)
    valid = np.asarray(valid, dtype=bool)
    high = np.where(valid, rewards, -np.inf).max(axis=1, initial=-np.inf)
    low = np.where(valid, rewards, np.inf).min(axis=1, initial=np.inf)
    return high > low


def first_of_each(positive: np.ndarray, valid: np.ndarray | None, pos_limit: np.ndarray,
                  neg_limit: np.ndarray) -> np.ndarray:
    """bool[G, m]: each row's first `pos_limit[g]` positives and first `neg_limit[g]` negatives (valid, not
    positive) in column order. `positive` must lie within `valid` (None: every column valid)."""
    positive = np.asarray(positive, dtype=bool)
    negative = ~positive if valid is None else np.asarray(valid, dtype=bool) & ~positive
    pos_limit, neg_limit = np.asarray(pos_limit).reshape(-1, 1), np.asarray(neg_limit).reshape(-1, 1)
    return ((positive & (np.cumsum(positive, axis=1) <= pos_limit))
            | (negative & (np.cumsum(negative, axis=1) <= neg_limit)))
