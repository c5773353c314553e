"""GRESO: skip prompts predicted zero-variance before rollout, then dynamic sampling (selectors.md §6).

Source: github Infini-AI-Lab/GRESO at b277843
(`verl/trainer/ttis/presampling_selector.py` skip rule, `ray_trainer.py` fit
loop and adaptation, `ttis.py` group filter, `train-scripts/*_greso.sh`);
paper arXiv 2506.02177 ("Act Only When It Pays"), abstract only.

Forward: a candidate whose last `c` rollouts were all solved is rolled out
with probability `max(p_easy ** c, keep_floor)` (all failed: `p_hard`), else
always; one `rng.random(m)` draw per round, candidate order. Backward:
dynamic sampling (keep the first `B - kept` informative groups in generation
order) with an adaptive round size `T = floor(margin * need * G / (G - Z))`
capped at `S` and floored at `min_round = min(64, S)` (RT:1161-1162); the
round after the estimate first drops to `<= S` is the last (the update may
then hold fewer than `B` groups). Once per step, when the update is decided,
`p_easy` / `p_hard` move by `delta` towards the zero-variance targets (1/3 and
2/3 of `target_zero_variance`), if the epoch the step ends in is > 0 (RT:974,
1207: the epoch of the chunk that completed the step; the harness announces a
pass entered mid-step with `begin_epoch`). The state and these rules live in
`greso_state.py` (HIVE reuses them).

Round structure (RT:973-1016, S15:16; spec §6 "Round structure"): a round
examines the data order in chunks of `chunk` prompts (the original's
dataloader batch, 32; `round_chunk()`), each chunk skipped by the rule above
with one draw per candidate, until at least `want` survivors wait (`S` in
round 0, `more = T` after), and rolls out every survivor; unexamined
candidates stay in the stream (lze_bench.step_rounds drives the chunks).

Choices where the spec is silent (ours, spec §6): exact classes (all /
none correct) instead of the original's 0.98 / 0.11 thresholds; `Z == G`
asks for a full round `S`; adaptation skipped when nothing was rolled out;
`begin_update(B)` / `finish_update()` let the counterfactual replay make one
complete update per logged step (spec §8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, Selector, UpdateDecision, require
from lze_bench.selectors.greso_state import SkipHistory, check_history_config, group_classes, round_estimate


@dataclass
class GresoConfig:
    name: str = "greso"
    train_batch_size: Optional[int] = None  # B; null = harness batch size (S15:23 real_train_batch_size=256)
    round_size: Optional[int] = None  # S; null = ceil(1.5 B) (S15:22 sampling_batch_size=384)
    p_easy: float = 0.5  # initial exploration probability of all-solved prompts; S15:19
    p_hard: float = 0.5  # same for all-failed prompts; S15:20
    target_zero_variance: float = 0.25  # S15:21; code default RT:298-299 (easy 1/3, hard 2/3 of it)
    delta: float = 0.01  # RT:1212-1219, hard-coded
    p_min: float = 0.05  # RT:1203 code default (data.min_p)
    p_max: float = 0.95  # RT:1204 code default (data.max_p)
    keep_floor: float = 0.01  # PS:117, 142, hard-coded
    margin: float = 1.25  # RT:1156, hard-coded
    min_round: Optional[int] = None  # null = min(64, S): RT:1162 absolute 64, capped at S for small batches
    chunk: int = 32  # prompts examined per skip pass: S15:16 data.train_batch_size=32 (the dataloader batch)
    max_gen_batches: int = 0  # 0 = unlimited (the code has no cap); 10 for parity with dapo
    on_exhaust: str = "partial"  # as dapo (only with a cap)

    def __post_init__(self):
        for key in ("train_batch_size", "round_size", "min_round"):
            value = getattr(self, key)
            require(value is None or value > 0, f"selector.{key}", f"must be > 0 or null, got {value}")
        require(self.margin > 0, "selector.margin", f"must be > 0, got {self.margin}")
        require(self.chunk > 0, "selector.chunk", f"must be > 0, got {self.chunk}")
        check_history_config(self)


class GresoSelector(Selector):
    """GRESO: skip likely zero-variance prompts before rollout; dynamic sampling with adaptive rounds."""

    Config = GresoConfig
    name = "greso"
    samples_in_rounds = True  # a round whose candidates are all skipped goes on (spec §6: Z == G)

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.history = SkipHistory(self.num_prompts, self.config)
        train = self.config.train_batch_size or self.batch_size
        if train is None:
            raise LzeBenchError("selector.train_batch_size: greso needs a batch size; set it or pass the harness's")
        self.begin_update(int(train))

    def begin_update(self, train_batch_size: int | None = None) -> None:
        """Set this step's B (and the sizes derived from it); replay calls it before each logged step."""
        if train_batch_size is not None:
            self.train_batch_size = int(train_batch_size)
            cfg = self.config
            self.round_size = int(cfg.round_size or math.ceil(1.5 * self.train_batch_size))
            self.min_round = int(cfg.min_round or min(64, self.round_size))

    def finish_update(self) -> None:
        """End the step now (adaptation, counters reset) even if more was asked for (replay, spec §8)."""
        self.history.finish_step()

    def begin_epoch(self, epoch, rng):
        self.history.epoch = int(epoch)

    def round_chunk(self) -> int:
        return int(self.config.chunk)  # rounds examine the stream chunk by chunk (RT:973-1016)

    def candidates_per_step(self, budget: int) -> int:
        return int(self.config.chunk)  # one select_rollout call examines one chunk

    def rollout_budget(self, budget: int) -> int:
        return self.round_size  # round 0 waits for S survivors; later rounds for `more` = T

    # --- forward -------------------------------------------------------------
    def skip_probability(self, candidates: np.ndarray) -> np.ndarray:
        """float64[m]: 1 - keep probability of each candidate."""
        return 1.0 - self.history.keep_probability(candidates)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        self.history.cand_step += int(candidates.size)
        return self.history.survivors(candidates, rng)[: max(0, int(budget))]

    # --- backward ------------------------------------------------------------
    def observe(self, batch):
        solved, failed, _ = group_classes(batch.rewards, self.name)
        self.history.observe(batch.prompt_ids, solved, failed)

    def select_update(self, batch, step, rng):
        hist, target = self.history, self.train_batch_size
        _, _, informative = group_classes(batch.rewards, self.name)
        keep = hist.keep_informative(informative, target)
        groups = batch.num_groups
        zero = groups - int(np.count_nonzero(informative))
        more = 0
        if hist.kept_so_far < target and not hist.last_round:
            estimate, last = round_estimate(target - hist.kept_so_far, groups, zero, self.round_size,
                                            self.config.margin)
            hist.last_round = last
            more = max(min(estimate, self.round_size), self.min_round)  # survivors the next round waits for
        more, partial = hist.exhausted(more, self.name, target)
        if more == 0:
            hist.finish_step()
        return UpdateDecision(keep=keep, more=more, partial=partial)

    # --- state ---------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**self.history.to_dict(), "train_batch_size": int(self.train_batch_size)}

    def load_state_dict(self, state: dict) -> None:
        self.history.load(state, self.name)
        self.begin_update(int(state["train_batch_size"]))
