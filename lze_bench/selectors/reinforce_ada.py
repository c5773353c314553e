"""Reinforce-Ada: sample each prompt in rounds until it has enough right and wrong answers, train on a balanced n.

Source: Xiong et al., "Reinforce-Ada: An Adaptive Sampling Framework for
Reinforce-Style LLM Training" (arXiv 2510.04996); code `RLHFlow/Reinforce-Ada`
@ 05be6058: `verl/trainer/ppo/ray_trainer.py:929-1215`
(`_generate_multi_round_adaptive_downsampling`), `core_algos.py:305-326`
(advantage from the pool's counts), `verl/trainer/config/algorithm.py:89-95`,
`scripts/run_reinforce_ada.sh`. Rules, defaults and departures: selectors.md §15.

Rule, per step (B prompts, n = `trainer.n_samples` kept per prompt):
- every prompt starts active; each round generates `round_repeat` rollouts of
  every active prompt, for at most `max_rounds` rounds;
- a rollout is positive when its reward > `positive_threshold`;
- after the whole round is in (so every rollout of the round counts), a prompt
  finishes: `balanced` once it has >= floor(n/2) positives and >= n - floor(n/2)
  negatives; `positive_focused` at its first positive;
- a finished prompt keeps n rollouts: min(floor(n/2), P) of its first positives
  and min(n - that, Q) of its first negatives in generation order, topped up
  from the positives, else the negatives, when that is short of n (the code's
  `downsample_cache`);
- after the last round an unfinished prompt still trains on
  take = min(n, P + Q) rollouts: `balanced` aims at floor(n/2) positives and
  n - floor(n/2) negatives (the values the round loop last assigned), and
  `positive_focused` at max(min(ceil(P/(P+Q) * n), take - 1), 1) positives and
  the rest negatives; each capped at what exists, then topped up from the
  positives, else the negatives. All-0 groups can therefore train;
- the advantage's mean (and std) come from every rollout generated for the
  prompt (`global_stat_est=True` in the authors' script), not only the kept n.

Interface mapping: round 0 rolls out the B candidates with `round_repeat`
rollouts each (`first_rollouts`); an unfinished prompt is held with
`extend=round_repeat`, so the backend's next round adds that many rollouts to
its group; a prompt's round count is its rollouts / `round_repeat`. The
selector is stateless: everything it needs is in the batch.

Choices and departures (ours):
- n, the kept rollouts per prompt, is `trainer.n_samples` (the authors pass
  `rollout.n` = 4); `round_repeat` null = 2n, the authors' 8 for n = 4 (their
  yaml default), so the generated/kept ratio matches theirs at any n;
- advantages: the authors' script sets `norm_adv_by_std_in_grpo=False` (r - mean,
  Dr.GRPO); here the trainer's `trainer.scale_rewards` decides for every selector
  of a comparison alike; set it false to run their script's estimator. With
  scaling, our std is over the same pool (theirs clamps it at 1e-6 from below
  and adds 1e-6; ours adds the trainer's epsilon);
- the dp-size padding of each round's generation batch (the padded rollouts
  are generated and discarded) is a multi-GPU artifact and is not reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import StatelessSelector, UpdateDecision, first_of_each, require, row_counts


CHOICES = ("balanced", "positive_focused")


@dataclass
class ReinforceAdaConfig:
    name: str = "reinforce_ada"
    choice: str = "balanced"  # reinforce_ada_choice: run_reinforce_ada.sh:57, algorithm.py:90
    positive_threshold: float = 0.7  # algorithm.py:91
    max_rounds: int = 4  # algorithm.py:92
    round_repeat: Optional[int] = None  # algorithm.py:93 says 8 for n = 4; null = 2 x trainer.n_samples
    global_stat_est: bool = True  # run_reinforce_ada.sh:58 (the yaml default is False)

    def __post_init__(self):
        require(self.choice in CHOICES, "selector.choice", f"must be one of {', '.join(CHOICES)}, got {self.choice!r}")
        require(self.max_rounds >= 1, "selector.max_rounds", f"must be >= 1, got {self.max_rounds}")
        require(self.round_repeat is None or self.round_repeat >= 1, "selector.round_repeat",
                f"must be >= 1 or null, got {self.round_repeat}")


def _check_rounds(config, max_gen_rounds: int) -> None:
    """The authors finish every prompt within its step (at most `max_rounds` rounds): a backend cap below that
    would carry unfinished prompts into the next step, which would then train more than B groups, some
    generated a step earlier."""
    require(int(max_gen_rounds) >= int(config.max_rounds), "backend.max_gen_rounds",
            f"{max_gen_rounds} rounds a step cannot finish Reinforce-Ada's selector.max_rounds={config.max_rounds}; "
            "set backend.max_gen_rounds >= selector.max_rounds, or lower selector.max_rounds")


def kept_counts(pos: np.ndarray, neg: np.ndarray, n: int, finished: np.ndarray) -> tuple:
    """int[G] positives and int[G] negatives each group keeps: the authors' two branches, reduced.

    Finished: `downsample_cache(n)` (RT:1069-1083); unfinished after the last round: the fallback over
    take = min(n, P + Q) (RT:1139-1185). Both aim at floor(n/2) positives, cap each class at what exists and
    top up when short of `take`, first from the positives, else from the negatives. Their negative targets
    (n - floor(n/2) in `balanced`, take - target_pos in `positive_focused`) never bind once the top-up has run:
    a `positive_focused` prompt still unfinished has no positive (it finishes at its first), and otherwise the
    top-up fills the negatives up to take - kept positives. So: negatives min(Q, take - min(P, floor(n/2))), and
    positives the rest of `take` (there are always enough: take <= P + Q). tests/test_selectors_ragged.py checks
    this against the branches as written, for both choices and every small P, Q, n."""
    take = np.where(finished, n, np.minimum(pos + neg, n))
    kept_neg = np.minimum(neg, take - np.minimum(pos, n // 2))
    return take - kept_neg, kept_neg


class ReinforceAdaSelector(StatelessSelector):
    """Reinforce-Ada: rounds of `round_repeat` rollouts per active prompt, a balanced n kept per prompt."""

    @classmethod
    def check_run(cls, config, *, max_gen_rounds: int) -> None:
        _check_rounds(config, max_gen_rounds)

    Config = ReinforceAdaConfig
    name = "reinforce_ada"
    keeps_rollouts = True
    extends_groups = True

    def round_repeat(self, n: int) -> int:
        return int(self.config.round_repeat) if self.config.round_repeat is not None else 2 * int(n)

    def first_rollouts(self, group_size: int) -> int:
        return self.round_repeat(group_size)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        return candidate_ids[:budget]  # every prompt of the batch starts active

    def select_update(self, batch, step, rng):
        cfg, n = self.config, int(self.group_size or batch.group_size)  # n: kept per prompt (the authors' rollout.n)
        valid = batch.valid
        positive = batch.rewards > cfg.positive_threshold
        if valid is not None:
            positive &= valid
        rollouts = batch.counts
        pos = row_counts(positive)
        neg = rollouts - pos  # negatives: valid and not positive
        if cfg.choice == "balanced":
            half = n // 2  # floor(n/2) positives and n - floor(n/2) negatives (RT:1087-1090)
            finished = (pos >= half) & (neg >= n - half)
        else:
            finished = pos >= 1
        keep = finished | (rollouts >= cfg.max_rounds * self.round_repeat(n))  # every round adds round_repeat
        kept_pos, kept_neg = kept_counts(pos, neg, n, finished)
        # the first kept_pos positives and kept_neg negatives in generation order, none outside kept groups
        keep_rollouts = first_of_each(positive, valid, np.where(keep, kept_pos, 0), np.where(keep, kept_neg, 0))
        hold = ~keep
        return UpdateDecision(keep=keep, keep_rollouts=keep_rollouts,
                              advantage_stats="generated" if cfg.global_stat_est else "kept",
                              hold=hold, extend=np.where(hold, self.round_repeat(n), 0))
