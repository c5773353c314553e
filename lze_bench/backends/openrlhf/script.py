"""The Slurm job script of one backend=openrlhf run, as text (`train --dry-run` with launcher=slurm).

Rendered by submitit's own `_make_sbatch_string` from the same parameters the
submission uses (slurm.executor_parameters), so the #SBATCH lines and the
`srun` line (with its `--cpus-per-task` and `--kill-on-bad-exit`) are exactly
submitit's. The one difference from the submitted job is the command: submitit
runs its pickled `OpenRLHFJob`, this script runs the same per-node body as a
module (`python -m lze_bench.backends.openrlhf.slurm RUN_DIR`, which reads the
GPUs and Ray CPUs from the launch plan in the run's `openrlhf/command.json`), so the
printed script can also be given to `sbatch` as it is once the run is prepared. The commands each node
runs are listed in comments, rendered by the very functions ray_cluster.py
executes, with the head address and the job-id-derived port left as
placeholders (they exist only at run time).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from lze_bench.backends.openrlhf.command import format_command
from lze_bench.backends.openrlhf.ray_cluster import (RAY_BASE_PORT, NodeRole, head_command, threads_per_process,
                                                     worker_command)


def job_script(cfg, plan, run_dir: Path, driver_argv: list[str], python: str = "python") -> str:
    """The full sbatch script text for this run and its launch plan (plan.py)."""
    from submitit.slurm.slurm import _make_sbatch_string

    from lze_bench.backends.openrlhf.slurm import executor_parameters

    log_dir = run_dir / "openrlhf" / "slurm"
    params = executor_parameters(cfg, plan)
    nodes, gpus = plan.nodes, plan.gpus_per_node
    role = NodeRole(rank=0, num_nodes=nodes, head_host="<head>", job_id="$SLURM_JOB_ID", attempt=0, gpus=gpus,
                    cpus=max(int(params["cpus_per_task"]), plan.ray_cpus))
    placeholders = {str(role.port + k): f"<port+{k}>" for k in range(1, 4)}
    placeholders[str(role.port)] = "<port>"

    def shown(argv: list[str]) -> str:
        text = " ".join(shlex.quote(a) for a in argv)
        for value, name in sorted(placeholders.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(value, name)
        return text

    notes = [
        f"# One task per node (slurm.node_main). <port> = {RAY_BASE_PORT} + 4 x (job id mod 3192), <head> = first "
        "node, <head-ip> its non-loopback address.",
        f"# Ray and the driver run with OMP_NUM_THREADS={threads_per_process(role)} (CPUs / (2 x GPUs)).",
        f"#   rank 0:  {shown(head_command(role, '<head-ip>'))}",
        f"#            waits for {nodes} Ray node(s), runs the driver below with LZE_RAY_ADDRESS=<head-ip>:<port>,",
        f"#            writes {log_dir}/done-$SLURM_JOB_ID-<restart count>, then SIGTERM to its own `ray start`",
        f"#   rank>0:  {shown(worker_command(role, '<head-ip>'))}",
        "#            until the done marker appears (or the head is gone: exits non-zero), then SIGTERM to its own",
        "#            `ray start` (never `ray stop`)",
        f"# USR2 ({int(cfg.launcher.signal_delay_s)} s before a time limit/preemption): rank 0 writes "
        "<run_dir>/PREEMPT, the trainer saves the step in hand and stops,",
        f"#   then rank 0 runs `scontrol requeue $SLURM_JOB_ID` while the restart count "
        f"< launcher.max_requeue={int(cfg.launcher.max_requeue)}",
        "# Driver (from openrlhf/command.json):",
        *("#   " + line for line in format_command(driver_argv).splitlines()),
    ]
    command = f"{shlex.quote(python)} -m lze_bench.backends.openrlhf.slurm {shlex.quote(str(run_dir))}"
    script = _make_sbatch_string(command=command, folder=log_dir, **params)
    head, _, tail = script.partition("\n# command\n")
    return head + "\n" + "\n".join(notes) + "\n\n# command\n" + tail
