"""One process per run directory: an OS file lock held while a command writes it.

Two `lze-bench train` on one run directory would interleave ledger rows and
checkpoints; two evals of one checkpoint under the same settings would write
the same result files; two `lze-bench sweep` on one sweep directory would
submit the same jobs twice and race on its manifest. So training holds
`<run_dir>/.train.lock`, eval holds `.eval.lock` in each results folder
(`evals/<checkpoint>/<settings>/`) while it fills it, and a sweep (training
or eval) holds `<sweep_dir>/.sweep.lock` while it submits *and* while it
polls; a second process refuses in one line naming the holder.

Choices:
* the `filelock` library's FileLock, an OS lock (`flock`): the kernel drops it
  when the holder exits however it exits (`kill -9`, a crash, a preempted
  Slurm job), so a dead run never leaves the directory stuck; the file itself
  stays (filelock never unlinks it: that would split waiters across inodes).
* training and eval do not exclude each other: eval reads only complete
  checkpoints and writes only under `evals/` and `evals.parquet`, whose
  appends have their own lock (ledger.py); evals of other checkpoints or
  settings of the same run (eval sweep jobs, replicas) run side by side.
* no waiting: the command fails at once; a run is hours, not a moment.
* a directory the lock created is removed again if the command wrote nothing
  else there (a run refused by a config check leaves no empty run directory).
* the holder writes its pid, host, command and start time beside the lock
  (`.<role>.lock.holder`), so the refusal can say who holds it; the lock,
  not that text, decides, and the lock file's content is left to filelock.
* on a filesystem without `flock` filelock falls back to its own marker file,
  which a killed process can leave behind (delete `.<role>.lock` by hand then).
  On NFS a lock of a node that died is released when the server's lease
  expires (about 90 s), not at once.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path

from lze_bench.errors import LzeBenchError

ROLES = ("train", "eval", "sweep")


def lock_path(run_dir: str | os.PathLike, role: str) -> Path:
    return Path(run_dir) / f".{role}.lock"


@contextlib.contextmanager
def hold_run_dir(run_dir: str | os.PathLike, role: str, key: str = "run_dir", name: str | None = None):
    """Hold `run_dir`'s `role` lock for the `with` block (creating the directory); refuse if held.

    For the message: `key` is the config key that named the directory (`run_dir`; "" when
    none did) and `name` what the directory holds (default `key=PATH`).
    """
    from filelock import FileLock, Timeout

    if role not in ROLES:
        raise ValueError(f"unknown lock role {role!r}")
    path = lock_path(run_dir, role)
    created = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]  # deepest first
    path.parent.mkdir(parents=True, exist_ok=True)
    # not a singleton: a second `with` in the same process must be refused too (tests run commands in-process)
    lock = FileLock(str(path), is_singleton=False)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        holder = _read_holder(path)
        subject = name or f"{key}={str(run_dir)!r}"
        other = f", or pass another {key}=PATH" if key else ""
        raise LzeBenchError(f"{subject} is in use by another lze-bench {role} ({holder}); wait for it to end or "
                            f"stop it{other}") from None
    try:
        _write_holder(path, role)
        yield path
    finally:
        lock.release()
        if created:
            _remove_if_only_locks(created)


def is_held(run_dir: str | os.PathLike, role: str) -> bool:
    """Whether a process holds `run_dir`'s `role` lock now (a reader's question: creates no lock file)."""
    from filelock import FileLock, Timeout

    path = lock_path(run_dir, role)
    if not path.exists():
        return False
    lock = FileLock(str(path), is_singleton=False)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        return True
    except OSError:  # a lock file this user cannot open: someone else's, assume it is in use
        return True
    lock.release()
    return False


def _remove_if_only_locks(created: list[Path]) -> None:
    """A command that failed before writing anything leaves none of the folders it created behind."""
    names = {f".{role}.lock{suffix}" for role in ROLES for suffix in ("", ".holder")}
    try:
        if any(child.name not in names for child in created[0].iterdir()):
            return
        for child in created[0].iterdir():
            child.unlink()
        for folder in created:  # deepest first; stops at the first that holds something else
            folder.rmdir()
    except OSError:  # another process just started writing there: leave it
        pass


def _holder_path(path: Path) -> Path:
    return path.with_name(path.name + ".holder")


def _write_holder(path: Path, role: str) -> None:
    """Who holds the lock, for the refusal's message."""
    from lze_bench.rundir import atomic_write_text

    command = " ".join(["lze-bench", *sys.argv[1:]])
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    atomic_write_text(_holder_path(path), f"pid {os.getpid()} on {socket.gethostname()} since {since}\n{command}\n")


def _read_holder(path: Path) -> str:
    """The holder's first line (pid, host, start time); the command line stays in the file."""
    try:
        lines = _holder_path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    return lines[0].strip() if lines and lines[0].strip() else "holder unknown"
