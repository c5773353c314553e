"""The sweep's head step: ASTRAL's learned head (`selector.predictor=trained` on backend=openrlhf) built
once, before the runs that share it. The build is lze_bench/backends/openrlhf/head_build.py's; this module
only schedules it.

`head_steps(plan)` groups the planned jobs by the head they need (`head_build.head_key`: jobs that differ
only in seed or selector settings other than the encoder share one). `--dry-run` prints each step
(`head_build.describe`: labellers, encoder, questions, FLOP estimate); a real sweep runs every step not
yet built, in order, through the sweep's launcher, and waits for it before submitting any run:
`launcher=local` builds in this process, `launcher=slurm` submits one Slurm job with the runs' resources
but one GPU (`slurm_parameters`, no array) and waits for its result. A failed build stops the sweep
before any run is submitted (no run could start without its head). Jobs on another backend or predictor have no step.

The labellers sample through lze_bench.evaluation's generation engines (vLLM at scale), which stand on the
backends' floor (tests/test_layout.py), so the build takes them as an argument and `build_head` here hands
them in (`engine`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)


@dataclass
class HeadStep:
    key: str
    overrides: list[str]  # the first job's train overrides: the head depends only on what they share
    jobs: list[str] = field(default_factory=list)


def _trained_head_config(overrides: list[str]):
    from lze_bench.backends.openrlhf.head_build import uses_trained_head
    from lze_bench.config import compose

    cfg = compose("train", overrides)
    return cfg if uses_trained_head(cfg) else None


def head_steps(plan) -> list[HeadStep]:
    from lze_bench.backends.openrlhf.head_build import head_key

    steps: dict[str, HeadStep] = {}
    for job in plan.jobs:
        if job.selector != "astral":  # only astral reads a head: skip composing the other jobs
            continue
        cfg = _trained_head_config(job.train_overrides)
        if cfg is None:
            continue
        key = head_key(cfg)
        steps.setdefault(key, HeadStep(key, list(job.train_overrides))).jobs.append(job.name)
    return list(steps.values())


def describe_steps(steps: list[HeadStep]) -> list[str]:
    from lze_bench.backends.openrlhf.head_build import check_recipe, describe
    from lze_bench.config import compose

    lines = []
    for step in steps:
        cfg = compose("train", step.overrides)
        check_recipe(cfg)
        lines += describe(cfg, step.jobs)
    return lines


def engine():
    """The labelling engine of the head's build: lze_bench.evaluation.generation's generators."""
    from lze_bench.backends.openrlhf.head_build import LabelEngine
    from lze_bench.evaluation.generation import Sampling, load_generator

    return LabelEngine(load_generator=load_generator, sampling=Sampling)


def build_head(cfg) -> Path:
    """The head directory for this config (head_build.build_head with the evaluation engines)."""
    from lze_bench.backends.openrlhf.head_build import build_head as build

    return build(cfg, engine())


def build_step(overrides: list[str]) -> str:
    """The job body (also run in-process): build the head of these overrides; returns its directory."""
    from lze_bench.config import compose

    return str(build_head(compose("train", overrides)))


def run_steps(plan, steps: list[HeadStep]) -> None:
    """Build every head not yet built, through the sweep's launcher, before any run is submitted."""
    from lze_bench.backends.openrlhf.head_build import built
    from lze_bench.config import compose

    for step in steps:
        if built(compose("train", step.overrides)):
            log.info("head step %s: already built, shared by %s", step.key, ", ".join(step.jobs))
            continue
        log.info("head step %s: building for %s", step.key, ", ".join(step.jobs))
        if plan.launcher.get("name") == "slurm":
            _slurm(plan, step)
        else:
            build_step(step.overrides)


def _slurm(plan, step: HeadStep) -> None:
    import submitit

    from lze_bench.sweep.manifest import SUBMITIT
    from lze_bench.sweep.submit import slurm_parameters

    params = slurm_parameters(plan.launcher, f"{plan.name}-head")
    params.pop("array_parallelism", None)
    if "gpus_per_node" in params:  # the build is one process on one device: labellers in turn, then the encoder
        params["gpus_per_node"] = 1
    try:
        executor = submitit.SlurmExecutor(folder=plan.sweep_dir / SUBMITIT / "head", max_num_timeout=0)
    except RuntimeError as exc:
        raise LzeBenchError(f"launcher=slurm: {exc} (no srun on PATH); use launcher=local here") from exc
    executor.update_parameters(**params)
    job = executor.submit(build_step, step.overrides)
    log.info("head step %s: Slurm job %s", step.key, job.job_id)
    try:
        job.result()
    except Exception as exc:  # the job's own traceback is in its submitit log
        raise LzeBenchError(f"the head step's Slurm job {job.job_id} failed ({str(exc).splitlines()[-1]}); "
                            f"its log: {job.paths.stderr}") from exc

