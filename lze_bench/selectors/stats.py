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
    if POPCOUNT and n < 256:  # one popcount per row word, summed in bytes (a row holds < 256 True bytes)
        counts = np.bitwise_count(words[:, 0])
        for column in range(1, words.shape[1]):
            counts += np.bitwise_count(words[:, column])
        return counts
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
    return pass_rate, _any_per_row(rewards != rewards[:, :1]), False


def _padded(flags: np.ndarray) -> np.ndarray:
    """bool[G, w]: `flags` (bool[G, m]) with False columns appended up to w, a multiple of 8 (itself if m is)."""
    groups, width = flags.shape
    if width % 8 == 0 and flags.flags.c_contiguous:
        return flags
    padded = np.zeros((groups, -(-width // 8) * 8), dtype=bool)
    padded[:, :width] = flags
    return padded


def _any_per_row(flags: np.ndarray) -> np.ndarray:
    """bool[G]: `flags.any(axis=1)` read 8 bytes at a time (a reduction along a short last axis is slow)."""
    words = _padded(flags).view(np.uint64)  # uint64[G, w / 8]
    if not words.shape[1]:
        return np.zeros(flags.shape[0], dtype=bool)  # no column: nothing found
    found = words[:, 0] != 0
    for column in range(1, words.shape[1]):
        found |= words[:, column] != 0
    return found


def row_counts(flags: np.ndarray) -> np.ndarray:
    """Unsigned ints[G]: True entries per row of bool[G, m] (`flags.sum(axis=1)`), by row words (`_row_ones`)."""
    groups, width = flags.shape
    if not width:
        return np.zeros(groups, dtype=np.uint8)  # no column: no True entry
    return _row_ones(_padded(flags))


def varied_rows(rewards: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """bool[G]: max > min of each group's rewards (over its `valid` columns when ragged): a non-zero GRPO advantage.

    What `RolloutBatch.zero_variance` negates, without NumPy's reductions along a short last axis (~50 ms
    each at 10^6 x 8). Finite rewards (RolloutBatch refuses others): max > min iff some reward differs from
    another (+0.0 and -0.0 are equal both ways). Full rows: 0 < ones < n for 0/1 rewards (`binary_ones`),
    else "differs from the row's first". Ragged rows of 0/1 rewards (as many nonzero valid rewards as valid
    1.0s): 0 < valid ones < valid rollouts; other ragged rewards take the row reductions.
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    groups, n = rewards.shape
    if valid is None:
        ones = binary_ones(rewards)
        if ones is not None:
            return np.less(ones - ones.dtype.type(1), n - 1)  # 0 < ones < n: unsigned 0 - 1 wraps to the max
        return _any_per_row(rewards != rewards[:, :1])
    valid = np.asarray(valid, dtype=bool)
    right = np.equal(rewards, 1.0)
    right &= valid
    nonzero = np.not_equal(rewards, 0.0)  # -0.0 == 0.0: a -0.0 counts as a 0 verdict, as it compares
    nonzero &= valid
    if np.count_nonzero(nonzero) == np.count_nonzero(right):  # every valid reward is 0 or 1
        ones = row_counts(right)
        return (ones > 0) & (ones < row_counts(valid))
    high = np.where(valid, rewards, -np.inf).max(axis=1, initial=-np.inf)
    low = np.where(valid, rewards, np.inf).min(axis=1, initial=np.inf)
    return high > low


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


def first_of_each(positive: np.ndarray, valid: np.ndarray | None, pos_limit: np.ndarray,
                  neg_limit: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """bool[G, m]: each row's first `pos_limit[g]` positives and first `neg_limit[g]` negatives (valid, not
    positive) in column order, i.e. `positive & (cumsum(positive, 1) <= pos_limit[:, None]) | negative &
    (cumsum(negative, 1) <= neg_limit[:, None])`, equal entry for entry. `positive` must lie within `valid`
    (None: every column valid); limits: ints[G], any sign.

    A cumulative sum (or a broadcast comparison) along a short last axis costs ~50 ms at 10^6 x 8: one inner
    loop per row. Here rows are read 8 columns at a time as little-endian words of 0/1 bytes, and every
    operation is a flat pass (callers pass blocks of rows that fit in cache): a word times 0x0101...01 holds
    in byte j the count of True bytes 0..j (each <= 8: no carries), to which the count of the row's earlier
    words is added in every byte (counts stay below 256: no carries either; 255 columns or more take the
    cumsums); a byte is kept if its count < limit + 1, held per byte the same way. Negatives are
    `valid ^ positive` per word. Without `valid`, the earlier words go into each word's bounds instead
    (`_first_in_full_rows`): one pass per operation over every word of the rows at once.
    `out` (optional, bool[G, m]): the result is written there and returned.
    """
    positive = np.asarray(positive, dtype=bool)
    groups, width = positive.shape
    if out is not None and (out.dtype != bool or out.shape != positive.shape):
        raise ValueError(f"first_of_each: out must be bool{list(positive.shape)}, got {out.dtype}{list(out.shape)}")
    pos_limit, neg_limit = np.asarray(pos_limit).reshape(-1), np.asarray(neg_limit).reshape(-1)
    if width >= 255 or not np.little_endian:
        negative = ~positive if valid is None else np.asarray(valid, dtype=bool) & ~positive
        chosen = ((positive & (np.cumsum(positive, axis=1) <= pos_limit[:, None]))
                  | (negative & (np.cumsum(negative, axis=1) <= neg_limit[:, None])))
    else:
        chosen = _first_by_words(_padded(positive), valid, pos_limit, neg_limit, out)
    if out is None:
        return np.ascontiguousarray(chosen[:, :width])  # (no copy when nothing was padded)
    if chosen is not out:
        out[...] = chosen[:, :width]
    return out


def _first_by_words(positive, valid, pos_limit, neg_limit, out) -> np.ndarray:
    """`first_of_each` on rows padded to whole words (bool[G, w], w a multiple of 8), into `out` itself when it
    has that shape and is C-contiguous (else a new array: the caller cuts and copies it)."""
    direct = out is not None and positive.shape == out.shape and out.flags.c_contiguous
    chosen = out if direct else np.empty(positive.shape, dtype=bool)
    if valid is None:
        _first_in_full_rows(positive.view(np.uint64), pos_limit, neg_limit, chosen.view(np.uint64))
    else:
        valid_words = _padded(np.asarray(valid, dtype=bool)).view(np.uint64)
        pos_bound, neg_bound = _byte_bounds(pos_limit), _byte_bounds(neg_limit)
        _first_in_words(positive.view(np.uint64), valid_words, pos_bound, neg_bound, chosen.view(np.uint64))
    return chosen


def _first_in_full_rows(pos_words, pos_limit, neg_limit, out) -> None:
    """`first_of_each` without `valid` (every column a rollout) on rows of uint64[g, w / 8] words of 0/1 bytes,
    into `out` (same shape), in flat passes over all the words at once. A row's earlier words go into each
    word's bounds instead of its counts, so a byte's count is within its own word: the word times 0x0101...01
    for the positives, 0x0807...01 minus that for the negatives (byte j covers j + 1 entries; no borrow:
    positives <= entries byte by byte). A byte is kept if its class's count is below its class's bound;
    neg_ok ^ ((pos_ok ^ neg_ok) & positive) picks the class per byte."""
    spread = np.uint64(0x0101010101010101)
    rows, words = pos_words.shape
    pos_bound, neg_bound = _word_bounds(pos_words, pos_limit, neg_limit)
    pos_count = np.multiply(pos_words, spread)
    pos_ok = np.less(pos_count.view(np.uint8), pos_bound.view(np.uint8)).view(np.uint64)
    neg_count = np.subtract(np.uint64(0x0807060504030201), pos_count, out=pos_count)
    neg_ok = np.less(neg_count.view(np.uint8), neg_bound.view(np.uint8)).view(np.uint64)
    pos_ok ^= neg_ok
    pos_ok &= pos_words
    np.bitwise_xor(neg_ok, pos_ok, out=out)


def _word_bounds(pos_words, pos_limit, neg_limit) -> tuple[np.ndarray, np.ndarray]:
    """uint64[g, w] twice: per row word, limit + 1 minus the row's entries of the class in its earlier words,
    floored at 0, in each of the word's 8 bytes: a True entry whose count within its word is c is among the
    row's first `limit` iff c < that bound (a row holds <= 254 entries, so the bound fits a byte). Kept in
    uint8 with saturating subtraction (x - min(x, y)): array-array ufuncs on bytes are SIMD; a min against a
    scalar is not (~8x slower)."""
    rows, words = pos_words.shape
    bounds = np.empty((2, rows, words), dtype=np.uint8)
    pos_left, neg_left = _bound_bytes(pos_limit), _bound_bytes(neg_limit)
    bounds[0, :, 0], bounds[1, :, 0] = pos_left, neg_left
    for column in range(1, words):
        ones = np.bitwise_count(pos_words[:, column - 1])  # uint8: the previous word's positives
        zeros = np.subtract(np.uint8(8), ones)  # its negatives (every column a rollout)
        pos_left -= np.minimum(pos_left, ones, out=ones)
        neg_left -= np.minimum(neg_left, zeros, out=zeros)
        bounds[0, :, column], bounds[1, :, column] = pos_left, neg_left
    wide = bounds.astype(np.uint64)
    wide *= np.uint64(0x0101010101010101)
    return wide[0], wide[1]


def _bound_bytes(limit: np.ndarray) -> np.ndarray:
    """uint8: min(max(limit, 0), 254) + 1, for limits of any integer type (uint8: the common, fast case)."""
    if limit.dtype == np.uint8:
        return np.subtract(limit, np.equal(limit, 255).view(np.uint8)) + np.uint8(1)
    return (np.minimum(np.maximum(limit, 0), 254) + 1).astype(np.uint8)


def _byte_bounds(limit: np.ndarray) -> np.ndarray:
    """uint64: min(max(limit, 0), 254) + 1 in each of the 8 bytes: a True entry's count c is in [1, 254], so
    c <= limit <=> c < that."""
    wide = _bound_bytes(limit).astype(np.uint64)  # in [1, 255]
    wide *= np.uint64(0x0101010101010101)
    return wide


def _first_in_words(pos_words, valid_words, pos_bound, neg_bound, out) -> None:
    """`first_of_each` on rows given as uint64[g, w / 8] words of 0/1 bytes (`valid_words` None: all valid),
    with the `_byte_bounds` of the limits, into `out` (same shape). Without `valid_words`, a negative's count
    is its column's count of rollouts (8 c + j + 1) minus the positives' count, per byte (never below 0)."""
    spread, top = np.uint64(0x0101010101010101), np.uint64(56)
    rows = pos_words.shape[0]
    pos_count, neg_count = np.zeros(rows, dtype=np.uint64), np.zeros(rows, dtype=np.uint64)
    neg, below, kept = (np.empty(rows, dtype=np.uint64) for _ in range(3))
    for column in range(pos_words.shape[1]):
        pos = pos_words[:, column]
        if valid_words is None:
            np.bitwise_xor(pos, spread, out=neg)
            counted = ((pos_count, pos),)
        else:
            np.bitwise_xor(valid_words[:, column], pos, out=neg)  # valid and not positive
            counted = ((pos_count, pos), (neg_count, neg))
        for count, words in counted:
            count >>= top  # the count of the earlier words (the last byte of the last counts) ...
            count *= spread  # ... in every byte
            np.multiply(words, spread, out=below)
            count += below  # inclusive counts
        if valid_words is None:  # bytes 8 c + 1 .. 8 c + 8 (the padding's may wrap: never kept, cut off)
            rollouts = np.uint64((0x0807060504030201 + 8 * column * 0x0101010101010101) % 2**64)
            np.subtract(rollouts, pos_count, out=neg_count)
        np.less(pos_count.view(np.uint8), pos_bound.view(np.uint8), out=below.view(bool))
        np.bitwise_and(below, pos, out=kept)
        np.less(neg_count.view(np.uint8), neg_bound.view(np.uint8), out=below.view(bool))
        below &= neg
        kept |= below
        out[:, column] = kept
