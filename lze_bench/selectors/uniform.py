"""Plain GRPO: roll out the first `budget` candidates and train on every group.

Zero-variance groups are kept on purpose: they carry no advantage, but keeping
them makes the token and FLOP ledger identical to plain GRPO, the baseline
every other selector is measured against (selectors.md §1).
"""

from __future__ import annotations

from dataclasses import dataclass

from lze_bench.api import StatelessSelector, UpdateDecision



@dataclass
class UniformConfig:
    name: str = "uniform"


class UniformSelector(StatelessSelector):
    """Every candidate up to the budget; every group to the update."""

    Config = UniformConfig
    name = "uniform"

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        return candidate_ids[:budget]  # the data order is already seeded

    def select_update(self, batch, step, rng):
        return UpdateDecision.keep_all(batch.num_groups)
