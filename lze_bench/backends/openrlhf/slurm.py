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
plain `sbatch` script (script.py) as `python -m lze_bench.backends.openrlhf.slurm`;
there Slurm's warning signal (`--signal=USR2@90`) reaches this process, which
requeues the job with `scontrol requeue` while SLURM_RESTART_COUNT <
`launcher.max_requeue` (submitit does the same for its own jobs).

Failure is failure: a non-zero driver exit raises in `OpenRLHFJob`, so submitit
marks the job failed (`sweep status`, resubmission on rerun).

Ray runs from the job's own interpreter (`sys.executable -m ray.scripts.scripts`,
never a `ray` found on PATH) with `--block` on every node, and is torn down by
terminating those processes only: Ray's own shutdown hook then stops exactly
this cluster's daemons. `ray stop` is never called (it kills every Ray process
of the user on the node, including another job's). Ray's CPU count is at least
what OpenRLHF reserves (placement.ray_cpus), so its placement groups fit.
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
STOP_WAIT_S = 60.0
RAY_CLI = (sys.executable, "-m", "ray.scripts.scripts")  # the job's interpreter, not PATH


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
    def from_env(cls, gpus: int, min_cpus: int = 1) -> "NodeRole":
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
            cpus=max(int(env.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1), int(min_cpus)),
        )


def _common(role: NodeRole, port: int) -> list[str]:
    return [f"--num-gpus={role.gpus}", f"--num-cpus={role.cpus}", "--disable-usage-stats",
            f"--temp-dir={role.temp_dir}", f"--dashboard-agent-listen-port={port + 2}",
            f"--metrics-export-port={port + 3}"]


def head_command(role: NodeRole, head_ip: str) -> list[str]:
    return [*RAY_CLI, "start", "--head", "--block", f"--node-ip-address={head_ip}", f"--port={role.port}",
            f"--ray-client-server-port={role.port + 1}", "--include-dashboard=false", *_common(role, role.port)]


def worker_command(role: NodeRole, head_ip: str) -> list[str]:
    return [*RAY_CLI, "start", f"--address={head_ip}:{role.port}", "--block", *_common(role, role.port)]


def stop_ray(proc: subprocess.Popen) -> None:
    """Stop this job's Ray node: SIGTERM to its `ray start --block` (Ray's hook stops its daemons)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    head = subprocess.Popen(head_command(role, head_ip))
    try:
        _wait_for_nodes(f"{head_ip}:{role.port}", role.num_nodes, head)
        env = dict(os.environ, LZE_RAY_ADDRESS=f"{head_ip}:{role.port}")
        code = subprocess.run(load_driver_argv(run_dir), env=env, check=False).returncode
    finally:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("")
        stop_ray(head)
    return code


def _worker(role: NodeRole, head_ip: str, marker: Path) -> int:
    time.sleep(POLL_S)  # let the head come up first
    proc = subprocess.Popen(worker_command(role, head_ip))
    try:
        while not marker.exists():
            time.sleep(POLL_S)
    finally:
        stop_ray(proc)
    return 0


def _wait_for_nodes(address: str, num_nodes: int, head: subprocess.Popen | None = None) -> None:
    import ray

    deadline = time.monotonic() + NODE_WAIT_S
    while True:  # the head starts in the background (`--block`); connect once its GCS answers
        if head is not None and head.poll() is not None:
            raise LzeBenchError(f"the Ray head exited with code {head.returncode} before the driver started")
        try:
            ray.init(address=address)
            break
        except ConnectionError:
            if time.monotonic() > deadline:
                raise LzeBenchError(f"the Ray head at {address} did not answer within {NODE_WAIT_S:.0f} s")
            time.sleep(POLL_S)
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
        "max_requeue": int(launcher.max_requeue),  # submitit: AutoExecutor(slurm_max_num_timeout=...)
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
        """The submitit callable: every task runs `node_main`; requeue resubmits the same call.

        A non-zero driver exit raises, so submitit reports the job FAILED (not COMPLETED).
        """

        def __call__(self, run_dir: str, gpus: int, cpus: int = 1) -> int:
            role = NodeRole.from_env(gpus, cpus)
            code = node_main(run_dir, role)
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


def install_requeue_handler(role: NodeRole, max_requeue: int) -> None:
    """On Slurm's warning signal (USR2), rank 0 requeues the job; every rank then exits (its Ray stops)."""
    import signal

    def handler(signum, frame):
        if role.rank == 0:
            requeue(role.job_id, role.attempt, max_requeue)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGUSR2, handler)


def main(argv: list[str] | None = None) -> int:
    """`python -m lze_bench.backends.openrlhf.slurm RUN_DIR GPUS_PER_NODE` (one srun task per node)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m lze_bench.backends.openrlhf.slurm RUN_DIR GPUS_PER_NODE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    from lze_bench.backends.openrlhf.context import load_run_config
    from lze_bench.backends.openrlhf.placement import ray_cpus

    cfg = load_run_config(Path(args[0]) / "config.yaml")
    role = NodeRole.from_env(int(args[1]), ray_cpus(cfg))
    install_requeue_handler(role, int(cfg.launcher.max_requeue))
    return node_main(args[0], role)


if __name__ == "__main__":
    sys.exit(main())
