"""GRESO's zero-variance history, skip rule and exploration adaptation (selectors.md §6), shared with HIVE (§4).

Source: github Infini-AI-Lab/GRESO at b277843, `verl/trainer/ttis/presampling_selector.py` (PS: the
runs and the skip rule, PS:117-144) and `verl/trainer/ray_trainer.py` (RT: the adaptation, RT:1203-1219).

Per prompt: `easy_run` / `hard_run`, the consecutive most recent rollouts whose group was all solved /
all failed (at most one of the two is non-zero: an observation resets the other), and `n_obs`. A
candidate is rolled out with probability `max(p_easy ** easy_run, keep_floor)` if `easy_run > 0`, the same
with `p_hard` if `hard_run > 0`, else 1; it is skipped iff its uniform draw `u < 1 - keep` (PS:119, 144).
Kept apart from `greso.py` so HIVE reuses the state and the rules.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from lze_bench.api import LzeBenchError, require
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

    Exact classes (min == 1, max == 0) where the authors use 0.98 / 0.11 thresholds (ours, spec §6
    "Classes"). Rewards must lie in [0, 1] and groups need n >= 2.
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
        """float64[m]: max(p_easy ** easy_run, floor) if easy_run > 0, the same for hard, else 1 (PS:117, 142)."""
        easy, hard = self.easy_run[ids], self.hard_run[ids]
        floor = self.cfg.keep_floor
        keep = np.ones(ids.size)
        keep = np.where(easy > 0, np.maximum(self.p_easy ** easy.astype(np.float64), floor), keep)
        return np.where(hard > 0, np.maximum(self.p_hard ** hard.astype(np.float64), floor), keep)

    def survivors(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The candidates `ids` not skipped, in candidate order: one `rng.random(m)`, skip iff u < 1 - keep."""
        draws = rng.random(ids.size)
        return ids[~(draws < 1.0 - self.keep_probability(ids))]

    def observe(self, ids: np.ndarray, solved: np.ndarray, failed: np.ndarray) -> None:
        """A run grows on an all-solved (all-failed) group and resets to 0 otherwise (ids unique in a batch)."""
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
        """The step's update is decided: adapt p_easy / p_hard by `delta` towards the zero-variance targets
        (RT:1207-1219: hard 2/3, easy 1/3 of `target_zero_variance`) if epoch > 0, then reset the counters."""
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
        arrays = {}
        for key in PER_PROMPT:
            value = np.asarray(state[key])
            if value.shape != self.n_obs.shape:
                raise LzeBenchError(f"{who} state {key!r} has shape {value.shape}, expected {self.n_obs.shape}")
            arrays[key] = value.astype(np.int32, copy=True)
        if np.any((arrays["easy_run"] > 0) & (arrays["hard_run"] > 0)):
            raise LzeBenchError(f"{who} state: a prompt has both an easy and a hard run; at most one can be > 0")
        self.easy_run, self.hard_run, self.n_obs = arrays["easy_run"], arrays["hard_run"], arrays["n_obs"]
        self.p_easy, self.p_hard, self.epoch = float(state["p_easy"]), float(state["p_hard"]), int(state["epoch"])
        for key in TRANSIENT:
            setattr(self, key, bool(state[key]) if key == "last_round" else int(state[key]))
