"""Group advantages of outcome rewards: the estimator `trainer.advantage_estimator` names, on every backend.

Each rollout `i` of a prompt's group gets one advantage from the group's rewards `r`:

    grpo      (r_i - mean) / (std + eps)   DeepSeekMath's GRPO; unbiased std (verl's, OpenRLHF's group_norm)
    dr_grpo   r_i - mean                   Dr. GRPO (no std scaling; OpenRLHF's dr_grpo)
    rloo      r_i - mean of the others     RLOO's leave-one-out baseline, (sum - r_i) / (m - 1)
                                           (OpenRLHF's rloo); = m / (m - 1) * (r_i - mean)

The statistics are over a pool of the group's rollouts (`over`; None = every rollout generated), as PODS
takes them over the subset it keeps: every rollout gets an advantage, the caller trains those it keeps. A
rollout outside the pool (never trained) is centred on the pool's mean. A pool of one rollout has no std and
no "others": its advantage is its centred reward, 0.

`trainer.scale_rewards`, the older switch, still reads as it did: false turns `grpo` into `dr_grpo`; null
(the default) leaves the estimator's own rule; true with an estimator that never divides by the std is a
contradiction and refused. OpenRLHF 0.11.2 has each of the three under its own name (`OPENRLHF_NAMES`, the
formulas of `compute_advantages_and_returns`), with its std epsilon 1e-9 for group_norm.
"""

from __future__ import annotations

import numpy as np

from lze_bench.errors import LzeBenchError

ESTIMATORS = ("grpo", "dr_grpo", "rloo")
OPENRLHF_NAMES = {"grpo": "group_norm", "dr_grpo": "dr_grpo", "rloo": "rloo"}  # --algo.advantage.estimator
GRPO_EPS = 1e-6  # verl's compute_grpo_outcome_advantage epsilon (the local backend's)


def check_estimator(name: str, scale_rewards: bool | None) -> None:
    """Refuse, in one line, an unknown estimator or a `trainer.scale_rewards` that contradicts it."""
    if name not in ESTIMATORS:
        raise LzeBenchError(f"trainer.advantage_estimator: unknown estimator {name!r}; use {', '.join(ESTIMATORS)}")
    if scale_rewards is True and name != "grpo":
        raise LzeBenchError(f"trainer.scale_rewards=true: {name} never divides by the group std; drop "
                            "trainer.scale_rewards or use trainer.advantage_estimator=grpo")


def resolved_estimator(trainer) -> str:
    """The estimator a trainer config runs: `advantage_estimator`, with `scale_rewards=false` making grpo dr_grpo.

    `trainer` is the trainer config (object or dict); a config written before the key existed runs grpo."""
    get = trainer.get if isinstance(trainer, dict) else lambda key, default=None: getattr(trainer, key, default)
    name = get("advantage_estimator", "grpo") or "grpo"
    check_estimator(name, get("scale_rewards", None))
    return "dr_grpo" if name == "grpo" and get("scale_rewards", None) is False else name


def group_advantages(rewards, estimator: str, over=None, eps: float = GRPO_EPS) -> np.ndarray:
    """float32[n]: each rollout's advantage under `estimator`, statistics over the rollouts `over` flags."""
    check_estimator(estimator, None)
    rewards = np.asarray(rewards, dtype=np.float64)
    inside = np.ones(rewards.shape, dtype=bool) if over is None else np.asarray(over, dtype=bool)
    pool = rewards[inside]
    centred = rewards - pool.mean()
    if pool.size > 1:
        if estimator == "grpo":
            centred = centred / (pool.std(ddof=1) + eps)
        elif estimator == "rloo":  # leave-one-out only inside the pool: outside, r_i is no part of the sum
            centred = np.where(inside, rewards - (pool.sum() - rewards) / (pool.size - 1), centred)
    return centred.astype(np.float32)
