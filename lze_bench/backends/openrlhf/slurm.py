"""The Slurm job body for backend=openrlhf: Ray head and workers, the driver, teardown (openrlhf.md §10).

One task per node. Rank 0 starts the Ray head on its node, waits until all
nodes joined, runs the driver command saved at preparation time
(`openrlhf/command.json`, exactly what `--dry-run` printed) with
LZE_RAY_ADDRESS pointing at the head, then writes a done marker on the shared
filesystem and stops Ray. Other ranks run `ray start --address ... --block`
and return once the marker appears (a lost head would otherwise make them fail
and the job count as failed). Ports derive from the job id so jobs sharing a
node do not collide; Ray's temp dir is short and node-local (socket paths must
stay under ~107 characters).

Requeue: `OpenRLHFJob` is `submitit.helpers.Checkpointable`, so a timeout or
preemption resubmits the same call; the rerun passes `--ckpt.load_enable`
(always set) and resumes from the last DeepSpeed checkpoint, and the trainer
restores the selector and data order (context.py). The same body runs from a
plain `sbatch` script (script.py) as `python -m lze_bench.backends.openrlhf.slurm`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

RAY_BASE_PORT = 20000
NODE_WAIT_S = 600.0
POLL_S = 10.0


@dataclass(frozen=True)
class NodeRole:
    rank: int
    num_nodes: int
    head_host: str
    job_id: str
    attempt: int  # SLURM_RESTART_COUNT: 0, then 1, 2, ... after requeues
    gpus: int
    cpus: int

    @property
    def port(self) -> int:
        digits = "".join(c for c in self.job_id if c.isdigit()) or "0"
        return RAY_BASE_PORT + int(digits) % 10000 * 4  # 4 ports per job (below)

    @property
    def temp_dir(self) -> str:
        return f"/tmp/ray_{self.job_id}"

    @classmethod
    def from_env(cls, gpus: int) -> "NodeRole":
        env = os.environ
        if "SLURM_PROCID" not in env:
            raise LzeBenchError("not inside a Slurm job step (SLURM_PROCID unset); submit with launcher=slurm")
        hosts = subprocess.run(["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]], capture_output=True,
                               text=True, check=True).stdout.split()
        return cls(
            rank=int(env["SLURM_PROCID"]),
            num_nodes=int(env.get("SLURM_NNODES", len(hosts) or 1)),
            head_host=hosts[0],
            job_id=env.get("SLURM_JOB_ID", "0"),
            attempt=int(env.get("SLURM_RESTART_COUNT", "0") or 0),
            gpus=int(gpus),
            cpus=int(env.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1),
        )


def _common(role: NodeRole, port: int) -> list[str]:
    return [f"--num-gpus={role.gpus}", f"--num-cpus={role.cpus}", "--disable-usage-stats",
            f"--temp-dir={role.temp_dir}", f"--dashboard-agent-listen-port={port + 2}",
            f"--metrics-export-port={port + 3}"]


def head_command(role: NodeRole, head_ip: str) -> list[str]:
    return ["ray", "start", "--head", f"--node-ip-address={head_ip}", f"--port={role.port}",
            f"--ray-client-server-port={role.port + 1}", "--include-dashboard=false", *_common(role, role.port)]


def worker_command(role: NodeRole, head_ip: str) -> list[str]:
    return ["ray", "start", f"--address={head_ip}:{role.port}", "--block", *_common(role, role.port)]


STOP_COMMAND = ["ray", "stop"]


def done_marker(run_dir: str | Path, role: NodeRole) -> Path:
    return Path(run_dir) / "openrlhf" / "slurm" / f"done-{role.job_id}-{role.attempt}"


def load_driver_argv(run_dir: str | Path) -> list[str]:
    path = Path(run_dir) / "openrlhf" / "command.json"
    if not path.exists():
        raise LzeBenchError(f"{path} is missing; prepare the run with `lze-bench train backend=openrlhf` first")
    return list(json.loads(path.read_text())["argv"])


def node_main(run_dir: str | Path, role: NodeRole) -> int:
    """Run this node's part of the job; returns the driver's exit code on rank 0, 0 elsewhere."""
    head_ip = socket.gethostbyname(role.head_host)
    marker = done_marker(run_dir, role)
    if role.rank > 0:
        return _worker(role, head_ip, marker)
    subprocess.run(head_command(role, head_ip), check=True)
    try:
        _wait_for_nodes(f"{head_ip}:{role.port}", role.num_nodes)
        env = dict(os.environ, LZE_RAY_ADDRESS=f"{head_ip}:{role.port}")
        code = subprocess.run(load_driver_argv(run_dir), env=env, check=False).returncode
    finally:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("")
        subprocess.run(STOP_COMMAND, check=False)
    return code


def _worker(role: NodeRole, head_ip: str, marker: Path) -> int:
    time.sleep(POLL_S)  # let the head come up first
    proc = subprocess.Popen(worker_command(role, head_ip))
    try:
        while not marker.exists():
            time.sleep(POLL_S)
    finally:
        subprocess.run(STOP_COMMAND, check=False)
        proc.wait(timeout=120)
    return 0


def _wait_for_nodes(address: str, num_nodes: int) -> None:
    import ray

    deadline = time.monotonic() + NODE_WAIT_S
    ray.init(address=address)
    try:
        while True:
            alive = sum(1 for node in ray.nodes() if node.get("Alive"))
            if alive >= num_nodes:
                return
            if time.monotonic() > deadline:
                raise LzeBenchError(f"only {alive} of {num_nodes} Ray nodes joined within {NODE_WAIT_S:.0f} s")
            time.sleep(POLL_S)
    finally:
        ray.shutdown()


def executor_parameters(cfg, folder: str | Path) -> dict:
    """submitit AutoExecutor parameters for one run of this backend (also the script's #SBATCH lines)."""
    from lze_bench.backends.openrlhf.command import cluster_shape

    launcher = cfg.launcher
    nodes, gpus = cluster_shape(cfg)
    params = {
        "name": f"lze-{Path(str(cfg.run_dir)).name}"[:64],
        "nodes": nodes,
        "tasks_per_node": 1,
        "gpus_per_node": gpus,
        "cpus_per_task": launcher.cpus_per_task,
        "timeout_min": launcher.timeout_min,
        "slurm_exclusive": True,
        "slurm_setup": list(launcher.setup),
        "slurm_additional_parameters": {"requeue": True, **dict(launcher.additional_parameters)},
    }
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(launcher, key):
            params[f"slurm_{key}"] = getattr(launcher, key)
    if launcher.mem_gb:
        params["mem_gb"] = launcher.mem_gb
    params["folder"] = str(folder)
    return params


try:  # submitit is a core dependency; the class is defined only when it imports
    import submitit

    class OpenRLHFJob(submitit.helpers.Checkpointable):
        """The submitit callable: every task runs `node_main`; requeue resubmits the same call."""

        def __call__(self, run_dir: str, gpus: int) -> int:
            return node_main(run_dir, NodeRole.from_env(gpus))

except ModuleNotFoundError:  # pragma: no cover
    OpenRLHFJob = None


def main(argv: list[str] | None = None) -> int:
    """`python -m lze_bench.backends.openrlhf.slurm RUN_DIR GPUS_PER_NODE` (one srun task per node)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m lze_bench.backends.openrlhf.slurm RUN_DIR GPUS_PER_NODE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    return node_main(args[0], NodeRole.from_env(int(args[1])))


if __name__ == "__main__":
    sys.exit(main())
