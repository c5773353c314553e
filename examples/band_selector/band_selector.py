"""Band: roll out the prompts whose recent pass rate lies in a band (neither solved nor hopeless)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lze_bench.api import Selector, UpdateDecision, require


@dataclass
class BandConfig:
    name: str = "band"
    low: float = 0.2  # a recent pass rate below this: too hard for the policy now
    high: float = 0.8  # above this: already solved, little left to learn
    decay: float = 0.5  # weight of the newest pass rate in the recent one

    def __post_init__(self):
        require(0.0 <= self.low <= self.high <= 1.0, "selector.low", f"need 0 <= low <= high <= 1, got {self.low}, {self.high}")
        require(0.0 < self.decay <= 1.0, "selector.decay", f"must be in (0, 1], got {self.decay}")


class BandSelector(Selector):
    """The candidates whose recent pass rate lies in [low, high] first; a prompt never seen counts as inside."""

    Config = BandConfig
    name = "band"
    lze_bench_api = "1.0"

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.rate = np.full(self.num_prompts, np.nan)  # recent pass rate per prompt; NaN: never rolled out

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        rate = self.rate[candidate_ids]
        inside = np.isnan(rate) | ((rate >= self.config.low) & (rate <= self.config.high))
        # the band first, then the others, so a full budget is always rolled out; in candidate order
        chosen = np.concatenate([np.flatnonzero(inside), np.flatnonzero(~inside)])[: max(0, int(budget))]
        return candidate_ids[np.sort(chosen)]

    def observe(self, batch):
        old, new, decay = self.rate[batch.prompt_ids], batch.pass_rate, self.config.decay
        self.rate[batch.prompt_ids] = np.where(np.isnan(old), new, (1.0 - decay) * old + decay * new)

    def select_update(self, batch, step, rng):
        return UpdateDecision.keep_all(batch.num_groups)

    def state_dict(self):
        return {"rate": self.rate.copy()}

    def load_state_dict(self, state):
        self.rate = np.array(state["rate"], dtype=np.float64)
