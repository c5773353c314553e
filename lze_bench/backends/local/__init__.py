"""The embedded default backend: a tiny HF policy trained by our compact GRPO loop.

Registered here and kept light: torch and transformers load inside `train`.
`LocalBackendConfig` holds the knobs only this backend has; the GRPO knobs
every backend honours are `trainer.*` (config/schema.py).

Passes the local backend runs, and the FLOPs it books (lze_bench.flops, F(L)
per forward pass over L tokens; details in trainer.py / grpo.py / features.py):
  rollout     generation with a KV cache, F(prompt + response) per sample,
              probes included                                  -> flops_rollout
  reference   one forward per trained sequence when trainer.kl_coef > 0
                                                               -> flops_logprob
  old policy  one no-grad forward per trained sequence before the update
              (trainer.old_logprob_pass, default true: the pass OpenRLHF's
              make_experience and verl's compute_log_prob run); false runs
              and books none                                   -> flops_logprob
  update      3·F(L) per trained sequence per PPO epoch        -> flops_train
  selection   prompt entropy (current policy) and prompt embeddings (initial
              policy, once for all prompts) on request, F(prompt) each
                                                               -> flops_select
  offline     ASTRAL's learned head (selector.predictor=trained|checkpoint):
              labelling rollouts, encoder passes, head training; not a step's
              compute: <run_dir>/offline_flops.json (lze_bench/predictor)
  held-out eval  greedy generation, F(prompt + response); NOT training
              compute: ledger column flops_eval, outside flops_total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from lze_bench.config.schema import require
from lze_bench.predictor import HeadRecipe
from lze_bench.registry import BACKENDS


@dataclass
class LocalBackendConfig:
    name: str = "local"
    threads: int = 0  # torch CPU threads (0 = torch's default, all cores)
    cache_dir: Optional[str] = None  # warm-start cache; null: env LZE_BENCH_CACHE, else ~/.cache/lze-bench
    # supervised warm start (loss on the solution only), cached by the hash of what shapes it
    warmstart_steps: int = 300  # optimizer steps (0 = start from random weights)
    warmstart_batch_size: int = 64
    warmstart_lr: float = 3e-3
    warmstart_warmup: int = 30  # linear warm-up steps, then cosine decay to 10%
    init_seed: int = 0  # weight init + warm-start data order (shared by every run of a comparison)
    # one warm start per seed (init seed init_seed + 1000 * seed; both runs of a seed pair share it), so the report's
    # intervals cover what another initial policy would do; false: every run starts from init_seed's
    warmstart_per_seed: bool = False
    # shipped: the package's weights for this recipe where it ships them (the same on every machine), else
    # built here; build: always built on this machine (cached by recipe and machine; warmstart.py)
    warmstart: str = "shipped"
    lr_warmup_steps: int = 10  # GRPO lr ramps linearly over the first K steps (Adam's first steps are sign steps)
    eval_size: int = 300  # held-out problems evaluated (greedy) every trainer.eval_every steps
    gen_chunk_size: int = 256  # sequences per generation batch
    max_gen_rounds: int = 10  # backend cap on generation rounds per step (DAPO's "sample until full")
    rollout_store_groups: int = -1  # groups kept for replay (ASTRAL); -1: selector buffer_size + batch, else 0
    grade_workers: int = 1  # grading processes (lze_bench.grading.Grader)
    stop_after_steps: int = 0  # end this invocation after K more steps (time-sliced jobs, tests); 0 = off
    predictor: HeadRecipe = field(default_factory=HeadRecipe)  # ASTRAL's head for selector.predictor=trained

    def __post_init__(self):
        for key in ("threads", "warmstart_steps", "warmstart_warmup", "lr_warmup_steps", "stop_after_steps",
                    "grade_workers"):
            require(getattr(self, key) >= 0, f"backend.{key}", f"must be >= 0, got {getattr(self, key)}")
        for key in ("warmstart_batch_size", "eval_size", "gen_chunk_size", "max_gen_rounds"):
            require(getattr(self, key) > 0, f"backend.{key}", f"must be > 0, got {getattr(self, key)}")
        require(self.warmstart_lr > 0, "backend.warmstart_lr", f"must be > 0, got {self.warmstart_lr}")
        require(self.warmstart in ("shipped", "build"), "backend.warmstart",
                f"must be shipped or build, got {self.warmstart!r}")
        require(self.rollout_store_groups >= -1, "backend.rollout_store_groups", "must be >= 0, or -1 (auto)")


@BACKENDS.add("local")
class LocalBackend:
    Config = LocalBackendConfig
    honours_flop_budget = True  # trainer.py stops on trainer.flop_budget, evals on trainer.eval_every_flops
    astral_predictors = ("kernel", "trained", "checkpoint")  # selector.predictor values (lze_bench/predictor)

    @staticmethod
    def train(cfg):
        from lze_bench.backends.local.trainer import train

        return train(cfg)

    @staticmethod
    def dry_run(cfg):
        from lze_bench.backends.local.trainer import dry_run

        return dry_run(cfg)
