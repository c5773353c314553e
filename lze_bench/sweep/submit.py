"""Submit a sweep's jobs with submitit and wait for them (training runs, or the eval jobs of
`lze-bench eval sweep_dir=`: a plan's jobs say what they run, `job.call()`).

* `launcher=slurm`: one Slurm job array through `sbatch` (submitit's SlurmExecutor),
  `%array_parallelism` jobs at once, requeued on preemption/time-out by
  submitit's checkpoint protocol (job.TrainJob.checkpoint).
* `launcher=local`: submitit's LocalExecutor, one process per job. It starts
  every job it is given at once, so this module hands it at most
  `launcher.array_parallelism` jobs at a time and submits the next as one ends;
  hence local sweeps wait (`wait=false` is refused).

Re-running a sweep skips `done` jobs, leaves `queued`/`running` ones alone and
(re)submits `new` and `failed` ones; each job writes only its own run dir, so a
failure never touches another's results. Each job gets OMP/MKL threads =
launcher.cpus_per_task (torch would otherwise use every core in every job).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import time
from pathlib import Path

from lze_bench import env
from lze_bench.errors import LzeBenchError
from lze_bench.sweep.manifest import (
    FINAL,
    LEFT_SCHEDULER,
    SUBMITIT,
    derive_status,
    load_manifest,
    merge_plan,
    new_manifest,
    run_dir_of,
    save_manifest,
)
from lze_bench.sweep.scheduler import scheduler_states
from lze_bench.sweep.status import SweepDisplay

log = logging.getLogger(__name__)


def slurm_parameters(launcher: dict, name: str) -> dict:
    """SlurmExecutor parameters (sbatch flags) from the launcher config."""
    params = {
        "job_name": f"lze-{name}",
        "time": int(launcher["timeout_min"]),
        "nodes": int(launcher["nodes"]),
        "ntasks_per_node": 1,  # one training process per node; the backend spreads over GPUs
        "cpus_per_task": int(launcher["cpus_per_task"]),
        "array_parallelism": int(launcher["array_parallelism"]),
        "signal_delay_s": int(launcher.get("signal_delay_s", 180)),  # --signal=USR2@S (lze_bench.preemption)
        "setup": [*thread_exports(launcher), *launcher.get("setup", [])],
        "additional_parameters": dict(launcher.get("additional_parameters") or {}),
        # the job step gets the task's CPUs (Slurm 22.05-23.02 give it one otherwise); a failed task ends the rest
        "srun_args": [f"--cpus-per-task={int(launcher['cpus_per_task'])}", "--kill-on-bad-exit=1"],
    }
    for key in ("partition", "account", "qos", "constraint"):
        if launcher.get(key):
            params[key] = str(launcher[key])
    if int(launcher["gpus_per_node"]) > 0:
        params["gpus_per_node"] = int(launcher["gpus_per_node"])
    if launcher.get("mem_gb"):
        params["mem"] = f"{int(launcher['mem_gb'])}GB"
    return params


def thread_exports(launcher: dict) -> list[str]:
    n = int(launcher["cpus_per_task"])
    return [f"export OMP_NUM_THREADS={n}", f"export MKL_NUM_THREADS={n}"]


def sbatch_preview(plan, count: int) -> str:
    """The sbatch script submitit would write for an array of `count` jobs (nothing is submitted)."""
    from submitit.slurm.slurm import _make_sbatch_string  # submitit's own renderer, so the preview is exact

    folder = plan.sweep_dir / SUBMITIT
    command = " ".join([shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))])
    return _make_sbatch_string(command=command, folder=folder, map_count=count, **slurm_parameters(plan.launcher, plan.name))


def make_executor(plan):
    import submitit

    launcher = plan.launcher
    folder = plan.sweep_dir / SUBMITIT
    max_requeue = int(launcher["max_requeue"])
    if launcher["name"] == "slurm":
        try:
            executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=max_requeue)
        except RuntimeError as exc:
            raise LzeBenchError(f"launcher=slurm: {exc} (no srun on PATH); use launcher=local here") from exc
        executor.update_parameters(**slurm_parameters(launcher, plan.name))
        return executor
    if int(launcher["nodes"]) != 1:
        raise LzeBenchError("launcher.nodes: launcher=local runs on this machine only; use nodes=1 or launcher=slurm")
    executor = submitit.LocalExecutor(folder=folder, max_num_timeout=max_requeue)
    executor.update_parameters(timeout_min=int(launcher["timeout_min"]), gpus_per_node=int(launcher["gpus_per_node"]),
                               signal_delay_s=int(launcher.get("signal_delay_s", 180)))
    return executor


@contextlib.contextmanager
def job_threads(launcher: dict):
    """Local jobs inherit this process's environment: set their thread counts for the submission only."""
    n = str(int(launcher["cpus_per_task"]))
    with env.temporarily({env.OMP_NUM_THREADS: n, env.MKL_NUM_THREADS: n}):
        yield


# a Slurm job being requeued (preemption, time limit) can be missing from squeue for a moment: a live job that
# vanishes without a result is asked about once more after this pause before it counts as failed
VANISHED_RECHECK_S = 3.0


def refresh(plan, data: dict, kind: str, recheck_s: float = VANISHED_RECHECK_S) -> dict[str, tuple[str, str | None]]:
    """Derive every job's status now and record it in the manifest (in memory)."""
    was_live = {name for name, e in data["jobs"].items() if e.get("status") in ("queued", "running")}
    live = scheduler_states(kind, [e["job_id"] for e in data["jobs"].values() if e.get("job_id")])
    statuses = {name: derive_status(plan.sweep_dir, entry, live) for name, entry in data["jobs"].items()}
    vanished = [name for name in was_live if statuses[name] == ("failed", LEFT_SCHEDULER)]
    if vanished and recheck_s > 0:
        time.sleep(recheck_s)
        again = scheduler_states(kind, [data["jobs"][name]["job_id"] for name in vanished])
        for name in vanished:
            statuses[name] = derive_status(plan.sweep_dir, data["jobs"][name], again)
    for name, (status, error) in statuses.items():
        data["jobs"][name]["status"], data["jobs"][name]["error"] = status, error
    return statuses


def submit(executor, plan, data: dict, names: list[str]) -> None:
    by_name = {job.name: job for job in plan.jobs}
    calls = [by_name[n].call() for n in names]  # job.TrainJob, or job.EvalJob for an eval sweep
    for name in names:
        run_dir_of(plan.sweep_dir, data["jobs"][name]).mkdir(parents=True, exist_ok=True)
    with job_threads(plan.launcher):
        if len(calls) > 1:
            with executor.batch():
                jobs = [executor.submit(call) for call in calls]
        else:
            jobs = [executor.submit(calls[0])]
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    for name, job in zip(names, jobs):
        entry = data["jobs"][name]
        entry.update(job_id=str(job.job_id), status="queued", error=None, submitted=now)
        entry["attempts"] = int(entry.get("attempts", 0)) + 1
        log.info("submitted %s as job %s", name, job.job_id)
    save_manifest(plan.sweep_dir, data)


def run_sweep(plan, wait: bool = True, poll_s: float = 5.0, command_line: list[str] = ()) -> dict:
    """Submit what is not done or running; with `wait`, block until all jobs end. Returns the manifest.

    One process per sweep directory, for the whole call (runlock.py): two pollers would both resubmit
    a job they see fail and overwrite each other's manifest. `sweep status` only reads, so it is not locked."""
    from lze_bench.runlock import hold_run_dir

    kind = plan.launcher["name"]
    if kind == "local" and not wait:
        raise LzeBenchError("wait=false needs launcher=slurm: local jobs are throttled by this process; use wait=true")
    with hold_run_dir(plan.sweep_dir, "sweep", key="", name=f"sweep directory {str(plan.sweep_dir)!r}"):
        return _submit_and_wait(plan, kind, wait, poll_s, command_line)


def _submit_and_wait(plan, kind: str, wait: bool, poll_s: float, command_line) -> dict:
    data = merge_plan(load_manifest(plan.sweep_dir) or new_manifest(plan, list(command_line)), plan)
    statuses = refresh(plan, data, kind)
    todo = [j.name for j in plan.jobs if statuses[j.name][0] in ("new", "failed")]
    skipped = [j.name for j in plan.jobs if statuses[j.name][0] == "done"]
    if skipped:
        log.info("%d job(s) already done, skipped: %s", len(skipped), ", ".join(skipped))
    save_manifest(plan.sweep_dir, data)
    executor = make_executor(plan) if todo else None
    parallel = int(plan.launcher["array_parallelism"]) if kind == "local" else len(todo)
    display = SweepDisplay(plan.sweep_dir, data) if wait else None
    try:
        with display or contextlib.nullcontext():
            while True:
                active = sum(1 for n in data["jobs"] if data["jobs"][n]["status"] in ("queued", "running"))
                batch = startable(plan, data, todo, max(0, parallel - active)) if kind == "local" else todo
                todo = [name for name in todo if name not in batch]
                if batch:
                    submit(executor, plan, data, batch)
                if not wait:
                    break
                display.update(data)
                if not todo and all(data["jobs"][j.name]["status"] in FINAL for j in plan.jobs):
                    break
                _pause(poll_s, kind, data)
                refresh(plan, data, kind)
                save_manifest(plan.sweep_dir, data)
    except KeyboardInterrupt:
        _interrupted(plan, data, kind)
        raise
    save_manifest(plan.sweep_dir, data)
    if wait:
        _finish(plan, data)
    return data


def startable(plan, data: dict, todo: list[str], free: int) -> list[str]:
    """Up to `free` jobs of `todo`, in order, for the free slots of a local sweep, holding back a job whose
    `build_group` has a job running and none finished: the first builds the group's cached artifact (ASTRAL's
    head, ~2 min) and the others would only wait on its lock, each holding a slot another job could use."""
    group_of = {job.name: getattr(job, "build_group", "") for job in plan.jobs}  # eval jobs build nothing
    status = {name: entry["status"] for name, entry in data["jobs"].items()}
    busy = {group_of[n] for n, s in status.items() if s in ("queued", "running") and group_of.get(n)}
    built = {group_of[n] for n, s in status.items() if s == "done" and group_of.get(n)}
    chosen = []
    for name in todo:
        if len(chosen) == free:
            break
        group = group_of.get(name, "")
        if group and group in busy and group not in built:
            continue
        chosen.append(name)
        if group:
            busy.add(group)
    return chosen


LOCAL_CHECK_S = 0.2


def _pause(poll_s: float, kind: str, data: dict) -> None:
    """Wait `poll_s` before the next status check; a local sweep stops waiting as soon as one of its running jobs
    (this process's children) ends, so the next job starts then rather than up to `poll_s` later: with short jobs
    that idle slot adds up (the quickstart's 39 jobs of about half a minute each lost about 2.5 s each at
    poll_s=5)."""
    deadline = time.monotonic() + poll_s
    pids = [int(e["job_id"]) for e in data["jobs"].values()
            if kind == "local" and e.get("status") in ("queued", "running") and str(e.get("job_id", "")).isdigit()]
    while pids and time.monotonic() < deadline:
        if any(_child_ended(pid) for pid in pids):
            return
        time.sleep(min(LOCAL_CHECK_S, max(0.0, deadline - time.monotonic())))
    time.sleep(max(0.0, deadline - time.monotonic()))


def _child_ended(pid: int) -> bool:
    """True when child `pid` has ended; `WNOWAIT` leaves it for submitit to reap. A pid that is not this process's
    child (a job a previous sweep process started) is left to the poll interval."""
    if not hasattr(os, "waitid"):  # not on this platform: the plain poll interval
        return False
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


def _interrupted(plan, data: dict, kind: str) -> None:
    """Ctrl-C: local jobs are this process's children: stop them (a re-run resumes them)."""
    if kind == "local":
        import signal

        for entry in data["jobs"].values():
            if entry["status"] in ("queued", "running") and entry.get("job_id"):
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(entry["job_id"]), signal.SIGINT)
    save_manifest(plan.sweep_dir, data)
    log.warning("interrupted; run the same command again to resume (finished jobs are kept)")


def _finish(plan, data: dict) -> None:
    jobs = [data["jobs"][j.name] for j in plan.jobs]
    failed = [j.name for j in plan.jobs if data["jobs"][j.name]["status"] == "failed"]
    if failed:
        raise LzeBenchError(
            f"{len(failed)} of {len(jobs)} jobs failed ({', '.join(failed)}); see `lze-bench sweep status "
            f"{plan.sweep_dir}`; run the same command again to resubmit them (finished jobs are kept)"
        )
    log.info("sweep %s: %d jobs done in %s", plan.name, len(jobs), Path(plan.sweep_dir))
