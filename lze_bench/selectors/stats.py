"""Per-group reward statistics shared by selectors: pass rate and "varied" (non-zero GRPO advantage).

Fast at 10^6 groups x n responses and equal to the row reductions
(`rewards.mean(axis=1)`, `max > min`) bit for bit; 0/1 verdicts, the common
case, take a popcount path (tests/test_selector_kernels.py).
"""

from __future__ import annotations

import numpy as np

from lze_bench.errors import LzeBenchError


PATTERN_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # a row of n bools read as one word
POPCOUNT = hasattr(np, "bitwise_count")  # NumPy >= 2.0: one SIMD popcount per row word


def _row_ones(flags: np.ndarray) -> np.ndarray:
    """Unsigned ints[G]: True entries per row of a C-contiguous bool[G, n], n in {1, 2, 4} or a multiple of 8.

    Reads each row as machine words: a True byte is 0x01, so a word's
    popcount (`np.bitwise_count`, NumPy >= 2) is its number of True bytes;
    without it, a word of 0/1 bytes times 0x0101...01 carries the byte sum
    into its top byte (no carries: the sum is <= 8). Counts come back as
    uint8 for n <= 8 (uint32 beyond): converting small ints to float64 is a
    SIMD pass, uint64 is not.
    """
    groups, n = flags.shape
    if n in (1, 2, 4, 8) and POPCOUNT:
        return np.bitwise_count(flags.view(PATTERN_WORDS[n])[:, 0])
    if n in (1, 2, 4, 8):
        dtype = PATTERN_WORDS[n]
        spread = dtype(int("01" * n, 16))
        product = flags.view(dtype)[:, 0] * spread
        return product.view(np.uint8)[n - 1 :: n].copy()  # little-endian: the top byte is the last one
    words = flags.view(np.uint64)
    counts = np.zeros(groups, dtype=np.uint32)
    for column in range(words.shape[1]):
        counts += (words[:, column] * np.uint64(0x0101010101010101)) >> np.uint64(56)
    return counts


def binary_ones(rewards: np.ndarray) -> np.ndarray | None:
    """Correct responses per group (unsigned ints[G]) if every reward is exactly +0.0 or 1.0, else None.

    The common case (a verifier's 0/1 verdicts) in flat SIMD passes over the
    float32 bits: 1.0 is 0x3F800000, so "as many nonzero bit patterns as 1.0
    patterns" proves every reward is +0.0 or 1.0 (a -0.0, 0.5 or 2.0 breaks
    the equality; the 1.0 patterns are counted per group anyway). Works in
    blocks of ~2^16 rewards (256 KiB), so the rewards are read from memory once
    and the other passes hit cache; the first block is also checked alone, so
    non-binary rewards stop there.
    """
    rewards = np.asarray(rewards)
    if rewards.dtype != np.float32 or rewards.ndim != 2 or not rewards.flags.c_contiguous or rewards.size == 0:
        return None
    groups, n = rewards.shape
    if (n % 8 and n not in (1, 2, 4)) or not np.little_endian:
        return None  # row words cannot be read for this n (rare): the general path
    bits = rewards.view(np.uint32)
    rows = max(1, (1 << 16) // n)  # 256 KiB of rewards per block: read from memory once (measured best)
    counts = np.empty(groups, dtype=np.uint8 if n <= 8 else np.uint32)
    ones = np.empty((min(rows, groups), n), dtype=bool)
    nonzero = 0
    for start in range(0, groups, rows):
        part = bits[start : start + rows]
        flags = ones[: part.shape[0]]
        np.equal(part, 0x3F800000, out=flags)
        nonzero += np.count_nonzero(part)
        counts[start : start + rows] = _row_ones(flags)
        if start == 0 and int(counts[:rows].sum(dtype=np.int64)) != nonzero:
            return None
    return counts if int(counts.sum(dtype=np.int64)) == nonzero else None


def reward_stats(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """`group_stats` plus whether every reward is exactly +0.0 or 1.0 (which proves them in [0, 1])."""
    rewards = np.asarray(rewards, dtype=np.float32)
    groups, n = rewards.shape
    if n == 0:
        raise LzeBenchError("rewards have zero responses per group; every group needs n >= 1")
    ones = binary_ones(rewards)
    if ones is not None:
        varied = np.less(ones - ones.dtype.type(1), n - 1)  # 0 < ones < n: unsigned 0 - 1 wraps to the max
        return np.divide(ones, n, dtype=np.float64), varied, True
    sums = np.einsum("ij->i", rewards)  # float32: exact for 0/1 rewards up to 2^24 responses
    pass_rate = np.divide(sums, n, dtype=np.float64)
    differs = rewards != rewards[:, :1]  # bool[G, n]
    width = -(-n // 8) * 8
    if width != n:
        padded = np.zeros((groups, width), dtype=bool)
        padded[:, :n] = differs
        differs = padded
    words = differs.view(np.uint64)  # uint64[G, width / 8]
    varied = words[:, 0] != 0
    for column in range(1, words.shape[1]):
        varied |= words[:, column] != 0
    return pass_rate, varied, False


def group_stats(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pass rate float64[G], varied bool[G]) of rewards float32[G, n], fast at 10^6 groups.

    `varied` = some reward of the group differs from its first (max > min):
    the group has a non-zero GRPO advantage. 0/1 rewards (`binary_ones`): the
    pass rate is count / n (what the float32 sum gives: exact up to 2^24) and
    varied is 0 < count < n. Otherwise NumPy reductions along a short last
    axis are slow (tens of ms at 10^6 x 8), so the sum goes through einsum's
    single-threaded loop (no BLAS, so no thread-count dependence) and the
    comparison mask is read 8 bytes at a time.
    """
    pass_rate, varied, _ = reward_stats(rewards)
    return pass_rate, varied


def pass_rates(rewards: np.ndarray) -> np.ndarray:
    """float64[G]: `rewards.mean(axis=1, dtype=float64)` (RolloutBatch.pass_rate) bit for bit, fast for 0/1.

    0/1 rewards: count / n, the float64 mean of exact 0/1 terms; any other
    rewards take NumPy's float64 mean itself (float32 sums, as in `group_stats`,
    could differ from it in the last bit).
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    ones = binary_ones(rewards)
    if ones is not None:
        return np.divide(ones, rewards.shape[1], dtype=np.float64)
    return rewards.mean(axis=1, dtype=np.float64)





def _row_codes(flags: np.ndarray) -> np.ndarray:
    """uint8[G]: sum_j flags[:, j] << j of a C-contiguous bool[G, n], n in PATTERN_WORDS, in one multiply pass.

    The row's n 0/1 bytes read as one little-endian word have flag j at bit 8j;
    the multiplier puts a copy of bit 8j at bit 8(n-1) + j for every j, and no
    other partial product reaches the top byte or carries into it (the
    partial products below it sit at distinct bits), so the top byte is the code.
    `rows_by_pattern` checks this on all 2^n patterns before using the codes.
    """
    n = flags.shape[1]
    dtype = PATTERN_WORDS[n]
    magic = dtype(sum(1 << (8 * (n - 1) - 7 * j) for j in range(n)))
    product = flags.view(dtype)[:, 0] * magic
    return product.view(np.uint8)[n - 1 :: n]


def rows_by_pattern(flags: np.ndarray, rule) -> np.ndarray:
    """`rule(flags)` for a row-wise rule bool[G, n] -> bool[G, n], evaluated once per possible row instead of per row.

    A rule whose output row depends only on its input row (PODS's kept
    rollouts of 0/1 rewards) has at most 2^n distinct rows: for n in {1, 2,
    4, 8} the rule runs on the 2^n patterns and each group's row is one
    gather of an n-byte word from that table (at 10^6 groups x 8 rollouts,
    a few ms instead of the rule's ~20 column passes). Other n (or big-endian
    machines) call the rule itself. Same values: the table row of a pattern
    is the rule's row for that pattern.
    """
    flags = np.ascontiguousarray(flags, dtype=bool)
    groups, n = flags.shape
    if n not in PATTERN_WORDS or not np.little_endian:
        return rule(flags)
    codes = np.arange(1 << n, dtype=np.uint16)
    patterns = np.ascontiguousarray(((codes[:, None] >> np.arange(n)) & 1).astype(bool))
    if not np.array_equal(_row_codes(patterns), codes):  # the multiply trick, checked on every pattern
        return rule(flags)
    table = np.ascontiguousarray(rule(patterns), dtype=bool)
    words = table.view(PATTERN_WORDS[n])[:, 0]
    return words.take(_row_codes(flags)).view(bool).reshape(groups, n)
