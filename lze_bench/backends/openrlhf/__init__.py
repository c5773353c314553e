"""backend=openrlhf: the scale path (OpenRLHF's Ray GRPO: vLLM rollouts, DeepSpeed actor).

Our selector decides which prompts are rolled out and which groups reach the
actor update, by subclassing OpenRLHF (never a fork or a copy): see
openrlhf.md §9. This file is light (no openrlhf, ray or torch
import) so `lze-bench --help` and `train --dry-run` work without OpenRLHF.

Modules, one concern each:
  plan.py        the launch plan: cluster shape, ranks, engines, Ray CPUs, trim unit, store capacity (once)
  command.py     our config + plan -> the exact OpenRLHF 0.11.2 flag list (+ invariants)
  launch.py      `train` / `dry_run`: prepare the run directory, run or print
  entry.py       the Ray driver: our env vars, our trainer class, OpenRLHF's CLI unchanged
  trainer.py     LzePPOTrainer: selector, ledger, checkpoints, resume (OpenRLHF subclass)
  generator.py   LzeSamplesGenerator._generate_vllm: the selection hook (OpenRLHF subclass)
  context.py     the run state the trainer actor holds (no OpenRLHF import)
  selection.py   one training step's selector calls (lze_bench.step_rounds) + the replay store
  trim.py        which responses of a step's update train: whole micro-batches per DP rank
  update.py      the experience maker's output -> trimmed, replay re-centred, one batch per rank
  replay_loss.py OpenRLHF's IS correction as ASTRAL's re-centred loss (flags, log mu per token)
  actor.py       our policy actor: per-step DeepSpeed batch size + the feature passes
  actor_features.py  no-grad entropy / mean-hidden passes run on each policy rank
  features.py    the selector's FeatureFn (hive's entropies, astral's embeddings), booked as flops_select
  head.py        astral's learned head (predictor=checkpoint|trained): frozen-encoder embeddings on the policy ranks
  head_build.py  predictor=trained: the head's build (labels by the engine, frozen encoder, authors' recipe)
  accounting.py  ledger rows and FLOPs for the passes OpenRLHF runs
  reward_func.py OpenRLHF's reward hook -> lze_bench.grading in a process pool
  data.py        the prompts JSONL OpenRLHF reads (input + label {id, answer})
  ray_cluster.py Ray on a Slurm allocation: head and workers, the driver, teardown
  slurm.py       the Slurm job: submitit parameters, the job body, requeue
  placement.py   OpenRLHF's placement-group waits, bounded
  checkpoints.py which OpenRLHF checkpoint a rerun resumes from (unloadable ones set aside)
  script.py      the Slurm job script text (`--dry-run` with launcher=slurm)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from lze_bench.backends.openrlhf.head_build import HeadBuildConfig
from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError, missing_dependency
from lze_bench.registry import BACKENDS

# The only release read (openrlhf.md §1). We override private methods
# (`_generate_vllm`) and call private helpers, which already differ between
# 0.11.0 and 0.11.2, so the pin is exact.
SUPPORTED_OPENRLHF = ("0.11.2",)
RAY_VERSION = "2.55.0"  # openrlhf 0.11.2 pins ray[default]==2.55.0
VLLM_VERSION = "0.29.0"  # openrlhf 0.11.2's [vllm] extra pins vllm==0.29.0
INSTALL = "pip install 'lze-bench[openrlhf]'"
# Packages OpenRLHF imports at module level on a GPU node, and the command that installs each
# (flash-attn and DeepSpeed compile against the installed CUDA torch; docs/cluster.md).
GPU_STACK = {
    "vllm": f"pip install 'lze-bench[openrlhf]' (vllm=={VLLM_VERSION})",
    "flash_attn": "pip install flash-attn==2.8.3 --no-build-isolation",
    "deepspeed": "pip install deepspeed==0.19.6",
    "ray": f"pip install 'ray[default]=={RAY_VERSION}'",
}

# Trainer defaults for a Hugging Face math model on this backend (sweeps/qwen25_math_1p5b.yaml,
# openrlhf.md §12); the `trainer.*` schema defaults are tuned for the embedded tiny policy
# (96 new tokens, lr 3e-5, 16 prompts) and must never reach a real run. Keys given on the
# command line win (lze_bench.config.compose).
TRAINER_DEFAULTS = {
    "steps": 200,
    "eval_every": 20,
    "checkpoint_every": 20,
    "batch_size": 128,
    "max_new_tokens": 3072,
    "lr": 1e-6,
}


@dataclass
class OpenRLHFBackendConfig:
    """Backend-only knobs; GRPO knobs shared with every backend live under `trainer.*`.

    Defaults follow openrlhf.md §12 ("proposed for us"); OpenRLHF's own flag
    each knob becomes is named in command.py.
    """

    name: str = "openrlhf"
    openrlhf_version: str = "0.11.2"  # recorded in config.yaml; must be a supported release
    # cluster shape (null: taken from launcher.nodes / launcher.gpus_per_node)
    num_nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    ray_address: Optional[str] = None  # join a running Ray cluster ("auto", "ip:port"); null = start one
    # engines
    colocate_all: bool = True  # vLLM, actor (and ref) share every GPU (--train.colocate_all)
    vllm_tensor_parallel_size: int = 1
    vllm_gpu_memory_utilization: float = 0.6
    vllm_enable_sleep: bool = True  # needs colocate_all
    vllm_enforce_eager: bool = False
    vllm_enable_prefix_caching: bool = False
    # the actor -> engine weight sync (--vllm.sync_backend): "nccl" (with colocate_all, CUDA IPC) on GPUs; "gloo"
    # broadcasts over gloo instead (no CUDA IPC; OpenRLHF 0.11.2 still builds its sync communicator with NCCL)
    vllm_sync_backend: str = "nccl"
    # vLLM 0.29.0's batch-invariant mode (VLLM_BATCH_INVARIANT=1 in every Ray actor): on GPUs a seeded rollout
    # then draws the same tokens whatever else the engine batched with it (slower kernels; CUDA only, vLLM's
    # Triton/cuBLAS overrides: docs/cluster.md "Reproducible rollouts"). Off, seeds still fix the random draws.
    vllm_batch_invariant: bool = False
    zero_stage: int = 2
    param_dtype: str = "bf16"
    ds_enable_sleep: bool = True  # offload DeepSpeed states while vLLM generates (needs colocate_all)
    adam_offload: bool = False
    packing_samples: bool = True
    gradient_checkpointing: bool = True
    attn_implementation: str = "flash_attention_2"
    train_micro_batch_size: int = 8  # per GPU (--train.micro_batch_size)
    rollout_micro_batch_size: int = 16  # per GPU, log-prob passes (--rollout.micro_batch_size)
    # sequence lengths: prompt + response <= max_len (Qwen2.5-Math-1.5B's context is 4,096)
    max_len: int = 4096
    apply_chat_template: bool = True
    prompt: str = "default"  # lze_bench.benchmarks.PROMPTS; qwen25_math: the instruction as the system turn
    # optimisation details OpenRLHF exposes beyond trainer.*
    lr_scheduler: str = "cosine_with_min_lr"
    lr_warmup_ratio: float = 0.03
    min_lr_ratio: float = 0.1
    loss_agg_mode: str = "token-mean"
    kl_estimator: str = "k3"  # used only when trainer.kl_coef > 0 (KL as a loss)
    # selection hook
    max_gen_rounds: int = 12  # backend cap on generation rounds per step (DAPO's own cap: 10); then ledger partial
    rollout_store_groups: int = -1  # groups kept for replay (astral); -1: selector buffer_size + batch, else 0
    # checkpoints, grading (trackers: the top-level logger=[...], lze_bench.tracking)
    ckpt_max_num: int = 2  # DeepSpeed states kept for resume (HF checkpoints are all kept); >= 2
    # DeepSpeed states (weights, fp32 masters, Adam moments: ~21 GB per tag for a 1.5B model) are needed only to
    # resume; a finished run (DONE) deletes them unless kept (checkpoints.remove_ds_states)
    keep_ds_states: bool = False
    grade_timeout_s: float = 5.0
    placement_timeout_s: float = 600.0  # fail a run whose Ray placement groups are not ready by then (never hang)
    grade_workers: int = 2  # grading processes per vLLM engine
    extra_args: List[str] = field(default_factory=list)  # any further OpenRLHF flag, verbatim
    # a command the Ray driver runs under, e.g. [nsys, profile, -o, prof] or [apptainer, exec, image.sif]:
    # the driver command becomes driver_wrapper + [python, -m, lze_bench.backends.openrlhf.entry, ...]
    driver_wrapper: List[str] = field(default_factory=list)
    # ASTRAL's learned head for selector.predictor=trained: labellers and recipe of the sweep's head step
    # (head_build.py); unused by every other selector
    predictor: HeadBuildConfig = field(default_factory=HeadBuildConfig)

    def __post_init__(self):
        require(
            self.openrlhf_version in SUPPORTED_OPENRLHF,
            "backend.openrlhf_version",
            f"{self.openrlhf_version!r} is not supported; use {' or '.join(SUPPORTED_OPENRLHF)}",
        )
        for key in ("vllm_tensor_parallel_size", "train_micro_batch_size", "rollout_micro_batch_size",
                    "max_len", "max_gen_rounds", "grade_workers"):
            require(getattr(self, key) > 0, f"backend.{key}", f"must be > 0, got {getattr(self, key)}")
        for key in ("num_nodes", "gpus_per_node"):
            value = getattr(self, key)
            require(value is None or value > 0, f"backend.{key}", f"must be > 0 or null, got {value}")
        require(0 < self.vllm_gpu_memory_utilization <= 1, "backend.vllm_gpu_memory_utilization", "must be in (0, 1]")
        require(self.zero_stage in (0, 1, 2, 3), "backend.zero_stage", f"use 0, 1, 2 or 3, got {self.zero_stage}")
        require(self.param_dtype in ("bf16", "fp16"), "backend.param_dtype", "use bf16 or fp16")
        require(self.rollout_store_groups >= -1, "backend.rollout_store_groups", "must be >= 0, or -1 (auto)")
        require(self.kl_estimator in ("k1", "k2", "k3"), "backend.kl_estimator", "use k1, k2 or k3")
        from lze_bench.benchmarks import PROMPTS

        require(self.prompt in PROMPTS, "backend.prompt",
                f"unknown prompt {self.prompt!r}; use one of {', '.join(PROMPTS)}")
        require(self.prompt == "default" or self.apply_chat_template, "backend.prompt",
                f"{self.prompt!r} puts the instruction in the system turn, "
                "which needs backend.apply_chat_template=true")
        require(
            self.loss_agg_mode in ("token-mean", "seq-mean-token-mean"),
            "backend.loss_agg_mode", "use token-mean or seq-mean-token-mean",
        )
        require(self.grade_timeout_s > 0, "backend.grade_timeout_s", "must be > 0")
        require(self.placement_timeout_s > 0, "backend.placement_timeout_s", "must be > 0")


def require_openrlhf() -> str:
    """The installed OpenRLHF version, or one clear line saying what to install."""
    from importlib import metadata

    try:
        version = metadata.version("openrlhf")
    except metadata.PackageNotFoundError:
        raise missing_dependency("openrlhf", "openrlhf", why="backend=openrlhf runs OpenRLHF's Ray GRPO trainer")
    if version not in SUPPORTED_OPENRLHF:
        raise LzeBenchError(
            f"openrlhf {version} is installed, but backend=openrlhf supports only openrlhf=="
            f"{' or =='.join(SUPPORTED_OPENRLHF)} (it overrides private methods read in that release); "
            f"install it with: {INSTALL}"
        )
    return version


def require_gpu_stack() -> None:
    """One clear line naming the install command of the first package OpenRLHF imports that is missing."""
    import importlib.util

    version = require_openrlhf()
    for module, command in GPU_STACK.items():
        if importlib.util.find_spec(module) is None:
            raise LzeBenchError(f"{module} is not installed (OpenRLHF {version} imports it); install it with: {command}")


@BACKENDS.add("openrlhf")
class OpenRLHFBackend:
    Config = OpenRLHFBackendConfig
    # the trainer stops on trainer.flop_budget and checkpoints on trainer.checkpoint_every_flops (lze_bench.budget);
    # trainer.eval_every_flops is refused (command.check): this backend evaluates checkpoints after training
    honours_flop_budget = True
    trainer_defaults = TRAINER_DEFAULTS
    # selector.predictor values: a head file is served as is (head.py); `trained` is built once per sweep by
    # the sweep's head step (head_build.py) and then served as a file
    astral_predictors = ("kernel", "trained", "checkpoint")

    @staticmethod
    def train(cfg):
        """Run (or, with launcher=slurm, submit) one training run; returns the run directory."""
        from lze_bench.backends.openrlhf.launch import train

        return train(cfg)

    @staticmethod
    def dry_run(cfg) -> None:
        """Print the exact driver command (and the Slurm job script); start nothing."""
        from lze_bench.backends.openrlhf.launch import dry_run

        dry_run(cfg)
