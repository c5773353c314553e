"""Top-k and Gumbel-top-k helpers shared by selectors (selectors.md §0 "Ranking and ties")."""

from __future__ import annotations

import numpy as np


def top_k_mask(key: np.ndarray, k: int) -> np.ndarray:
    """bool[m]: the same k entries `top_k` picks (ties by ascending position), in O(m).

    Finds the k-th largest value with a partition, takes every key above it,
    then the first positions among the keys equal to it. NaN keys are an error
    (found by `max`, which propagates NaN: one reduction, no temporary mask).
    """
    key = np.asarray(key).reshape(-1)
    m = key.size
    k = min(max(0, int(k)), m)
    mask = np.zeros(m, dtype=bool)
    if k == 0:
        return mask
    if k == m:
        mask[:] = True
        return mask
    if np.isnan(key.max()):
        raise ValueError("top_k: keys contain NaN")
    kth = np.partition(key, m - k)[m - k]
    np.greater(key, kth, out=mask)
    need = k - int(np.count_nonzero(mask))  # >= 1: fewer than k keys exceed the k-th largest
    mask[np.flatnonzero(key == kth)[:need]] = True
    return mask


def gumbel_noise(rng: np.random.Generator, scale: float, size: int) -> np.ndarray:
    """float64[size]: one `rng.gumbel(0, scale, size)` draw, its logarithms taken by `np.log`.

    NumPy draws each value from one uniform U of `rng.random`, as
    `-scale * log(-log(1 - U))`, and draws again when U == 0 (probability
    2^-53 per value). Here the same uniforms are drawn by `rng.random(size)`
    and put through `np.log`; on a zero uniform the rng is rewound and
    `rng.gumbel` itself draws, so the stream consumed is always NumPy's. The
    values can differ from NumPy's in the last bit (`np.log` is vectorised,
    the generator's log is the C library's); selectors have always ranked
    these, so their decisions reproduce.
    """
    state = rng.bit_generator.state
    uniform = rng.random(size)
    if size and uniform.min() == 0.0:
        rng.bit_generator.state = state
        return rng.gumbel(0.0, scale, size)
    return -float(scale) * np.log(-np.log(1.0 - uniform))


def gumbel_where(rng: np.random.Generator, scale: float, size: int, where: np.ndarray) -> np.ndarray:
    """`gumbel_noise(rng, scale, size)` where `where` is True, 0 elsewhere (the same stream consumed)."""
    return np.where(np.asarray(where, dtype=bool).reshape(-1), gumbel_noise(rng, scale, size), 0.0)


def gumbel_top_k(rng: np.random.Generator, scale: float, size: int, idx: np.ndarray, base: np.ndarray,
                 k: int) -> np.ndarray:
    """bool[len(idx)]: which of `idx` are in `top_k_mask(key, k)`, key = base + gumbel_noise(rng, scale, size) there.

    `idx` are increasing positions in [0, size) and `base` their float64
    values (key = -inf at every other position); `k <= idx.size`, so no
    -inf key is chosen and only the noise at `idx` matters. One noise vector
    of `size` values is drawn (spec §0), ties go by position.
    """
    k = min(max(0, int(k)), np.size(idx))
    return top_k_mask(gumbel_noise(rng, scale, size)[idx] + base, k)


def median(values: np.ndarray) -> float:
    """`float(np.median(values))` for finite float32 / float64 values, with one partition instead of two.

    np.median partitions at both middle positions of an even-sized array; the
    lower middle value is also the largest of the lower half after a partition
    at the upper one, so one partition and one `max` find the same two values.
    The result is their float64 mean, `(lo + hi) / 2`, as np.median computes
    it (for float32 input: of the float32 values cast to float64, which is what
    np.median of the float64 upcast returns). Float32 input is partitioned as
    float32 (half the memory traffic at 10^6 values).
    """
    values = np.asarray(values).reshape(-1)
    m = values.size
    if m == 0:
        return float("nan")
    part = np.partition(values, m // 2)
    hi = np.float64(part[m // 2])
    if m % 2:
        return float(hi)
    lo = np.float64(part[: m // 2].max())
    return float((lo + hi) / 2.0)

