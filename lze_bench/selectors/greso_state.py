"""GRESO's zero-variance history, skip rule and exploration adaptation (selectors.md §6), shared with HIVE (§4).

Kept apart from `greso.py` so HIVE reuses the same state and rules: the
per-prompt runs of all-solved / all-failed rollouts, the keep probability
`max(p ** run, keep_floor)`, the per-step counters and the once-per-step
adaptation of `p_easy` / `p_hard`. Everything is a vectorized gather or
scatter by prompt id (ids are unique within a batch).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.selectors.dapo import cap_rounds, keep_first_informative

PER_PROMPT = ("easy_run", "hard_run", "n_obs")
SCALARS = ("p_easy", "p_hard", "epoch")
TRANSIENT = ("kept_so_far", "gen_rounds", "last_round", "cand_step", "rolled_step", "solved_step", "failed_step")


def check_history_config(cfg) -> None:
    """One-line errors for the GRESO keys (shared by greso and hive configs)."""
    for key in ("p_easy", "p_hard", "p_min", "p_max", "keep_floor"):
        value = getattr(cfg, key)
        require(0 <= value <= 1, f"selector.{key}", f"must be in [0, 1], got {value}")
    require(cfg.p_min <= cfg.p_max, "selector.p_min", f"must be <= selector.p_max, got {cfg.p_min} > {cfg.p_max}")
    require(cfg.target_zero_variance >= 0, "selector.target_zero_variance", "must be >= 0")
    require(cfg.delta >= 0, "selector.delta", f"must be >= 0, got {cfg.delta}")
    require(cfg.max_gen_batches >= 0, "selector.max_gen_batches", "must be >= 0 (0 = unlimited)")
    require(cfg.on_exhaust in ("partial", "error"), "selector.on_exhaust",
            f"use 'partial' or 'error', got {cfg.on_exhaust!r}")


def group_classes(rewards: np.ndarray, who: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(solved, failed, informative) bool[G]: every / no response correct, rewards not all equal.

    Rewards must lie in [0, 1] and groups need n >= 2 (spec §6 "Classes").
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    if rewards.shape[1] < 2:
        raise LzeBenchError(f"{who}: groups need n >= 2 responses (n = 1 is never informative); "
                            "raise trainer.n_samples")
    low, high = rewards.min(axis=1), rewards.max(axis=1)
    if rewards.size and (float(low.min()) < 0 or float(high.max()) > 1):
        raise LzeBenchError(f"{who}: rewards must lie in [0, 1]; rescale the task reward")
    return low == 1, high == 0, high > low


def round_estimate(need: int, groups: int, zero: int, first_round: int, margin: float) -> tuple[int, bool]:
    """(T, last_round) of spec §6: prompts to roll out so the room fills with a margin (exact rationals).

    `zero == groups` (no informative group): T = first_round and not the last round (ours).
    """
    if zero == groups:
        return int(first_round), False
    estimate = math.floor(Fraction(margin) * need * groups / (groups - zero))
    return int(estimate), estimate <= first_round


class SkipHistory:
    """Per-prompt runs, the exploration probabilities and the per-step counters of GRESO."""

    def __init__(self, num_prompts: int, cfg):
        self.cfg = cfg
        self.easy_run = np.zeros(num_prompts, dtype=np.int32)  # consecutive all-solved rollouts, 0 unseen
        self.hard_run = np.zeros(num_prompts, dtype=np.int32)  # consecutive all-failed rollouts, 0 unseen
        self.n_obs = np.zeros(num_prompts, dtype=np.int32)
        self.p_easy, self.p_hard, self.epoch = float(cfg.p_easy), float(cfg.p_hard), 0
        self.reset_step()

    def reset_step(self) -> None:
        self.kept_so_far, self.gen_rounds, self.last_round = 0, 0, False
        self.cand_step, self.rolled_step, self.solved_step, self.failed_step = 0, 0, 0, 0

    def keep_probability(self, ids: np.ndarray) -> np.ndarray:
        """float64[m]: max(p_easy ** easy_run, floor) if easy_run > 0, the same for hard, else 1."""
        easy, hard = self.easy_run[ids], self.hard_run[ids]
        floor = self.cfg.keep_floor
        keep = np.ones(ids.size)
        keep = np.where(easy > 0, np.maximum(self.p_easy ** easy.astype(np.float64), floor), keep)
        return np.where(hard > 0, np.maximum(self.p_hard ** hard.astype(np.float64), floor), keep)

    def observe(self, ids: np.ndarray, solved: np.ndarray, failed: np.ndarray) -> None:
        self.easy_run[ids] = np.where(solved, self.easy_run[ids] + 1, 0)
        self.hard_run[ids] = np.where(failed, self.hard_run[ids] + 1, 0)
        self.n_obs[ids] += 1
        self.rolled_step += int(ids.size)
        self.solved_step += int(np.count_nonzero(solved))
        self.failed_step += int(np.count_nonzero(failed))

    def keep_informative(self, informative: np.ndarray, target: int) -> np.ndarray:
        """Dynamic sampling: the first `target - kept_so_far` informative groups, in generation order."""
        keep = keep_first_informative(informative, target - self.kept_so_far)
        self.kept_so_far += int(np.count_nonzero(keep))
        self.gen_rounds += 1
        return keep

    def exhausted(self, more: int, who: str, target: int) -> tuple[int, bool]:
        """(more, partial) after the `max_gen_batches` cap (dapo's rule, spec §2)."""
        return cap_rounds(more, self.gen_rounds, self.cfg, who, self.kept_so_far, target)

    def finish_step(self) -> None:
        """The step's update is decided: adapt p_easy / p_hard (epoch > 0), then reset the counters."""
        cfg = self.cfg
        if self.epoch > 0 and self.rolled_step > 0:
            easy = self.solved_step / self.rolled_step
            hard = self.failed_step / self.rolled_step
            if hard >= cfg.target_zero_variance * 2 / 3:
                self.p_hard = max(self.p_hard - cfg.delta, cfg.p_min)
            else:
                self.p_hard = min(self.p_hard + cfg.delta, cfg.p_max)
            if easy >= cfg.target_zero_variance / 3:
                self.p_easy = max(self.p_easy - cfg.delta, cfg.p_min)
            else:
                self.p_easy = min(self.p_easy + cfg.delta, cfg.p_max)
        self.reset_step()

    def to_dict(self) -> dict:
        state = {key: getattr(self, key).copy() for key in PER_PROMPT}
        state.update({key: getattr(self, key) for key in SCALARS + TRANSIENT})
        return state

    def load(self, state: dict, who: str) -> None:
        for key in PER_PROMPT:
            value = np.asarray(state[key])
            if value.shape != self.n_obs.shape:
                raise LzeBenchError(f"{who} state {key!r} has shape {value.shape}, expected {self.n_obs.shape}")
            setattr(self, key, value.astype(np.int32, copy=True))
        self.p_easy, self.p_hard, self.epoch = float(state["p_easy"]), float(state["p_hard"]), int(state["epoch"])
        for key in TRANSIENT:
            setattr(self, key, bool(state[key]) if key == "last_round" else int(state[key]))
