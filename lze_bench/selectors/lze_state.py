"""Per-prompt state of the LZE selector and its update rules (selectors.md §5 "State", "observe").

Kept apart from `lze.py` so the selection rules read on one screen. Every
update is a vectorized gather/scatter by prompt id (ids are unique within a
batch), so a step costs O(G), never a Python loop over prompts; a batch
covering >= 1/4 of the prompts adds a few sequential O(N) byte passes
(`marks`) that are cheaper than the per-id updates they replace. The
selector itself sends such batches of 0/1 rewards to `lze_dense`, which
computes the same updates in prompt order; `observe` here serves the rest
(and is that path's reference in tests/test_lze_dense.py).

Speed at 10^6 prompts (< 50 ms per step, same decisions) is mostly
random memory access: next to a 32 MB reward batch the per-prompt arrays
do not stay in cache, so each random read or write costs a cache miss.
Measured choices (ours; values, dtypes and layout of the state unchanged):
gathers and scatters run over the whole batch at once (in blocks they were
~3x slower), large gathers after one sequential pass that pulls the array
into cache (`gather`); the arithmetic between them runs in blocks of
`BLOCK` groups on cache-resident temporaries; count and pruner updates of
large batches go through one byte scatter (`marks`). Packing d_init/ema or
pruned/replay into shared 8/2-byte words was measured too: not faster.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from lze_bench.errors import LzeBenchError

PER_PROMPT = ("d_init", "ema", "n_obs", "first_epoch", "last_p", "streak", "pruned", "replay")
CACHE = ("cache_ids", "cache_energy", "cache_alive", "cache_card")
SOLVED = 1.0 - 1e-8  # prune_replay.py: a group counts as all-correct at p >= 1 - 1e-8
BLOCK = 1 << 16  # groups per block of `energy_and_ema` (float64 temporaries of 512 KiB stay in cache)


def energy_and_ema(p, d_init, ema, cfg, energy, buf, wide=None) -> None:
    """Energy of spec §5 steps 2-3 into `energy`, and step 4's EMA update of `ema` in place.

    The same bits as the spec's formulas evaluated straightforwardly in
    float64 from the float32 state: `E = ((1-p) p * 4) d_init * (1 + w m)`,
    `m = min(2 |p - ema|, 1)`; EMA: `ema_decay * ema` in float32 (a Python
    float adopts the array's float32) plus `(1 - ema_decay) * p` in float64,
    rounded once to float32. `buf` and `wide` (optional) are float64 scratch
    of the same length.

    Two passes fewer (our choice, exact): multiplying by a power of two
    commutes with rounding unless a result is subnormal, so with `w = 0` or
    `2^-600 <= w <= 2^600`, `fl(fl(min(|t|, 1/2) 8w) + 4)` is exactly
    `4 fl(fl(min(2|t|, 1) w) + 1)` and `fl(fl(x d) 4M) = fl(fl(4x d) M)`:
    folding the `* 2` into `8w` and the `* 4` into the momentum factor leaves
    every energy bit unchanged. Nothing here is subnormal: p is a float32
    sum / n and ema a float32, so a nonzero `t = p - ema` is >= 2^-232, and
    `(1 - p) p d_init` is 0 or >= 2^-382.

    With `wide`, each float32 operand is first widened into it (exact), so
    every float64 operation runs on float64 arrays: measured ~2x faster than
    NumPy's buffered mixed-type loops, same values.
    """
    energy_of(p, d_init, ema, float(cfg.momentum_weight), energy, buf, wide, wide)
    ema_update(p, ema, cfg.ema_decay, buf, wide)


def energy_of(p, d_init, ema, weight: float, energy, buf, wide_ema=None, wide_d=None) -> None:
    """The energy half of `energy_and_ema` (same operations, same order). `wide_ema` and `wide_d` (optional)
    are float64 arrays the float32 `ema` and `d_init` are widened into: `wide_ema` may be `energy` itself
    (the widened EMA is read before the energy is written) and `wide_d` may be `p` (read last, so p is then
    overwritten): three float64 arrays of a block in all (`lze_dense`)."""
    np.subtract(p, ema if wide_ema is None else _widened(ema, wide_ema), out=buf)  # t, with the EMA before this step
    np.abs(buf, out=buf)
    if weight == 0.0 or 2.0**-600 <= weight <= 2.0**600:
        np.minimum(buf, 0.5, out=buf)
        buf *= 8.0 * weight
        buf += 4.0  # 4 (1 + w m)
        np.subtract(1.0, p, out=energy)
        energy *= p
    else:
        buf *= 2.0
        np.minimum(buf, 1.0, out=buf)
        buf *= weight
        buf += 1.0  # 1 + w m
        np.subtract(1.0, p, out=energy)
        energy *= p
        energy *= 4.0
    energy *= d_init if wide_d is None else _widened(d_init, wide_d)
    energy *= buf


def ema_update(p, ema, decay: float, buf, wide=None, target=None) -> None:
    """The EMA half of `energy_and_ema`: `ema` in place, or into the float32 `target` (`ema` then unchanged).
    `buf` and `wide` (optional) are float64 scratch; `wide` may be the block's energy array if the energy is
    computed afterwards."""
    target = ema if target is None else target
    np.multiply(ema, decay, out=target)
    np.multiply(p, 1.0 - decay, out=buf)
    if wide is None:
        np.add(buf, target, out=target, casting="same_kind")
    else:  # the float64 sum, rounded once to float32 by the copy (what the mixed add's output cast does)
        buf += _widened(target, wide)
        np.copyto(target, buf, casting="same_kind")


def _widened(values: np.ndarray, wide: np.ndarray) -> np.ndarray:
    np.copyto(wide, values)
    return wide


@dataclass
class LzeState:
    d_init: np.ndarray  # float32[N]  difficulty anchor, -1 = unset
    ema: np.ndarray  # float32[N]  EMA of the pass rate (init 0.5, overwritten at first sight)
    n_obs: np.ndarray  # int32[N]  observations (with last_p: may lag behind until `flush`, see below)
    first_epoch: np.ndarray  # int32[N]  epoch of first sight, -1 = unseen
    last_p: np.ndarray  # float32[N]  last pass rate, NaN = unseen
    streak: np.ndarray  # int32[N]  consecutive all-correct observations (pruner)
    pruned: np.ndarray  # bool[N]  skipped by the forward pruner
    replay: np.ndarray  # bool[N]  this epoch's replay pool of pruned prompts
    epoch: int = 0
    anchored: bool = False  # anchor="init_probe" done
    cache_ids: np.ndarray = None  # int64[G]  the batch `observe` saw last
    cache_energy: np.ndarray = None  # float64[G]
    cache_alive: np.ndarray = None  # bool[G]
    cache_card: np.ndarray = None  # float64[G]  card-variant score (empty when unused)
    # not fields (not state): a prompt-order observe (`lze_dense.DenseEnergy`) whose energies are not yet
    # gathered, and the `last_p` / `n_obs` updates of prompt-order observes not yet written (`lze_dense.Deferred`;
    # `flush` writes them: read those two arrays through `to_dict`, or after `flush()`)
    pending = None
    deferred = None

    # Per-prompt arrays are float32/int32: a step's cost at 10^6 prompts is
    # random gathers/scatters, so half the bytes is most of the speed; pass
    # rates are multiples of 1/n and EMAs need no more than float32 precision.
    # Per-batch values (energy, keys) are float64.

    @classmethod
    def empty(cls, num_prompts: int) -> "LzeState":
        n = int(num_prompts)
        return cls(
            d_init=np.full(n, -1.0, dtype=np.float32),
            ema=np.full(n, 0.5, dtype=np.float32),
            n_obs=np.zeros(n, dtype=np.int32),
            first_epoch=np.full(n, -1, dtype=np.int32),
            last_p=np.full(n, np.nan, dtype=np.float32),
            streak=np.zeros(n, dtype=np.int32),
            pruned=np.zeros(n, dtype=bool),
            replay=np.zeros(n, dtype=bool),
            cache_ids=np.zeros(0, dtype=np.int64),
            cache_energy=np.zeros(0),
            cache_alive=np.zeros(0, dtype=bool),
            cache_card=np.zeros(0),
        )

    def first_sight(self, ids: np.ndarray, p: np.ndarray, d_init_min: float) -> None:
        """Anchor the prompts among `ids` never seen before (d_init, ema = p, first_epoch)."""
        where = np.flatnonzero(self.d_init[ids] < 0)
        fresh = ids[where]
        self.d_init[fresh] = np.maximum(1.0 - p[where], d_init_min)
        self.ema[fresh] = p[where]
        self.first_epoch[fresh] = self.epoch

    def observe(self, ids: np.ndarray, p: np.ndarray, cfg) -> np.ndarray:
        """Steps 1-5 of spec §5 "observe": returns the energy float64[G] from the pre-update EMA.

        Random gathers and scatters run over the whole batch at once, the
        arithmetic in cache-sized blocks (module docstring).
        """
        self.flush()
        d_init = self.gather(self.d_init, ids)
        ema = self.gather(self.ema, ids)
        if ids.size and not d_init.min() >= 0:  # first sight (a NaN also takes this path, as before)
            first = np.flatnonzero(d_init < 0)
            if first.size:  # anchor, and the EMA starts at p (so momentum 0)
                self.first_sight(ids[first], p[first], cfg.d_init_min)
                d_init[first], ema[first] = self.d_init[ids[first]], self.ema[ids[first]]
        energy = np.empty(ids.size)
        p32 = np.empty(ids.size, dtype=np.float32)
        solved = np.empty(ids.size, dtype=bool) if cfg.prune_enabled else None
        buf = np.empty(min(ids.size, BLOCK))
        for start in range(0, ids.size, BLOCK):  # blocks: the ~15 passes run on cache-resident data
            part = slice(start, start + BLOCK)
            energy_and_ema(p[part], d_init[part], ema[part], cfg, energy[part], buf[: energy[part].size])
            np.copyto(p32[part], p[part], casting="same_kind")
            if solved is not None:
                np.greater_equal(p[part], SOLVED, out=solved[part])
        self.ema[ids] = ema
        self.last_p[ids] = p32
        marks = self.marks(ids, solved)
        if marks is None:
            self.n_obs[ids] += 1
        else:
            self.n_obs += marks.view(bool) if solved is None else marks != 0  # marks are 0/1 without solved
        if solved is not None:
            self.update_pruner(ids, solved, cfg.prune_after, marks)
        return energy

    @staticmethod
    def gather(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """`values[ids]`; for ids covering >= 1/4 of the array, after one sequential read of `values`.

        Measured: next to a 32 MB reward batch, a random gather of 10^6 float32
        from a 4 MB array costs ~3.8 ms from memory, ~2.5 ms including a prior
        sequential pass (a 0.1-0.3 ms `max`) that pulls the array into cache.
        """
        if 4 * ids.size >= values.size:
            values.view(np.uint8).max()
        return values.take(ids)  # take: ~1.5x faster than values[ids], same values

    def marks(self, ids: np.ndarray, solved: np.ndarray | None) -> np.ndarray | None:
        """uint8[N] for a batch covering >= 1/4 of the prompts: 0 unseen, 1 seen, 2 seen and solved; else None.

        A random int32 gather + scatter per id costs about twice a 1-byte
        scatter, so for large batches the count and pruner updates become
        sequential passes over N masked by this one scatter (same results: ids
        are unique). Small batches (None) update per id, in O(G).
        """
        if 4 * ids.size < self.n_obs.size:
            return None
        marks = np.zeros(self.n_obs.size, dtype=np.uint8)
        marks[ids] = 1 if solved is None else np.add(solved, 1, dtype=np.uint8)
        return marks

    def update_pruner(self, ids: np.ndarray, solved: np.ndarray, prune_after: int, marks=None) -> None:
        """Step 5: a replayed prompt stays pruned only if still solved; others prune after a streak."""
        if marks is None:
            streak = self.streak[ids]
            streak += 1
            streak *= solved  # where(solved, streak + 1, 0)
            self.streak[ids] = streak
            self.pruned[ids] = np.where(self.replay[ids], solved, streak >= prune_after)
            return
        seen, solved_at = marks != 0, marks == 2
        self.streak += seen
        self.streak *= np.greater_equal(solved_at, seen)  # seen and unsolved: 0; others keep their value
        rule = self.streak >= prune_after
        flip = np.bitwise_xor(rule, solved_at)
        flip &= self.replay
        rule ^= flip  # where(replay, solved, streak >= prune_after), as bool bit operations (no masked copy)
        np.bitwise_xor(rule, self.pruned, out=flip)
        flip &= seen
        self.pruned ^= flip  # pruned = rule where seen, unchanged elsewhere

    def rollout_mask(self, ids: np.ndarray) -> np.ndarray:
        """bool[len(ids)]: `~pruned | replay` of each id (for many ids: one dense pass, then one gather)."""
        if 4 * ids.size < self.pruned.size:
            return ~self.pruned[ids] | self.replay[ids]
        return np.less_equal(self.pruned, self.replay).take(ids)  # take: ~1.5x faster than [ids]

    def cache(self, ids, energy, alive, card) -> None:
        self.cache_ids = ids  # a reference: select_update gets the same batch object
        self.cache_energy = energy
        self.cache_alive = alive
        self.cache_card = np.zeros(0) if card is None else card
        self.pending = None

    def cache_dense(self, dense) -> None:
        """Cache a prompt-order observe (`lze_dense.DenseEnergy`); its energies are gathered only when read."""
        self.cache(dense.ids, None, dense.alive, None)
        self.pending = dense

    def dense(self, ids: np.ndarray):
        """The prompt-order observe of this batch if its energies were not read or replaced since, else None."""
        if self.pending is None or self.cache_energy is not None:
            return None
        self.check_cached(ids)
        return self.pending

    def check_cached(self, ids: np.ndarray) -> None:
        if ids is not self.cache_ids and not np.array_equal(ids, self.cache_ids):
            raise LzeBenchError("lze: select_update got a batch that observe() has not seen; call observe(batch) first")

    def cached(self, ids: np.ndarray):
        self.check_cached(ids)
        self.materialize()
        return self.cache_energy, self.cache_alive, self.cache_card

    def materialize(self) -> None:
        """Gather a prompt-order observe's energies into batch order (cache_energy), once."""
        if self.cache_energy is None and self.pending is not None:
            self.cache_energy = self.pending.exact()

    def flush(self) -> None:
        """Write the deferred `last_p` and `n_obs` updates of prompt-order observes (`lze_dense.Deferred`)."""
        if self.deferred is not None:
            self.deferred.flush(self)
            self.deferred = None

    def to_dict(self) -> dict:
        self.materialize()
        self.flush()
        return {f.name: (getattr(self, f.name).copy() if f.name in PER_PROMPT + CACHE else getattr(self, f.name))
                for f in fields(self)}

    @classmethod
    def from_dict(cls, state: dict, num_prompts: int) -> "LzeState":
        template = cls.empty(num_prompts)
        values = {}
        for f in fields(cls):
            if f.name not in state:
                raise LzeBenchError(f"lze state lacks {f.name!r}; was it written by another selector?")
            if f.name in PER_PROMPT + CACHE:
                value = np.array(state[f.name], dtype=getattr(template, f.name).dtype)
                if f.name in PER_PROMPT and value.shape != (num_prompts,):
                    raise LzeBenchError(f"lze state {f.name!r} has shape {value.shape}, expected ({num_prompts},)")
                values[f.name] = value
            else:
                values[f.name] = type(getattr(template, f.name))(state[f.name])
        return cls(**values)
