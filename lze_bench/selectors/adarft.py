"""AdaRFT: roll out the prompts whose fixed difficulty is nearest a target that follows the batch reward.

Source: github uscnlp-lime/verl at bf2dd7e6 (`verl/trainer/ppo/custom_sampler.py` CurriculumSampler
L14-39, `verl/trainer/ppo/ray_trainer.py` L426-438 set-up with target 0, L956-967 target update,
`examples/adarft/run_qwen2.5-1.5b_seq_balance.sh` L16-21); upstream as volcengine/verl `recipe/adarft/`;
paper arXiv 2504.05520.

Every prompt carries a difficulty `d_i` (a per-prompt column, lze_bench.metadata; `column`). Each
step rolls out the B prompts with the smallest `|d_i - T|` (in candidate order, the interface's rule;
the authors' batch is nearest first, which only orders their mini-batches). After the step the target
moves with the mean reward R of every rollout of the batch (the authors' mean sequence reward):

    T <- clip(T + eta * tanh(alpha * (R - beta)), d_min, d_max)

starting at T = 0, the easiest prompts (ray_trainer.py L432). The sampler remembers nothing about
which prompts it used: while T stays put, the same B prompts are rolled out again (a quirk of the
authors' code, kept). Defaults are the authors' script: beta = 0.5 (target reward), alpha = 2,
eta = 50, d in [0, 100].

The labels: AdaRFT's difficulty is 100 x (1 - a reference model's success rate over many samples),
0-100 (the released MATH / DeepScaleR difficulty sets). On the synthetic task the column is the
task's own level, 1 (one addition) to 6 (eight additions), mapped linearly onto that scale
(1 -> 0, 2 -> 20, ..., 6 -> 100; lze_bench.metadata.synthetic_difficulty): more steps fail more, as a
lower success rate does, so the authors' eta and range apply unchanged, and the label comes with the
data ("external, not charged"). A labels file (`labels=FILE`, lze_bench.metadata) that declares the
FLOPs its rollouts cost is charged as offline compute.

Choices where our interface differs (ours):
* ties in `|d_i - T|` (every prompt of a level ties) go by a fixed random rank of the prompts, drawn
  once from the first step's rng and kept in the state. The authors' `np.argsort` is not stable: which
  prompts of a partly taken level it picks depends on the whole array it sorts, so it changes with T
  even when the level's own distances tie. Ours picks the same tied prompts whenever T leaves their
  level partly taken; so the two agree on which levels a batch draws from, not on the prompts within
  the level that is cut;
* the authors run PPO with a critic and n = 1; here GRPO with the harness's n (the mean over n
  rollouts is the same estimate of the batch reward, with less noise);
* the authors' verl dataloader draws batches from the sampler through 8 worker processes that
  prefetch 2 batches each, so a batch is chosen with the target of 16 steps before, and the workers
  restart, taking the target of that moment, at every epoch: at their script's sizes an epoch is
  shorter than that lag, so every batch of an epoch is chosen with the epoch-start target. Here the
  target updated after step t chooses step t + 1's batch (what the paper describes); a comparison with
  the authors' runs should expect their curriculum to move in epoch-sized jumps where ours moves every
  step;
* candidates restricted to fewer than all N ids (a replayed log) are chosen from the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import Selector, UpdateDecision, require, top_k_mask



@dataclass
class AdarftConfig:
    name: str = "adarft"
    column: str = "difficulty"  # the per-prompt column read (lze_bench.metadata); 0-100 like the authors' labels
    labels: Optional[str] = None  # a JSON labels file adding columns (lze_bench.metadata); null: the task's own
    target: float = 0.0  # initial T: ray_trainer.py L432 target_difficulty=0
    beta: float = 0.5  # target reward; run_qwen2.5-1.5b_seq_balance.sh data.adarft.beta=0.5
    alpha: float = 2.0  # tanh sensitivity; same script data.adarft.alpha=2
    eta: float = 50.0  # step size in difficulty units; same script data.adarft.eta=50
    d_min: float = 0.0  # same script data.adarft.d_min=0
    d_max: float = 100.0  # same script data.adarft.d_max=100

    def __post_init__(self):
        require(bool(self.column), "selector.column", "name the per-prompt difficulty column, e.g. difficulty")
        require(self.d_min <= self.d_max, "selector.d_min", f"must be <= selector.d_max, got {self.d_min} > {self.d_max}")
        require(self.eta >= 0, "selector.eta", f"must be >= 0, got {self.eta}")


def nearest(distance: np.ndarray, rank_of, k: int) -> np.ndarray:
    """Positions (ascending) of the k smallest `distance`, ties by smaller `rank_of(positions)` (distinct values).

    O(m) partitions instead of a lexsort of all m: the k-th smallest distance splits the candidates into
    those surely in, the tied ones (cut by rank, looked up for them only) and the rest."""
    m = distance.size
    k = min(max(0, int(k)), m)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    cut = np.partition(distance, k - 1)[k - 1]
    chosen = distance < cut
    tied = np.flatnonzero(distance == cut)
    short = k - int(np.count_nonzero(chosen))
    if short < tied.size:
        tied = tied[top_k_mask(-rank_of(tied).astype(np.float64), short)]
    chosen[tied] = True
    return np.flatnonzero(chosen)


class AdarftSelector(Selector):
    """AdaRFT: the B prompts whose difficulty is nearest a target T; T follows the batch's mean reward."""

    Config = AdarftConfig
    name = "adarft"
    candidate_mode = "full"

    @classmethod
    def metadata_columns(cls, config) -> tuple[str, ...]:
        return (config.column,)

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None, metadata=None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.difficulty = np.asarray((metadata or {})[self.config.column], dtype=np.float64)
        self.target = float(self.config.target)
        self.tie_rank = np.zeros(0, dtype=np.int64)  # drawn at the first select_rollout

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        if self.tie_rank.size == 0:
            self.tie_rank = rng.permutation(self.num_prompts).astype(np.int64)
        distance = self.difficulty[candidates]
        distance = np.abs(np.subtract(distance, self.target, out=distance), out=distance)  # custom_sampler.py L26
        rank = self.tie_rank
        return candidates[nearest(distance, lambda at: rank[candidates[at]], budget)]  # candidate order

    def observe(self, batch):
        if batch.num_groups == 0:
            return
        cfg = self.config
        reward = float(batch.rewards.mean(dtype=np.float64))  # ray_trainer.py L961-962: mean sequence reward
        moved = self.target + cfg.eta * np.tanh(cfg.alpha * (reward - cfg.beta))  # L964
        self.target = float(np.clip(moved, cfg.d_min, cfg.d_max))  # L965

    def select_update(self, batch, step, rng):
        return UpdateDecision.keep_all(batch.num_groups)

    def state_dict(self) -> dict:
        return {"target": float(self.target), "tie_rank": self.tie_rank.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.target = float(state["target"])
        self.tie_rank = np.asarray(state["tie_rank"], dtype=np.int64).copy()
