"""Generation engines behind one interface: `hf` (transformers) and `vllm` ("Generation").

    gen = load_generator(path, backend="hf", device="cpu", dtype="auto", batch_size=8)
    results = gen.generate(user_messages, Sampling(n=1, temperature=0.0, ...))  # one PromptResult each

One file per engine: hf_generator.py (transformers), vllm_generator.py (vLLM's
CUDA or CPU build); what they share (the request and result types, prompt
rendering, fitting prompts to the context window) is in generator_base.py.
The names are re-exported here, where callers import them from.
"""

from __future__ import annotations

from lze_bench.errors import LzeBenchError
from lze_bench.evaluation.generator_base import (Completion, GeneratorBase, PromptResult, Sampling,
                                                  budget)
from lze_bench.evaluation.hf_generator import HFGenerator
from lze_bench.evaluation.vllm_generator import VLLMGenerator, problem_seed, vllm_platform

__all__ = ["Completion", "GeneratorBase", "HFGenerator", "PromptResult", "Sampling", "VLLMGenerator", "budget",
           "load_generator", "problem_seed", "vllm_platform"]


def load_generator(path: str, *, backend: str = "hf", device: str = "cpu", dtype: str = "auto", batch_size: int = 8,
                   use_chat_template: bool = True, seed: int = 0, engine=None):
    """A generator for `path`; `engine` (a GenerationConfig) carries the vLLM engine settings."""
    if backend == "hf":
        return HFGenerator(path, device=device, dtype=dtype, batch_size=batch_size, use_chat_template=use_chat_template)
    if backend == "vllm":
        sizing = {} if engine is None else {
            "tensor_parallel_size": engine.tensor_parallel_size, "max_model_len": engine.max_model_len,
            "gpu_memory_utilization": engine.gpu_memory_utilization, "enforce_eager": engine.enforce_eager,
            "cpu_kv_cache_gib": engine.cpu_kv_cache_gib}
        return VLLMGenerator(path, device=device, dtype=dtype, batch_size=batch_size,
                             use_chat_template=use_chat_template, seed=seed, **sizing)
    raise LzeBenchError(f"generation.backend: unknown backend {backend!r}; use hf or vllm")
