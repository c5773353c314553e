"""The reward a rollout trains with, from its grade: `trainer.reward_shape`, on every backend.

    binary       1 correct, 0 otherwise (the default)
    deepscaler   1 correct, 0.1 wrong with an extracted answer, 0 without one: DeepScaleR's math reward,
                 the one SEC's authors train with

"An extracted answer" is a grade whose status is not `no_answer` (lze_bench.grading.Grade: a timeout or
a parser error had an answer to grade). The shape is what the update's advantages see; the verdicts
(0/1) stay what selectors read (RolloutBatch.rewards: pass rates), what the ledger's `reward_mean` and the
rollout log record, so selectors and replays mean the same under every shape.
"""

from __future__ import annotations

import numpy as np

from lze_bench.errors import LzeBenchError

REWARD_SHAPES = {  # shape -> (correct, wrong with an answer, no answer)
    "binary": (1.0, 0.0, 0.0),
    "deepscaler": (1.0, 0.1, 0.0),
}


def check_reward_shape(name: str) -> None:
    if name not in REWARD_SHAPES:
        raise LzeBenchError(f"trainer.reward_shape: unknown shape {name!r}; use {', '.join(REWARD_SHAPES)}")


def shaped_rewards(correct, answered, shape: str) -> np.ndarray:
    """float32[n]: the rewards of rollouts graded `correct` (bool[n]) that had an extracted answer `answered`."""
    check_reward_shape(shape)
    right, wrong, missing = REWARD_SHAPES[shape]
    correct, answered = np.asarray(correct, dtype=bool), np.asarray(answered, dtype=bool)
    return np.where(correct, right, np.where(answered, wrong, missing)).astype(np.float32)


def grade_reward(grade, shape: str) -> float:
    """One rollout's reward from its Grade (`correct`, `status`)."""
    return float(shaped_rewards([grade.correct], [grade.status != "no_answer"], shape)[0])
