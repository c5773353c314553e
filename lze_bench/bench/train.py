"""`lze-bench bench train`: the local backend's measured throughput on this device.

Runs a short real training run (`lze-bench train` with the options given as
overrides) in a temporary run directory and reads its ledger: where each step's
wall time goes (generation, the no-grad log-prob passes, training, held-out
eval, grading, selection, the rest), tokens/s and the achieved FLOP/s of each
phase that computes (the ledger's exact FLOP counts / that phase's seconds),
and that FLOP/s as a share of this machine's fp32 matmul rate, measured in the
same command at the run's thread count (`matmul_rate`), so a figure says how
much of the machine the step uses rather than how fast the machine is. The
quickstart runs each job on one thread (`backend.threads=1`); pass it to
measure at that setting.

Defaults (overridable: `lze-bench bench train trainer.steps=8 device=cuda
model.hidden_size=256`): 4 steps, no held-out eval, and
`backend.warmstart_steps=0`, so the figures come from a randomly initialised
policy without building the warm start first (its responses run to
`trainer.max_new_tokens`, so generation is measured at full length). Pass
`backend.warmstart_steps=300` to measure with the trained warm start (cached).
The first step is left out of the rates: it pays one-off start-up
(allocator warm-up, the grading pool).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from lze_bench.bench import BenchResult
from lze_bench.registry import BENCH_COMMANDS

DEFAULTS = {"trainer.steps": "4", "trainer.eval_every": "0", "backend.warmstart_steps": "0"}


@BENCH_COMMANDS.add("train")
def bench_train(options: dict[str, str]) -> BenchResult:
    import time

    from lze_bench.backends import run_training
    from lze_bench.backends.local.model import resolve_device
    from lze_bench.config import compose, config_dict
    from lze_bench.ledger import read_ledger

    merged = {**DEFAULTS, **options}
    with tempfile.TemporaryDirectory(prefix="lze-bench-train-") as tmp:
        merged["run_dir"] = str(Path(tmp) / "run")
        if "backend.cache_dir" not in merged and int(merged["backend.warmstart_steps"]) == 0:
            merged["backend.cache_dir"] = str(Path(tmp) / "cache")  # random init: nothing worth caching
        cfg = compose("train", [f"{k}={v}" for k, v in merged.items()])
        started = time.perf_counter()
        run_training(cfg)
        run_wall_s = time.perf_counter() - started
        ledger = read_ledger(merged["run_dir"])
        resolved = config_dict(cfg)
    import torch

    threads = torch.get_num_threads()  # as the run set them (backend.threads)
    peak = matmul_rate(str(resolve_device(resolved["device"])))
    timed = ledger.iloc[1:] if len(ledger) > 1 else ledger
    rows = _rows(timed, peak)
    outside = run_wall_s - float(ledger["time_step_s"].sum())
    device = resolved["device"]
    notes = [
        f"{len(timed)} of {len(ledger)} steps timed (the first pays start-up); model "
        f"{resolved['model']['name']} hidden {resolved['model']['hidden_size']} x {resolved['model']['num_layers']} "
        f"layers, batch {resolved['trainer']['batch_size']} x n {resolved['trainer']['n_samples']}, device {device}, "
        f"torch threads {threads}",
        f"matmul rate of this machine, measured in this run at {threads} thread(s): {peak:.3g} FLOP/s "
        f"(fp32 {MATMUL_SIZE}x{MATMUL_SIZE} products, best of {MATMUL_BATCHES} batches); 'of matmul' is each "
        "phase's FLOP/s over it",
        "FLOPs are the ledger's exact counts (lze_bench.flops: F(L) = 2·N·L + 2·n_layer·d_attn·L·(L+1)); "
        "padding and finished rows the batch still computes are not counted",
        f"outside the steps (start-up, warm start, initial eval, ledger and checkpoint writes), all {len(ledger)} "
        f"steps: {outside:.2f} s of the run's {run_wall_s:.2f} s",
    ]
    return BenchResult(title="local backend throughput (lze-bench bench train)", rows=rows, notes=notes)


MATMUL_SIZE, MATMUL_BATCHES = 1024, 5


def matmul_rate(device: str = "cpu", size: int = MATMUL_SIZE, batches: int = MATMUL_BATCHES,
                batch_s: float = 0.1) -> float:
    """fp32 FLOP/s of torch's square matrix product on `device` at the current thread count: the best of `batches`
    timed batches of at least `batch_s` seconds each (the best, because anything else on the machine only slows
    one). On CUDA each batch waits for its kernels before the clock stops."""
    import time

    import torch

    left, right = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    wait = torch.cuda.synchronize if left.is_cuda else (lambda: None)

    def seconds(reps: int) -> float:
        start = time.perf_counter()
        for _ in range(reps):
            left @ right
        wait()
        return time.perf_counter() - start

    seconds(1)  # warm-up: thread pool and kernel selection
    reps = 1
    while seconds(reps) < batch_s:  # enough products for one batch to take batch_s
        reps *= 2
    return 2.0 * size ** 3 * reps / min(seconds(reps) for _ in range(batches))


def _rows(frame, peak: float) -> list[dict]:
    """A row per phase of the step: seconds, share of the step, tokens/s and FLOP/s where the phase computes."""
    step_s = float(frame["time_step_s"].sum())
    update_s = float(frame["time_update_s"].sum())
    passes_s = float(frame["time_logprob_s"].sum()) if "time_logprob_s" in frame else 0.0
    eval_s = float(frame["time_eval_s"].sum()) if "time_eval_s" in frame else 0.0
    gen_tokens = int(frame["prompt_tokens"].sum() + frame["generated_tokens"].sum())
    phases = [  # (phase, seconds, FLOPs or None, tokens or None)
        ("generation", float(frame["time_rollout_s"].sum()), int(frame["flops_rollout"].sum()), gen_tokens),
        ("log-prob passes (old policy, reference)", passes_s, int(frame["flops_logprob"].sum()), None),
        ("training (forward, backward, step)", update_s - passes_s, int(frame["flops_train"].sum()),
         int(frame["trained_tokens"].sum())),
        ("held-out eval", eval_s, int(frame["flops_eval"].sum()) if "flops_eval" in frame else 0, None),
        ("grading", float(frame["time_grade_s"].sum()), None, None),
        ("selection", float(frame["time_select_s"].sum()), int(frame["flops_select"].sum()), None),
    ]
    rest = step_s - sum(seconds for _, seconds, _, _ in phases)
    phases.append(("rest of the step (advantages, store, bookkeeping)", rest, None, None))
    rows = [_row(name, seconds, flops, tokens, step_s, peak) for name, seconds, flops, tokens in phases]
    total_flops = int(frame["flops_total"].sum()) + (int(frame["flops_eval"].sum()) if "flops_eval" in frame else 0)
    rows.append(_row("whole step", step_s, total_flops, None, step_s, peak))
    rows[0]["generated tokens/s"] = _rate(frame["generated_tokens"].sum(), rows[0]["seconds"])
    return rows


def _rate(numerator: float, seconds: float) -> float:
    return float(numerator) / seconds if seconds > 0 else float("nan")


def _row(phase: str, seconds: float, flops, tokens, step_s: float, peak: float) -> dict:
    flop_rate = _rate(flops, seconds) if flops else None
    return {"phase": phase, "seconds": seconds, "of step": seconds / step_s if step_s > 0 else float("nan"),
            "tokens/s": _rate(tokens, seconds) if tokens else None, "generated tokens/s": None,
            "FLOPs": flops, "FLOP/s": flop_rate, "of matmul": flop_rate / peak if flop_rate else None}
