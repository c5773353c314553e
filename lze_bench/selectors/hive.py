"""HIVE: a history screen, then prompt-entropy pruning, before rollout (selectors.md §4).

Source: HIVE arXiv 2603.25184, abstract and introduction only (no code was
found). The method picks prompts at the "learning edge" (intermediate
difficulty, high uncertainty) in two stages: a coarse screen from each
prompt's reward history, then the current policy's prompt entropy as a
real-time proxy. **Every formula and default here is ours** (spec §4, open
question Q1):

* stage 1 utility `u = 4 p (1 - p)` of the prompt's EMA pass rate, times
  `(h / h̄)^gamma` when response entropy is tracked (`gamma > 0`); unseen
  prompts get `u = +inf` (explore); a seen prompt with `u == 0` gets `+inf`
  with probability `explore_prob` (GRESO-style re-check of "dead" labels);
  keep the top `ceil(coarse_factor * budget)` (ties: candidate order);
* stage 2 asks the backend for the survivors' prompt entropy only and keeps
  the top `budget`; the result is returned in candidate order;
* every rolled-out group reaches the update (HIVE acts before rollout).

Choices where the spec is open (ours): the exploration draw
`rng.random(m)` happens only when `explore_prob > 0` (so `explore_prob=0`
consumes no randomness); `h̄` is the mean over all prompts with a known
`h_hist`, and the entropy factor is skipped while `h̄ <= 0`; when the
FeatureFn cannot provide prompt entropy at all (a replayed log without that
column, spec §8) stage 2 ranks by the stage-1 utility (stable ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.selectors.base import Selector, UpdateDecision, group_stats, top_k_mask


@dataclass
class HiveConfig:
    name: str = "hive"
    pool_factor: float = 2.0  # ours: candidates offered per rolled-out prompt
    coarse_factor: float = 1.5  # ours: stage-1 survivors per rolled-out prompt
    beta: float = 0.5  # ours: EMA weight of the newest pass rate / response entropy
    explore_prob: float = 0.1  # ours; GRESO uses history-dependent skip probabilities
    gamma: float = 0.0  # ours: response-entropy weight in stage 1 (off); v2 abstract mentions it

    def __post_init__(self):
        require(self.pool_factor >= 1, "selector.pool_factor", f"must be >= 1, got {self.pool_factor}")
        require(self.coarse_factor >= 1, "selector.coarse_factor", f"must be >= 1, got {self.coarse_factor}")
        require(0 < self.beta <= 1, "selector.beta", f"must be in (0, 1], got {self.beta}")
        require(0 <= self.explore_prob <= 1, "selector.explore_prob", f"must be in [0, 1], got {self.explore_prob}")
        require(self.gamma >= 0, "selector.gamma", f"must be >= 0, got {self.gamma}")


@SELECTORS.add("hive")
class HiveSelector(Selector):
    """HIVE: screen candidates by reward history, then keep the highest prompt entropy."""

    Config = HiveConfig
    name = "hive"
    requires = ("prompt_entropy",)

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        # float32/int32 per-prompt state: at 10^6 prompts a step is random gathers/scatters, half the bytes
        self.p_hist = np.full(self.num_prompts, np.nan, dtype=np.float32)  # EMA pass rate, NaN = unseen
        self.h_hist = np.full(self.num_prompts, np.nan, dtype=np.float32)  # EMA response entropy, NaN = unknown
        self.n_obs = np.zeros(self.num_prompts, dtype=np.int32)

    def candidates_per_step(self, budget: int) -> int:
        return int(math.ceil(self.config.pool_factor * int(budget)))

    def utility(self, candidate_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Stage-1 utility u float32[m] of the candidates (+inf = always passes)."""
        cfg = self.config
        p = self.p_hist[candidate_ids]  # float32: u only ranks, so float32 keys (faster partition) suffice
        seen = ~np.isnan(p)
        u = 1.0 - p  # u = 4 p (1 - p), in place
        u *= p
        u *= 4.0
        if cfg.gamma > 0:
            h = self.h_hist[candidate_ids]
            known_all = ~np.isnan(self.h_hist)
            h_bar = float(self.h_hist[known_all].mean()) if known_all.any() else 0.0
            if h_bar > 0:
                known = ~np.isnan(h)
                u[known] *= (h[known] / h_bar) ** cfg.gamma
        np.copyto(u, np.inf, where=~seen)
        if cfg.explore_prob > 0:
            draw = rng.random(candidate_ids.size)
            np.copyto(u, np.inf, where=(u == 0) & (draw < cfg.explore_prob))  # u == 0 implies seen
        return u

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        budget = min(max(0, int(budget)), candidates.size)
        if budget == 0:
            return candidates[:0]
        features = self.require_features(features)
        u = self.utility(candidates, rng)
        stage1 = top_k_mask(u, min(candidates.size, math.ceil(self.config.coarse_factor * budget)))
        survivors = candidates[stage1]
        entropy = features("prompt_entropy", survivors)
        if entropy is None:  # a replayed log without prompt entropy (selectors.md §8)
            key = u[stage1]
        else:
            key = np.asarray(entropy).reshape(-1)
            key = key if key.dtype.kind == "f" else key.astype(np.float64)
            if key.size != survivors.size or not np.all(np.isfinite(key)):
                raise LzeBenchError(
                    f"hive: prompt_entropy must be {survivors.size} finite numbers, got shape {key.shape}"
                )
        return survivors[top_k_mask(key, budget)]

    def observe(self, batch):
        ids = batch.prompt_ids
        p, _ = group_stats(batch.rewards)
        self.p_hist[ids] = self._ema(self.p_hist[ids], p)
        if batch.response_entropy is not None:
            h = np.asarray(batch.response_entropy, dtype=np.float64).mean(axis=1)
            self.h_hist[ids] = self._ema(self.h_hist[ids], h)
        self.n_obs[ids] += 1

    def _ema(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """(1 - beta) old + beta new; the new value itself where old is NaN (first sight)."""
        out = old * (1.0 - self.config.beta)  # float64[G]
        out += self.config.beta * new
        np.copyto(out, new, where=np.isnan(old))
        return out

    def select_update(self, batch, step, rng):
        return UpdateDecision.keep_all(batch.num_groups)

    def state_dict(self) -> dict:
        return {"p_hist": self.p_hist.copy(), "h_hist": self.h_hist.copy(), "n_obs": self.n_obs.copy()}

    def load_state_dict(self, state: dict) -> None:
        for key in ("p_hist", "h_hist", "n_obs"):
            value = np.asarray(state[key])
            if value.shape != (self.num_prompts,):
                raise LzeBenchError(f"hive state {key!r} has shape {value.shape}, expected ({self.num_prompts},)")
            setattr(self, key, value.astype(getattr(self, key).dtype, copy=True))
