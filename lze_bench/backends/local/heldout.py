"""Held-out accuracy of a policy on the synthetic task: greedy, fixed problems, per level.

Used by the warm start (its accuracy per level, over the whole test split) and
by the trainer every `trainer.eval_every` steps (the fixed subset: the first
`backend.eval_size` test rows; the generator cycles through the levels, so the
subset is balanced). Greedy decoding makes the figure a deterministic function
of the weights, so every spread between runs is training noise, not eval noise.
The FLOPs of an eval are returned for the ledger's `flops_eval` column; they
are not training compute and stay out of `flops_total`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lze_bench.backends.local.rollout import generate
from lze_bench.backends.local.tokenizer import format_prompt


@dataclass
class HeldoutResult:
    accuracy: float
    by_level: dict  # level -> accuracy
    flops: int
    time_s: float
    num_problems: int


def encode_prompts(tokenizer, problems: list[str]) -> list[list[int]]:
    return [tokenizer(format_prompt(p), add_special_tokens=False)["input_ids"] for p in problems]


def evaluate(model, tokenizer, rows: list[dict], grader, flop_model, *, max_new_tokens: int,
             chunk_size: int = 256) -> HeldoutResult:
    import time

    start = time.perf_counter()
    prompts = encode_prompts(tokenizer, [row["problem"] for row in rows])
    gen = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, greedy=True, chunk_size=chunk_size)
    grades = grader.grade(gen.texts, [row["answer"] for row in rows])
    per_level = defaultdict(list)
    for row, grade in zip(rows, grades):
        per_level[int(row["level"])].append(grade.correct)
    correct = [g.correct for g in grades]
    return HeldoutResult(
        accuracy=float(np.mean(correct)) if correct else float("nan"),
        by_level={level: float(np.mean(v)) for level, v in sorted(per_level.items())},
        flops=flop_model.generation(gen.prompt_tokens, gen.response_tokens),
        time_s=time.perf_counter() - start,
        num_problems=len(rows),
    )
