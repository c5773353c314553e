"""MoPPS: a Beta posterior of each prompt's pass rate, Thompson-sampled over a pool; keep those nearest a target.

Source: github thu-rllab/MoPPS at a883f519 (`recipe/ours/mopps.py` PosteriorSampler: `sample_batch`
L26-70, `train` L72-79; `recipe/ours/our_ray_trainer.py` L141-145 sampler set-up and epochs x ts_ratio,
L175-177 the candidate chunk, L61-87 the per-prompt accuracy it is trained on, L373-374 the pick;
`recipe/ours/config/our_trainer.yaml` `tasksampler`; `recipe/ours/scripts/math/math_verl_1.5b_topk_noinit.sh`);
paper arXiv 2507.04632. The same sampler is upstream in volcengine/verl `recipe/mopps/`.

Per step the data order offers a chunk of `min(floor(ts_ratio * B), N)` candidates (the authors' dataloader
batch; `candidates_per_step`). For each candidate a pass rate is drawn from its posterior,
`r_i ~ Beta(alpha_i, beta_i)` (`sample`: a uniform draw for prompts never rolled out, whose posterior is
the Beta(1, 1) prior, one `rng.beta` for the rest); `strategy=topk` (every
launch script) rolls out the B candidates with the smallest `(r_i - target)^2`;
`threshold` takes a uniform random B of those with `r_i` in `[lower, upper]`, or, when fewer than B
are, the B nearest the interval (0 inside it). Every group reaches the update (the authors' math
runs have the DAPO filter off). After grading, each rolled-out prompt with pass rate `s_i` over n
rollouts is updated, with the prior (alpha0, beta0) and the forgetting factor `decay` (lambda):

    alpha_i <- lambda * alpha_i + (1 - lambda) * alpha0 + n * s_i
    beta_i  <- lambda * beta_i  + (1 - lambda) * beta0  + n * (1 - s_i)

The authors' code writes the `... if n > 1 else 8` fallback without parentheses, so it binds to the
whole right-hand side: with n = 1 both alpha and beta are *set* to 8 (the prompt's history is erased
and its posterior becomes Beta(8, 8)). `n1_quirk=true` (default) reproduces that; `false` applies the
formula above for every n. Defaults are the authors' math runs: ts_ratio 16, prior Beta(1, 1),
lambda = 1 (no forgetting: the posterior of a prompt only sharpens, even as the policy improves),
target 0.5 (yaml `bandit_target_mean`).

Choices where our interface differs (ours):
* the posterior starts at the prior for every prompt (the authors create it lazily, at the prior,
  when a prompt first appears as a candidate: the same numbers);
* ties in the distance (probability zero with continuous draws) go to the earlier candidate (the
  authors' `np.argsort` is not stable); the chosen are returned in candidate order, the interface's
  rule (the authors' batch is nearest first, which only orders their mini-batches);
* the randomness is the harness's `rng` per step (the authors use NumPy's global generator);
* the authors multiply `total_epochs` by ts_ratio so the step count stays that of the plain run;
  here runs end at a step cap or a FLOP budget, and a pass over the data is counted in candidates
  offered (ledger `prompts_considered`, `epoch`), so one pass is about N / (ts_ratio * B) steps;
* the optional warm start from recorded outcomes (`bandit_init`) is not offered: the math scripts
  ("noinit") do not use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lze_bench.api import Selector, UpdateDecision, pass_rates, require, top_k_mask


STRATEGIES = ("topk", "threshold")
N1_RESET = 8.0  # mopps.py L77-78: the value alpha and beta are set to when n == 1 (the precedence quirk)


@dataclass
class MoppsConfig:
    name: str = "mopps"
    ts_ratio: float = 16.0  # candidate pool / batch; math_verl_*_topk_noinit.sh tasksampler.ts_ratio=16
    prior_alpha: float = 1.0  # mopps.py L8 default, used by our_ray_trainer.py L143
    prior_beta: float = 1.0  # same
    decay: float = 1.0  # lambda, forgetting factor; our_trainer.yaml bandit_decay_ratio (math: not overridden)
    target: float = 0.5  # our_trainer.yaml bandit_target_mean
    strategy: str = "topk"  # every launch script: bandit_sample_strategy='topk'
    lower: float = 0.3  # threshold strategy: our_trainer.yaml bandit_lower_bound
    upper: float = 0.7  # threshold strategy: our_trainer.yaml bandit_upper_bound
    n1_quirk: bool = True  # mopps.py L77-78 as written: with n == 1, alpha = beta = 8

    def __post_init__(self):
        require(self.ts_ratio >= 1, "selector.ts_ratio", f"must be >= 1 (the pool holds the batch), got {self.ts_ratio}")
        require(self.prior_alpha > 0 and self.prior_beta > 0, "selector.prior_alpha",
                "prior_alpha and prior_beta must be > 0 (a Beta distribution)")
        require(0 <= self.decay <= 1, "selector.decay", f"must be in [0, 1], got {self.decay}")
        require(0 <= self.target <= 1, "selector.target", f"must be in [0, 1], got {self.target}")
        require(self.strategy in STRATEGIES, "selector.strategy",
                f"unknown strategy {self.strategy!r}; use one of {', '.join(STRATEGIES)}")
        require(0 <= self.lower <= self.upper <= 1, "selector.lower", "need 0 <= lower <= upper <= 1")


class MoppsSelector(Selector):
    """MoPPS: Thompson-sample each candidate's pass rate from its Beta posterior; roll out those nearest the target."""

    Config = MoppsConfig
    name = "mopps"

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.alpha = np.full(self.num_prompts, float(self.config.prior_alpha))
        self.beta = np.full(self.num_prompts, float(self.config.prior_beta))
        self.observed = np.zeros(self.num_prompts, dtype=bool)  # rolled out at least once

    def candidates_per_step(self, budget: int) -> int:
        # our_ray_trainer.py L175-177: min(int(ts_ratio * gen_batch_size), len(dataset))
        return max(int(budget), min(int(math.floor(self.config.ts_ratio * int(budget))), self.num_prompts))

    def sample(self, candidates: np.ndarray, rng) -> np.ndarray:
        """One Thompson draw r_i ~ Beta(alpha_i, beta_i) per candidate (mopps.py L45), in candidate order.

        With the Beta(1, 1) prior, a prompt never rolled out has the uniform distribution: every candidate
        gets one `rng.random`, then the rolled-out ones (`observed`) are redrawn with one `rng.beta`. The
        same distribution as one `rng.beta` over every candidate (not the same stream); other priors take
        that one `rng.beta`."""
        cfg = self.config
        if cfg.prior_alpha != 1.0 or cfg.prior_beta != 1.0:
            return rng.beta(self.alpha[candidates], self.beta[candidates])
        sampled = rng.random(candidates.size)
        seen = np.flatnonzero(self.observed[candidates])
        if seen.size:
            ids = candidates[seen]
            sampled[seen] = rng.beta(self.alpha[ids], self.beta[ids])
        return sampled

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        budget = min(max(0, int(budget)), candidates.size)
        sampled = self.sample(candidates, rng)
        cfg = self.config
        if cfg.strategy == "topk":  # L49-51: the smallest (r - target)^2
            chosen = np.flatnonzero(top_k_mask(-np.square(sampled - cfg.target), budget))
        else:
            inside = np.flatnonzero((sampled >= cfg.lower) & (sampled <= cfg.upper))
            if inside.size >= budget:  # L55-57: a uniform random `budget` of those in range
                chosen = np.sort(inside[rng.permutation(inside.size)[:budget]])
            else:
                gap = np.maximum(cfg.lower - sampled, 0.0) + np.maximum(sampled - cfg.upper, 0.0)  # L59-64
                chosen = np.flatnonzero(top_k_mask(-gap, budget))
        return candidates[chosen]  # candidate order (selectors.md §0)

    def observe(self, batch):
        if batch.num_groups == 0:
            return
        cfg, ids, n = self.config, batch.prompt_ids, batch.group_size
        self.observed[ids] = True
        if n == 1 and cfg.n1_quirk:  # `... + s * n if n > 1 else 8` parses as `(...) if n > 1 else 8`
            self.alpha[ids] = N1_RESET
            self.beta[ids] = N1_RESET
            return
        success = pass_rates(batch.rewards)  # our_ray_trainer.py L61-87: the group's mean accuracy
        keep, fresh = cfg.decay, 1.0 - cfg.decay
        self.alpha[ids] = self.alpha[ids] * keep + cfg.prior_alpha * fresh + success * n
        self.beta[ids] = self.beta[ids] * keep + cfg.prior_beta * fresh + (1.0 - success) * n

    def select_update(self, batch, step, rng):
        return UpdateDecision.keep_all(batch.num_groups)  # the math scripts run without the DAPO filter

    def state_dict(self) -> dict:
        return {"alpha": self.alpha.copy(), "beta": self.beta.copy(), "observed": self.observed.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.alpha = np.array(state["alpha"], dtype=np.float64)
        self.beta = np.array(state["beta"], dtype=np.float64)
        self.observed = np.asarray(state["observed"], dtype=bool).copy()
