"""PODS max-variance down-sampling: generate n rollouts per prompt, train on the m with the largest variance.

Source: Xu, Savani, Fang, Kolter, "Not All Rollouts are Useful: Down-Sampling
Rollouts in LLM Reinforcement Learning" (arXiv 2504.13818, TMLR 2026); code
`YixuanEvenXu/pods` @ 187f43b6: `trainer/maxvargrpo_trainer.py:515-533` (the
single-GPU trainer: the rule below). The multi-GPU trainer,
`open-r1/src/open_r1/grpo_trainer.py:1103-1135`, is not the same rule vectorised:
there `indices` is a view of `sorted_indices` that the loop overwrites while it
still reads it, so in about a third of the groups it keeps a lower-variance
subset than the rule it means. We run the single-GPU trainer's rule, which is the
paper's; copying the overwrite would reproduce a bug, not a method. Rules,
defaults and departures: selectors.md §14.

Rule, per group of n rewards:
- sort the rewards in descending order;
- for i = 0 .. m, the candidate subset is the i highest and the m - i lowest;
  keep the one of largest sample variance. The authors' loop starts from the
  all-top subset (i = m) and then tries i = 0, 1, ..., m - 1, replacing the best
  only on a strictly larger variance: ties keep the first found in that order;
- the kept m get advantages from their own statistics,
  (r - mean_kept) / (std_kept + 1e-4), std unbiased (torch's `.std()`);
  the other n - m rollouts are generated (and booked) but never trained.
It is stateless and chooses no prompts: every candidate up to the budget is
rolled out and every group reaches the update, zero-variance ones included
(the authors train them too, with advantage 0; and so does uniform here).

Defaults mapped to the embedded task. The authors always down-sample by
n / m = 4: 32/8 in `maxvargrpo_config.py:125-132`, 64/16 (GSM8K) and 32/8
(MATH) in the paper's main runs (`scripts/plot.py:61-83`), 128/32 in
`open-r1/exp.sh`. Here the backend generates n = `trainer.n_samples` rollouts
per prompt (the same for every selector of a comparison), so PODS keeps
m = max(2, n // down_sample_ratio) of them (`num_kept` sets m directly):
n = 8 keeps 2, n = 16 keeps 4. The paper's own comparison, GRPO with n = m
against PODS with 4m / m, is `trainer.n_samples=4m selector.num_kept=m`
against uniform at `trainer.n_samples=m`; the ledger then books the 4x
generation in full (the paper compares wall-clock, where generation is cheap).

Choices where the code is silent or our interface differs (ours):
- m >= 2: one kept rollout has no std (torch gives NaN); m is capped at n
  (m = n keeps every rollout: plain GRPO with PODS's epsilon);
- equal rewards are ordered by generation index (a stable descending sort),
  so among tied rollouts the earliest generated are the "highest" and the
  latest the "lowest"; the authors' `torch.sort` is not stable, which only
  changes which of several equal-reward responses train, never the kept rewards;
- the authors' rewards are multi-component (accuracy + format + tag count,
  `config_pods.yaml`); the embedded task's grader gives 0/1, for which the rule
  keeps min(correct, ceil(m/2))-ish correct rollouts and fills the rest with wrong
  ones;
- the epsilon 1e-4 is TRL's, which the authors' trainer inherits; it applies to
  the groups PODS keeps (the harness's own epsilon, 1e-6, stays for every other
  selector), and only when the harness scales rewards (`trainer.scale_rewards`,
  the open-r1 trainer's `scale_rewards`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, StatelessSelector, UpdateDecision, require



@dataclass
class PodsConfig:
    name: str = "pods"
    num_kept: Optional[int] = None  # m; null = max(2, n // down_sample_ratio) for n = trainer.n_samples
    down_sample_ratio: int = 4  # n / m: 32/8 (maxvargrpo_config.py:125-132), 64/16, 32/8 (plot.py), 128/32 (exp.sh)
    adv_eps: float = 1e-4  # maxvargrpo_trainer.py:533, open-r1 grpo_trainer.py:1133 (TRL's)

    def __post_init__(self):
        require(self.num_kept is None or self.num_kept >= 2, "selector.num_kept",
                f"must be >= 2 (one kept rollout has no std) or null, got {self.num_kept}")
        require(self.down_sample_ratio >= 1, "selector.down_sample_ratio", f"must be >= 1, got {self.down_sample_ratio}")
        require(self.adv_eps >= 0, "selector.adv_eps", f"must be >= 0, got {self.adv_eps}")


def max_variance_subset(rewards: np.ndarray, m: int) -> np.ndarray:
    """bool[G, n]: per group, the m rollouts the authors' max-variance loop keeps (module docstring).

    Vectorised over groups: a stable descending sort of each group (ties by generation index), then
    each candidate subset i (the i highest and m - i lowest rewards) is scored by m·Σr² - (Σr)² =
    m(m-1)·variance from prefix sums of the sorted rewards. The score is exact for 0/1 rewards (and
    small multiples of a power of two), so subsets whose variances are equal tie exactly and the tie
    goes to the first one the authors try (torch's float32 `var` ties exactly too on 0/1 subsets such
    as 2 vs 3 correct of 5).
    """
    rewards = np.asarray(rewards)
    if rewards.dtype.kind != "f":
        rewards = rewards.astype(np.float64)
    groups, n = rewards.shape
    order = np.argsort(-rewards, axis=1, kind="stable")  # ties by generation index (any float type orders alike)
    ranked = np.take_along_axis(rewards, order, axis=1).astype(np.float64)
    zero = np.zeros((groups, 1))
    sums = np.concatenate([zero, np.cumsum(ranked, axis=1)], axis=1)
    squares = np.concatenate([zero, np.cumsum(ranked * ranked, axis=1)], axis=1)

    def score(i):
        total = sums[:, i] + sums[:, n] - sums[:, n - m + i]
        square = squares[:, i] + squares[:, n] - squares[:, n - m + i]
        return m * square - total * total

    # the authors' loop: start from the all-top subset (i = m), then try i = 0, 1, ..., m - 1 and move
    # only on a strictly larger variance (ties keep the first found)
    best_i = np.full(groups, m, dtype=np.int64)
    best = score(m)
    for i in range(m):
        candidate = score(i)
        better = candidate > best
        best = np.where(better, candidate, best)
        best_i = np.where(better, i, best_i)
    rank = np.arange(n)[None, :]
    in_sorted = (rank < best_i[:, None]) | (rank >= n - m + best_i[:, None])
    keep = np.empty((groups, n), dtype=bool)
    np.put_along_axis(keep, order, in_sorted, axis=1)
    return keep


class PodsSelector(StatelessSelector):
    """PODS: every candidate up to the budget, every group kept, m of its n rollouts trained."""

    Config = PodsConfig
    name = "pods"
    keeps_rollouts = True

    def kept_per_group(self, n: int) -> int:
        """m for groups of n rollouts (module docstring: the mapping of the authors' n / m = 4)."""
        m = self.config.num_kept if self.config.num_kept is not None else max(2, n // self.config.down_sample_ratio)
        if self.config.num_kept is not None and m > n:
            raise LzeBenchError(f"selector.num_kept={m} exceeds the {n} rollouts per prompt (trainer.n_samples); "
                                f"set selector.num_kept <= {n} or raise trainer.n_samples")
        return min(m, n)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        return candidate_ids[:budget]  # the data order is already seeded: PODS picks rollouts, not prompts

    def select_update(self, batch, step, rng):
        m = self.kept_per_group(batch.group_size)
        return UpdateDecision(keep=np.ones(batch.num_groups, dtype=bool),
                              keep_rollouts=max_variance_subset(batch.rewards, int(m)),
                              advantage_stats="kept", advantage_eps=self.config.adv_eps)
