"""HIVE: a probabilistic history screen, prompt-entropy verification, then dynamic sampling (selectors.md §4).

Sources: HIVE arXiv 2603.25184 (v1/v2 abstract and introduction; no code was
found) and three second-hand accounts of the method (spec §4 (a)-(c)): the
history shortlist is broad and random (a selection probability, "not an extra
Stage-1 top-k gate"), stage 2 keeps the upper half of the shortlist by the
current policy's prompt entropy (median over the shortlist), and the update
is filled by dynamic sampling (train batch `B` from rollout batches `R`).
The setup matches GRESO's launch scripts, so HIVE is built on GRESO's state
and rules (`greso_state.py`) — our inference.

Per round, for candidate i (stage 1):
    k_i = GRESO's keep probability      e_i = edge_floor + (1 - edge_floor) * 4 p(1-p) * u
    u_i = min(1, h_hist_i / mean known h_hist)     q_i = 1 if unseen else k_i * e_i
    v = rng.random(m); shortlist = candidates with not (v_i < 1 - q_i)
Stage 2: `V` = prompt entropy of the shortlist only; keep `V >= median(V)`,
at most `budget` (top by V, ties by candidate order), in candidate order.
Backward: dapo's rule with `train_batch_size = B`, `gen_batch_size = R`;
when the update is decided, GRESO's exploration adaptation, then reset.

Choices where the spec is silent (ours, spec §4 table): the product form of
`q`, `edge_floor`, `u`, `beta`, `pool_factor` (each round offers
`ceil(pool_factor * budget)` candidates), the round cap; `u = 1` when the
prompt's entropy is unknown, none is known, the mean is <= 0 or
`use_response_entropy=false`; without prompt entropy at all (a replayed log,
spec §8) stage 2 applies the median rule and the cap to `e` (unseen: +inf).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, Selector, UpdateDecision, median, pass_rates, require, top_k_mask
from lze_bench.selectors.greso_state import SkipHistory, check_history_config, group_classes


@dataclass
class HiveConfig:
    name: str = "hive"
    train_batch_size: Optional[int] = None  # B; null = harness batch size (paper: 256 or 128, account (c))
    rollout_batch_size: Optional[int] = None  # R; null = ceil(1.5 B) (paper: 384 or 192, account (c))
    use_response_entropy: bool = True  # accounts (a), (c); (b) "requires high uncertainty"
    edge_floor: float = 0.5  # ours ((b): the shortlist is broad)
    beta: float = 0.5  # ours: EMA weight of the newest pass rate / response entropy
    pool_factor: float = 2.0  # ours: the median halves the shortlist, so 2R candidates give <= R rollouts
    p_easy: float = 0.5  # GRESO S15:19; its use in HIVE is ours
    p_hard: float = 0.5  # GRESO S15:20
    target_zero_variance: float = 0.25  # GRESO S15:21
    delta: float = 0.01  # GRESO RT:1212-1219
    p_min: float = 0.05  # GRESO RT:1203
    p_max: float = 0.95  # GRESO RT:1204
    keep_floor: float = 0.01  # GRESO PS:117, 142
    max_gen_batches: int = 10  # as dapo (section 2); no HIVE evidence
    on_exhaust: str = "partial"  # as dapo

    def __post_init__(self):
        for key in ("train_batch_size", "rollout_batch_size"):
            value = getattr(self, key)
            require(value is None or value > 0, f"selector.{key}", f"must be > 0 or null, got {value}")
        require(0 <= self.edge_floor <= 1, "selector.edge_floor", f"must be in [0, 1], got {self.edge_floor}")
        require(0 < self.beta <= 1, "selector.beta", f"must be in (0, 1], got {self.beta}")
        require(self.pool_factor >= 1, "selector.pool_factor", f"must be >= 1, got {self.pool_factor}")
        check_history_config(self)


class HiveSelector(Selector):
    """HIVE: random screen towards the learning edge, keep high prompt entropy, fill by dynamic sampling."""

    Config = HiveConfig
    name = "hive"
    samples_in_rounds = True  # an empty shortlist still asks for the next round
    requires = ("prompt_entropy", "response_entropy")

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        if not self.config.use_response_entropy:
            self.requires = ("prompt_entropy",)
        self.history = SkipHistory(self.num_prompts, self.config)
        self.p_hist = np.full(self.num_prompts, np.nan)  # float64[N] EMA pass rate, NaN = unseen
        self.h_hist = np.full(self.num_prompts, np.nan)  # float64[N] EMA mean response entropy, NaN = unknown
        self.h_bar = None  # mean of the known h_hist (None: none known); derived, not state
        train = self.config.train_batch_size or self.batch_size
        if train is None:
            raise LzeBenchError("selector.train_batch_size: hive needs a batch size; set it or pass the harness's")
        self.begin_update(int(train))

    def begin_update(self, train_batch_size: int | None = None) -> None:
        """Set this step's B (and R from it); replay calls it before each logged step."""
        if train_batch_size is not None:
            self.train_batch_size = int(train_batch_size)
            self.rollout_batch_size = int(self.config.rollout_batch_size or math.ceil(1.5 * self.train_batch_size))

    def finish_update(self) -> None:
        """End the step now (adaptation, counters reset) even if more was asked for (replay, spec §8)."""
        self.history.finish_step()

    def begin_epoch(self, epoch, rng):
        self.history.epoch = int(epoch)

    def candidates_per_step(self, budget: int) -> int:
        return self.round_candidates(self.rollout_batch_size)

    def rollout_budget(self, budget: int) -> int:
        return self.rollout_batch_size

    def round_candidates(self, more: int) -> int:
        return int(math.ceil(self.config.pool_factor * int(more)))

    # --- stage 1 -------------------------------------------------------------
    def edge(self, candidates: np.ndarray) -> np.ndarray:
        """float64[m]: the learning-edge term e = edge_floor + (1 - edge_floor) * 4 p (1 - p) * u in
        [edge_floor, 1] (NaN for unseen prompts); u = 1 where it is not known (module docstring)."""
        cfg = self.config
        p = self.p_hist[candidates]
        e = (1.0 - cfg.edge_floor) * (4.0 * p * (1.0 - p))
        if cfg.use_response_entropy and self.h_bar is not None and self.h_bar > 0:
            h = self.h_hist[candidates]
            e = e * np.where(np.isnan(h), 1.0, np.minimum(1.0, h / self.h_bar))
        return cfg.edge_floor + e

    def select_probability(self, candidates: np.ndarray) -> np.ndarray:
        """float64[m]: q = k * e, 1 for unseen prompts."""
        q = self.history.keep_probability(candidates) * self.edge(candidates)
        return np.where(np.isnan(self.p_hist[candidates]), 1.0, q)

    # --- forward -------------------------------------------------------------
    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        budget = max(0, int(budget))
        features = self.require_features(features)
        self.history.cand_step += int(candidates.size)
        draws = rng.random(candidates.size)  # one draw per candidate, candidate order
        shortlist = candidates[~(draws < 1.0 - self.select_probability(candidates))]
        if shortlist.size == 0 or budget == 0:
            return shortlist[:0]
        entropy = features("prompt_entropy", shortlist)
        if entropy is None:  # a replayed log without prompt entropy (spec §8): the edge term stands in
            value = np.nan_to_num(self.edge(shortlist), nan=np.inf)
        else:
            value = np.asarray(entropy).reshape(-1)
            if value.dtype != np.float32:  # float32 stays: its values compare exactly against a float64 median
                value = value.astype(np.float64)
            if value.size != shortlist.size or not np.all(np.isfinite(value)):
                raise LzeBenchError(
                    f"hive: prompt_entropy must be {shortlist.size} finite numbers, got shape {value.shape}")
        # V >= the float64 median of the values (np.float64 on the right: float32 V is compared in float64)
        passed = np.greater_equal(value, np.float64(median(value)))
        if np.count_nonzero(passed) > budget:
            passed = top_k_mask(np.where(passed, value.astype(np.float64), -np.inf), budget)
        return shortlist[passed]

    # --- backward ------------------------------------------------------------
    def observe(self, batch):
        ids = batch.prompt_ids
        solved, failed, _ = group_classes(batch.rewards, self.name)
        self.history.observe(ids, solved, failed)
        self.p_hist[ids] = self._ema(self.p_hist[ids], pass_rates(batch.rewards))
        if batch.response_entropy is not None:
            h = np.asarray(batch.response_entropy, dtype=np.float64).mean(axis=1)
            self.h_hist[ids] = self._ema(self.h_hist[ids], h)
            self._mean_entropy()

    def _mean_entropy(self) -> None:
        """h_bar: the mean h_hist over every prompt where known (None: none known), kept current by observe
        and load_state_dict, the only places h_hist changes."""
        known = ~np.isnan(self.h_hist)
        self.h_bar = float(self.h_hist[known].mean()) if known.any() else None

    def _ema(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """(1 - beta) old + beta new; the new value itself where old is NaN (first sight)."""
        beta = self.config.beta
        return np.where(np.isnan(old), new, (1.0 - beta) * old + beta * new)

    def select_update(self, batch, step, rng):
        hist, target = self.history, self.train_batch_size
        _, _, informative = group_classes(batch.rewards, self.name)
        keep = hist.keep_informative(informative, target)
        more = 0 if hist.kept_so_far >= target else self.rollout_batch_size
        more, partial = hist.exhausted(more, self.name, target)
        if more == 0:
            hist.finish_step()
        return UpdateDecision(keep=keep, more=more, partial=partial)

    # --- state ---------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**self.history.to_dict(), "p_hist": self.p_hist.copy(), "h_hist": self.h_hist.copy(),
                "train_batch_size": int(self.train_batch_size)}

    def load_state_dict(self, state: dict) -> None:
        self.history.load(state, self.name)
        for key in ("p_hist", "h_hist"):
            value = np.asarray(state[key], dtype=np.float64)
            if value.shape != (self.num_prompts,):
                raise LzeBenchError(f"hive state {key!r} has shape {value.shape}, expected ({self.num_prompts},)")
            setattr(self, key, value.copy())
        self._mean_entropy()
        self.begin_update(int(state["train_batch_size"]))
