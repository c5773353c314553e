"""`lze-bench bench generation model=PATH`: rollout tokens/s of transformers' generate against vLLM, one model.

    lze-bench bench generation model=PATH [engines=hf,vllm] [prompts=64] [samples=4] [max_new_tokens=64]
                                          [dtype=float32] [batch_size=16] [enforce_eager=true]

Both engines generate the same prompts (synthetic arithmetic questions), `samples`
sampled responses each (temperature 1, as a GRPO rollout), through the eval
generators (lze_bench.evaluation.generation): `generated tokens / generate
seconds` of one timed call after one untimed warm-up call, so vLLM's engine start
and first-call compilation are not in the figure (they are reported apart, as
`start_s`). vLLM runs on whatever build is installed (its CPU build on a machine
without a GPU). The ratio row is vLLM's tokens/s over transformers'.
"""

from __future__ import annotations

import time

from lze_bench.bench import BenchResult
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCH_COMMANDS

ENGINES = ("hf", "vllm")


def _prompts(count: int) -> list[str]:
    return [f"What is {7 * i + 3} + {11 * i + 5}? Answer with a number." for i in range(count)]


def _measure(engine: str, model: str, options: dict) -> dict:
    from lze_bench.evaluation.generation import Sampling, load_generator
    from lze_bench.evaluation.suites import GenerationConfig

    prompts = _prompts(int(options.get("prompts", 64)))
    sampling = Sampling(n=int(options.get("samples", 4)), temperature=1.0,
                        max_new_tokens=int(options.get("max_new_tokens", 64)), seed=0)
    dtype = options.get("dtype", "float32")
    started = time.perf_counter()
    config = GenerationConfig(backend=engine, enforce_eager=options.get("enforce_eager", "true") == "true")
    generator = load_generator(model, backend=engine, device=options.get("device", "auto"), dtype=dtype,
                               batch_size=int(options.get("batch_size", 16)), engine=config)
    start_s = time.perf_counter() - started
    try:
        generator.generate(prompts[: max(1, len(prompts) // 8)], sampling)  # warm-up, untimed
        tokens, seconds = generator.generated_tokens, generator.generate_s
        generator.generate(prompts, sampling)
        tokens, seconds = generator.generated_tokens - tokens, generator.generate_s - seconds
        ran_dtype = getattr(generator, "dtype", dtype)
    finally:
        generator.close()
    return {"engine": engine, "dtype": ran_dtype, "prompts": len(prompts), "samples": sampling.n,
            "generated_tokens": tokens, "generate_s": seconds, "tokens/s": tokens / seconds if seconds else None,
            "start_s": start_s}


@BENCH_COMMANDS.add("generation")
def bench_generation(options: dict[str, str]) -> BenchResult:
    model = options.get("model")
    if not model:
        raise LzeBenchError("bench generation: pass model=PATH_OR_HF_ID (a causal LM with its tokenizer)")
    engines = [e for e in options.get("engines", "hf,vllm").split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise LzeBenchError(f"bench generation: engines={options.get('engines')!r}; use hf, vllm or hf,vllm")
    rows = [_measure(engine, model, options) for engine in engines]
    speeds = {row["engine"]: row["tokens/s"] for row in rows}
    notes = ["tokens/s = generated tokens / seconds in generate, one timed call after a warm-up; start_s (model "
             "load, vLLM's engine start) is apart"]
    if speeds.get("hf") and speeds.get("vllm"):
        notes.append(f"vllm / hf tokens/s: {speeds['vllm'] / speeds['hf']:.1f}x")
    return BenchResult(title=f"rollout generation: {model}", rows=rows, notes=notes)
