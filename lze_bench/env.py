"""Every environment variable lze-bench reads or sets, in one table, read in one place.

`TABLE` lists each variable once: its name, the value used when it is unset or empty, the modules
that read or set it, and one line of meaning (docs/design.md "Environment variables" shows the same
table; tests/test_env.py keeps the two in step). The typed accessors below are the only reads of
`os.environ` in lze_bench; the helpers at the end set variables for this process and the child
processes it starts, by the table's names.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str | None  # the value when unset or empty (None: no value)
    used_by: tuple[str, ...]  # modules under lze_bench/ that read or set it
    meaning: str


DEBUG = EnvVar("LZE_BENCH_DEBUG", None, ("cli.py", "argv.py"),
               "1: a command's error raises with its traceback instead of one line and exit code 2")
RECIPES = EnvVar("LZE_BENCH_RECIPES", None, ("config/__init__.py",),
                 "more recipe roots (os.pathsep-separated), each holding sweeps/ and evals/")
DATA = EnvVar("LZE_BENCH_DATA", None, ("config/__init__.py", "bench/grading.py"),
              "the data root when data.root (or bench grading's data=) is not given; unset: the Hugging Face hub")
CACHE = EnvVar("LZE_BENCH_CACHE", "~/.cache/lze-bench", ("backends/local/warmstart.py", "backends/openrlhf/head_build.py"),
               "cache folder for warm starts and learned heads when the backend's cache_dir is not given")
WARMSTARTS = EnvVar("LZE_BENCH_WARMSTARTS", None, ("backends/local/shipped.py",),
                    "another folder of shipped warm starts instead of the package's own")
PROGRESS = EnvVar("LZE_BENCH_PROGRESS", "1", ("backends/local/progress.py",), "0: no progress bars")
HF_HUB_OFFLINE = EnvVar("HF_HUB_OFFLINE", None, ("hub.py",),
                        "1/on/yes/true: nothing is fetched from the Hugging Face hub (huggingface_hub's own variable)")
WANDB_MODE = EnvVar("WANDB_MODE", None, ("tracking/wandb.py",),
                    "offline/disabled/dryrun: W&B runs without a key (W&B's own variable)")
WANDB_PROJECT = EnvVar("WANDB_PROJECT", "lze-bench", ("tracking/wandb.py",),
                       "the W&B project when tracking.project is not given")
CUDA_VISIBLE_DEVICES = EnvVar("CUDA_VISIBLE_DEVICES", None, ("evaluation/replicas.py",),
                              "GPUs this process may use; set for each eval replica process to its own")
VLLM_CPU_KVCACHE_SPACE = EnvVar("VLLM_CPU_KVCACHE_SPACE", None, ("evaluation/vllm_generator.py",),
                                "set while a CPU vLLM engine starts, to generation.cpu_kv_cache_gib (GiB)")
OMP_NUM_THREADS = EnvVar("OMP_NUM_THREADS", None, ("sweep/submit.py", "backends/openrlhf/slurm.py"),
                         "set for local sweep jobs (launcher.cpus_per_task) and each Ray process on Slurm")
MKL_NUM_THREADS = EnvVar("MKL_NUM_THREADS", None, ("sweep/submit.py",),
                         "set for local sweep jobs to launcher.cpus_per_task")
OMP_WAIT_POLICY = EnvVar("OMP_WAIT_POLICY", "PASSIVE", ("backends/local/model.py",),
                         "set to PASSIVE before torch loads unless already set (spinning threads starve others)")
RAY_ADDRESS = EnvVar("LZE_RAY_ADDRESS", None, ("backends/openrlhf/entry.py", "backends/openrlhf/slurm.py",
                                               "bench/overhead.py"),
                     "the Ray cluster an OpenRLHF run joins (set per node on Slurm); unset: backend.ray_address")
PLAIN_RAY_ADDRESS = EnvVar("RAY_ADDRESS", None, ("bench/overhead.py",),
                           "set for plain OpenRLHF in bench overhead to LZE_RAY_ADDRESS (Ray's own variable)")
RUN_CONFIG = EnvVar("LZE_CONFIG", None, ("backends/openrlhf/entry.py", "backends/openrlhf/context.py"),
                    "the run's config.yaml, set for OpenRLHF's processes (driver and Ray workers)")
RUN_DIR = EnvVar("LZE_RUN_DIR", None, ("backends/openrlhf/entry.py",),
                 "the run directory, set for OpenRLHF's processes")
GRADE_TIMEOUT_S = EnvVar("LZE_GRADE_TIMEOUT_S", "5", ("backends/openrlhf/entry.py", "backends/openrlhf/reward_func.py"),
                         "seconds per grading call in OpenRLHF's reward function; set from backend.grade_timeout_s")
GRADE_WORKERS = EnvVar("LZE_GRADE_WORKERS", "2", ("backends/openrlhf/entry.py", "backends/openrlhf/reward_func.py"),
                       "grading processes of OpenRLHF's reward function; set from backend.grade_workers")
REWARD_SHAPE = EnvVar("LZE_REWARD_SHAPE", "binary", ("backends/openrlhf/entry.py", "backends/openrlhf/reward_func.py"),
                      "set for Ray actors: trainer.reward_shape, the reward OpenRLHF trains on")
TOKENIZERS_PARALLELISM = EnvVar("TOKENIZERS_PARALLELISM", "true", ("backends/openrlhf/entry.py",),
                                "passed to Ray workers (Hugging Face tokenizers' own variable)")
NCCL_DEBUG = EnvVar("NCCL_DEBUG", "WARN", ("backends/openrlhf/entry.py",),
                    "passed to Ray workers (NCCL's own variable)")
RAY_ZERO_COPY = EnvVar("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1", ("backends/openrlhf/entry.py",),
                       "passed to Ray workers: tensors cross processes without a copy (Ray's own variable)")
PYTHONPATH = EnvVar("PYTHONPATH", None, ("backends/openrlhf/entry.py", "plugins.py"),
                    "passed to Ray workers, with a selector plug-in's module folder added, so they import the same "
                    "lze_bench and plug-in")
SLURM_PROCID = EnvVar("SLURM_PROCID", None, ("backends/openrlhf/launch.py", "backends/openrlhf/ray_cluster.py"),
                      "set by Slurm: this process runs inside a Slurm step")
SLURM_JOB_NODELIST = EnvVar("SLURM_JOB_NODELIST", None, ("backends/openrlhf/ray_cluster.py",),
                            "set by Slurm: the job's nodes (expanded with scontrol)")
SLURM_NNODES = EnvVar("SLURM_NNODES", None, ("backends/openrlhf/ray_cluster.py",),
                      "set by Slurm: the job's node count (else the node list's length)")
SLURM_JOB_ID = EnvVar("SLURM_JOB_ID", "0", ("backends/openrlhf/ray_cluster.py",),
                      "set by Slurm: names the node's Ray temp directory")
SLURM_RESTART_COUNT = EnvVar("SLURM_RESTART_COUNT", "0", ("backends/openrlhf/ray_cluster.py",),
                             "set by Slurm: how often the job was requeued")
SLURM_CPUS_PER_TASK = EnvVar("SLURM_CPUS_PER_TASK", None, ("backends/openrlhf/ray_cluster.py",),
                             "set by Slurm: CPUs Ray may use on the node (else the machine's count)")

TABLE = (DEBUG, RECIPES, DATA, CACHE, WARMSTARTS, PROGRESS, HF_HUB_OFFLINE, WANDB_MODE, WANDB_PROJECT,
         CUDA_VISIBLE_DEVICES, VLLM_CPU_KVCACHE_SPACE, OMP_NUM_THREADS, MKL_NUM_THREADS, OMP_WAIT_POLICY,
         RAY_ADDRESS, PLAIN_RAY_ADDRESS, RUN_CONFIG, RUN_DIR, GRADE_TIMEOUT_S, GRADE_WORKERS, REWARD_SHAPE,
         TOKENIZERS_PARALLELISM, NCCL_DEBUG, RAY_ZERO_COPY, PYTHONPATH, SLURM_PROCID, SLURM_JOB_NODELIST,
         SLURM_NNODES, SLURM_JOB_ID, SLURM_RESTART_COUNT, SLURM_CPUS_PER_TASK)


def value(var: EnvVar) -> str | None:
    """The variable's value, read now; unset or empty gives the table's default."""
    return os.environ.get(var.name) or var.default


def is_set(var: EnvVar) -> bool:
    """Whether the variable is in the environment at all (even empty)."""
    return var.name in os.environ


def debug() -> bool:
    return value(DEBUG) == "1"


def recipe_roots() -> list[str]:
    return [root for root in (value(RECIPES) or "").split(os.pathsep) if root]


def data_root() -> str | None:
    return value(DATA)


def cache_dir() -> str:
    return value(CACHE)


def warmstart_store() -> str | None:
    return value(WARMSTARTS)


def progress_shown() -> bool:
    return value(PROGRESS) != "0"


def hub_offline() -> bool:
    """As huggingface_hub reads it."""
    return (value(HF_HUB_OFFLINE) or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def wandb_mode() -> str:
    return (value(WANDB_MODE) or "").lower()


def wandb_project() -> str:
    return value(WANDB_PROJECT)


def visible_devices() -> list[str]:
    """The GPU ids CUDA_VISIBLE_DEVICES lists ([]: unset or empty)."""
    return [gpu.strip() for gpu in (value(CUDA_VISIBLE_DEVICES) or "").split(",") if gpu.strip()]


def ray_address() -> str | None:
    return value(RAY_ADDRESS)


def run_config_path() -> str:
    """The resolved config a Ray actor of an OpenRLHF run reads ("" when unset: the caller says how to start)."""
    return value(RUN_CONFIG) or ""


def grading_settings() -> tuple[float, int]:
    """(timeout in seconds, workers) of the OpenRLHF reward function's grading pool."""
    return float(value(GRADE_TIMEOUT_S)), int(value(GRADE_WORKERS))


def set_here(var: EnvVar, setting: str) -> None:
    """Set the variable in this process's environment (and so for every child it starts from now on)."""
    os.environ[var.name] = setting


def default_here(var: EnvVar) -> None:
    """Set the variable to the table's default unless it is already set."""
    os.environ.setdefault(var.name, var.default)


@contextlib.contextmanager
def temporarily(settings: dict[EnvVar, str]):
    """Set variables for the duration of a block (for the children started in it); then restore them."""
    saved = {var.name: os.environ.get(var.name) for var in settings}
    os.environ.update({var.name: setting for var, setting in settings.items()})
    try:
        yield
    finally:
        for name, before in saved.items():
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before


def set_names_here(settings: dict[str, str]) -> None:
    """Set variables given by name (each must be in TABLE) in this process's environment."""
    known = {var.name for var in TABLE}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise KeyError(f"not in lze_bench.env.TABLE: {', '.join(unknown)}")
    os.environ.update(settings)


def child_env(settings: dict[EnvVar, str] | None = None) -> dict[str, str]:
    """A copy of this process's environment with `settings` added, for a subprocess."""
    return {**os.environ, **{var.name: setting for var, setting in (settings or {}).items()}}
