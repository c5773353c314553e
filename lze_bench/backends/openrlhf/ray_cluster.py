"""Ray on a Slurm allocation for backend=openrlhf: head and workers, the driver, teardown (openrlhf.md §10).

One task per node. Rank 0 starts the Ray head on its node, waits until all
nodes joined, runs the driver command saved at preparation time
(`openrlhf/command.json`, exactly what `--dry-run` printed) with
LZE_RAY_ADDRESS pointing at the head, then writes a done marker on the shared
filesystem and stops Ray. Other ranks run `ray start --address ... --block`
and return once the marker appears (a lost head would otherwise make them fail
and the job count as failed); if the head is gone without a marker (its node
died, the driver was killed) they return non-zero at once instead of holding
their nodes until the time limit: their own `ray start` has exited, or the
head's GCS port has refused connections `HEAD_LOST_POLLS` times in a row.
Each node's GPUs and Ray CPUs are the run's launch plan's (plan.py:
`gpus_per_node`, `ray_cpus`, at least what OpenRLHF reserves, so its placement
groups fit).

Addresses and ports: the head's address is never a loopback one (Debian maps a
host's own name to 127.0.1.1, which `gethostbyname` returns on the head node
and no worker can reach; `head_address`). Ports derive from the job id so
jobs sharing a node do not collide, and stay in [20000, 32768): above Ray's
own worker-port range (10002-19999) and below Linux's ephemeral range
(32768-60999), where the kernel and Ray pick ports for other connections.
Ray's temp dir is short and node-local (socket paths must stay under ~107
characters).

Processes and threads: Ray and the driver get `OMP_NUM_THREADS` = the task's
CPUs over the two processes per GPU (a vLLM engine and a policy rank), not the
node's count in every process (`threads_per_process`). Slurm's warning signal
reaches every process of the step; Ray and the driver ignore it (the job body,
slurm.py, acts on it).

Ray runs from the job's own interpreter (`sys.executable -m ray.scripts.scripts`,
never a `ray` found on PATH) with `--block` on every node, and is torn down by
terminating those processes only: Ray's own shutdown hook then stops exactly
this cluster's daemons. `ray stop` is never called (it kills every Ray process
of the user on the node, including another job's).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lze_bench import env
from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

RAY_BASE_PORT = 20000  # Ray's worker ports are 10002-19999 by default
RAY_PORT_END = 32768  # Linux's ephemeral range starts here (net.ipv4.ip_local_port_range)
PORTS_PER_JOB = 4
NODE_WAIT_S = 600.0
HEAD_LOST_POLLS = 3
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
        slots = (RAY_PORT_END - RAY_BASE_PORT) // PORTS_PER_JOB
        return RAY_BASE_PORT + int(digits) % slots * PORTS_PER_JOB  # 4 ports per job (below)

    @property
    def temp_dir(self) -> str:
        return f"/tmp/ray_{self.job_id}"

    @classmethod
    def from_env(cls, gpus: int, min_cpus: int = 1) -> "NodeRole":
        if not env.value(env.SLURM_PROCID):
            raise LzeBenchError("not inside a Slurm job step (SLURM_PROCID unset); submit with launcher=slurm")
        hosts = job_hosts()
        return cls(
            rank=int(env.value(env.SLURM_PROCID)),
            num_nodes=int(env.value(env.SLURM_NNODES) or len(hosts) or 1),
            head_host=hosts[0],
            job_id=env.value(env.SLURM_JOB_ID),
            attempt=int(env.value(env.SLURM_RESTART_COUNT)),
            gpus=int(gpus),
            cpus=max(int(env.value(env.SLURM_CPUS_PER_TASK) or os.cpu_count() or 1), int(min_cpus)),
        )


def job_hosts() -> list[str]:
    """This job's node names, head first (`scontrol show hostnames $SLURM_JOB_NODELIST`)."""
    nodelist = env.value(env.SLURM_JOB_NODELIST)
    if not nodelist:
        raise LzeBenchError("SLURM_JOB_NODELIST is unset: not inside a Slurm job; submit with launcher=slurm")
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, check=True).stdout.split()


def _common(role: NodeRole, port: int) -> list[str]:
    return [f"--num-gpus={role.gpus}", f"--num-cpus={role.cpus}", "--disable-usage-stats",
            f"--temp-dir={role.temp_dir}", f"--dashboard-agent-listen-port={port + 2}",
            f"--metrics-export-port={port + 3}"]


def head_command(role: NodeRole, head_ip: str) -> list[str]:
    return [*RAY_CLI, "start", "--head", "--block", f"--node-ip-address={head_ip}", f"--port={role.port}",
            f"--ray-client-server-port={role.port + 1}", "--include-dashboard=false", *_common(role, role.port)]


def worker_command(role: NodeRole, head_ip: str) -> list[str]:
    return [*RAY_CLI, "start", f"--address={head_ip}:{role.port}", "--block", *_common(role, role.port)]


def threads_per_process(role: NodeRole) -> int:
    """OMP threads for each of this node's Ray processes: a vLLM engine and a policy rank per GPU."""
    return max(1, int(role.cpus) // max(1, 2 * int(role.gpus)))


def _is_loopback(address: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(address).is_loopback


def head_address(host: str, peers: list[str] = ()) -> str:
    """A non-loopback IPv4 address of `host`: its resolved addresses first, else (this node's own name mapped to
    127.0.1.1) the address this node uses to reach a peer node (a UDP connect sends nothing)."""
    try:
        resolved = [info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET)]
    except socket.gaierror as exc:
        raise LzeBenchError(f"cannot resolve the Ray head {host!r}: {exc}") from exc
    for address in resolved:
        if not _is_loopback(address):
            return address
    for peer in [*peers, "10.255.255.254"]:  # any routable target: only the route is looked up
        try:
            target = socket.getaddrinfo(peer, 9, socket.AF_INET)[0][4][0]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((target, 9))
                address = probe.getsockname()[0]
        except OSError:
            continue
        if not _is_loopback(address):
            return address
    raise LzeBenchError(f"the Ray head {host!r} resolves only to loopback ({', '.join(resolved)}) and no "
                        "non-loopback interface was found; fix the node's /etc/hosts or DNS")


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
    """The driver command the run recorded when it was prepared (exactly what `--dry-run` printed)."""
    from lze_bench.backends.openrlhf.plan import read_command

    return list(read_command(run_dir)["argv"])


def ignore_warning_signal() -> None:
    """In Ray and the driver (before exec; an ignored signal stays ignored): Slurm sends its warning signal to
    every process of the job step, and only this process acts on it (lze_bench.preemption: the trainer actor
    reads the PREEMPT marker, finishes and saves its step, and the driver exits)."""
    import signal

    from lze_bench.preemption import SIGNAL

    signal.signal(SIGNAL, signal.SIG_IGN)


def node_main(run_dir: str | Path, role: NodeRole, peers: list[str] = ()) -> int:
    """Run this node's part of the job; returns the driver's exit code on rank 0, 0 elsewhere (non-zero on a worker
    whose head went away without finishing). `peers`: the other nodes' host names (head_address)."""
    head_ip = head_address(role.head_host, list(peers))
    marker = done_marker(run_dir, role)
    child = env.child_env({env.OMP_NUM_THREADS: str(threads_per_process(role))})
    if role.rank > 0:
        return _worker(role, head_ip, marker, child)
    head = subprocess.Popen(head_command(role, head_ip), env=child, preexec_fn=ignore_warning_signal)
    try:
        _wait_for_nodes(f"{head_ip}:{role.port}", role.num_nodes, head)
        child[env.RAY_ADDRESS.name] = f"{head_ip}:{role.port}"
        code = subprocess.run(load_driver_argv(run_dir), env=child, check=False,
                              preexec_fn=ignore_warning_signal).returncode
    finally:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("")
        stop_ray(head)
    return code


def _head_answers(head_ip: str, port: int) -> bool:
    try:
        with socket.create_connection((head_ip, port), timeout=5):
            return True
    except OSError:
        return False


def _worker(role: NodeRole, head_ip: str, marker: Path, env: dict) -> int:
    time.sleep(POLL_S)  # let the head come up first
    proc = subprocess.Popen(worker_command(role, head_ip), env=env, preexec_fn=ignore_warning_signal)
    lost = 0
    try:
        while not marker.exists():
            if proc.poll() is not None:
                log.error("this node's Ray exited (code %s) before the job finished; the head is gone",
                          proc.returncode)
                return 1
            lost = 0 if _head_answers(head_ip, role.port) else lost + 1
            if lost >= HEAD_LOST_POLLS:
                log.error("the Ray head %s:%d has not answered for %d polls; leaving the job", head_ip, role.port,
                          lost)
                return 1
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
