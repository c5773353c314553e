"""AdaRFT's difficulty labels made from rollouts of a reference model (`lze-bench label`), their cost measured.

AdaRFT's authors label every training problem once, before training, with 100 x (1 - the pass rate
of a reference model over k sampled solutions) (arXiv 2504.05520; methods.md §2.6: "robust with as
few as 64 rollouts"). This module does that on the embedded backend and writes a labels file
(lze_bench.metadata) whose `flops` is the generation FLOPs the labelling rollouts cost (the project's
FLOP model, lze_bench.flops, per prompt + response token, as a training step's rollouts are counted):
a run that reads it with `selector.labels=FILE` books them as offline FLOPs (`offline_flops.json`,
the report's `(+offline)` rows), as ASTRAL's trained head is booked. The labels also carry
`pass_rate` (the measured rate) beside `difficulty`.

Choices (ours, where the paper leaves it open for this backend):
* the reference model: `labeler` (default) is ASTRAL's last labelling model (backend.predictor: a tiny
  warm start with its own init seed, never the policy; shipped with the package), standing in for the
  authors' separate reference model; `policy` is the run's own initial policy for `seed` (what the
  policy itself finds hard before training). Their own training is not charged: like the public
  models the authors label with, they exist before the benchmark (as for ASTRAL's labellers);
* samples at the trainer's temperature, top_p and max_new_tokens (the rollouts a step would make);
  k = `--samples` (default 64, the paper's "as few as 64");
* the rollouts' randomness is seeded by `seed`, so a labels file is reproducible on one machine;
* the file records the train split's fingerprint; it is labels for that data and no other.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from lze_bench.errors import LzeBenchError

REFERENCES = ("labeler", "policy")
DEFAULT_SAMPLES = 64  # methods.md §2.6: AdaRFT's labels are "robust with as few as 64 rollouts"


def difficulty_from_pass_rate(rate: np.ndarray) -> np.ndarray:
    """AdaRFT's 0-100 scale: 100 x (1 - pass rate); 0 = always solved, 100 = never."""
    return 100.0 * (1.0 - np.asarray(rate, dtype=np.float64))


def reference_dir(cfg, reference: str, device, grader) -> Path:
    """The reference model's directory (built or found in the cache like a run's warm start)."""
    if reference == "labeler":
        from lze_bench.backends.local.predictor import labeler_dirs

        dirs, _ = labeler_dirs(cfg, device, grader)
        return dirs[-1]
    if cfg.model.path:
        return Path(cfg.model.path)
    from lze_bench.backends.local.warmstart import ensure_warmstart, policy_backend

    return ensure_warmstart(cfg.model, cfg.task, policy_backend(cfg.backend, cfg.seed), device, grader)


def make_labels(cfg, out: Path, samples: int = DEFAULT_SAMPLES, reference: str = "labeler") -> dict:
    """Roll out the reference on every train prompt `samples` times; write the labels file `out`; return it."""
    if reference not in REFERENCES:
        raise LzeBenchError(f"lze-bench label: --reference {reference!r} is unknown; use one of {', '.join(REFERENCES)}")
    if samples < 1:
        raise LzeBenchError(f"lze-bench label: --samples must be >= 1 (rollouts per prompt), got {samples}")
    from lze_bench.backends.local.model import resolve_device, setup_torch
    from lze_bench.backends.local.predictor import measure
    from lze_bench.fingerprint import fingerprint
    from lze_bench.grading import Grader
    from lze_bench.rundir import atomic_write_json
    from lze_bench.tasks.synthetic import load_split

    setup_torch(cfg.backend.threads)
    device = resolve_device(cfg.device)
    rows = load_split("train", cfg.task)
    trainer = cfg.trainer
    start = time.perf_counter()
    with Grader(timeout_s=5.0, workers=cfg.backend.grade_workers) as grader:
        directory = reference_dir(cfg, reference, device, grader)
        rate, flops = measure(directory, rows, samples=samples, max_new_tokens=trainer.max_new_tokens,
                              temperature=trainer.temperature, top_p=trainer.top_p, grader=grader, device=device,
                              chunk_size=cfg.backend.gen_chunk_size, seed=cfg.seed)
    elapsed = time.perf_counter() - start
    record = {
        "columns": {"difficulty": [round(float(v), 6) for v in difficulty_from_pass_rate(rate)],
                    "pass_rate": [round(float(v), 6) for v in rate.astype(np.float64)]},
        "flops": int(flops),
        "source": (f"lze-bench label: 100 x (1 - pass rate) of {reference} {directory.name} over {samples} "
                   f"samples per prompt (task {cfg.task.name}, {len(rows)} train prompts)"),
        "reference": {"kind": reference, "dir": str(directory)}, "samples": int(samples), "seed": int(cfg.seed),
        "prompts": len(rows), "train_fingerprint": fingerprint(rows), "time_s": round(elapsed, 2),
        "sampling": {"temperature": trainer.temperature, "top_p": trainer.top_p,
                     "max_new_tokens": trainer.max_new_tokens},
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, record)
    return record
