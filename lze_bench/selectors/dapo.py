"""DAPO dynamic sampling: over-sample, keep only groups with a non-constant reward (selectors.md §2).

Sources: DAPO arXiv 2503.14476 §3.2 ("Dynamic Sampling"); verl
`recipe/dapo` trainer loop and launch scripts; OpenRLHF `--dynamic_filtering`.

A group is informative iff its rewards are not all equal (verl: `std > 0`,
or one response). Informative groups are kept in generation order until the
step holds `train_batch_size` of them; surplus informative groups are dropped,
not carried over (verl truncates the accumulated batch). While the step is
short, `select_update` asks the backend for `gen_batch_size` more prompts
(`UpdateDecision.more`); the backend drives that loop. Choices where the
spec is open (ours):

* the generation-round counters are the only state; they reset when a step's
  update is decided (`more == 0`) and are serialized for a mid-step resume;
* when `max_gen_batches` rounds did not fill the batch, `on_exhaust="partial"`
  updates on what was kept and flags `UpdateDecision.partial`; `"error"`
  raises `SelectorExhausted` (verl's behaviour);
* `begin_update(train_batch_size)` starts a fresh step with a per-step
  target; the counterfactual replay uses it (each logged step is one update,
  selectors.md §8). A backend never needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, Selector, SelectorExhausted, UpdateDecision, group_stats, require



@dataclass
class DapoConfig:
    name: str = "dapo"
    train_batch_size: Optional[int] = None  # null = harness batch size; verl DAPO scripts train_prompt_bsz=512
    gen_batch_size: Optional[int] = None  # null = 3 x train_batch_size; verl gen_prompt_bsz=$((train_prompt_bsz*3))
    max_gen_batches: int = 10  # 0 = unlimited; verl DAPO scripts max_num_gen_batches=10
    metric: str = "acc"  # the reward (0/1 accuracy); verl scripts filter_groups_metric=acc
    on_exhaust: str = "partial"  # ours (a sweep never crashes); "error" reproduces verl's ValueError

    def __post_init__(self):
        for key in ("train_batch_size", "gen_batch_size"):
            value = getattr(self, key)
            require(value is None or value > 0, f"selector.{key}", f"must be > 0 or null, got {value}")
        require(self.max_gen_batches >= 0, "selector.max_gen_batches", "must be >= 0 (0 = unlimited)")
        require(self.metric == "acc", "selector.metric", f"only 'acc' (the reward) is supported, got {self.metric!r}")
        require(
            self.on_exhaust in ("partial", "error"),
            "selector.on_exhaust",
            f"use 'partial' or 'error', got {self.on_exhaust!r}",
        )


class DapoSelector(Selector):
    """DAPO dynamic sampling: drop all-correct/all-wrong groups, roll out more until the batch is full."""

    Config = DapoConfig
    name = "dapo"

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        train = self.config.train_batch_size or self.batch_size
        if train is None:
            raise LzeBenchError("selector.train_batch_size: dapo needs a batch size; set it or pass the harness's")
        self.train_batch_size = int(train)
        self.gen_batch_size = int(self.config.gen_batch_size or 3 * self.train_batch_size)
        self.kept_so_far = 0
        self.gen_rounds = 0

    def candidates_per_step(self, budget: int) -> int:
        return self.gen_batch_size  # one generation round

    def rollout_budget(self, budget: int) -> int:
        return self.gen_batch_size  # every prompt of the round is rolled out

    def begin_update(self, train_batch_size: int | None = None) -> None:
        """Forget the current step's counters; optionally set this step's target (replay)."""
        if train_batch_size is not None:
            self.train_batch_size = int(train_batch_size)
        self.kept_so_far = 0
        self.gen_rounds = 0

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        return np.asarray(candidate_ids, dtype=np.int64)[: max(0, int(budget))]

    def select_update(self, batch, step, rng):
        _, varied = group_stats(batch.rewards)
        informative = varied | (batch.group_size == 1)
        keep = keep_first_informative(informative, self.train_batch_size - self.kept_so_far)
        self.kept_so_far += int(np.count_nonzero(keep))
        self.gen_rounds += 1
        more = 0 if self.kept_so_far >= self.train_batch_size else self.gen_batch_size
        more, partial = cap_rounds(more, self.gen_rounds, self.config, "dapo", self.kept_so_far,
                                   self.train_batch_size)
        if more == 0:
            self.begin_update()
        return UpdateDecision(keep=keep, more=more, partial=partial)

    def state_dict(self) -> dict:
        return {
            "kept_so_far": int(self.kept_so_far),
            "gen_rounds": int(self.gen_rounds),
            "train_batch_size": int(self.train_batch_size),
        }

    def load_state_dict(self, state: dict) -> None:
        self.kept_so_far = int(state["kept_so_far"])
        self.gen_rounds = int(state["gen_rounds"])
        self.train_batch_size = int(state.get("train_batch_size", self.train_batch_size))


def keep_first_informative(informative: np.ndarray, room: int) -> np.ndarray:
    """Dynamic sampling (spec §2): the first `room` informative groups, in generation order (also GRESO's,
    HIVE's and SPEED's)."""
    return informative & (np.cumsum(informative) <= room)


def cap_rounds(more: int, gen_rounds: int, config, who: str, kept: int, target: int) -> tuple[int, bool]:
    """(more, partial) after the `max_gen_batches` cap (spec §2; also greso and hive).

    `config` has `max_gen_batches` (0 = unlimited) and `on_exhaust` ("partial": update on what
    was kept, flagged in the ledger; "error": raise, as verl does).
    """
    cap = config.max_gen_batches
    if more > 0 and cap > 0 and gen_rounds >= cap:
        if config.on_exhaust == "error":
            raise SelectorExhausted(
                f"{who}: {gen_rounds} generation rounds (selector.max_gen_batches={cap}) filled only "
                f"{kept} of {target} groups; raise selector.max_gen_batches or set selector.on_exhaust=partial"
            )
        return 0, True
    return more, False
