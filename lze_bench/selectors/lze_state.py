"""LZE's per-prompt state and its checkpoint form (selectors.md §5 "State"); the rules are in `lze.py`.

Plain NumPy arrays indexed by prompt id. Per-prompt values are float32 /
int32 (pass rates are multiples of 1/n, and an EMA needs no more than float32);
per-batch values (energies, card keys) are float64. The last observed batch
and its energies are part of the state: `select_update` ranks them, and a
checkpoint taken between `observe` and `select_update` must carry them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from lze_bench.api import LzeBenchError


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
    cache_energy: np.ndarray = None  # float64[G]  its energies
    cache_alive: np.ndarray = None  # bool[G]  its groups with a non-zero GRPO advantage
    cache_card: np.ndarray = None  # [G] card-variant key (float32 as observed, float64 once loaded); empty if unused

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
