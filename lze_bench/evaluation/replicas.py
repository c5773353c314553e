"""Data parallelism for `lze-bench eval`: D model replicas evaluate different checkpoints at once.

With `generation.data_parallel_size=D` and several targets (checkpoints),
the targets are dealt round-robin to D processes (started with `spawn`, so no
CUDA state is inherited); replica i sees only GPUs
`[i·T, (i+1)·T)` of the visible ones (T = generation.tensor_parallel_size)
through CUDA_VISIBLE_DEVICES, set before it imports torch or vLLM. Each replica
runs the ordinary per-target loop (runner.evaluate_targets) with its own
grading pool, so results, resuming and evals.parquet rows (appended under a
file lock) are exactly those of one process.

Choices where the sources are silent:
- replicas split checkpoints, not the prompts of one benchmark: each
  checkpoint's engine starts once, results need no merging, and vLLM's own
  offline data parallelism (`LLM(data_parallel_size>1)`) is refused by vLLM
  (vllm-project/vllm#27282);
- the visible GPUs are CUDA_VISIBLE_DEVICES when set (Slurm sets it), else
  0..D·T-1; with device=cpu the variable is set but changes nothing;
- a replica that fails makes the command fail after every replica has ended
  (finished results are kept; a re-run does the rest).
"""

from __future__ import annotations

import logging

from lze_bench import env
from lze_bench.errors import LzeBenchError

logger = logging.getLogger(__name__)


def visible_gpus(count: int) -> list[str]:
    """The first `count` GPU ids this process may use."""
    listed = env.visible_devices()
    if not listed:
        return [str(i) for i in range(count)]
    if len(listed) < count:
        raise LzeBenchError(f"generation.data_parallel_size x tensor_parallel_size = {count} GPUs, but "
                            f"CUDA_VISIBLE_DEVICES lists {len(listed)}; ask the launcher for {count} "
                            "(launcher.gpus_per_node) or lower them")
    return listed[:count]


def run_replicas(evaluate, options, per_seed: list[dict], data: dict, targets: list) -> list[dict]:
    """Evaluate `targets` on data_parallel_size replicas; entries in the targets' order.

    `evaluate(targets, options, per_seed, data, show)` is what each replica runs (runner.evaluate_targets, a
    module-level function: spawn pickles it by name)."""
    import multiprocessing

    replicas = min(options.generation.data_parallel_size, len(targets))
    tp = options.generation.tensor_parallel_size
    gpus = visible_gpus(replicas * tp) if options.device != "cpu" else ["" for _ in range(replicas * tp)]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = []
    for index in range(replicas):
        share = targets[index::replicas]
        devices = ",".join(gpus[index * tp : (index + 1) * tp])
        process = context.Process(target=_replica, name=f"lze-eval-replica-{index}",
                                  args=(evaluate, index, options, per_seed, data, share, devices, queue))
        process.start()
        processes.append(process)
    outcomes = _collect(processes, queue)
    failed = [f"replica {i}: {payload}" for i, (ok, payload) in sorted(outcomes.items()) if not ok]
    if failed:
        raise LzeBenchError(f"{len(failed)} of {replicas} eval replicas failed ({'; '.join(failed)}); "
                            "finished results are kept, run the same command again for the rest")
    by_checkpoint = {}
    for index in range(replicas):
        for entry in outcomes[index][1]:
            by_checkpoint.setdefault(entry["checkpoint"], []).append(entry)
    return [entry for target in targets for entry in by_checkpoint.get(target.checkpoint, [])]


def _collect(processes: list, queue) -> dict[int, tuple[bool, object]]:
    """Each replica's (ok, entries or error line); a replica that died without reporting
    (killed, out of memory) is a failure with its exit code."""
    import queue as queue_module

    outcomes: dict[int, tuple[bool, object]] = {}
    while len(outcomes) < len(processes):
        try:
            index, ok, payload = queue.get(timeout=5.0)
            outcomes[index] = (ok, payload)
        except queue_module.Empty:
            for index, process in enumerate(processes):
                if index not in outcomes and not process.is_alive() and process.exitcode not in (None, 0):
                    outcomes[index] = (False, f"died with exit code {process.exitcode}")
    for process in processes:
        process.join()
    return outcomes


def _replica(evaluate, index: int, options, per_seed: list[dict], data: dict, targets: list, devices: str,
             queue) -> None:
    if options.device != "cpu":
        env.set_here(env.CUDA_VISIBLE_DEVICES, devices)  # before torch/vLLM are imported in this process
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s replica {index} %(name)s %(levelname)s %(message)s")
    try:
        logger.info("replica %d on GPUs [%s]: %s", index, devices, ", ".join(t.checkpoint for t in targets))
        entries = evaluate(targets, options, per_seed, data, show=False)
    except BaseException as exc:  # reported to the parent, which fails the command
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        queue.put((index, False, f"{type(exc).__name__}: {lines[-1] if lines else ''}"))
        return
    queue.put((index, True, entries))
