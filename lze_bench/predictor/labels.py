"""Pass rates measured by labelling models (ASTRAL's head is trained on them; paper App. C.1).

The authors label their training questions with several public models (`data_train.pkl`,
`data_ref.pkl`: per model, questions and mean rewards). On the local backend the labelling models are
tiny checkpoints that are never the run's policy (build.py picks them); each rolls out `samples`
responses per question at the training temperature, graded by the one grading function, and a
question's label is its mean reward. Cost: generation F(prompt + response) per sample, booked by the
caller as offline compute.
"""

from __future__ import annotations

import numpy as np


def measure(model_dir, rows: list[dict], *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
            grader, device, chunk_size: int, seed: int) -> tuple[np.ndarray, int]:
    """(pass rate float32[Q], generation FLOPs) of the model in `model_dir` on the question rows."""
    import torch

    from lze_bench.backends.local.heldout import encode_prompts
    from lze_bench.backends.local.model import load_policy
    from lze_bench.backends.local.rollout import generate
    from lze_bench.flops import FlopModel

    model, tokenizer = load_policy(model_dir, device)
    prompts = encode_prompts(tokenizer, [r["problem"] for r in rows])
    flat = np.repeat(np.arange(len(rows)), samples)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(np.random.default_rng([seed, 31]).integers(2**62)))
    gen = generate(model, tokenizer, [prompts[i] for i in flat], max_new_tokens=max_new_tokens,
                   temperature=temperature, top_p=top_p, generator=generator, chunk_size=chunk_size)
    grades = grader.grade(gen.texts, [rows[i]["answer"] for i in flat])
    correct = np.array([1.0 if g.correct else 0.0 for g in grades], dtype=np.float32).reshape(len(rows), samples)
    flops = FlopModel.from_torch_model(model).generation(gen.prompt_tokens, gen.response_tokens)
    return correct.mean(axis=1), int(flops)
