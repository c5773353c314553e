"""Synthetic verifiable math: multi-step integer addition with worked solutions.

The training task of the embedded backend ("Task"). A problem is a
two-digit start plus distinct one-digit terms; the worked solution takes one
short line per addition, then boxes the answer:

    problem   57+4+1+9+7          level 4 (four steps)
    solution  57+4=61
              61+1=62
              62+9=71
              71+7=78
              \\boxed{78}

Levels (`LEVELS`): 1, 2, 3, 4, 6 and 8 steps. Answers are graded by
`lze_bench.grading` from the final `\\boxed{}`.

How the regime "easiest almost always, hardest almost never, middle
sometimes" is made (measured while building the task, 0.9 M-parameter
policy, 300-step warm start; numbers in docs/usage.md):
- the warm start's `sft` split holds worked chains up to `sft_max_level` (5,
  six steps); level 6 (eight steps) is never shown, and the policy does not
  extend chains it has not seen (held-out 0-2%);
- `sft_terse_fraction` (60%) of the multi-step `sft` rows give the bare boxed
  answer instead of the worked steps, as terse answers do in real SFT data.
  The warm-started policy therefore often answers multi-step problems in one
  shot, which fails more the longer the chain (levels 2-5: 23-39% greedy),
  while one-step problems always show their step (level 1: 100%). RL learns
  from the reward to show its work: held-out 0.39 -> 0.80 in 60 steps;
- terms are distinct within a problem: with repeats the policy lost track of
  which term comes next (4-step chains 15-24%); subtraction mixed in, or a
  rewrite format (`=16+3+9+2` per line), learned far slower in 300 steps.

Choices where the sources are silent:
- splits are generated from independent streams of one seed
  (`numpy.random.default_rng([seed, SPLIT_TAG])`), levels cycle through the
  range so every split is balanced, and `train` and `sft` never contain a
  `test` problem (deduplicated by problem text), so held-out accuracy is held
  out; `train` and `sft` may repeat a problem;
- `train` holds the RL prompts, whose ids are row indices 0..N-1
  (selectors.md §0); 256 by default, so the default run makes several epochs
  and history-based selectors (lze, hive) see prompts again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.registry import TASKS

SPLIT_TAGS = {"train": 1, "test": 2, "sft": 3}


@dataclass(frozen=True)
class Level:
    ops: int  # additions = solution steps


LEVELS = {1: Level(1), 2: Level(2), 3: Level(3), 4: Level(4), 5: Level(6), 6: Level(8)}
START = (10, 59)  # the first term: two digits
TERMS = (1, 9)  # every later term: one digit, distinct within a problem


@dataclass
class SyntheticTaskConfig:
    name: str = "synthetic"
    seed: int = 0  # generator seed: fixes every split (the training data order has its own `seed`)
    min_level: int = 1
    max_level: int = 6
    num_train: int = 256  # RL prompts (ids 0..N-1): the default 60 steps x 16 prompts make 3.75 epochs
    num_test: int = 600  # held-out problems; evals use a fixed subset of them
    num_sft: int = 30000  # worked solutions for the supervised warm start
    sft_max_level: int = 5  # the warm start sees worked chains up to this level
    sft_terse_fraction: float = 0.6  # multi-step warm-start rows whose solution is the bare boxed answer

    def __post_init__(self):
        require(self.min_level in LEVELS and self.max_level in LEVELS, "task.min_level/max_level",
                f"levels run from {min(LEVELS)} to {max(LEVELS)}")
        require(self.min_level <= self.max_level, "task.min_level", "must be <= task.max_level")
        require(self.sft_max_level >= self.min_level, "task.sft_max_level", "must be >= task.min_level")
        require(0 <= self.sft_terse_fraction <= 1, "task.sft_terse_fraction", "must be in [0, 1]")
        for key in ("num_train", "num_test", "num_sft"):
            require(getattr(self, key) > 0, f"task.{key}", f"must be > 0, got {getattr(self, key)}")


@TASKS.add("synthetic")
class SyntheticTask:
    """Registry entry: `task=synthetic`; rows come from `load_split`."""

    Config = SyntheticTaskConfig

    @staticmethod
    def load_split(split: str, cfg=None) -> list[dict]:
        return load_split(split, cfg)


def _draw_terms(rng: np.random.Generator, level: Level) -> list[int]:
    """A two-digit start and `ops` distinct one-digit terms."""
    first = int(rng.integers(START[0], START[1] + 1))
    rest = rng.choice(np.arange(TERMS[0], TERMS[1] + 1), size=level.ops, replace=False)
    return [first, *map(int, rest)]


def format_solution(terms: list[int]) -> tuple[str, int]:
    """(worked solution, answer): one line `total+term=new_total` per step, then the boxed answer."""
    lines, total = [], terms[0]
    for term in terms[1:]:
        lines.append(f"{total}+{term}={total + term}")
        total += term
    return "\n".join(lines + [f"\\boxed{{{total}}}"]), total


def _generate(cfg: SyntheticTaskConfig, split: str, count: int, exclude: frozenset[str]) -> list[dict]:
    rng = np.random.default_rng([cfg.seed, SPLIT_TAGS[split]])
    top = cfg.max_level if split != "sft" else min(cfg.max_level, cfg.sft_max_level)
    levels = list(range(cfg.min_level, top + 1))
    rows, seen, attempts = [], set(), 0
    while len(rows) < count:
        level = levels[len(rows) % len(levels)]
        terms = _draw_terms(rng, LEVELS[level])
        expr = "+".join(map(str, terms))
        solution, answer = format_solution(terms)
        attempts += 1
        if attempts > 50 * count + 10_000:
            raise LzeBenchError(f"task.num_{split}={count}: not enough distinct problems; lower it")
        # test rows are unique; train/sft avoid test problems (held out) but may repeat
        # level-1 problems among themselves (there are only 200 of them)
        if expr in exclude or (split == "test" and expr in seen):
            continue
        seen.add(expr)
        if split == "sft" and level > 1 and rng.random() < cfg.sft_terse_fraction:
            solution = f"\\boxed{{{answer}}}"
        rows.append({
            "id": len(rows),
            "problem": expr,
            "answer": str(answer),
            "level": level,
            "solution": solution,
        })
    return rows


def _as_config(cfg) -> SyntheticTaskConfig:
    if cfg is None:
        return SyntheticTaskConfig()
    if isinstance(cfg, SyntheticTaskConfig):
        return cfg
    values = dict(cfg) if not hasattr(cfg, "items") else {k: v for k, v in cfg.items()}
    return SyntheticTaskConfig(**values)


@lru_cache(maxsize=8)
def _cached(cfg_key: tuple, split: str) -> tuple[dict, ...]:
    cfg = SyntheticTaskConfig(**dict(cfg_key))
    test = _generate(cfg, "test", cfg.num_test, frozenset())
    if split == "test":
        return tuple(test)
    exclude = frozenset(row["problem"] for row in test)
    count = cfg.num_train if split == "train" else cfg.num_sft
    return tuple(_generate(cfg, split, count, exclude))


def load_split(split: str, cfg=None) -> list[dict]:
    """Rows {id, problem, answer, level, solution} of `train`, `test` or `sft`; deterministic in `cfg`."""
    if split not in SPLIT_TAGS:
        raise LzeBenchError(f"synthetic task has no split {split!r}; use one of {', '.join(SPLIT_TAGS)}")
    config = _as_config(cfg)
    key = tuple(sorted(vars(config).items()))
    return [dict(row) for row in _cached(key, split)]
