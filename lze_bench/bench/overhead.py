"""`lze-bench bench overhead overrides=FILE`: lze-bench's step wall time on backend=openrlhf against OpenRLHF's own
`train_ppo_ray` given the same flags, both measured in this one command.

    lze-bench bench overhead overrides=FILE [out=runs/bench/overhead] [steps=4] [skip=1] [timeout_s=3600]

FILE is a YAML list of `lze-bench train` overrides for a `backend=openrlhf` run (model, data, cluster shape,
backend.*); the bench adds `selector=uniform`, `trainer.steps=steps`, `logger=[tensorboard]` and its own run
directory. It then runs, one after the other on the same Ray cluster (`LZE_RAY_ADDRESS`, or each starts its own):

1. lze-bench: the job's own driver command (`openrlhf/command.json`, through `backend.driver_wrapper` if set);
2. plain OpenRLHF: `python -m openrlhf.cli.train_ppo_ray` with the same OpenRLHF flags (the same wrapper), except
   its own checkpoint folder, no resume, `--logger.tensorboard_dir` for its step times and `--data.max_samples`
   = steps x batch so it runs the same number of steps.

Step wall time, for both: the interval between consecutive steps' TensorBoard events (each written once per step,
when the step's logs are written), median over the steps after the first `skip` (the first steps carry engine
warm-up). The ratio row is lze-bench's over OpenRLHF's: the harness's cost per step (selection hook, grading in a
process pool, ledger, seeded requests). Plain OpenRLHF samples unseeded and selects nothing, so the two runs draw
different tokens: compare on a job whose responses are short and few. Nothing is overwritten: `out` must not exist.
On a CPU machine the OpenRLHF engines need the test harness's stand-ins (`backend.driver_wrapper=[python,
tests/openrlhf_cpu/run_entry.py]`, env LZE_TEST_ENGINE=vllm LZE_TEST_POLICY=deepspeed; tests/test_openrlhf_vllm.py
runs it that way).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from lze_bench import env
from lze_bench.bench import BenchResult
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCH_COMMANDS

OPENRLHF_CLI = "openrlhf.cli.train_ppo_ray"
# flags of the lze-bench job that would make plain OpenRLHF resume or write into lze-bench's run directory
_DROPPED = {"--ckpt.load_enable": 0, "--ckpt.path": 1, "--ckpt.output_dir": 1, "--data.max_samples": 1}


def _read_overrides(path: str | None) -> list[str]:
    if not path:
        raise LzeBenchError("bench overhead: pass overrides=FILE (a YAML list of lze-bench train overrides for a "
                            "backend=openrlhf run)")
    from omegaconf import OmegaConf

    file = Path(path)
    if not file.is_file():
        raise LzeBenchError(f"bench overhead: overrides={path}: no such file")
    items = OmegaConf.to_container(OmegaConf.load(file))
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise LzeBenchError(f"bench overhead: overrides={path} must hold a YAML list of KEY=VALUE strings")
    return items


def plain_flags(flags: list[str], work: Path, max_samples: int) -> list[str]:
    """lze-bench's OpenRLHF flags for plain OpenRLHF: its own checkpoints under `work`, no resume, a TensorBoard
    folder, and `max_samples` prompts (so it runs the same number of steps)."""
    out, i = [], 0
    while i < len(flags):
        if flags[i] in _DROPPED:
            i += 1 + _DROPPED[flags[i]]
            continue
        out.append(flags[i])
        i += 1
    return [*out, "--ckpt.path", str(work / "ckpt"), "--ckpt.output_dir", str(work / "final"),
            "--logger.tensorboard_dir", str(work / "tensorboard"), "--data.max_samples", str(max_samples)]


def step_times(folder: Path, recursive: bool) -> list[float]:
    """Intervals between consecutive steps' first TensorBoard events in `folder` (with `recursive`, its subfolders
    too: OpenRLHF writes under a run-named one; lze-bench's `cum_flops/` subfolder counts FLOPs, not steps)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    first: dict[int, float] = {}
    pattern = "events.out.tfevents.*"
    for path in sorted(folder.rglob(pattern) if recursive else folder.glob(pattern)):
        for event in EventFileLoader(str(path)).Load():
            if event.HasField("summary") and event.step not in first:
                first[event.step] = event.wall_time
            elif event.HasField("summary"):
                first[event.step] = min(first[event.step], event.wall_time)
    stamps = [first[s] for s in sorted(first)]
    return [b - a for a, b in zip(stamps, stamps[1:])]


def _run(argv: list[str], environment: dict, log: Path, timeout_s: float) -> float:
    started = time.perf_counter()
    with log.open("w") as handle:
        done = subprocess.run(argv, env=environment, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout_s)
    if done.returncode != 0:
        raise LzeBenchError(f"bench overhead: {argv[argv.index('-m') + 1]} exited {done.returncode}; see {log}")
    return time.perf_counter() - started


def _row(name: str, intervals: list[float], skip: int, wall_s: float) -> dict:
    kept = intervals[max(0, skip - 1):]  # interval i ends at step i + 1: skip the ones ending in warm-up steps
    if not kept:
        raise LzeBenchError(f"bench overhead: {name} logged {len(intervals) + 1} steps; raise steps= above skip=")
    return {"driver": name, "steps_timed": len(kept), "step_s_median": statistics.median(kept),
            "step_s_min": min(kept), "step_s_max": max(kept), "job_wall_s": wall_s}


@BENCH_COMMANDS.add("overhead")
def bench_overhead(options: dict[str, str]) -> BenchResult:
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.config import compose

    steps, skip = int(options.get("steps", 4)), int(options.get("skip", 1))
    if steps < skip + 2:
        raise LzeBenchError(f"bench overhead: steps={steps} leaves fewer than 2 timed steps after skip={skip}")
    out = Path(options.get("out", "runs/bench/overhead"))
    if out.exists():
        raise LzeBenchError(f"bench overhead: out={out} exists; pass a new out=DIR or delete it (nothing is "
                            "overwritten)")
    timeout_s = float(options.get("timeout_s", 3600))
    cfg = compose("train", [*_read_overrides(options.get("overrides")), "selector=uniform",
                            f"trainer.steps={steps}", "logger=[tensorboard]", f"run_dir={out / 'lze'}"])
    if cfg.backend.name != "openrlhf":
        raise LzeBenchError("bench overhead: the overrides must select backend=openrlhf")
    paths, argv = prepare(cfg)
    address = env.ray_address()  # plain OpenRLHF's ray.init() joins the same cluster
    environment = env.child_env({env.PLAIN_RAY_ADDRESS: address} if address else None)
    lze_wall = _run(argv, environment, out / "lze.log", timeout_s)
    split = argv.index("--")
    wrapper = argv[: argv.index("-m") - 1]
    plain = [*wrapper, sys.executable, "-m", OPENRLHF_CLI,
             *plain_flags(argv[split + 1:], out / "openrlhf", steps * int(cfg.trainer.batch_size))]
    plain_wall = _run(plain, environment, out / "openrlhf.log", timeout_s)
    rows = [_row("lze-bench", step_times(paths.run_dir / "tensorboard", recursive=False), skip, lze_wall),
            _row("openrlhf", step_times(out / "openrlhf" / "tensorboard", recursive=True), skip, plain_wall)]
    ratio = rows[0]["step_s_median"] / rows[1]["step_s_median"]
    rows.append({"driver": "ratio lze-bench / openrlhf", "step_s_median": ratio})
    notes = [f"step wall time: median interval between consecutive steps' TensorBoard events, first {skip} "
             "step(s) skipped; job_wall_s includes Ray actors' and engines' start",
             f"harness overhead per step: {ratio:.3f}x (goal <= 1.05 on CPU, <= 1.02 on GPU)",
             f"runs: {paths.run_dir} and {out / 'openrlhf'}; driver logs {out / 'lze.log'}, {out / 'openrlhf.log'}"]
    return BenchResult(title=f"harness overhead on backend=openrlhf: {cfg.model.path}", rows=rows, notes=notes)
