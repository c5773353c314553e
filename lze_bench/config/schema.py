"""Structured-config schemas of the shared keys (design.md "Keys every user can rely on").

Group options (selector, backend, task) take their schema from the registry
entry's `Config` dataclass; YAML presets (model, launcher, eval, sweep) are
validated against the schemas here or in their own module. Value checks live
in `__post_init__`, which runs when `compose()` turns the config into objects,
so a bad value fails with one line naming the key and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from lze_bench.advantages import check_estimator
from lze_bench.errors import LzeBenchError
from lze_bench.reward_shape import check_reward_shape
from lze_bench.tracking import TrackingConfig, check_loggers

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?|auto)$")


def require(condition: bool, key: str, message: str) -> None:
    """Raise the one-line config error `key: message`."""
    if not condition:
        raise LzeBenchError(f"{key}: {message}")


def check_seed(value: int, key: str = "seed") -> None:
    """NumPy's seeded generators (default_rng([seed, ...]): data order, selector rngs) take no negative seed."""
    require(value >= 0, key, f"must be an integer >= 0, got {value}")


def check_device(value: str, key: str = "device") -> None:
    require(bool(_DEVICE.match(str(value))), key, f"unknown device {value!r}; use cpu, cuda, cuda:N or auto")


def check_training_signal(estimator: str, scale_rewards: bool | None, reward_shape: str) -> None:
    """The advantage estimator and the reward shape: one-line refusals of unknown or contradictory values."""
    check_estimator(estimator, scale_rewards)
    check_reward_shape(reward_shape)


@dataclass
class TrainerConfig:
    """GRPO knobs every backend honours (backend-only knobs live under `backend.*`)."""

    steps: int = 60  # actor updates; with flop_budget set, a cap (the run says which one stopped it)
    flop_budget: Optional[float] = None  # stop at the first step with ledger cum_flops >= this (design.md "Equal compute"); null = off
    eval_every: int = 10  # held-out eval every K steps (0 = only at the end)
    eval_every_flops: Optional[float] = None  # also eval at each step whose cum_flops crosses a multiple of this; null = off
    checkpoint_every: int = 20  # HF checkpoint + selector state every K steps (and at the end)
    checkpoint_every_flops: Optional[float] = None  # also at each step whose cum_flops crosses a multiple of this (lze_bench/budget.py); null = off
    batch_size: int = 16  # prompts per actor update = the selectors' budget
    n_samples: int = 8  # responses per prompt (group size)
    temperature: float = 1.0  # rollout sampling temperature
    top_p: float = 1.0
    max_new_tokens: int = 96  # response length cap (the synthetic task's longest worked solution is 77 tokens)
    lr: float = 3e-5  # AdamW learning rate (tuned for the embedded tiny policy; real models use ~1e-6)
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max grad norm (0 = off)
    clip_eps_low: float = 0.2  # PPO clip range [1 - low, 1 + high]
    clip_eps_high: float = 0.28  # DAPO's clip-higher
    kl_coef: float = 0.0  # KL to the reference policy (0 = no reference pass)
    ppo_epochs: int = 1  # passes over the kept groups per step
    micro_batch_size: int = 32  # sequences per forward/backward chunk
    old_logprob_pass: bool = True  # forward over the trained sequences before the update, as OpenRLHF/verl's make_experience (design.md "FLOP accounting")
    advantage_estimator: str = "grpo"  # grpo | dr_grpo | rloo (lze_bench/advantages.py)
    scale_rewards: Optional[bool] = None  # older switch: false makes grpo dr_grpo; null: the estimator's own rule
    reward_shape: str = "binary"  # binary | deepscaler (lze_bench/reward_shape.py)

    def __post_init__(self):
        for key in ("steps", "batch_size", "n_samples", "max_new_tokens", "ppo_epochs", "micro_batch_size"):
            value = getattr(self, key)
            require(value > 0, f"trainer.{key}", f"must be a positive integer, got {value}")
        for key in ("eval_every", "checkpoint_every"):
            value = getattr(self, key)
            require(value >= 0, f"trainer.{key}", f"must be >= 0 (0 = only at the end), got {value}")
        for key in ("flop_budget", "eval_every_flops", "checkpoint_every_flops"):
            value = getattr(self, key)
            require(value is None or value > 0, f"trainer.{key}", f"must be > 0 FLOPs or null (off), got {value}")
        # a group's advantages are its rewards minus their mean over the group: one sample has none to learn from
        require(self.n_samples >= 2, "trainer.n_samples",
                f"GRPO group advantages need >= 2 samples per prompt, got {self.n_samples}")
        require(self.lr > 0, "trainer.lr", f"must be > 0, got {self.lr}")
        require(self.temperature > 0, "trainer.temperature", f"must be > 0, got {self.temperature}")
        require(0 < self.top_p <= 1, "trainer.top_p", f"must be in (0, 1], got {self.top_p}")
        require(self.kl_coef >= 0, "trainer.kl_coef", f"must be >= 0, got {self.kl_coef}")
        require(self.clip_eps_low >= 0 and self.clip_eps_high >= 0, "trainer.clip_eps_*", "must be >= 0")
        check_training_signal(self.advantage_estimator, self.scale_rewards, self.reward_shape)


@dataclass
class DataConfig:
    """Where datasets come from and how the training stream is cut into candidates."""

    root: Optional[str] = None  # local dataset directory; else env LZE_BENCH_DATA; else the HF hub
    candidates_per_step: Optional[int] = None  # null: batch_size x the selector's own pool factor

    def __post_init__(self):
        if self.candidates_per_step is not None:
            require(self.candidates_per_step > 0, "data.candidates_per_step", "must be > 0 or null")


def check_candidates(data: DataConfig, trainer: TrainerConfig) -> None:
    """The first round of a step offers `data.candidates_per_step` prompts (step_rounds.py): fewer than
    `trainer.batch_size` would leave a one-round selector (uniform, lze, ...) training on fewer prompts than the
    batch size says, and the comparison's budgets unequal."""
    count, batch = data.candidates_per_step, trainer.batch_size
    require(count is None or count >= batch, "data.candidates_per_step",
            f"{count} candidates per step is fewer than the trainer.batch_size={batch} prompts a step trains; "
            "set it >= trainer.batch_size, or null for the selector's own number")


@dataclass
class ModelConfig:
    """A policy: a tiny architecture built by lze-bench, or a Hugging Face id/path.

    `model=NAME` picks a preset (lze_bench/config/model/NAME.yaml); any other
    value (`model=Qwen/Qwen2.5-Math-1.5B`, `model=runs/x/checkpoints/step_000060`)
    is read as a path or hub id (preset `hf`).
    """

    name: str = "tiny"
    path: Optional[str] = None  # HF hub id or local directory; null = build the tiny policy
    arch: str = "llama"  # transformers architecture family for tiny policies
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate_size: int = 384
    max_position_embeddings: int = 256
    dtype: str = "float32"

    def __post_init__(self):
        if self.name == "hf":
            require(bool(self.path), "model.path", "model=hf needs a path or hub id; pass model=PATH_OR_HF_ID")
        if self.path is None:
            for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
                require(getattr(self, key) > 0, f"model.{key}", "must be > 0")
            require(self.hidden_size % self.num_heads == 0, "model.hidden_size", "must be divisible by model.num_heads")
        require(self.dtype in ("float32", "bfloat16", "float16"), "model.dtype", "use float32, bfloat16 or float16")


@dataclass
class TrainConfig:
    """`lze-bench train`: one policy, one selector, one run directory."""

    defaults: List[Any] = field(
        default_factory=lambda: [
            "_self_",
            {"selector": "uniform"},
            {"backend": "local"},
            {"model": "tiny"},
            {"task": "synthetic"},
            {"launcher": "local"},
        ]
    )
    selector: Any = MISSING
    backend: Any = MISSING
    model: ModelConfig = MISSING
    task: Any = MISSING
    launcher: Any = MISSING  # where `sweep` runs this job; `train backend=openrlhf --dry-run` prints its script
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    seed: int = 0
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    run_dir: Optional[str] = None  # null: runs/<selector>-<backend>-<model>-s<seed>-<hash>
    # live trackers (lze_bench.tracking): wandb, tensorboard; none by default. Like `tracking.*`, not part
    # of the run's identity (rundir.TRACKING_KEYS); W&B's key comes only from the environment
    logger: List[str] = field(default_factory=list)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self):
        check_seed(self.seed)
        check_device(self.device)
        check_loggers(self.logger)
        check_candidates(self.data, self.trainer)


@dataclass
class ReplayOptions:
    budget_fraction: Optional[float] = None  # null: each method's own budget (selectors.md §8)
    # n (trainer.n_samples of the run compared with) for selectors that extend groups: Reinforce-Ada's kept
    # rollouts per prompt; null = the log's first row's rollout count
    group_size: Optional[int] = None

    def __post_init__(self):
        if self.budget_fraction is not None:
            require(0 < self.budget_fraction <= 1, "replay.budget_fraction", "must be in (0, 1] or null")
        if self.group_size is not None:
            require(self.group_size >= 1, "replay.group_size", "must be >= 1 or null")


@dataclass
class ReplayConfig:
    """`lze-bench replay ROLLOUTS selector=NAME`: a selector over a recorded log."""

    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"selector": "lze"}])
    selector: Any = MISSING
    replay: ReplayOptions = field(default_factory=ReplayOptions)
    seed: int = 0

    def __post_init__(self):
        check_seed(self.seed)


def _register() -> None:
    from lze_bench.config import CONFIGS

    CONFIGS.add("train")(TrainConfig)
    CONFIGS.add("replay")(ReplayConfig)


_register()
