"""The Slurm job script of one backend=openrlhf run, as text (`train --dry-run` with launcher=slurm).

A runnable `sbatch` script with the same resources submitit requests
(slurm.executor_parameters) and the same per-node body (slurm.node_main, one
srun task per node). The commands each node runs are listed in comments,
rendered by the very functions slurm.py executes, with the head address and
the job-id-derived port left as placeholders (they exist only at run time).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from lze_bench.backends.openrlhf.command import format_command
from lze_bench.backends.openrlhf.slurm import RAY_BASE_PORT, NodeRole, head_command, worker_command

SBATCH_KEYS = {  # submitit parameter -> #SBATCH option
    "name": "job-name",
    "nodes": "nodes",
    "tasks_per_node": "ntasks-per-node",
    "gpus_per_node": "gpus-per-node",
    "cpus_per_task": "cpus-per-task",
    "slurm_partition": "partition",
    "slurm_account": "account",
    "slurm_qos": "qos",
    "slurm_constraint": "constraint",
}


def sbatch_lines(params: dict, log_dir: Path) -> list[str]:
    lines = [f"#SBATCH --{SBATCH_KEYS[key]}={params[key]}" for key in SBATCH_KEYS if key in params]
    if "mem_gb" in params:
        lines.append(f"#SBATCH --mem={params['mem_gb']}G")
    lines.append(f"#SBATCH --time={params['timeout_min']}")
    if params.get("slurm_exclusive"):
        lines.append("#SBATCH --exclusive")
    lines.append(f"#SBATCH --output={log_dir}/%j_%t.out")
    lines.append("#SBATCH --signal=USR2@90")  # submitit's default warning before the time limit
    for key, value in params.get("slurm_additional_parameters", {}).items():
        option = key.replace("_", "-")
        lines.append(f"#SBATCH --{option}" if value is True else f"#SBATCH --{option}={value}")
    return lines


def job_script(cfg, run_dir: Path, driver_argv: list[str], python: str = "python") -> str:
    """The full sbatch script text."""
    from lze_bench.backends.openrlhf.slurm import executor_parameters

    log_dir = run_dir / "openrlhf" / "slurm"
    params = executor_parameters(cfg, log_dir)
    nodes, gpus = params["nodes"], params["gpus_per_node"]
    from lze_bench.backends.openrlhf.placement import ray_cpus

    role = NodeRole(rank=0, num_nodes=nodes, head_host="<head>", job_id="$SLURM_JOB_ID", attempt=0, gpus=gpus,
                    cpus=max(int(params["cpus_per_task"]), ray_cpus(cfg)))
    placeholders = {str(role.port + k): f"<port+{k}>" for k in range(1, 4)}
    placeholders[str(role.port)] = "<port>"

    def shown(argv: list[str]) -> str:
        text = " ".join(shlex.quote(a) for a in argv)
        for value, name in sorted(placeholders.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(value, name)
        return text

    body = [
        "#!/bin/bash",
        *sbatch_lines(params, log_dir),
        "set -euo pipefail",
        *params.get("slurm_setup", []),
        "",
        f"# One task per node (slurm.node_main). <port> = {RAY_BASE_PORT} + 4 x (job id mod 10000), <head> = first node.",
        f"#   rank 0:  {shown(head_command(role, '<head-ip>'))}",
        f"#            waits for {nodes} Ray node(s), runs the driver below with LZE_RAY_ADDRESS=<head-ip>:<port>,",
        f"#            writes {log_dir}/done-$SLURM_JOB_ID-<restart count>, then SIGTERM to its own `ray start`",
        f"#   rank>0:  {shown(worker_command(role, '<head-ip>'))}",
        "#            until the done marker appears, then SIGTERM to its own `ray start` (never `ray stop`)",
        f"# USR2 (time limit/preemption): rank 0 runs `scontrol requeue $SLURM_JOB_ID` while the restart count "
        f"< launcher.max_requeue={int(cfg.launcher.max_requeue)}",
        "# Driver (from openrlhf/command.json):",
        *("#   " + line for line in format_command(driver_argv).splitlines()),
        "",
        f"srun --nodes={nodes} --ntasks-per-node=1 {shlex.quote(python)} -m lze_bench.backends.openrlhf.slurm "
        f"{shlex.quote(str(run_dir))} {gpus}",
    ]
    return "\n".join(body) + "\n"
