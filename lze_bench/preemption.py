"""Slurm's warning before a preemption or time limit: finish the step in hand, save it, then requeue.

Slurm sends SIGUSR2 `launcher.signal_delay_s` seconds before it stops a job
(`sbatch --signal=USR2@S`, set through submitit's `signal_delay_s`). submitit's
own handler requeues at once, so a job would lose every step since its last
periodic checkpoint (up to `trainer.checkpoint_every`). While a sweep job trains,
`deferred(run_dir)` puts a handler in its place that only records the signal,
in this process (`requested()`) and as `<run_dir>/PREEMPT` for the trainer
processes the signal does not reach (OpenRLHF's trainer actor). After each step
the trainer sees it, saves a checkpoint of that step (weights, optimizer,
selector state, ledger, data position: what a resume reads) and stops; the job
then hands the signal to the handler it replaced (`forward`: submitit's
checkpoint + requeue + exit), and the requeued job resumes from that step.

Choices:
* the step in hand is finished, not abandoned: its work is paid for, and a step
  is far shorter than the grace period on the clusters this targets (the
  default 180 s; raise `launcher.signal_delay_s` for longer steps). If Slurm's
  kill comes first, the run resumes from its last periodic checkpoint, as before;
* a run that finishes with the step in hand is not requeued (DONE is written);
* the marker is removed when a job starts, so a stale one never stops a run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

MARKER = "PREEMPT"
SIGNAL = signal.SIGUSR2  # submitit's and sbatch --signal's default

_received: list[int] = []  # signals recorded in this process since the handler was installed


def requested(run_dir: str | os.PathLike | None = None) -> bool:
    """Whether a preemption warning arrived: in this process, or (with `run_dir`) to the job that runs it."""
    return bool(_received) or (run_dir is not None and (Path(run_dir) / MARKER).exists())


def clear(run_dir: str | os.PathLike) -> None:
    _received.clear()
    (Path(run_dir) / MARKER).unlink(missing_ok=True)


@contextlib.contextmanager
def deferred(run_dir: str | os.PathLike):
    """Record SIGNAL instead of acting on it for the `with` block; yields the handler it replaced."""
    previous = signal.getsignal(SIGNAL)
    clear(run_dir)

    def record(signum, frame):
        _received.append(signum)
        with contextlib.suppress(OSError):  # the record in this process is what the local backend reads
            (Path(run_dir) / MARKER).write_text(f"signal {signum} to pid {os.getpid()}\n")

    signal.signal(SIGNAL, record)
    try:
        yield previous
    finally:
        signal.signal(SIGNAL, previous)


def forward(previous) -> None:
    """Hand the recorded signal to the handler `deferred` replaced (submitit: checkpoint, requeue, exit);
    without one (a plain process), exit as the signal's default action would, with status 128 + signal."""
    if callable(previous):
        try:
            previous(SIGNAL, None)
        except subprocess.CalledProcessError as exc:
            if exc.returncode != -signal.SIGTERM:
                raise
            # `scontrol requeue` stops the job's step, scontrol itself included, before scontrol returns: the
            # requeue happened. Leave as submitit does after a requeue, without a result (not a failed job)
            sys.exit(-1)
        return
    sys.exit(128 + int(SIGNAL))
