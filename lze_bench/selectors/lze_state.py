"""Per-prompt state of the LZE selector and its update rules (selectors.md §5 "State", "observe").

Kept apart from `lze.py` so the selection rules read on one screen. Every
update is a vectorized gather/scatter by prompt id (ids are unique within a
batch), so a step costs O(G), never O(N) or a Python loop over prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from lze_bench.errors import LzeBenchError

PER_PROMPT = ("d_init", "ema", "n_obs", "first_epoch", "last_p", "streak", "pruned", "replay")
CACHE = ("cache_ids", "cache_energy", "cache_alive", "cache_card")


@dataclass
class LzeState:
    d_init: np.ndarray  # float32[N]  difficulty anchor, -1 = unset
    ema: np.ndarray  # float32[N]  EMA of the pass rate (init 0.5, overwritten at first sight)
    n_obs: np.ndarray  # int32[N]  observations
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
        """Steps 1-4 of spec §5 "observe": returns the energy float64[G] from the pre-update EMA."""
        d_init = self.d_init[ids]
        ema_before = self.ema[ids]
        first = np.flatnonzero(d_init < 0)
        if first.size:  # first sight: anchor, and the EMA starts at p (so momentum 0)
            self.first_sight(ids[first], p[first], cfg.d_init_min)
            d_init[first], ema_before[first] = self.d_init[ids[first]], self.ema[ids[first]]
        momentum = np.abs(p - ema_before)  # float64[G], in place from here on
        momentum *= 2.0
        np.minimum(momentum, 1.0, out=momentum)
        momentum *= cfg.momentum_weight
        momentum += 1.0
        energy = 1.0 - p
        energy *= p
        energy *= 4.0
        energy *= d_init
        energy *= momentum
        self.ema[ids] = cfg.ema_decay * ema_before + (1.0 - cfg.ema_decay) * p
        self.n_obs[ids] += 1
        self.last_p[ids] = p
        return energy

    def update_pruner(self, ids: np.ndarray, solved: np.ndarray, prune_after: int) -> None:
        """Step 5: a replayed prompt stays pruned only if still solved; others prune after a streak."""
        streak = np.where(solved, self.streak[ids] + 1, 0)
        self.streak[ids] = streak
        self.pruned[ids] = np.where(self.replay[ids], solved, streak >= prune_after)

    def cache(self, ids, energy, alive, card) -> None:
        self.cache_ids = ids  # a reference: select_update gets the same batch object
        self.cache_energy = energy
        self.cache_alive = alive
        self.cache_card = np.zeros(0) if card is None else card

    def cached(self, ids: np.ndarray):
        if ids is not self.cache_ids and not np.array_equal(ids, self.cache_ids):
            raise LzeBenchError("lze: select_update got a batch that observe() has not seen; call observe(batch) first")
        return self.cache_energy, self.cache_alive, self.cache_card

    def to_dict(self) -> dict:
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
