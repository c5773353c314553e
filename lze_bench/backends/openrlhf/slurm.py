"""The Slurm job of one backend=openrlhf run: its parameters, the submitit job, requeue (openrlhf.md §10).

Every task (one per node) runs its node's part of the Ray cluster and, on rank
0, the driver (ray_cluster.node_main), with the GPUs and Ray CPUs of the launch
plan the run recorded in `openrlhf/command.json` (plan.py), never worked out
again from the config.

Submission: `executor_parameters(cfg, plan)` are the submitit SlurmExecutor
parameters (and, rendered by submitit, the script `--dry-run` prints: script.py).
`srun` gets `--cpus-per-task` (Slurm 22.05-23.02 do not pass sbatch's value to
job steps, so Ray, every vLLM engine and every policy rank would share one core)
and `--kill-on-bad-exit=1` (a failed task ends the others).

Requeue: `OpenRLHFJob` is `submitit.helpers.Checkpointable`, so a timeout or
preemption resubmits the same call; the rerun passes `--ckpt.load_enable`
(always set) and resumes from the last DeepSpeed checkpoint, and the trainer
restores the selector and data order (context.py). The same body runs from a
plain `sbatch` script (script.py) as `python -m lze_bench.backends.openrlhf.slurm RUN_DIR`;
there Slurm's warning signal (`--signal=USR2@S`, S = `launcher.signal_delay_s`)
reaches every process of the step: Ray and the driver ignore it, rank 0 records
it as `<run_dir>/PREEMPT` (lze_bench.preemption), the trainer actor finishes and
saves the step in hand and stops (context.py), and rank 0 then requeues the
job with `scontrol requeue` while SLURM_RESTART_COUNT < `launcher.max_requeue`
(submitit's jobs: its own requeue, after the same save).

Failure is failure: a non-zero driver exit raises in `OpenRLHFJob`, so submitit
marks the job failed (`sweep status`, resubmission on rerun).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from lze_bench.backends.openrlhf.ray_cluster import NodeRole, ignore_warning_signal, job_hosts, node_main
from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)


def executor_parameters(cfg, plan) -> dict:
    """submitit SlurmExecutor parameters of one run of this backend (its launch plan, plan.py): the job submitit
    submits and, rendered by submitit's own `_make_sbatch_string`, the script `--dry-run` prints (script.py)."""
    launcher = cfg.launcher
    cpus = max(int(launcher.cpus_per_task), int(plan.ray_cpus))
    params = {
        "job_name": f"lze-{Path(str(cfg.run_dir)).name}"[:64],
        "nodes": int(plan.nodes),
        "ntasks_per_node": 1,
        "gpus_per_node": int(plan.gpus_per_node),
        "cpus_per_task": int(launcher.cpus_per_task),
        "time": int(launcher.timeout_min),
        "signal_delay_s": int(launcher.signal_delay_s),  # --signal=USR2@S: the step in hand is saved (preemption.py)
        "exclusive": True,
        "setup": list(launcher.setup),
        "additional_parameters": {"requeue": True, **dict(launcher.additional_parameters)},
        # job steps get the task's CPUs (Slurm 22.05-23.02 give them one otherwise); a failed task ends the rest
        "srun_args": [f"--cpus-per-task={cpus}", "--kill-on-bad-exit=1"],
    }
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(launcher, key):
            params[key] = str(getattr(launcher, key))
    if launcher.mem_gb:
        params["mem"] = f"{int(launcher.mem_gb)}GB"
    return params


try:  # submitit is a core dependency; the class is defined only when it imports
    import submitit

    class OpenRLHFJob(submitit.helpers.Checkpointable):
        """The submitit callable: every task runs `node_main` with the run's recorded launch plan; requeue
        resubmits the same call.

        A non-zero driver exit raises, so submitit reports the job FAILED (not COMPLETED).
        """

        def __call__(self, run_dir: str) -> int:
            from lze_bench import preemption
            from lze_bench.backends.openrlhf.plan import load_plan
            from lze_bench.rundir import is_done

            plan = load_plan(run_dir)
            role = NodeRole.from_env(plan.gpus_per_node, plan.ray_cpus)
            if role.rank > 0:  # submitit's handler ignores the signal on other ranks; rank 0 decides
                return self._node(run_dir, role)
            with preemption.deferred(run_dir) as previous:  # the trainer saves the step in hand first
                code = node_main(run_dir, role, peers=job_hosts()[1:])
            if preemption.requested(run_dir) and not is_done(run_dir):
                log.warning("job %s: preempted; %s saved its last step, requeueing", role.job_id, run_dir)
                preemption.forward(previous)
            return self._check(code, role)

        def _node(self, run_dir: str, role) -> int:
            return self._check(node_main(run_dir, role, peers=job_hosts()[1:]), role)

        @staticmethod
        def _check(code: int, role) -> int:
            if code != 0:
                raise LzeBenchError(f"the OpenRLHF driver exited with code {code} (job {role.job_id}); "
                                    "rerun the same command to resume")
            return code

except ModuleNotFoundError:  # pragma: no cover
    OpenRLHFJob = None


def requeue(job_id: str, restarts: int, max_requeue: int, run=None) -> bool:
    """`scontrol requeue JOB` while restarts < max_requeue; True when requeued."""
    if restarts >= max_requeue:
        log.warning("job %s: time limit or preemption after %d requeue(s) (launcher.max_requeue=%d); not requeued",
                    job_id, restarts, max_requeue)
        return False
    (run or subprocess.run)(["scontrol", "requeue", str(job_id)], check=False)
    log.warning("job %s: requeued (%d/%d)", job_id, restarts + 1, max_requeue)
    return True


def requeue_if_preempted(run_dir: str | Path, role: NodeRole, max_requeue: int) -> bool:
    """After the driver returned on rank 0: when Slurm's warning came (lze_bench.preemption, recorded while the
    trainer saved its step) and the run is not done, `scontrol requeue` the job; True when requeued."""
    from lze_bench.preemption import requested
    from lze_bench.rundir import is_done

    if role.rank != 0 or not requested(run_dir) or is_done(run_dir):
        return False
    return requeue(role.job_id, role.attempt, max_requeue)


def main(argv: list[str] | None = None) -> int:
    """`python -m lze_bench.backends.openrlhf.slurm RUN_DIR` (one srun task per node; GPUs and Ray CPUs from the
    run's launch plan)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m lze_bench.backends.openrlhf.slurm RUN_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    from lze_bench.backends.openrlhf.context import load_run_config
    from lze_bench.backends.openrlhf.plan import load_plan

    from lze_bench import preemption

    cfg = load_run_config(Path(args[0]) / "config.yaml")
    plan = load_plan(args[0])
    role = NodeRole.from_env(plan.gpus_per_node, plan.ray_cpus)
    if role.rank > 0:
        ignore_warning_signal()  # rank 0 acts on it
        return node_main(args[0], role, peers=job_hosts()[1:])
    with preemption.deferred(args[0]):  # the trainer finishes and saves its step; then the job is requeued
        code = node_main(args[0], role, peers=job_hosts()[1:])
    if requeue_if_preempted(args[0], role, int(cfg.launcher.max_requeue)):
        return 128 + int(preemption.SIGNAL)
    return code


if __name__ == "__main__":
    sys.exit(main())
