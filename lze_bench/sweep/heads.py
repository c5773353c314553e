"""The sweep's head step: ASTRAL's learned head (`selector.predictor=trained` on backend=openrlhf) built
once, before the runs that share it (lze_bench/backends/openrlhf/head_build.py).

`head_steps(plan)` groups the planned jobs by the head they need (`head_build.head_key`: jobs that differ
only in seed or selector settings other than the encoder share one). `--dry-run` prints each step
(`head_build.describe`: labellers, encoder, questions, FLOP estimate); a real sweep runs every step not
yet built, in order, through the sweep's launcher, and waits for it before submitting any run:
`launcher=local` builds in this process, `launcher=slurm` submits one Slurm job with the runs' resources
but one GPU (`slurm_parameters`, no array) and waits for its result. A failed build stops the sweep
before any run is submitted (no run could start without its head). Jobs on another backend or predictor have no step.

The build itself (`build_head`, `label`) is here rather than in the backend because it samples through
lze_bench.evaluation's generation engines (vLLM at scale), a floor above the backends (tests/test_layout.py);
what it does and what it books is described in head_build.py's docstring.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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


# --- the build itself (here, not in the backend: it labels through lze_bench.evaluation's engines) -----------


def label(cfg, model: str, rows: list[dict], grader, seed: int) -> tuple[np.ndarray, int]:
    """(pass rate float32[Q], generation FLOPs) of `model` on the rows, sampled by the engine."""
    from lze_bench.backends.openrlhf.data import prompt_input
    from lze_bench.evaluation.generation import Sampling, load_generator

    recipe, trainer = cfg.backend.predictor, cfg.trainer
    generator = load_generator(str(model), backend=str(recipe.generation), device=str(cfg.device),
                               dtype=str(recipe.dtype), batch_size=int(recipe.gen_batch_size),
                               use_chat_template=bool(cfg.backend.apply_chat_template), seed=seed)
    try:
        results = generator.generate([prompt_input(r["problem"], str(cfg.backend.prompt)) for r in rows],
                                     Sampling(n=int(recipe.samples), temperature=float(trainer.temperature),
                                              top_p=float(trainer.top_p),
                                              max_new_tokens=int(trainer.max_new_tokens), seed=seed))
    finally:
        generator.close()
    texts, golds, prompt_tokens, response_tokens = [], [], [], []
    for row, result in zip(rows, results):
        if len(result.completions) != int(recipe.samples):
            raise LzeBenchError(f"labeller {model}: {len(result.completions)} responses for a question, "
                                f"expected backend.predictor.samples={recipe.samples}")
        for completion in result.completions:
            texts.append(completion.text)
            golds.append(str(row["answer"]))
            prompt_tokens.append(result.prompt_tokens)
            response_tokens.append(completion.tokens)
    correct = np.array([1.0 if g.correct else 0.0 for g in grader.grade(texts, golds)], dtype=np.float32)
    rates = correct.reshape(len(rows), int(recipe.samples)).mean(axis=1)
    from lze_bench.backends.openrlhf.head_build import flop_model

    return rates, int(flop_model(str(model)).generation(prompt_tokens, response_tokens))


def build_head(cfg) -> Path:
    """The head directory for this config (`head.pt` + `info.json`), built first if missing (file-locked)."""
    from lze_bench.backends.openrlhf.head_build import check_recipe, head_dir
    from lze_bench.predictor.build import build_once

    check_recipe(cfg)
    return build_once(head_dir(cfg), lambda out: _build(cfg, out))


def _build(cfg, out: Path) -> dict:
    from lze_bench.backends.openrlhf.head_build import HEAD_FILE, _rows
    from lze_bench.config import config_dict
    from lze_bench.grading import Grader
    from lze_bench.predictor.build import train_and_save
    from lze_bench.predictor.encoder import Encoder

    recipe = cfg.backend.predictor
    rows = _rows(cfg)
    times, flops, rates = {}, {"labeling": 0}, []
    start = time.perf_counter()
    grader = Grader(timeout_s=float(cfg.backend.grade_timeout_s), workers=int(cfg.backend.grade_workers))
    try:
        for index, model in enumerate(recipe.labelers):
            rate, spent = label(cfg, str(model), rows, grader, seed=int(recipe.seed) + index)
            rates.append(rate)
            flops["labeling"] += spent
            log.info("labeller %s: mean pass rate %.3f over %d questions", model, rate.mean(), len(rows))
    finally:
        grader.close()
    times["labeling"] = time.perf_counter() - start
    start = time.perf_counter()
    name = str(cfg.selector.predictor_encoder)
    device = "cuda" if str(cfg.device) in ("cuda", "auto") and _cuda() else "cpu"
    encoder = Encoder.load(name, name, device)
    embeddings, flops["encoder"] = encoder.embed([r["problem"] for r in rows])
    del encoder.model  # frozen and done: free its memory before training the head
    times["encoder"] = time.perf_counter() - start
    built = train_and_save(embeddings, rates, recipe, out / HEAD_FILE, encoder=name,
                           labelers=[str(m) for m in recipe.labelers], flops=flops, times=times)
    return {
        "encoder": {"name": name, "path": name, "width": int(embeddings.shape[1])}, **built,
        "samples": int(recipe.samples), "generation": str(recipe.generation), "recipe": config_dict(recipe),
    }


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
