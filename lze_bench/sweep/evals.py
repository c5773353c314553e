"""`lze-bench eval sweep_dir=DIR`: every checkpoint of every finished run of a sweep, evaluated as submitit jobs.

    lze-bench eval sweep_dir=runs/sweeps/micro eval=synthetic                      # launcher=local (default)
    lze-bench eval sweep_dir=runs/sweeps/qwen25_math_1p5b eval=math_suite generation.backend=vllm device=cuda \\
        launcher=slurm launcher.gpus_per_node=1 launcher.partition=gpu [--dry-run]
    lze-bench sweep status runs/sweeps/micro                                   # training jobs, then eval jobs

Reads run directories only: the sweep's manifest.json (or any folder of run
directories), each run's DONE, `checkpoints/step_*/` (Hugging Face model
folders marked COMPLETE), config.yaml (the initial policy) and, when results
are written, ledger.parquet (the checkpoint's cum_flops): so it works the same
for runs of any backend.

Order: compose the `eval` config (a bad key fails here); compute the settings
key (lze_bench/evaluation/settings.py; with `eval.seeds=[...]`, one key per
seed and the seed group's key, which names the folder); load and check every
benchmark's rows (a missing file fails before anything is submitted); list each finished run's
targets (runner.run_targets: its initial policy and complete checkpoints);
plan one job per run (`job_per=run`, the checkpoints evaluated in turn, each
engine shut down before the next starts) or per checkpoint
(`job_per=checkpoint`); then submit and wait with the training sweep's own
machinery (submit.run_sweep: local or Slurm executor, array parallelism,
requeue, `wait=`), into `DIR/evals/<suite>-<key>/` (manifest.json with
`kind: eval`, submitit/ logs). A job is done when each of its checkpoints has
every benchmark's result under the key (with several seeds: under every seed's
key, and in their aggregate; evaluation.seeds.checkpoint_finished, built on
outputs.finished, the rule `eval` itself skips by), so a re-run skips finished jobs, resubmits failed ones, and a
job that starts again skips finished (checkpoint, benchmark) results.

Choices where the sources are silent:
- runs without DONE (still training, or failed) are left out and named; run
  the command again once they finish;
- GPUs: a job evaluates with `generation.tensor_parallel_size ×
  data_parallel_size` GPUs; with launcher=slurm and a GPU device,
  `launcher.gpus_per_node` must be at least that (refused otherwise, rather
  than a job that waits for GPUs it never gets);
- `out_dir` is refused: results must land in the runs' own `evals/` folders,
  where reports and resumption look.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

EVALS_ROOT = "evals"  # DIR/evals/<suite>-<key>/: one eval sweep per settings key
# keys of the eval sweep itself; every other argument is an `eval` override each job composes with
SWEEP_ONLY = ("sweep_dir", "launcher", "wait", "poll_s", "job_per", "run", "checkpoints", "out_dir")


@dataclass
class PlannedEval:
    name: str
    run_dir: Path
    checkpoints: list[str]
    overrides: list[str]
    benchmarks: list[str]
    settings_key: str  # the seed group's key (with one sampling seed: that seed's settings key)
    selector: str
    seed: int  # the run's (training) seed
    seed_keys: list[str] = field(default_factory=list)  # each sampling seed's settings key, eval.seeds order
    config_hash: None = None  # merge_plan: eval jobs are identified by their folder's settings key

    def manifest_fields(self, eval_dir: Path) -> dict:
        return {"kind": "eval", "overrides": self.overrides, "run_dir": os.path.relpath(self.run_dir, eval_dir),
                "checkpoints": self.checkpoints, "benchmarks": self.benchmarks, "settings_key": self.settings_key,
                "seed_settings_keys": self.seed_keys or [self.settings_key], "selector": self.selector,
                "seed": self.seed}

    def call(self):
        from lze_bench.sweep.job import EvalJob

        return EvalJob(self.overrides, str(self.run_dir), self.checkpoints, self.settings_key)


@dataclass
class EvalPlan:
    name: str  # eval-<suite>
    sweep_dir: Path  # DIR/evals/<suite>-<key>: its manifest.json and submitit/ (submit.run_sweep's word)
    source: Path  # the training sweep (or folder of runs)
    jobs: list[PlannedEval]
    launcher: dict
    settings: dict
    key: str
    suite: str
    problems: dict[str, int]  # benchmark -> problems evaluated (after limit)
    pending: list[str] = field(default_factory=list)  # runs left out: not finished
    kind: str = "eval"
    command: str = "eval"

    @property
    def manifest_extra(self) -> dict:
        """Written into a new manifest (manifest.new_manifest): what the status table's caption names."""
        from lze_bench.evaluation.settings import describe

        return {"suite": self.suite, "settings_key": self.key,
                "settings": f"suite {self.suite}, settings {self.key}: {describe(self.settings)}"}


def sweep_overrides(args: list[str]) -> list[str]:
    """The `eval` overrides every job composes with (the sweep's own keys removed)."""
    kept = []
    for item in args:
        key = item.partition("=")[0].lstrip("+~")
        if key.split(".")[0] not in SWEEP_ONLY:
            kept.append(item)
    return kept


def plan_evals(options, args: list[str], launcher: dict) -> EvalPlan:
    from lze_bench.evaluation.runner import all_run_targets, choose_checkpoints, load_suite
    from lze_bench.evaluation.settings import group_settings, seed_settings, settings_key
    from lze_bench.rundir import is_done
    from lze_bench.sweep.manifest import runs_of

    source = Path(options.sweep_dir)
    if not source.is_dir():
        raise LzeBenchError(f"sweep_dir={options.sweep_dir!r} is not a directory; pass a sweep directory (runs/sweeps/NAME) "
                            "or a folder of run directories")
    if options.out_dir:
        raise LzeBenchError("out_dir: not with sweep_dir=; results go to each run's evals/ folder")
    _check_gpus(options, launcher)
    per_seed = seed_settings(options)
    settings = group_settings(per_seed)  # `seed` is the list of sampling seeds when there are several
    key, seed_keys = settings_key(settings), [settings_key(s) for s in per_seed]
    data = load_suite(options, per_seed[0])  # every benchmark checked before anything is submitted
    overrides = sweep_overrides(args)
    eval_dir = (source / EVALS_ROOT / f"{_safe(options.eval.name)}-{key}").resolve()
    jobs, pending, lacking = [], [], []
    for run_dir, axes in runs_of(source):
        if not is_done(run_dir):
            pending.append(run_dir.name)
            continue
        targets = all_run_targets(run_dir, _with_run(options, run_dir))
        if options.checkpoints is not None:
            targets, unknown = choose_checkpoints(targets, options.checkpoints)
            lacking += [f"{run_dir.name} has no {', '.join(unknown)}"] if unknown else []
        selector, seed = _identity(run_dir, axes)
        names = [t.checkpoint for t in targets]
        groups = [names] if options.job_per == "run" else [[name] for name in names]
        for group in groups:
            name = run_dir.name if options.job_per == "run" else f"{run_dir.name}-{group[0]}"
            jobs.append(PlannedEval(name, run_dir.resolve(), group, overrides, list(options.eval.benchmarks), key,
                                    selector, seed, seed_keys))
    if lacking:  # every run named at once, before any job is submitted
        raise LzeBenchError(f"checkpoints: {'; '.join(lacking)} (under {str(source)!r}); name checkpoints every "
                            "finished run has (`lze-bench eval sweep_dir=... --dry-run` lists them)")
    if pending:
        log.warning("%d run(s) not finished (no DONE), left out: %s; run this command again once they finish",
                    len(pending), ", ".join(pending))
    if not jobs:
        raise LzeBenchError(f"no finished run (DONE) under {str(source)!r} to evaluate"
                            + (f" ({len(pending)} still without DONE)" if pending else ""))
    return EvalPlan(name=f"eval-{options.eval.name}", sweep_dir=eval_dir, source=source, jobs=jobs, launcher=launcher,
                    settings=settings, key=key, suite=options.eval.name,
                    problems={name: len(rows) for name, rows in data.items()}, pending=pending)


def _with_run(options, run_dir: Path):
    import dataclasses

    return dataclasses.replace(options, run=str(run_dir), sweep_dir=None, checkpoints=None)


def _identity(run_dir: Path, axes: dict) -> tuple[str, int]:
    """(selector, seed) of a run, from its config.yaml (else its grid values), for the status table."""
    import yaml

    path = run_dir / "config.yaml"
    cfg = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    selector = (cfg.get("selector") or {}).get("name") or axes.get("selector") or ""
    return str(selector), int(cfg.get("seed", axes.get("seed", 0)) or 0)


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "suite"


def _check_gpus(options, launcher: dict) -> None:
    needed = options.generation.gpus_per_job
    if launcher.get("name") == "slurm" and options.device != "cpu" and int(launcher.get("gpus_per_node", 0)) < needed:
        raise LzeBenchError(
            f"launcher.gpus_per_node: an eval job with device={options.device} uses generation.tensor_parallel_size x "
            f"data_parallel_size = {needed} GPU(s); pass launcher.gpus_per_node={needed}"
        )


def main(cfg, args: list[str], dry_run: bool = False) -> None:
    """CLI entry of `lze-bench eval sweep_dir=DIR ...`."""
    from lze_bench.config import config_dict, to_objects
    from lze_bench.sweep.manifest import checkpoints_finished

    options = to_objects(cfg)
    plan = plan_evals(options, args, config_dict(cfg)["launcher"])
    if dry_run:
        from lze_bench.sweep.status import print_eval_plan
        from lze_bench.sweep.submit import sbatch_preview

        todo = [job for job in plan.jobs
                if checkpoints_finished(plan.sweep_dir, job.manifest_fields(plan.sweep_dir)) < len(job.checkpoints)]
        slurm = plan.launcher.get("name") == "slurm" and todo
        print_eval_plan(plan, sbatch_preview(plan, len(todo)) if slurm else None)
        return
    from lze_bench.evaluation.settings import describe
    from lze_bench.sweep.submit import run_sweep

    log.info("eval sweep %s: %d jobs, settings %s (%s), into %s", plan.name, len(plan.jobs), plan.key,
             describe(plan.settings), plan.sweep_dir)
    plan.sweep_dir.mkdir(parents=True, exist_ok=True)
    _record_settings(plan)
    run_sweep(plan, wait=options.wait, poll_s=options.poll_s, command_line=args)


def _record_settings(plan: EvalPlan) -> None:
    """The settings and suite beside the manifest (`settings.json`), for a reader of the folder."""
    from lze_bench.evaluation.settings import describe
    from lze_bench.rundir import atomic_write_json

    atomic_write_json(plan.sweep_dir / "settings.json", {"suite": plan.suite, "settings_key": plan.key,
                                                         "settings": plan.settings, "describe": describe(plan.settings),
                                                         "problems": plan.problems})
