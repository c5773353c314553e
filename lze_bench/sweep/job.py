"""The functions a sweep submits: one `train` run (TrainJob) or one run's evals (EvalJob), requeued on preemption or timeout.

submitit pickles a `TrainJob`, runs it on the node (or as a local process) and,
on preemption or time-out, calls `checkpoint()`; the DelayedSubmission it
returns is requeued (at most launcher.max_requeue times on time-out; Slurm
preemptions are not counted by submitit). A training job first defers Slurm's
warning signal (lze_bench.preemption): the backend finishes the step in hand,
checkpoints it and stops, and only then is submitit's requeue run; the backend
resumes from its last complete checkpoint when started again on the same
run_dir, so the requeued job is the very same call. A job checks that the config it composes
when it starts has the hash the sweep planned (see `_check_config`).

Multi-node jobs (launcher.nodes > 1) run one task per node; each task calls the
backend, which starts its own Ray cluster when it sees a Slurm job (OpenRLHF).

Each call records how it ended in `submitit/<job>_<task>_outcome.json`
(`recorded_outcome`): `sweep status` reads that JSON, never submitit's result
pickle, which it would have to unpickle (lze_bench/sweep/manifest.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import traceback
from pathlib import Path

from submitit.helpers import Checkpointable, DelayedSubmission

log = logging.getLogger(__name__)


def _job_id() -> str:
    """submitit's id of this job (Slurm job id, or the local controller's pid)."""
    try:
        from submitit import JobEnvironment

        return str(JobEnvironment().job_id)
    except RuntimeError:  # not inside a submitit job (a direct call)
        return f"pid {os.getpid()}"


def _outcome_file() -> Path | None:
    """Where this job task records its outcome (next to submitit's result pickle); None outside a submitit job."""
    try:
        from submitit import JobEnvironment

        env = JobEnvironment()
        from lze_bench.sweep.manifest import outcome_path

        return outcome_path(env.paths.folder, env.job_id, env.global_rank)
    except (RuntimeError, KeyError):  # not inside a submitit job (a direct call)
        return None


@contextlib.contextmanager
def recorded_outcome():
    """Write the outcome file when the call returns ("success") or raises ("error", with the traceback), as
    submitit pickles its result; a requeue (preemption, time-out) exits past it and records nothing."""
    from lze_bench.rundir import atomic_write_json

    path = _outcome_file()
    try:
        yield
    except Exception:
        if path is not None:
            atomic_write_json(path, {"outcome": "error", "error": traceback.format_exc()})
        raise
    if path is not None:
        atomic_write_json(path, {"outcome": "success"})


class TrainJob(Checkpointable):
    """`lze-bench train <overrides> run_dir=<run_dir>`, as a picklable callable."""

    def __init__(self, overrides: list[str], run_dir: str, config_hash: str | None = None):
        self.overrides = list(overrides)
        self.run_dir = str(run_dir)
        self.config_hash = config_hash  # as planned by the sweep; None: not checked

    def __call__(self) -> dict:
        with recorded_outcome():
            return self._train()

    def _train(self) -> dict:
        from lze_bench.rundir import is_done

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        if is_done(self.run_dir):  # finished by an earlier attempt: a requeue must not redo it
            return {"run_dir": self.run_dir, "resumed": False, "already_done": True}
        from lze_bench.backends import run_training
        from lze_bench.config import compose

        cfg = compose("train", [*self.overrides, f"run_dir={self.run_dir}"])
        self._check_config(cfg)
        resumed = (Path(self.run_dir) / "ledger.parquet").exists()
        log.info("job %s: train %s (resume=%s)", _job_id(), self.run_dir, resumed)
        from lze_bench import preemption

        with preemption.deferred(self.run_dir) as previous:  # the step in hand is saved before the requeue
            run_training(cfg)
        if preemption.requested(self.run_dir) and not is_done(self.run_dir):
            log.warning("job %s: preempted; %s saved its last step, requeueing", _job_id(), self.run_dir)
            preemption.forward(previous)
        return {"run_dir": self.run_dir, "resumed": resumed, "already_done": False}

    def _check_config(self, cfg) -> None:
        """The job composes its config when it starts, maybe hours after planning: if the code or the
        config files changed in between, its config (and its pairing with the other jobs) is not the
        one planned, so it refuses to run rather than mix two versions in one comparison."""
        from lze_bench.config import config_dict
        from lze_bench.errors import LzeBenchError
        from lze_bench.rundir import config_hash

        now = config_hash(config_dict(cfg))
        if self.config_hash is not None and now != self.config_hash:
            raise LzeBenchError(
                f"{self.run_dir}: the config composed now (hash {now}) differs from the one planned "
                f"({self.config_hash}); lze-bench or its config files changed since the sweep was submitted. "
                "Use a new sweep_dir=PATH to run the new version"
            )

    def checkpoint(self, *args, **kwargs) -> DelayedSubmission:
        """Requeue the same call; the backend resumes from its last complete checkpoint."""
        log.info("requeueing %s (it resumes from its last checkpoint)", self.run_dir)
        return DelayedSubmission(TrainJob(self.overrides, self.run_dir, self.config_hash))


class EvalJob(Checkpointable):
    """`lze-bench eval <overrides> run=<run_dir> checkpoints=[...]`, as a picklable callable.

    Requeued on preemption or time-out like TrainJob: finished (checkpoint,
    benchmark) results are skipped when it starts again. It refuses to run when
    the settings key of the config it composes differs from the planned one (a
    suite file or lze-bench changed since submission), since its results would
    land under another key than the sweep waits for.
    """

    def __init__(self, overrides: list[str], run_dir: str, checkpoints: list[str], settings_key: str):
        self.overrides = list(overrides)
        self.run_dir = str(run_dir)
        self.checkpoints = list(checkpoints)
        self.settings_key = settings_key

    def __call__(self) -> dict:
        with recorded_outcome():
            return self._evaluate()

    def _evaluate(self) -> dict:
        from lze_bench.config import compose, to_objects
        from lze_bench.errors import LzeBenchError
        from lze_bench.evaluation.runner import run_eval
        from lze_bench.evaluation.settings import group_settings, seed_settings, settings_key

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        chosen = "[" + ",".join(self.checkpoints) + "]"
        cfg = compose("eval", [*self.overrides, f"run={self.run_dir}", f"checkpoints={chosen}"])
        now = settings_key(group_settings(seed_settings(to_objects(cfg))))  # one seed: that seed's key
        if now != self.settings_key:
            raise LzeBenchError(
                f"{self.run_dir}: the eval settings composed now (key {now}) differ from the planned ones "
                f"({self.settings_key}); a suite file or lze-bench changed since submission. Run `lze-bench eval "
                "sweep_dir=...` again to plan the new settings"
            )
        log.info("job %s: eval %s %s (settings %s)", _job_id(), self.run_dir, chosen, now)
        entries = run_eval(cfg, show=False)
        return {"run_dir": self.run_dir, "checkpoints": self.checkpoints, "results": len(entries)}

    def checkpoint(self, *args, **kwargs) -> DelayedSubmission:
        """Requeue the same call; finished results are skipped when it starts again."""
        log.info("requeueing the evals of %s", self.run_dir)
        return DelayedSubmission(EvalJob(self.overrides, self.run_dir, self.checkpoints, self.settings_key))
