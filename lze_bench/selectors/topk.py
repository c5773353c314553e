"""Top-k and Gumbel-top-k kernels shared by selectors (selectors.md §0 "Ranking and ties").

Exact and fast at 10^6 keys: `top_k_mask` is O(m) (one partition), the
Gumbel helpers draw exactly the stream of one `rng.gumbel(0, scale, m)` and
compute noise only where it can matter; `gumbel_top_k_codes` ranks keys
whose base is known through one-byte codes without a logarithm per key.
Every function returns what the straightforward formula returns (tests/test_selector_kernels.py checks it on
random inputs with ties); the docstrings say why each shortcut is exact.
"""

from __future__ import annotations

import numpy as np

APPROX_MIN = 4096  # gumbel_top_k: below this many keys the float64 path is cheap enough
BLOCK = 1 << 15  # keys per block of `_approx_keys`: 128 KiB of float32 plus 512 KiB of inputs stay in cache
SMALL_U = 2.0**-8  # u below this: 1 - u rounded to float32 loses the digits log needs; computed in float64


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


def _gumbel_uniforms(rng: np.random.Generator, size: int) -> np.ndarray | None:
    """The `size` doubles `rng.gumbel(size=size)` would consume, or None with the rng left untouched.

    NumPy draws a gumbel as `loc - scale * log(-log(1 - U))` from one
    `next_double` U, which is what `rng.random` returns, but rejects U == 0
    (then `1 - U == 1`) and draws again. That happens with probability 2^-53
    per value; when it does, the state is restored and the caller uses
    `rng.gumbel` itself, so the stream stays exactly NumPy's.
    """
    state = rng.bit_generator.state
    uniform = rng.random(size)
    if size and uniform.min() == 0.0:
        rng.bit_generator.state = state
        return None
    return uniform


def _neg_log_log(values: np.ndarray, scale: float) -> np.ndarray:
    """In place: `-scale * log(-log(1 - U))`, NumPy's gumbel formula with loc=0, op for op."""
    np.subtract(1.0, values, out=values)
    np.log(values, out=values)
    np.negative(values, out=values)
    np.log(values, out=values)
    values *= -float(scale)
    return values


def gumbel_where(rng: np.random.Generator, scale: float, size: int, where: np.ndarray) -> np.ndarray:
    """`rng.gumbel(0, scale, size)` evaluated only where `where` is True (0 elsewhere).

    Consumes exactly the same stream as `rng.gumbel(0.0, scale, size)` and gives
    the same values at the selected positions (see `_gumbel_uniforms`; a zero
    value may come out as -0.0 where NumPy writes 0.0 - 0.0 = +0.0). Selectors
    only need the noise of groups that can be chosen, and the two logs are most
    of the cost at 10^6 groups. Positions go through `flatnonzero` + `take`:
    boolean-mask gathers and scatters are 3x slower on random masks.
    """
    where = np.asarray(where, dtype=bool).reshape(-1)
    uniform = _gumbel_uniforms(rng, size)
    if uniform is None:
        return np.where(where, rng.gumbel(0.0, scale, size), 0.0)
    idx = np.flatnonzero(where)
    noise = np.zeros(size, dtype=np.float64)
    noise[idx] = _neg_log_log(uniform.take(idx), scale)
    return noise


def gumbel_top_k(rng: np.random.Generator, scale: float, size: int, idx: np.ndarray, base: np.ndarray, k: int,
                 base_absmax: float | None = None) -> np.ndarray:
    """bool[len(idx)]: which of `idx` are in `top_k_mask(key, k)`, key = base + rng.gumbel(0, scale, size) there.

    `idx` are increasing positions in [0, size) and `base` their float64
    values (key = -inf at every other position); `k <= idx.size`, so no
    -inf key is ever chosen and only the noise at `idx` matters. Same rng
    stream as one `rng.gumbel(0, scale, size)` (spec §0) and the same float64
    keys decide, so the same choice as the straightforward formula, ties by
    position included. `base_absmax` (optional) is max |base| if known.

    Speed (our choice, exact): the float64 log-log and partition of every key
    are most of the cost at 10^6 groups, yet only keys near the k-th largest
    matter. So keys are first computed in float32 (`_approx_keys`), whose
    error is provably below `delta`; a key more than 2 delta above the k-th
    largest float32 key is surely chosen, one more than 2 delta below surely
    not, and only the few in between get their float64 key and an exact top-k.
    """
    k = min(max(0, int(k)), idx.size)
    uniform = _gumbel_uniforms(rng, size)
    if uniform is None:
        noise = rng.gumbel(0.0, scale, size).take(idx)
        noise += base
        return top_k_mask(noise, k)
    u = uniform.take(idx)
    if 0 < k < idx.size and idx.size >= APPROX_MIN:
        chosen = _filtered_top_k(u, float(scale), base, k, base_absmax)
        if chosen is not None:
            return chosen
    return top_k_mask(_neg_log_log(u, scale) + base, k)



def gumbel_top_k_dense(rng: np.random.Generator, scale: float, base: np.ndarray, k: int,
                       base_absmax: float | None = None) -> np.ndarray:
    """bool[size]: `top_k_mask(base + rng.gumbel(0, scale, size), k)` for float64 `base` with -inf where excluded.

    `gumbel_top_k` over every position at once: `base` is the key without noise
    (-inf at positions that can never be chosen, finite elsewhere) and k is at
    most the number of finite entries, so no -inf key is chosen. Same rng
    stream, same float64 keys near the k-th largest and the same stable ties as
    `gumbel_top_k(rng, scale, size, idx, base[idx], k)` scattered back to
    `idx = flatnonzero(isfinite(base))`; at 10^6 groups it saves that index
    and the gathers and scatter around it (a -inf key stays -inf through the
    float32 filter and never enters its band). `base_absmax` (optional) is the
    largest |finite base|; without it the float32 filter is not used.
    """
    base = np.asarray(base, dtype=np.float64).reshape(-1)
    size = base.size
    k = min(max(0, int(k)), size)
    uniform = _gumbel_uniforms(rng, size)
    if uniform is None:
        key = rng.gumbel(0.0, scale, size)
        key += base
        return top_k_mask(key, k)
    if 0 < k < size and size >= APPROX_MIN and base_absmax is not None:
        chosen = _filtered_top_k(uniform, float(scale), base, k, base_absmax)
        if chosen is not None:
            return chosen
    key = _neg_log_log(uniform, scale)
    key += base
    return top_k_mask(key, k)



def _approx_keys(u: np.ndarray, scale: float, base: np.ndarray) -> np.ndarray:
    """float32 `base - scale * log(-log(1 - u))`, with |error| <= `_approx_delta` wherever u >= SMALL_U.

    Error budget, assuming only that float32 log is within 8 ulp (2^-20
    relative; NumPy's SIMD log is within 4): 1 - u rounded to float32 moves
    log(1 - u) by <= 2^-24, relative <= 2^-16 of -log(1 - u) >= u >= 2^-8;
    with the log's own error the inner log is off by a relative
    rho <= 2^-16 + 2^-20, so the outer log (|log| <= 5.55 for inputs in
    [2^-8, 37]) is off by <= 1.01 rho + 5.6 * 2^-20 = 2.2e-5 absolute, times
    scale; rounding the float32 scale, product and sum adds <= 2^-21 * 5.6
    scale + 2^-24 |base|; float64's own rounding is below 1e-15 (|key| + 1).
    In all <= 2.5e-5 scale + 2^-24 |base|: `_approx_delta` is 5x and 16x that.
    """
    key = np.empty(u.size, dtype=np.float32)
    for start in range(0, u.size, BLOCK):  # cache-sized blocks: six passes over each block, one over memory
        part = key[start : start + BLOCK]
        np.subtract(1.0, u[start : start + BLOCK], out=part, casting="same_kind")  # 1 - u (exact), rounded once
        with np.errstate(divide="ignore"):  # 1 - u == 1 in float32 (u < 2^-25): those keys are replaced
            np.log(part, out=part)
            np.negative(part, out=part)
            np.log(part, out=part)
        part *= np.float32(-scale)
        np.add(part, base[start : start + BLOCK], out=part, casting="same_kind")
    return key


def _approx_delta(scale: float, base_absmax: float) -> float:
    """A bound on |float32 key - float64 key| for `_approx_keys` (see there), with margins 5x and 16x."""
    return 2.0**-13 * scale + 2.0**-20 * (base_absmax + 6.0 * scale)


def _filtered_top_k(u: np.ndarray, scale: float, base: np.ndarray, k: int,
                    base_absmax: float | None) -> np.ndarray | None:
    """The exact top-k mask of `base + gumbel(u)`, via the float32 filter; None to fall back."""
    if base_absmax is None:
        base_absmax = max(abs(float(base.max())), abs(float(base.min())))  # NaN propagates
    if not (np.isfinite(scale) and np.isfinite(base_absmax) and scale > 0):
        return None  # NaN / inf keys: the float64 path raises or ranks them as before
    key = _approx_keys(u, scale, base)
    small = np.flatnonzero(u < SMALL_U)
    if small.size:  # exact float64 keys, rounded to float32: error <= 2^-24 |key| < delta
        key[small] = _neg_log_log(u.take(small), scale) + base.take(small)
    delta = _approx_delta(scale, base_absmax)
    m = key.size
    kth = float(np.partition(key, m - k)[m - k])  # within delta of the exact k-th largest key
    above = np.float32(kth + 2.0 * delta)
    below = np.float32(kth - 2.0 * delta)
    above = above if float(above) >= kth + 2.0 * delta else np.nextafter(above, np.float32(np.inf))
    below = below if float(below) <= kth - 2.0 * delta else np.nextafter(below, np.float32(-np.inf))
    chosen = key > above  # exact key > k-th largest: surely in
    band = np.flatnonzero(np.logical_xor(key >= below, chosen))  # the only undecided keys
    need = k - int(np.count_nonzero(chosen))
    if not 0 <= need <= band.size:
        return None  # cannot happen within the error bound; the float64 path decides
    exact = _neg_log_log(u.take(band), scale)
    exact += base.take(band)
    if np.any(np.abs(exact - key.take(band)) > delta):
        return None  # the float32 log is less accurate than assumed: do not trust the filter
    chosen[band.take(np.flatnonzero(top_k_mask(exact, need)))] = True
    return chosen


SAMPLE = 1 << 14  # gumbel_top_k_codes: keys computed exactly to place the cut
SAMPLE_Z = 3.5  # its margin, in binomial standard deviations of the sample's count above the cut


def gumbel_top_k_codes(rng: np.random.Generator, scale: float, codes: np.ndarray, unit: float, exact,
                       k: int) -> np.ndarray:
    """`gumbel_top_k_dense(rng, scale, base, k)` with `base` known through one-byte codes.

    `base` is `exact(None)` (float64[size]) where `codes > 0` and -inf where
    `codes == 0`; `base` lies in `((codes - 1) unit, codes unit]` (up to a
    relative 1e-12), and `exact(positions)` reads the float64 base at some
    positions. The caller (LZE's prompt-order observe, `lze_dense`) then needs
    one byte per group in batch order, and no key is computed for most
    groups: `_threshold_top_k` places the cut from a sample of exact keys and
    decides each group by comparing its uniform with a threshold of its code.
    Same rng stream and the same float64 keys wherever the choice is close,
    so the same choice (ties by position); `k` is at most the codes > 0.
    """
    codes = np.asarray(codes).reshape(-1)
    size = codes.size
    k = min(max(0, int(k)), size)
    state = rng.bit_generator.state
    uniform = rng.random(size)
    if 0 < k < size and size >= 4 * SAMPLE and np.isfinite(scale) and scale > 0:
        if k == int(np.count_nonzero(codes)):  # every finite key and no -inf one: no ranking needed
            if not uniform.min() == 0.0:  # (a zero uniform: NumPy's own stream below, as for every other key)
                return codes != 0
        else:
            chosen = _threshold_top_k(uniform, float(scale), codes, float(unit), exact, k)
            if chosen is not None:
                return chosen
    # a zero uniform, which NumPy's gumbel rejects and redraws: then its own stream decides (`_gumbel_uniforms`)
    if size and uniform.min() == 0.0:
        rng.bit_generator.state = state
        uniform = None
    key = rng.gumbel(0.0, scale, size) if uniform is None else _neg_log_log(uniform, scale)
    key += _code_base(codes, exact(None))
    return top_k_mask(key, k)


def _code_base(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """float64: `values` where codes > 0, -inf where codes == 0 (in place over `values`)."""
    np.copyto(values, -np.inf, where=codes == 0)
    return values


def _uniform_below(key: np.ndarray, scale: float) -> np.ndarray:
    """The u with `-scale * log(-log(1 - u)) == key` (the Gumbel noise is decreasing in u)."""
    with np.errstate(over="ignore"):
        return -np.expm1(-np.exp(-key / scale))


def _threshold_top_k(u: np.ndarray, scale: float, codes: np.ndarray, unit: float, exact, k: int):
    """The exact top-k of `base + gumbel(u)` from codes, or None (the caller ranks every key).

    1. An evenly spaced sample of SAMPLE keys, computed exactly, gives two cuts `H >= L`
       around the k-th largest key (its rank +- SAMPLE_Z standard deviations).
    2. A group is surely above H if even its lowest possible base, (code - 1)
       unit, plus its noise exceeds H + eta: since the noise decreases in u,
       that is `u < t_in[code]`, a table of 256 thresholds (one gather and one
       comparison per group, no logarithm; in float32 with the thresholds
       moved inwards by more than its rounding). Surely below L likewise with the
       highest base, `u > t_out[code]`. eta (1e-9 of the keys' scale) exceeds
       the float64 rounding of the keys and both thresholds are moved by a
       relative 1e-9 to shrink the sure sets, so "surely" holds for the keys
       as computed.
    3. The other groups (the band) get their exact keys; the `need = k - #above`
       largest of them (ties by position) are chosen. This is the exact top-k
       if the chosen band keys are >= L and the others <= H: then every
       group above is larger than every group left out and every group below
       smaller than every group chosen. Otherwise None.
    """
    size = u.size
    sample = np.arange(SAMPLE, dtype=np.int64) * size // SAMPLE  # evenly over every position, the last ones too
    sample_u = u.take(sample)
    if not sample_u.min() > 0.0:  # a zero uniform: NumPy's gumbel redraws it (the caller's path)
        return None
    sample_key = _neg_log_log(sample_u, scale)
    sample_key += _code_base(codes.take(sample), exact(sample))
    ordered = np.sort(sample_key)[::-1]
    m, frac = sample.size, k / size
    margin = SAMPLE_Z * float(np.sqrt(m * frac * (1.0 - frac))) + 2.0
    high = float(ordered[max(int(frac * m - margin), 0)])
    low = float(ordered[min(int(frac * m + margin), m - 1)])
    if not (np.isfinite(high) and np.isfinite(low)):
        return None
    eta = 1e-9 * (1.0 + abs(high) + abs(low) + 40.0 * scale)
    levels = np.arange(256, dtype=np.float64)
    lowest = (levels - 1.0) * unit * (1.0 - 1e-12)
    highest = levels * unit * (1.0 + 1e-12)
    t_in = _uniform_below(high + eta - lowest, scale) * (1.0 - 1e-9)
    t_out = _uniform_below(low - eta - highest, scale) * (1.0 + 1e-9)
    t_in[0] = t_out[0] = -1.0  # code 0: key -inf, surely below
    # compared in float32, half the bytes: u32 = fl32(u) is within a relative 2^-24 of u, so moving each
    # threshold a relative 2^-20 inwards keeps both tests sound (u32 < in32 => u < t_in; u32 > out32 => u > t_out);
    # both thresholds of a code sit in one 8-byte table entry: one gather per group
    pair = np.empty((256, 2), dtype=np.float32)
    pair[:, 0] = np.nextafter(np.float32(t_in * (1.0 - 2.0**-20)), np.float32(-np.inf))
    pair[:, 1] = np.nextafter(np.float32(t_out * (1.0 + 2.0**-20)), np.float32(np.inf))
    chosen, band = _sure_and_band(u, codes, pair.view(np.uint64)[:, 0])
    if chosen is None:
        return None
    need = k - int(np.count_nonzero(chosen))
    if not 0 <= need <= band.size:
        return None
    band_key = _neg_log_log(u.take(band), scale)
    band_key += _code_base(codes.take(band), exact(band))
    picked = top_k_mask(band_key, need)
    if need and not float(band_key[picked].min()) >= low:
        return None
    if need < band.size and not float(band_key[~picked].max()) <= high:
        return None
    chosen[band.take(np.flatnonzero(picked))] = True
    return chosen


def _sure_and_band(u: np.ndarray, codes: np.ndarray, table: np.ndarray):
    """(bool[size] u32 < in32[code], int64 positions with in32[code] <= u32 <= out32[code]), or (None, None)
    if some uniform is 0 (NumPy's gumbel would redraw it).

    `table` holds each code's float32 pair (in32, out32) as one uint64. Works in blocks of BLOCK groups
    whose float32 uniforms, indices and gathered pairs stay in cache (measured inside a step at 10^6
    groups, with the one 8-byte gather: LZE's update ~11.5 -> ~10 ms, against whole-array passes and two
    4-byte gathers). in32 <= out32 for every code > 0 (`t_in <= t_out`, rounded outwards), so a chosen
    group is open too and `open ^ chosen` is the band; code 0 has in32 < 0 and out32 < 0, neither holds.
    """
    size = u.size
    chosen, open_ = np.empty(size, dtype=bool), np.empty(size, dtype=bool)
    width = min(size, BLOCK)
    u32, level, pairs = np.empty(width, dtype=np.float32), np.empty(width, dtype=np.intp), np.empty(width, dtype=np.uint64)
    for start in range(0, size, BLOCK):
        end = min(start + BLOCK, size)
        v, index, both, band = u32[: end - start], level[: end - start], pairs[: end - start], open_[start:end]
        np.copyto(v, u[start:end], casting="same_kind")
        if not v.min() > 0.0:  # fl32(u) is 0 only for u == 0 (else u >= 2^-53)
            return None, None
        np.copyto(index, codes[start:end])
        table.take(index, out=both, mode="clip")  # codes are < 256; mode clip: no buffered bounds check
        thresholds = both.view(np.float32).reshape(end - start, 2)
        inside = np.less(v, thresholds[:, 0], out=chosen[start:end])
        np.less_equal(v, thresholds[:, 1], out=band)
        band ^= inside
    return chosen, np.flatnonzero(open_)  # one call: ~2x cheaper than one per block


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

