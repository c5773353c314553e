"""SPEED-RL: screen each prompt with a few rollouts, continue those with a pass rate strictly between 0 and 1.

Source: Zhang, Arora, Mei, Zanette, "SPEED-RL: Faster Training of Reasoning
Models via Online Curriculum Learning" (arXiv 2506.09016); code
`Zanette-Labs/speed-rl` @ 80e47b5f: `verl/trainer/ppo/data_controller.py` (all
of the rule) and `recipe/dapo/src/fast_dapo_ray_trainer.py:126-216` (the loop).
Rules, defaults and departures: selectors.md §16.

The authors' loop, one generation call after another:
- a call generates `n_init` rollouts for each of `gen_batch_size` fresh
  prompts (screening) and `n_continue` more for every prompt queued for
  continuation (rounded down to a multiple of the GPU count; the rest wait);
- a screened prompt whose `n_init` rewards have std > 0 joins the queue, and its
  screening rollouts are part of its group; the others are dropped;
- once `train_batch_size` groups hold all `n_init + n_continue` rollouts, the
  update trains the first that many in arrival (screening) order, with no
  second filter (a continued group that came out all-0 or all-1 still trains);
- surplus complete groups and queued prompts carry over to the next step: the
  last screening's survivors continue in the next step's first call, and a
  step that starts with enough complete groups generates nothing.

Interface mapping: a round is one call. Fresh prompts come from
`select_rollout` (`gen_batch_size`, `first_rollouts` = n_init); a survivor is
held with `extend=n_continue`, a complete group not yet trained is held with
`extend=0`; the backend brings both back first in the next batch, in the order
they were held (so batch order is arrival order). When the complete groups
reach B, the first B are kept and everything else is held with `defer`: the
step ends and the backend carries the held groups to the next step, where each
rollout's generation step is recorded (`rollout_steps` in the rollout log).
The only state is the number of complete groups held (`ready`), which decides
whether a step's first call screens new prompts.

Choices and departures (ours):
- the call cap: the authors' `data_controller.py` raises before it would make
  the `max_num_gen_batches`-th call, so a step makes at most
  `max_num_gen_batches - 1` calls; so does ours. A step that has not filled B
  complete groups by then trains the complete groups it has, flagged partial
  (the authors stop the run with an error there). When the backend's own cap
  (`backend.max_gen_rounds`) comes first,
  the step trains nothing, is flagged partial, and every held group carries
  over to the next step (nothing generated is lost);
- the authors' loop draws a dataloader batch on every iteration, also on a
  training iteration, where it is not used: those prompts are skipped for the
  epoch. Here a step that starts with B complete groups carried over takes no
  candidates (`takes_candidates`), so every prompt of a pass is offered;
- a carried-over rollout trains as the authors' trainer trains it: verl
  recomputes the old log-probs with the current policy, so the PPO ratio is
  taken against the current policy with no correction for the generating one;
- survivors that wait (the GPU-count remainder) keep their queue order; the
  embedded default has one device (`n_gpus=1`), so none wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import Selector, UpdateDecision, require
from lze_bench.selectors.dapo import keep_first_informative


@dataclass
class SpeedConfig:
    name: str = "speed"
    n_init: int = 4  # run_fast_rloo_7b.sh:36-41 (rollout.n)
    n_continue: int = 20  # run_fast_rloo_7b.sh (24 rollouts per trained group); the 1.5B script: 8 + 16
    gen_batch_size: Optional[int] = None  # null = 4 x B: the 7B script's 64 generated per 16 trained prompts
    n_gpus: int = 1  # continuations per call are a multiple of it (data_controller.py:97); one device here
    max_num_gen_batches: int = 50  # run_fast_rloo_7b.sh; the backend's max_gen_rounds caps a step too

    def __post_init__(self):
        require(self.n_init >= 2, "selector.n_init", f"must be >= 2 (screening needs a std), got {self.n_init}")
        require(self.n_continue >= 1 and self.n_continue % self.n_init == 0, "selector.n_continue",
                f"must be a positive multiple of selector.n_init={self.n_init} (data_controller.py:46), "
                f"got {self.n_continue}")
        require(self.gen_batch_size is None or self.gen_batch_size >= 1, "selector.gen_batch_size",
                f"must be >= 1 or null, got {self.gen_batch_size}")
        require(self.n_gpus >= 1, "selector.n_gpus", f"must be >= 1, got {self.n_gpus}")
        require(self.max_num_gen_batches >= 2, "selector.max_num_gen_batches",
                f"must be >= 2 (a step makes at most max_num_gen_batches - 1 calls, as the authors' "
                f"data_controller.py), got {self.max_num_gen_batches}")


class SpeedSelector(Selector):
    """SPEED-RL: n_init screening rollouts, n_continue more for the prompts with 0 < pass rate < 1."""

    Config = SpeedConfig
    name = "speed"
    extends_groups = True
    samples_in_rounds = False

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.ready = 0  # complete groups held for a later update
        self._calls: tuple = ()  # (step, calls made in it): the per-step cap, not state (a step restarts whole)

    def _in_step(self, step: int) -> bool:
        """Whether this step already made a call (a later round of it)."""
        return bool(self._calls) and self._calls[0] == step

    def gen_batch_size(self, budget: int) -> int:
        return int(self.config.gen_batch_size) if self.config.gen_batch_size is not None else 4 * int(budget)

    def first_rollouts(self, group_size: int) -> int:
        return int(self.config.n_init)

    def candidates_per_step(self, budget: int) -> int:
        return self.gen_batch_size(budget)

    def rollout_budget(self, budget: int) -> int:
        return self.gen_batch_size(budget)

    def _starts_full(self, step: int, target: int) -> bool:
        """A step's first call finds `target` complete groups carried over: the step makes no call."""
        return not self._in_step(step) and self.ready >= target

    def takes_candidates(self, step: int) -> bool:
        """No fresh prompts for a step that starts with B complete groups carried over."""
        return self.batch_size is None or not self._starts_full(step, self.batch_size)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        if self._starts_full(step, self.batch_size or budget):
            return candidate_ids[:0]  # a replay still offers its logged rows: decline them
        return candidate_ids[:budget]

    def select_update(self, batch, step, rng):
        cfg = self.config
        target = int(self.batch_size or batch.num_groups)
        calls = self._calls[1] + 1 if self._in_step(step) else 1
        self._calls = (step, calls)
        counts = batch.counts
        complete = counts >= cfg.n_init + cfg.n_continue
        screened = counts == cfg.n_init
        survivor = screened & ~batch.zero_variance
        # the first `target` complete groups in arrival order
        enough = int(np.count_nonzero(complete)) >= target
        capped = calls >= cfg.max_num_gen_batches - 1  # the authors raise before the max-th call
        keep = (keep_first_informative(complete, target) if (enough or capped)
                else np.zeros(batch.num_groups, dtype=bool))
        hold = (complete & ~keep) | survivor
        # continuations this call: the queued survivors, rounded down to a multiple of the GPU count
        extend_now = keep_first_informative(survivor, (int(np.count_nonzero(survivor)) // cfg.n_gpus) * cfg.n_gpus)
        ends = enough or capped
        self.ready = int((complete & ~keep).sum())
        if ends and self.ready >= target:
            extend_now = np.zeros_like(extend_now)  # the next step trains without a call: survivors wait
        return UpdateDecision(keep=keep, more=0 if ends else self.gen_batch_size(target), hold=hold,
                              extend=np.where(extend_now, cfg.n_continue, 0), defer=ends,
                              partial=capped and not enough)

    def state_dict(self) -> dict:
        return {"ready": int(self.ready)}

    def load_state_dict(self, state: dict) -> None:
        self.ready = int(state["ready"])

