"""Ask the scheduler which sweep jobs are still queued or running.

Slurm: `squeue --me -r` (one line per array element). squeue needs no
accounting database, unlike submitit's own watcher (sacct), so this works on
a bare single-node cluster too; a job that squeue no longer lists and that
left no result has failed (manifest.derive_status).

Local: the job id is the pid of submitit's controller process; it is alive
when /proc shows it, not a zombie, and still running submitit (a pid reused
after a reboot is not mistaken for our job).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED", "RESV_DEL_HOLD",
          "RESIZING", "STOPPED"}
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE", "REVOKED", "SPECIAL_EXIT"}


def scheduler_states(kind: str, job_ids: list[str]) -> dict[str, str] | None:
    """job id -> "queued" | "running" for live jobs; None when the scheduler cannot be asked."""
    if not job_ids:
        return {}
    if kind == "slurm":
        return _slurm_states(set(job_ids))
    return {jid: "running" for jid in job_ids if _local_alive(jid)}


def _slurm_states(wanted: set[str]) -> dict[str, str] | None:
    if shutil.which("squeue") is None:
        log.warning("squeue not found: cannot tell which Slurm jobs are still running")
        return None
    try:
        out = subprocess.run(
            ["squeue", "--me", "-h", "-r", "-o", "%i|%T"], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError) as exc:
        log.warning("squeue failed (%s): job states unknown for now", exc)
        return None
    states = {}
    for line in out.splitlines():
        jid, _, state = line.strip().partition("|")
        state = state.split()[0].upper() if state else ""
        if jid in wanted and state not in ENDED:
            states[jid] = "queued" if state in QUEUED else "running"
    return states


def _local_alive(job_id: str) -> bool:
    try:
        pid = int(job_id)
    except ValueError:
        return False
    proc = Path("/proc") / str(pid)
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and "submitit" in cmdline
