"""LZE's observe for a batch covering >= 1/4 of the prompts, computed in prompt order (issue 29, item 6).

`LzeState.observe` works in batch order: it gathers `d_init` and `ema` for
each group and scatters `ema`, `last_p` and the counts back, four random
accesses of 4 bytes per group. At 10^6 prompts next to a 32 MB reward batch
each costs ~5 ms in this VM, about half of the step. Here the batch instead
scatters one byte per group (its correct count + 1) into a `uint8[N]` mark
array, and every update then runs as sequential passes over the prompts, in
cache-sized blocks, with the same float64 operations in the same order as
`energy_and_ema` (it is called on each block), so every state bit and every
energy is what `LzeState.observe` gives. The energies stay in prompt order;
what `select_update` needs in batch order is a one-byte code per group
(`codes`, one 1-byte gather) from which `topk.gumbel_top_k_codes` ranks, with
the exact float64 energies read only for the few groups near the cut
(`DenseEnergy.exact`). `LzeState.cached` (and `to_dict`) gather them all
when asked. `last_p` and `n_obs`, which no decision reads, are not written
here: one byte per prompt keeps the latest mark and one the observations
since the last write (`Deferred`), and `LzeState.flush` writes both when
the state is read (`to_dict`) or a small batch is observed per id.

Taken only when exact: 0/1 rewards (`stats.binary_ones`), n <= 254 (a count
+ 1 fits a byte), the code variant; ids are unique (`RolloutBatch` refuses
repeated ones). Anything else, or any block whose energies are not finite in
[0, `bound`], keeps the exact per-batch path (no codes: `select_update`
ranks the gathered float64 energies as before).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lze_bench.selectors.lze_state import ema_update, energy_and_ema, energy_of
from lze_bench.selectors.stats import binary_ones

CODE_LEVELS = 255  # a positive energy E gets the code ceil(E / unit) in [1, 255]; 0 is E == 0
MAX_SAMPLES = 254  # a group's correct count + 1 must fit a byte
BLOCK = 1 << 15  # prompts per block: ~15 float64 passes over 256 KiB arrays that stay in cache (measured best)


@dataclass
class DenseEnergy:
    """The last large batch: energies in prompt order, and what the ranking needs in batch order.

    ids      int64[G]    the batch's prompt ids
    energy   float64[N]  exact energies at the batch's prompts (others are stale: never read); a work buffer,
                         valid until the next observe
    codes    uint8[G]    ceil(E / unit) per group (0 iff E == 0), or None when the energies were not all finite
                         in [0, bound] (then unit, top, low and live are None too: nothing is ranked from codes)
    unit     float       the code unit: |codes * unit - E| <= unit + 2^-50 E
    alive    bool[G]     0 < correct < n (a non-zero GRPO advantage)
    top      float       the largest energy of the batch
    low      float       the smallest positive energy (None if none)
    live     int         groups with E > 0
    """

    ids: np.ndarray
    energy: np.ndarray
    codes: np.ndarray | None
    unit: float | None
    alive: np.ndarray
    top: float | None
    low: float | None
    live: int | None

    def exact(self, positions: np.ndarray | None = None) -> np.ndarray:
        """float64 energies of the batch (or of some of its positions), in batch order."""
        ids = self.ids if positions is None else self.ids.take(positions)
        return self.energy.take(ids)


def energy_bound(cfg) -> float:
    """An upper bound of every energy with d_init <= 1: (1 - p) p 4 <= 1 and the momentum factor <= 1 + w."""
    return (1.0 + float(cfg.momentum_weight)) * (1.0 + 1e-12)


class Work:
    """Buffers reused across steps (fresh 8 MB temporaries cost page faults and cache misses)."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype) -> np.ndarray:
        """The buffer `name` (one selector: always the same size and dtype), allocated on first use."""
        if name not in self.arrays:
            self.arrays[name] = np.empty(size, dtype=dtype)
        return self.arrays[name]


class Deferred:
    """The bookkeeping of prompt-order observes not yet written into `last_p` and `n_obs` (never read by a
    decision: only `LzeState.to_dict` and the per-batch `LzeState.observe` need them, and flush them first).

    latest  uint8[N]  per prompt, the mark (correct count + 1) of the latest observe that saw it since the
                      last flush, 0 if none: last_p is then its pass rate with `n` responses per group
    n       int       the responses per group of those observes (a batch with another n flushes first)
    counts  uint8[N]  observations not yet added to n_obs
    most    int       observes since counts was last emptied (an upper bound of its values)

    Measured (issue 29): writing last_p and n_obs over 10^6 prompts (4 MB written, 4 MB read and
    written) was ~2 ms of a ~24 ms observe next to the step's other memory traffic; here an observe
    touches two 1 MB byte arrays instead, and the float32 pass rates are written once, when read.
    """

    def __init__(self, num: int):
        self.latest, self.n = np.zeros(num, dtype=np.uint8), 0
        self.counts, self.most = np.zeros(num, dtype=np.uint8), 0

    def flush_rates(self, state) -> None:
        """Write the deferred pass rates into `state.last_p` (the float32 casts of the per-batch path)."""
        where = np.flatnonzero(self.latest)
        if where.size:  # (none before the first observe, whose n is not set yet)
            state.last_p[where] = _rates(self.latest.take(where), self.n, np.empty(where.size))
            self.latest.fill(0)

    def flush_counts(self, state) -> None:
        np.add(state.n_obs, self.counts, out=state.n_obs, casting="unsafe")
        self.counts.fill(0)
        self.most = 0

    def flush(self, state) -> None:
        """Write every deferred update into `state` (the values the per-prompt writes would have left)."""
        self.flush_rates(state)
        self.flush_counts(state)


def observe_dense(state, ids: np.ndarray, rewards: np.ndarray, cfg, work: Work) -> DenseEnergy | None:
    """`LzeState.observe` for a large batch of 0/1 rewards, in prompt order; None (nothing changed) if not taken.

    `ids` and `rewards` are a RolloutBatch's: int64[G] unique ids, float32[G, n].
    """
    num = state.d_init.size
    if cfg.variant != "code" or 4 * ids.size < num or rewards.shape[1] > MAX_SAMPLES:
        return None
    ones = binary_ones(rewards)
    if ones is None:
        return None
    n = rewards.shape[1]
    deferred = state.deferred or Deferred(num)
    if deferred.n != n:  # the deferred marks mean pass rates of another n: write them first
        deferred.flush_rates(state)
        deferred.n = n
    if deferred.most == np.iinfo(np.uint8).max:  # one more observe could overflow a count: add them now
        deferred.flush_counts(state)
    marks = work.get("marks", num, np.uint8)
    marks.fill(0)
    marks[ids] = np.add(ones, 1, dtype=np.uint8)  # ids are unique: RolloutBatch refuses repeated ones
    energy = work.get("energy", num, np.float64)
    codes = work.get("codes", num, np.uint8)
    top, low, valid = _blocks(state, marks, n, cfg, energy, codes, deferred)
    deferred.most += 1
    state.deferred = deferred
    alive = np.less(ones - ones.dtype.type(1), n - 1)  # 0 < ones < n: unsigned 0 - 1 wraps to the max
    if not valid:  # no codes: select_update gathers the exact energies and ranks them as the per-batch path
        return DenseEnergy(ids=ids, energy=energy, codes=None, unit=None, alive=alive, top=None, low=None,
                           live=None)
    live = int(np.count_nonzero(codes))  # codes are 0 exactly where E == 0 (unmarked prompts: 0)
    return DenseEnergy(ids=ids, energy=energy, codes=codes.take(ids), unit=energy_bound(cfg) / CODE_LEVELS,
                       alive=alive, top=top, low=low if live else None, live=live)


def _blocks(state, marks, n, cfg, energy, codes, deferred):
    """Every update of `LzeState.observe`, block by block over the prompts; the batch's energy summary:
    the largest energy, the smallest positive one (inf if none) and whether the codes are valid.
    `last_p` and `n_obs` are left to `deferred`."""
    bound = energy_bound(cfg)
    scale = CODE_LEVELS / bound
    weight, decay = float(cfg.momentum_weight), float(cfg.ema_decay)
    top, low, valid = 0.0, np.inf, True
    size = min(marks.size, BLOCK)
    # the scratch of a block stays in a core's cache (~2 MiB here): a partly seen block uses three float64
    # arrays, `p_buf` (the pass rates, then the widened d_init), `buf` (the momentum factor, then the blend's
    # masks and the codes' products) and the block's energies (first the widened EMA); `p_buf` also holds the
    # energies' bits at the end (measured in-process against a fourth array, lze_full at 10^6 prompts, 40
    # alternating steps twice: observe 0.3-0.9 ms faster). A fully seen block updates the EMA in place after
    # the energy, so it needs p to the end and widens into a fourth array, `wide`.
    p_buf, buf, wide = np.empty(size), np.empty(size), None
    ema_buf = np.empty(size, dtype=np.float32)
    byte_buf = np.empty(size, dtype=np.uint8)
    for start in range(0, marks.size, BLOCK):
        part = slice(start, start + BLOCK)
        mark = marks[part]
        count = mark.size
        marked = int(np.count_nonzero(mark))
        if not marked:  # nothing to update; energies of unmarked prompts are never read, their codes are 0
            codes[part] = 0
            continue
        p = _rates(mark, n, p_buf[:count], byte_buf[:count])  # 0 where unseen: their energy is then 0 (finite state)
        d_init, ema, e, new = state.d_init[part], state.ema[part], energy[part], ema_buf[:count]
        if not d_init.min() >= 0:  # first sight (a NaN d_init also looks here, as in LzeState.observe)
            at = np.flatnonzero(mark)
            _first_sight(state, start + at, p.take(at), cfg.d_init_min)
        if marked == count:  # every prompt seen: the EMA in place, after the energy (a fourth array, `wide`)
            wide = wide if wide is not None else np.empty(size)
            energy_and_ema(p, d_init, ema, cfg, e, buf[:count], wide[:count])
            np.copyto(deferred.latest[part], mark)
            deferred.counts[part] += 1
        else:  # unseen prompts keep their state: the updates are blended in by bit masks
            # `energy_and_ema`'s operations with the EMA first, into `new` (the energy reads the EMA before it)
            ema_update(p, ema, decay, buf[:count], wide=e, target=new)
            energy_of(p, d_init, ema, weight, e, buf[:count], wide_ema=e, wide_d=p)  # p is spent here
            seen = np.not_equal(mark, 0)
            words = buf[:count].view(np.uint32)  # two uint32 per float64: the mask, then the blend's scratch
            _blend(ema, new, _word_mask(seen, words[:count]), words[count:])
            _overlay(deferred.latest[part], mark, seen, byte_buf[:count])
            deferred.counts[part] += seen.view(np.uint8)
        # energies are >= 0 (d_init >= 0 once anchored, (1 - p) p >= 0, momentum factor > 0); above the bound
        # (a loaded state's d_init > 1) or NaN, the codes would be wrong: none, the exact ranking path decides
        hi = float(e.max())
        if not hi <= bound:
            valid = False
        top = max(top, hi)  # (a NaN leaves valid False: top is then unused)
        if valid:
            energy_codes(e, scale, buf[:count], codes[part])
            low = min(low, _smallest_positive(e, p_buf[:count].view(np.uint64)))
    if cfg.prune_enabled:
        _prune_blocks(state, marks, n, cfg.prune_after)
    return top, low, valid


def energy_codes(energy: np.ndarray, scale: float, work: np.ndarray, out: np.ndarray) -> None:
    """uint8 codes ceil(E * scale) of energies in [0, 255 / scale]: 0 exactly for E == 0, and
    E in ((code - 1) / scale, code / scale] up to a relative 1e-12 (what `gumbel_top_k_codes` assumes)."""
    np.multiply(energy, scale, out=work)
    np.ceil(work, out=out, casting="unsafe")


def _smallest_positive(energy: np.ndarray, work: np.ndarray) -> float:
    """The smallest positive value of float64 `energy` (all >= 0, +-0 or finite), inf if none.

    Non-negative doubles order like their bit patterns as unsigned integers:
    `bits - 1` wraps +0.0 to the largest uint64 and puts -0.0 above every
    finite double, so its minimum + 1 (wrapping again) is the bit pattern of
    the smallest positive value, or of +-0 if there is none (two passes over
    a cache-resident block, no mask).
    """
    np.subtract(energy.view(np.uint64), np.uint64(1), out=work)
    lowest = work.min(keepdims=True)
    lowest += np.uint64(1)  # (an array: wraps silently)
    value = float(lowest.view(np.float64)[0])
    return value if value > 0 else np.inf


def _rates(mark: np.ndarray, n: int, out: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """float64 c / n from marks c + 1 (0 where unmarked): what np.divide(ones, n, dtype=float64) gives.

    c is exact in float64; for n a power of two, c * (1/n) is c / n exactly (a power-of-two scaling,
    nothing subnormal) and a multiplication is cheaper than a division. c is formed in bytes (`work`:
    uint8 scratch like `mark`), then widened once: measured ~2x cheaper than a mixed uint8 - float64
    subtraction and a float64 maximum.
    """
    counts = np.subtract(mark, 1, out=np.empty_like(mark) if work is None else work)  # unmarked: 0 - 1 wraps
    np.minimum(counts, mark, out=counts)  # ... to 255, and its mark 0 is the minimum: c = 0 there, c elsewhere
    np.copyto(out, counts)  # unmarked: 0, so their energy is 0 and their code 0
    if n & (n - 1) == 0:
        out *= 1.0 / n
    else:
        out /= n
    return out


def _word_mask(seen: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Unsigned ints of `out`'s type (uint32 for float32 fields): all ones where seen, 0 elsewhere."""
    np.copyto(out, seen.view(np.uint8))
    return np.negative(out, out=out)


def _blend(target: np.ndarray, new: np.ndarray, mask: np.ndarray, work: np.ndarray) -> None:
    """`target = where(mask, new, target)` by bits, for values as wide as the `_word_mask` `mask` (float32 with a
    uint32 mask: measured ~2x faster than a masked copy); `work`: scratch like `mask`."""
    old = target.view(mask.dtype)
    np.bitwise_xor(old, new.view(mask.dtype), out=work)
    work &= mask
    old ^= work


def _overlay(latest: np.ndarray, mark: np.ndarray, seen: np.ndarray, work: np.ndarray) -> None:
    """`latest = where(seen, mark, latest)` for bytes with `mark == 0` wherever not seen: clear the seen bytes,
    then or the marks in (three byte passes; `work`: uint8 scratch)."""
    unseen = np.subtract(seen.view(np.uint8), 1, out=work)  # 0 where seen, 0xFF elsewhere (unsigned wrap)
    np.bitwise_and(latest, unseen, out=latest)
    np.bitwise_or(latest, mark, out=latest)


def _first_sight(state, where: np.ndarray, p: np.ndarray, d_init_min: float) -> None:
    """`LzeState.first_sight` for the prompts `where` (p their pass rates) with d_init < 0: the same values."""
    fresh = np.flatnonzero(state.d_init.take(where) < 0)
    if fresh.size:
        first, ids = p.take(fresh), where.take(fresh)
        state.d_init[ids] = np.maximum(1.0 - first, d_init_min)
        state.ema[ids] = first
        state.first_epoch[ids] = state.epoch


def _prune_blocks(state, marks: np.ndarray, n: int, prune_after: int) -> None:
    """The pruner's update (`LzeState.update_pruner`) block by block over the prompts, in a walk of its own:
    its arrays (`streak`, `pruned`, `replay`) and temporaries then share the cache with nothing else
    (measured inside a step at 10^6 prompts: `lze_full`'s observe ~0.5 ms faster than inside the energy walk)."""
    for start in range(0, marks.size, BLOCK):
        part = slice(start, start + BLOCK)
        mark = marks[part]
        marked = int(np.count_nonzero(mark))
        if marked == mark.size:
            _prune(state, part, mark == n + 1, prune_after)
        elif marked:
            _prune_seen(state, part, mark == 0, mark == n + 1, prune_after)


def _prune(state, part: slice, solved: np.ndarray, prune_after: int) -> None:
    """`LzeState.update_pruner` for every prompt of a block: a replayed prompt stays pruned only if still
    solved, the others prune after a streak of solved observations. Solved (p >= SOLVED = 1 - 1e-8) is
    mark == n + 1, every answer right: (n - 1) / n < SOLVED for every n <= MAX_SAMPLES.

    `where(replay, solved, streak >= prune_after)` is `solved & (replay | streak >= prune_after)`: an
    unsolved prompt's new streak is 0 < prune_after (>= 1), so both are False there."""
    streak, pruned = state.streak[part], state.pruned[part]
    streak += 1
    streak *= solved  # where(solved, streak + 1, 0)
    np.greater_equal(streak, prune_after, out=pruned)
    pruned |= state.replay[part]
    pruned &= solved


def _prune_seen(state, part: slice, unseen: np.ndarray, solved: np.ndarray, prune_after: int) -> None:
    """`_prune` for the seen prompts of a block (`LzeState.update_pruner`'s large-batch rule); unseen ones keep
    their streak and pruned flag. Solved prompts are seen, so the streak is `(streak + solved) * (solved |
    unseen)` (seen and unsolved: 0) and pruned is `_prune`'s rule where seen, `pruned & unseen` elsewhere:
    `(solved & (replay | streak >= prune_after)) | (pruned & unseen)`, bool operations without a masked copy."""
    streak, pruned = state.streak[part], state.pruned[part]
    np.add(streak, solved.view(np.uint8), out=streak, casting="unsafe")
    streak *= np.bitwise_or(solved, unseen)
    rule = np.greater_equal(streak, prune_after)
    rule |= state.replay[part]
    rule &= solved
    pruned &= unseen
    pruned |= rule
