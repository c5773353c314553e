"""Config schemas of `lze-bench eval`: the `eval` group (suites) and the `eval` command.

A suite (evals/<name>.yaml, validated by SuiteConfig) names benchmarks and the
sampling settings they are run with; every setting is recorded in the outputs
("Generation"). The command config (EvalConfig) adds what to evaluate
(`model=PATH_OR_HF_ID`, or `run=RUN_DIR` for every checkpoint of a run) and how.

Choices where the sources are silent:
- `eval.temperature=0` means greedy; greedy with n_samples > 1 is refused
  (it would repeat one sample and report a meaningless pass@k);
- pass@k and maj@k are computed for every k in `eval.ks` (k <= n_samples); the
  ledger's single `k` column holds the largest;
- `limit=N` (top level, for smoke runs) wins over the suite's `eval.limit`;
- the default model preset is `tiny`, which has no weights to evaluate: pass
  `model=PATH_OR_HF_ID` or `run=RUN_DIR` (run_eval says so in one line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from lze_bench.config.schema import DataConfig, ModelConfig, check_device, require

GENERATION_BACKENDS = ("hf", "vllm")


@dataclass
class SuiteConfig:
    """One benchmark suite: which benchmarks, sampled how."""

    name: str = "math_suite"
    benchmarks: List[str] = field(default_factory=lambda: ["gsm8k", "math500", "aime25", "amc23"])
    split: Optional[str] = None  # null: each benchmark's own test split
    n_samples: int = 1  # responses per problem (avg@n)
    temperature: float = 0.0  # 0 = greedy decoding
    top_p: float = 1.0
    max_new_tokens: int = 2048  # clamped to the model's context window (generation.py)
    ks: List[int] = field(default_factory=lambda: [1])  # pass@k / maj@k for each k
    limit: Optional[int] = None  # first N problems of each benchmark (smoke runs)
    prompt_template: Optional[str] = None  # null: each benchmark's own template ({problem})
    use_chat_template: bool = True  # when the tokenizer has one

    def __post_init__(self):
        from lze_bench.data import get_spec

        require(len(self.benchmarks) > 0, "eval.benchmarks", "list at least one benchmark")
        for name in self.benchmarks:
            get_spec(name)  # unknown name -> one line with the choices
        require(self.n_samples >= 1, "eval.n_samples", f"must be >= 1, got {self.n_samples}")
        require(self.temperature >= 0, "eval.temperature", f"must be >= 0 (0 = greedy), got {self.temperature}")
        require(
            self.temperature > 0 or self.n_samples == 1, "eval.temperature",
            "greedy decoding (0) with n_samples > 1 repeats one sample; set eval.temperature > 0 or eval.n_samples=1",
        )
        require(0 < self.top_p <= 1, "eval.top_p", f"must be in (0, 1], got {self.top_p}")
        require(self.max_new_tokens >= 1, "eval.max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        require(len(self.ks) > 0, "eval.ks", "list at least one k")
        for k in self.ks:
            require(1 <= k <= self.n_samples, "eval.ks", f"each k must be in [1, n_samples={self.n_samples}], got {k}")
        if self.limit is not None:
            require(self.limit >= 1, "eval.limit", f"must be >= 1 or null, got {self.limit}")
        if self.prompt_template is not None:
            require("{problem}" in self.prompt_template, "eval.prompt_template", "must contain {problem}")


@dataclass
class GenerationConfig:
    backend: str = "hf"  # hf (transformers) | vllm
    batch_size: int = 8  # prompts per generate call (hf); each yields n_samples responses
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA; or float32 | bfloat16 | float16

    def __post_init__(self):
        require(self.backend in GENERATION_BACKENDS, "generation.backend", f"use one of {', '.join(GENERATION_BACKENDS)}")
        require(self.batch_size >= 1, "generation.batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.dtype in ("auto", "float32", "bfloat16", "float16"), "generation.dtype",
                "use auto, float32, bfloat16 or float16")


@dataclass
class GradingConfig:
    timeout_s: float = 5.0  # per answer; a timeout counts wrong
    workers: int = 0  # grading processes; 0 = one per core

    def __post_init__(self):
        require(self.timeout_s > 0, "grading.timeout_s", f"must be > 0, got {self.timeout_s}")
        require(self.workers >= 0, "grading.workers", f"must be >= 0 (0 = one per core), got {self.workers}")


@dataclass
class EvalConfig:
    """`lze-bench eval model=PATH_OR_HF_ID eval=SUITE` or `lze-bench eval run=RUN_DIR`."""

    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"model": "tiny"}, {"eval": "math_suite"}])
    model: ModelConfig = MISSING
    eval: SuiteConfig = MISSING
    run: Optional[str] = None  # a run directory: evaluate each complete checkpoint, append to its ledger
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    grading: GradingConfig = field(default_factory=GradingConfig)
    limit: Optional[int] = None  # first N problems per benchmark; wins over eval.limit
    out_dir: Optional[str] = None  # null: <run>/evals/<checkpoint>/ or runs/eval/<model>-<suite>/

    def __post_init__(self):
        check_device(self.device)
        if self.limit is not None:
            require(self.limit >= 1, "limit", f"must be >= 1 or null, got {self.limit}")


def _register() -> None:
    from lze_bench.config import CONFIGS

    if "eval" not in CONFIGS:
        CONFIGS.add("eval")(EvalConfig)


_register()
