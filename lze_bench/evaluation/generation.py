"""Generation backends behind one interface: `hf` (transformers) and `vllm` ("Generation").

    gen = load_generator(path, backend="hf", device="cpu", dtype="auto", batch_size=8)
    results = gen.generate(user_messages, Sampling(n=1, temperature=0.0, ...))  # one PromptResult each

Prompts: a message is a string (one user turn) or a list of chat turns
({role, content}; lze_bench.benchmarks.chat_messages). The tokenizer's chat
template renders the turns (with the generation prompt) when it has one and
`use_chat_template` is set; otherwise a single user turn is the prompt as is
(BOS added by the tokenizer), and turns with a system message are refused:
there is no honest way to render them without a template.

Context window (choice; tiny checkpoints have max_position_embeddings ~256):
with C the model's context, L the longest prompt of a batch and M the
requested max_new_tokens, the batch generates m = min(M, max(C - L, C // 2))
tokens and each prompt keeps its last C - m tokens (truncated from the left:
the instruction and the chat template's assistant header are at the end).
So the response budget never drops below half the window; `truncated` and
the effective `max_new_tokens` are recorded per problem.

hf: batched with left padding, greedy (temperature 0) or sampling, CPU or
CUDA (device=auto picks CUDA when available); dtype auto = float32 on CPU,
bfloat16 on CUDA. Each batch is seeded (seed, batch index), so a run is
reproducible on one device. Generated tokens count up to and including the
first EOS. vllm: imported only here, needs CUDA; the same truncation, one
`LLM.generate` call per benchmark (vLLM batches itself); engine sizing and the
explicit shutdown in `close()` are described on VLLMGenerator.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from lze_bench.errors import LzeBenchError, missing_dependency

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sampling:
    n: int = 1
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0


@dataclass
class Completion:
    text: str
    tokens: int  # generated tokens, EOS included when emitted
    finish: str  # stop | length


@dataclass
class PromptResult:
    prompt: str  # rendered prompt (chat template applied), before truncation
    prompt_tokens: int  # tokens actually fed to the model
    truncated: bool
    max_new_tokens: int  # effective budget after clamping to the context window
    completions: list[Completion] = field(default_factory=list)


def budget(context: int | None, longest_prompt: int, max_new_tokens: int) -> tuple[int, int | None]:
    """(new tokens, prompt cap) for a batch; see the module docstring."""
    if not context:
        return max_new_tokens, None
    new = max(1, min(max_new_tokens, max(context - longest_prompt, context // 2)))
    return new, context - new


class _Base:
    name = "base"

    def __init__(self, tokenizer, context: int | None, use_chat_template: bool):
        self.tokenizer = tokenizer
        self.context = context
        self.chat = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        self.generated_tokens = 0
        self.generate_s = 0.0

    def render(self, message: str | list[dict]) -> str:
        turns = [{"role": "user", "content": message}] if isinstance(message, str) else list(message)
        if self.chat:
            return self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        if len(turns) != 1 or turns[0]["role"] != "user":
            raise LzeBenchError("eval.prompt: a system turn needs a chat template, and this model's tokenizer has "
                                "none (or eval.use_chat_template=false); use eval.prompt=default")
        return turns[0]["content"]

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"])

    def _fit(self, ids_list: list[list[int]], max_new_tokens: int):
        new, cap = budget(self.context, max(len(ids) for ids in ids_list), max_new_tokens)
        fitted = [ids[-cap:] if cap is not None and len(ids) > cap else ids for ids in ids_list]
        return new, fitted, [len(f) < len(o) for f, o in zip(fitted, ids_list)]

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.generate_s if self.generate_s > 0 else float("nan")

    def close(self) -> None:
        return None


def _context_window(config, tokenizer) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 10**7 else None


class HFGenerator(_Base):
    name = "hf"

    def __init__(self, path: str, device: str = "cpu", dtype: str = "auto", batch_size: int = 8,
                 use_chat_template: bool = True):
        from lze_bench.hub import hub_model_path

        resolved = hub_model_path(path)  # an unreachable hub id fails in one line before torch loads
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise LzeBenchError("device=cuda but torch sees no CUDA device; pass device=cpu")
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        try:
            tokenizer = AutoTokenizer.from_pretrained(resolved)
            model = AutoModelForCausalLM.from_pretrained(resolved, dtype=getattr(torch, dtype))
        except (OSError, ValueError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise LzeBenchError(f"model {path!r} could not be loaded ({first}); pass model=PATH_OR_HF_ID") from None
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        super().__init__(tokenizer, _context_window(model.config, tokenizer), use_chat_template)
        self.torch = torch
        self.device = device
        self.model = model.to(device).eval()
        self.batch_size = batch_size
        eos = model.generation_config.eos_token_id
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}

    def generate(self, messages: list[str], sampling: Sampling, progress=None) -> list[PromptResult]:
        prompts = [self.render(m) for m in messages]
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: -len(encoded[i]))  # similar lengths: less padding
        results: list[PromptResult | None] = [None] * len(prompts)
        for batch_index, start in enumerate(range(0, len(order), self.batch_size)):
            indices = order[start : start + self.batch_size]
            batch = self._generate_batch([encoded[i] for i in indices], sampling, batch_index)
            for i, result in zip(indices, batch):
                result.prompt = prompts[i]
                results[i] = result
            if progress is not None:
                progress(len(indices))
        return results  # type: ignore[return-value]

    def _generate_batch(self, ids_list: list[list[int]], sampling: Sampling, batch_index: int) -> list[PromptResult]:
        from transformers import GenerationConfig

        torch = self.torch
        new, fitted, truncated = self._fit(ids_list, sampling.max_new_tokens)
        width = max(len(ids) for ids in fitted)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in fitted], device=self.device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in fitted], device=self.device)
        greedy = sampling.temperature == 0
        config = GenerationConfig(
            max_new_tokens=new, do_sample=not greedy, num_return_sequences=sampling.n,
            temperature=None if greedy else sampling.temperature, top_p=None if greedy else sampling.top_p,
            top_k=None, pad_token_id=pad, eos_token_id=sorted(self.eos_ids) or None,
        )
        torch.manual_seed(sampling.seed * 1_000_003 + batch_index)
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        self.generate_s += time.perf_counter() - started
        generated = output[:, width:].tolist()
        results = []
        for row, ids in enumerate(fitted):
            result = PromptResult("", len(ids), truncated[row], new)
            for sequence in generated[row * sampling.n : (row + 1) * sampling.n]:
                result.completions.append(self._completion(sequence))
            results.append(result)
        return results

    def _completion(self, sequence: list[int]) -> Completion:
        stop = next((i for i, token in enumerate(sequence) if token in self.eos_ids), None)
        kept = sequence if stop is None else sequence[: stop + 1]
        self.generated_tokens += len(kept)
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        return Completion(text, len(kept), "length" if stop is None else "stop")

    def close(self) -> None:
        self.model = None
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()


class VLLMGenerator(_Base):
    """vLLM on CUDA; not run in this project's CI (no GPU there; tests drive it with a fake `vllm.LLM`).

    Engine settings (generation.* in the eval config): tensor_parallel_size,
    max_model_len (the KV cache is sized for it; null = the model's own window),
    gpu_memory_utilization and enforce_eager, passed to `vllm.LLM` as is.

    `close()` shuts the engine down explicitly rather than waiting for garbage
    collection, so the next checkpoint's engine finds the GPU free: vLLM's V1
    `LLM` runs its engine core (and tensor-parallel workers) in child processes
    that live until `llm.llm_engine.engine_core.shutdown()` (vllm/v1/engine/
    core_client.py); `LLM.shutdown()` is called instead where a vLLM version has
    it. Then the references are dropped, `gc.collect()` runs and the CUDA
    caching allocator is emptied. Idempotent; a vLLM with neither shutdown is
    only garbage-collected, with a warning.
    """

    name = "vllm"

    def __init__(self, path: str, device: str = "cuda", dtype: str = "auto", batch_size: int = 8,
                 use_chat_template: bool = True, seed: int = 0, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.9, enforce_eager: bool = False):
        try:
            import vllm
        except ImportError:
            raise missing_dependency("vllm", extra="vllm", why="generation.backend=vllm") from None
        if device == "cpu":
            raise LzeBenchError("generation.backend=vllm needs a GPU: pass device=cuda, or use generation.backend=hf")
        self.vllm = vllm
        engine = {"tensor_parallel_size": tensor_parallel_size, "gpu_memory_utilization": gpu_memory_utilization,
                  "enforce_eager": enforce_eager}
        if max_model_len is not None:
            engine["max_model_len"] = max_model_len
        self.llm = vllm.LLM(model=path, dtype=dtype, seed=seed, **engine)
        context = self.llm.llm_engine.model_config.max_model_len
        super().__init__(self.llm.get_tokenizer(), context, use_chat_template)

    def generate(self, messages: list[str], sampling: Sampling, progress=None) -> list[PromptResult]:
        if self.llm is None:
            raise LzeBenchError("this vLLM generator was closed; load a new one")
        prompts = [self.render(m) for m in messages]
        new, fitted, truncated = self._fit([self.encode(p) for p in prompts], sampling.max_new_tokens)
        params = self.vllm.SamplingParams(
            n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p if sampling.temperature else 1.0,
            max_tokens=new, seed=sampling.seed,
        )
        started = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in fitted], params, use_tqdm=False)
        self.generate_s += time.perf_counter() - started
        results = []
        for prompt, ids, cut, output in zip(prompts, fitted, truncated, outputs):
            result = PromptResult(prompt, len(ids), cut, new)
            for sample in output.outputs:
                self.generated_tokens += len(sample.token_ids)
                result.completions.append(Completion(sample.text, len(sample.token_ids),
                                                     "length" if sample.finish_reason == "length" else "stop"))
            results.append(result)
        if progress is not None:
            progress(len(prompts))
        return results

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is None:
            return
        shutdown = getattr(llm, "shutdown", None)
        if callable(shutdown):
            shutdown()
        else:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if callable(getattr(core, "shutdown", None)):
                core.shutdown()
            else:  # not the V1 engine this is written for: garbage collection is all that is left
                logger.warning("vllm %s has neither LLM.shutdown() nor llm_engine.engine_core.shutdown(); the "
                               "engine is only garbage-collected (lze-bench[vllm] pins vllm==0.29.0)",
                               getattr(self.vllm, "__version__", "?"))
        del llm
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def load_generator(path: str, *, backend: str = "hf", device: str = "cpu", dtype: str = "auto", batch_size: int = 8,
                   use_chat_template: bool = True, seed: int = 0, engine=None):
    """A generator for `path`; `engine` (a GenerationConfig) carries the vLLM engine settings."""
    if backend == "hf":
        return HFGenerator(path, device=device, dtype=dtype, batch_size=batch_size, use_chat_template=use_chat_template)
    if backend == "vllm":
        sizing = {} if engine is None else {
            "tensor_parallel_size": engine.tensor_parallel_size, "max_model_len": engine.max_model_len,
            "gpu_memory_utilization": engine.gpu_memory_utilization, "enforce_eager": engine.enforce_eager}
        return VLLMGenerator(path, device=device, dtype=dtype, batch_size=batch_size,
                             use_chat_template=use_chat_template, seed=seed, **sizing)
    raise LzeBenchError(f"generation.backend: unknown backend {backend!r}; use hf or vllm")
