"""`lze-bench bench train`: the local backend's measured throughput on this device.

Runs a short real training run (`lze-bench train` with the options given as
overrides) in a temporary run directory and reads its ledger: generation
tokens/s (prompt + generated tokens / rollout seconds, and generated tokens
alone), training tokens/s (trained tokens / update seconds) and the achieved
FLOP/s of each phase (the ledger's exact FLOP counts / that phase's seconds).

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
    from lze_bench.backends import run_training
    from lze_bench.config import compose, config_dict
    from lze_bench.ledger import read_ledger

    merged = {**DEFAULTS, **options}
    with tempfile.TemporaryDirectory(prefix="lze-bench-train-") as tmp:
        merged["run_dir"] = str(Path(tmp) / "run")
        if "backend.cache_dir" not in merged and int(merged["backend.warmstart_steps"]) == 0:
            merged["backend.cache_dir"] = str(Path(tmp) / "cache")  # random init: nothing worth caching
        cfg = compose("train", [f"{k}={v}" for k, v in merged.items()])
        run_training(cfg)
        ledger = read_ledger(merged["run_dir"])
        resolved = config_dict(cfg)
    timed = ledger.iloc[1:] if len(ledger) > 1 else ledger
    rows = _rows(timed)
    import torch

    device = resolved["device"]
    notes = [
        f"{len(timed)} of {len(ledger)} steps timed (the first pays start-up); model "
        f"{resolved['model']['name']} hidden {resolved['model']['hidden_size']} x {resolved['model']['num_layers']} "
        f"layers, batch {resolved['trainer']['batch_size']} x n {resolved['trainer']['n_samples']}, device {device}, "
        f"torch threads {torch.get_num_threads()}",
        "FLOPs are the ledger's exact counts (lze_bench.flops: F(L) = 2·N·L + 2·n_layer·d_attn·L·(L+1)); "
        "padding and finished rows the batch still computes are not counted",
    ]
    return BenchResult(title="local backend throughput (lze-bench bench train)", rows=rows, notes=notes)


def _rows(frame) -> list[dict]:
    def rate(numerator: float, seconds: float) -> float:
        return float(numerator) / seconds if seconds > 0 else float("nan")

    gen_s, upd_s = float(frame["time_rollout_s"].sum()), float(frame["time_update_s"].sum())
    step_s = float(frame["time_step_s"].sum())
    gen_tokens = int(frame["prompt_tokens"].sum() + frame["generated_tokens"].sum())
    return [
        {"phase": "generation", "tokens": gen_tokens, "seconds": gen_s, "tokens/s": rate(gen_tokens, gen_s),
         "generated tokens/s": rate(frame["generated_tokens"].sum(), gen_s), "FLOPs": int(frame["flops_rollout"].sum()),
         "FLOP/s": rate(frame["flops_rollout"].sum(), gen_s)},
        {"phase": "training", "tokens": int(frame["trained_tokens"].sum()), "seconds": upd_s,
         "tokens/s": rate(frame["trained_tokens"].sum(), upd_s), "generated tokens/s": None,
         "FLOPs": int(frame["flops_train"].sum() + frame["flops_logprob"].sum()),
         "FLOP/s": rate(frame["flops_train"].sum() + frame["flops_logprob"].sum(), upd_s)},
        {"phase": "whole step", "tokens": None, "seconds": step_s, "tokens/s": None, "generated tokens/s": None,
         "FLOPs": int(frame["flops_total"].sum()), "FLOP/s": rate(frame["flops_total"].sum(), step_s)},
    ]
