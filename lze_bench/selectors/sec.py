"""SEC (Self-Evolving Curriculum): a Boltzmann bandit over prompt categories rewarded by mean |advantage|.

Source: the SEC code as vendored in github Vincent-La/cofa at 8b685cb (`sec/verl/verl/utils/auto_curriculum/
priority.py` BanditPriority / JointBandit: arms L80-90, `get_probs` L99-110, `sample_arms` L113-116,
`update` L134-156 and L178-187; `dataloader.py` BanditDataloader L183-256; `sec/verl/verl/trainer/
ppo/ray_trainer.py` L400-427 set-up, perpetual with `max_steps`; `sec/verl/verl/trainer/config/
ppo_trainer.yaml` `trainer.sec`; `sec/README.md` math settings); paper arXiv 2505.14970. The authors'
own repository was not found.

Arms are the distinct values of a fixed per-prompt column (`column`; the authors' `difficulty`, MATH's
level 1-5). `column=level,subject` makes one arm per (level, subject) pair (the authors' joint bandit
over several features, SEC-2D). Each arm keeps a queue of its prompts in a shuffled order. Per step:

* if any arm's queue holds fewer than B prompts, every arm's queue becomes what it still holds
  followed by a fresh shuffle of all its prompts (the perpetual loader's refill, dataloader.py L233-239;
  the authors' math runs stop at a step count, which makes the loader perpetual);
* B arms are drawn i.i.d. from softmax(Q / temperature) (`rng.choice`), and each draw pops the next
  prompt of its arm's queue; the batch is returned in candidate order (the interface's rule; the
  authors' is draw order, which only orders their mini-batches);
* after grading, every rollout's advantage `A = (r - mean) / (std + 1e-6)` of its group (unbiased std;
  verl's GRPO, also our trainers'; a group of one: `r / (1 + 1e-6)`, verl's mean 0 and std 1), and for
  each arm in the batch `r_a` = the mean |A| over its rollouts (priority.py L143-156, the `adv`
  objective); then `Q <- (1 - lr) Q + lr r` for **every** arm, with `r = 0` for arms absent from the
  batch (L181-187), so they decay towards 0. Q starts at 0 (uniform arms).

Defaults are the authors' math run (README: lr 0.5, temperature 0.4; the yaml's generic defaults are
0.1 and 1.0). All groups reach the update.

Choices where the code or our interface differs (ours):
* the refill can put a prompt still in the queue a second time right behind itself; a pop that would
  repeat a prompt already in this step's batch is passed over (consumed), since a batch holds one
  group per prompt (the original could roll the same prompt out twice in one batch);
* an arm with fewer prompts than the batch is refused (the authors assert it, dataloader.py L212);
* arms are numbered in sorted order of their values (the authors: order of first appearance); the
  queues are first shuffled on the first step, with the harness's rng (theirs: Python's `random`);
* only the `adv` objective and Boltzmann sampling (the math runs'); `progress` and epsilon-greedy are
  not offered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, Selector, UpdateDecision, require


ADV_EPS = 1e-6  # verl compute_grpo_outcome_advantage epsilon
MAX_ARMS = 1 << 16  # arm codes are 16-bit


@dataclass
class SecConfig:
    name: str = "sec"
    column: str = "level"  # the arms' per-prompt column(s), comma-separated for joint arms; ppo_trainer.yaml feature
    labels: Optional[str] = None  # a JSON labels file adding columns (lze_bench.metadata); null: the task's own
    temperature: float = 0.4  # Boltzmann temperature; sec/README.md math: trainer.sec.bandit.temperature=0.4
    lr: float = 0.5  # TD step size alpha; sec/README.md math: trainer.sec.bandit.lr=0.5

    def __post_init__(self):
        require(bool(self.columns), "selector.column", "name the per-prompt column(s) the arms come from, e.g. level")
        require(self.temperature > 0, "selector.temperature", f"must be > 0, got {self.temperature}")
        require(0 <= self.lr <= 1, "selector.lr", f"must be in [0, 1], got {self.lr}")

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in str(self.column).split(",") if part.strip())


def arm_codes(metadata: dict, columns: tuple[str, ...]) -> tuple[np.ndarray, list[str]]:
    """(arm of each prompt, arm names): one arm per distinct value (tuple of values), in sorted order."""
    codes, names = None, None
    for column in columns:
        values, code = np.unique(np.asarray(metadata[column]), return_inverse=True)
        labels = [str(v) for v in values.tolist()]
        if codes is None:
            codes, names = code.astype(np.int64), labels
        else:
            pairs = codes * len(labels) + code
            used, codes = np.unique(pairs, return_inverse=True)
            names = [f"{names[p // len(labels)]}-{labels[p % len(labels)]}" for p in used.tolist()]
    return codes.astype(np.int64).reshape(-1), names


def mean_abs_advantage(rewards: np.ndarray) -> np.ndarray:
    """float64[G]: the mean |A| of each group's rollouts, A = (r - mean) / (std + 1e-6), verl's GRPO."""
    rewards = np.asarray(rewards, dtype=np.float64)
    n = rewards.shape[1]
    if n == 1:  # verl: a single response gets mean 0 and std 1
        return np.abs(rewards[:, 0]) / (1.0 + ADV_EPS)
    centred = rewards - rewards.mean(axis=1, keepdims=True)
    std = np.sqrt(np.square(centred).sum(axis=1) / (n - 1))
    return np.abs(centred).mean(axis=1) / (std + ADV_EPS)


class SecSelector(Selector):
    """SEC: Boltzmann bandit over categories (e.g. difficulty levels), rewarded by the batch's mean |advantage|."""

    Config = SecConfig
    name = "sec"
    candidate_mode = "full"

    @classmethod
    def metadata_columns(cls, config) -> tuple[str, ...]:
        return config.columns

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None, metadata=None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        arm_of, self.arm_names = arm_codes(metadata or {}, self.config.columns)
        self.num_arms = len(self.arm_names)
        if self.num_arms > MAX_ARMS:
            raise LzeBenchError(f"selector.column={self.config.column}: {self.num_arms} arms; SEC's bandit takes at most "
                                f"{MAX_ARMS} (a category column, not a per-prompt score)")
        # 16-bit codes: NumPy's stable argsort of 16-bit keys is a radix sort (the refill, O(N))
        self.arm_of = arm_of.astype(np.uint16)
        self.arm_size = np.bincount(self.arm_of, minlength=self.num_arms)
        # the prompts of each arm, contiguous (arm 0's, then arm 1's, ...): the refill shuffles within them
        self.by_arm = np.argsort(self.arm_of, kind="stable").astype(np.int64)
        self.arm_start = np.concatenate([[0], np.cumsum(self.arm_size)]).astype(np.int64)
        self.q = np.zeros(self.num_arms)
        self.queue = np.zeros(0, dtype=np.int64)  # every arm's queue, arm after arm
        self.q_pos = np.zeros(self.num_arms, dtype=np.int64)  # the next prompt of arm a: queue[q_pos[a]]
        self.q_end = np.zeros(self.num_arms, dtype=np.int64)  # arm a's queue ends before queue[q_end[a]]
        if batch_size is not None:
            self._check_sizes(int(batch_size))

    def _check_sizes(self, budget: int) -> None:
        small = np.flatnonzero(self.arm_size < budget)
        if small.size:
            arm = int(small[0])
            raise LzeBenchError(f"selector.column={self.config.column}: arm {self.arm_names[arm]!r} has "
                                f"{int(self.arm_size[arm])} prompts, fewer than the batch of {budget}; SEC needs "
                                "every arm to fill a batch (use a coarser column or a smaller trainer.batch_size)")

    def probabilities(self) -> np.ndarray:
        """softmax(Q / temperature) (priority.py L101; shifted by max Q, the same probabilities)."""
        z = (self.q - self.q.max()) / self.config.temperature
        weights = np.exp(z)
        return weights / weights.sum()

    def _refill(self, rng) -> None:
        """Each arm's queue := its remaining prompts + a fresh shuffle of all its prompts (dataloader.py L233-239)."""
        shuffled = rng.permutation(self.num_prompts)
        fresh = shuffled[np.argsort(self.arm_of[shuffled], kind="stable")]  # shuffled within each arm
        parts, start = [], np.zeros(self.num_arms, dtype=np.int64)
        for arm in range(self.num_arms):
            start[arm] = sum(p.size for p in parts)
            parts.append(self.queue[self.q_pos[arm] : self.q_end[arm]])
            parts.append(fresh[self.arm_start[arm] : self.arm_start[arm + 1]])
        self.queue = np.concatenate(parts).astype(np.int64)
        self.q_pos = start
        self.q_end = np.concatenate([start[1:], [self.queue.size]]).astype(np.int64)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        budget = int(budget)
        self._check_sizes(budget)
        if np.any(self.q_end - self.q_pos < budget):  # also the first step: every queue is empty
            self._refill(rng)
        arms = rng.choice(self.num_arms, size=budget, p=self.probabilities())  # priority.py L115-116
        counts = np.bincount(arms, minlength=self.num_arms)
        picked = []
        for arm in np.flatnonzero(counts):
            take = int(counts[arm])
            window = self.queue[self.q_pos[arm] : self.q_end[arm]]
            _, first = np.unique(window[: 2 * take], return_index=True)  # a repeat is the refill's, <= take apart
            position = np.sort(first)[:take]
            picked.append(window[position])
            self.q_pos[arm] += int(position[-1]) + 1
        chosen = np.zeros(self.num_prompts, dtype=bool)
        if picked:
            chosen[np.concatenate(picked)] = True
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        # candidate order (selectors.md §0); a replayed log offers fewer than all N: those it has
        return candidates[chosen[candidates]]

    def observe(self, batch):
        if batch.num_groups == 0:
            return
        arms = self.arm_of[batch.prompt_ids]
        score = np.bincount(arms, weights=mean_abs_advantage(batch.rewards), minlength=self.num_arms)
        groups = np.bincount(arms, minlength=self.num_arms)
        reward = np.divide(score, groups, out=np.zeros(self.num_arms), where=groups > 0)  # absent arms: 0
        lr = self.config.lr
        self.q = (1 - lr) * self.q + lr * reward  # priority.py L187, every arm

    def select_update(self, batch, step, rng):
        return UpdateDecision.keep_all(batch.num_groups)

    def state_dict(self) -> dict:
        return {"q": self.q.copy(), "queue": self.queue.copy(), "q_pos": self.q_pos.copy(), "q_end": self.q_end.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.q = np.asarray(state["q"], dtype=np.float64).copy()
        self.queue = np.asarray(state["queue"], dtype=np.int64).copy()
        self.q_pos = np.asarray(state["q_pos"], dtype=np.int64).copy()
        self.q_end = np.asarray(state["q_end"], dtype=np.int64).copy()
