"""Run directories: names, atomic writes, the DONE marker and the resume point.

Layout (design.md "The run directory"):

    <run_dir>/
      config.yaml            resolved config + package version + git commit
      data.json              rows and SHA-256 of the data the run started on, checked on resume (fingerprint.py)
      ledger.parquet         one row per training step (lze_bench.ledger)
      rollouts.parquet       one row per rolled-out prompt per step
      selector_state/step_000100.npz
      checkpoints/step_000100/   a Hugging Face model directory (+ trainer_state.pt)
      evals/<checkpoint>/<settings_key>/<benchmark>.jsonl and summary.json (evaluation/outputs.py)
      progress.json          while a run is preparing: what it is doing (the warm start's steps), read
                             by `sweep status`; removed when the run finishes
      DONE                   written last; a run without it is resumable

Every file is written to a temporary name in the same folder and renamed, so a
killed run never leaves a half-written file (atomic_write_bytes says why this
is done by hand). A finished run (DONE present) is
never overwritten: starting it again is an error that says what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from lze_bench.errors import LzeBenchError

DONE = "DONE"
PROGRESS = "progress.json"
CONFIG = "config.yaml"
CHECKPOINTS = "checkpoints"
SELECTOR_STATE = "selector_state"
EVALS = "evals"
_STEP_DIR = re.compile(r"^step_(\d{6,})$")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the new one, never a part.

    A temporary file in the same folder (same filesystem, so `os.replace` is an
    atomic rename), flushed and fsynced before the rename, removed on any failure.
    Kept by hand: it is a few lines of the standard library; `atomicwrites`, the
    package that wrapped them, was archived unmaintained by its author in 2022,
    who points to `os.replace`; and every writer here (parquet buffers, JSON,
    YAML, text) hands over bytes, so one function serves them all.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None):
    """A Parquet file as a DataFrame, read through one open handle: the file as it was when opened.

    Never hand pandas or pyarrow the path itself while a writer may be at work:
    pyarrow's dataset reader learns the file's size from one look at the path and
    reads it through another open, so a file renamed over in between (every writer
    here replaces files that way, atomic_write_bytes) is read with the old size and
    fails ("Page was smaller (8) than expected (12)": a test reading a live run's
    ledger, and `sweep status` reading a sweep's). Measured here against a process
    replacing a file in a loop: 612 of 8,759 reads by path failed in 10 s, none of
    7,693 through one handle. A plain descriptor, not a memory map: a file cut short
    under a map kills the reader (SIGBUS) instead of raising.
    """
    import pandas as pd
    import pyarrow as pa

    with pa.OSFile(os.fspath(path)) as handle:
        return pd.read_parquet(handle, columns=columns)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _signal_as_recorded(trainer: dict) -> dict:
    """The trainer config with its estimator and reward in the form runs recorded before `advantage_estimator`
    and `reward_shape` existed: `scale_rewards` true (grpo) or false (dr_grpo), the binary reward implied. Only
    settings those runs could not express (rloo, a shaped reward) keep their own keys, so they hash apart."""
    trainer = dict(trainer)
    estimator = trainer.get("advantage_estimator", "grpo") or "grpo"
    scale = trainer.get("scale_rewards")
    if estimator == "grpo" and scale is not False:
        trainer["scale_rewards"] = True
        trainer.pop("advantage_estimator", None)
    elif estimator == "dr_grpo" or (estimator == "grpo" and scale is False):
        trainer["scale_rewards"] = False
        trainer.pop("advantage_estimator", None)
    if (trainer.get("reward_shape") or "binary") == "binary":
        trainer.pop("reward_shape", None)
    return trainer


# Keys that say where a run's curves are shown (`logger=[wandb]`, `tracking.project=...`), never what
# it computes: changing them keeps the run directory, its resume point and its pairing.
TRACKING_KEYS = ("logger", "tracking")


def config_hash(cfg_container: dict) -> str:
    """A short stable hash of a resolved config, without run_dir (which names it) and the keys that do not
    change the result: launcher (where it runs) and TRACKING_KEYS (where its curves go). The trainer's
    training signal is hashed as runs recorded it before it had keys of its own (`_signal_as_recorded`), so
    run directories, sweep jobs and resumes of those runs keep their names and identities."""
    data = {k: v for k, v in cfg_container.items() if k not in ("run_dir", "launcher", *TRACKING_KEYS)}
    if isinstance(data.get("trainer"), dict):
        data["trainer"] = _signal_as_recorded(data["trainer"])
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def default_run_dir(cfg_container: dict, root: str | os.PathLike = "runs") -> Path:
    """`runs/<selector>-<backend>-<model>-s<seed>-<confighash>`: readable and collision-free."""
    selector = _name_of(cfg_container.get("selector"), "selector")
    backend = _name_of(cfg_container.get("backend"), "backend")
    model = _name_of(cfg_container.get("model"), "model")
    seed = cfg_container.get("seed", 0)
    return Path(root) / f"{selector}-{backend}-{model}-s{seed}-{config_hash(cfg_container)}"


def _name_of(node, default: str) -> str:
    if isinstance(node, dict):
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(node.get("name", default)))
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(node or default))


def git_commit() -> str | None:
    """The commit of the lze-bench checkout, or None when not in a git repository."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def is_done(run_dir: str | os.PathLike) -> bool:
    return (Path(run_dir) / DONE).exists()


def mark_done(run_dir: str | os.PathLike, summary: dict | None = None) -> None:
    atomic_write_json(Path(run_dir) / DONE, summary or {})


def write_progress(run_dir: str | os.PathLike, phase: str, done: int | None = None, total: int | None = None,
                   note: str = "") -> None:
    """Say what the run is doing before its ledger has rows (`phase` "warm start", "initial eval", "training")."""
    atomic_write_json(Path(run_dir) / PROGRESS, {"phase": phase, "done": done, "total": total, "note": note})


def read_progress(run_dir: str | os.PathLike) -> dict | None:
    """The run's progress.json, or None (absent, or being replaced right now)."""
    try:
        return json.loads((Path(run_dir) / PROGRESS).read_text())
    except (OSError, ValueError):
        return None


def clear_progress(run_dir: str | os.PathLike) -> None:
    (Path(run_dir) / PROGRESS).unlink(missing_ok=True)


def refuse_finished(run_dir: str | os.PathLike) -> None:
    """Raise when a run directory is finished: never overwrite one silently."""
    if is_done(run_dir):
        raise LzeBenchError(
            f"run_dir {str(run_dir)!r} holds a finished run (DONE exists); "
            "pass a new run_dir=PATH, or delete that directory to redo it"
        )


def checkpoint_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{int(step):06d}"


def selector_state_path(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / SELECTOR_STATE / f"step_{int(step):06d}.npz"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints (step, path), oldest first. A checkpoint is complete
    when its `COMPLETE` marker exists (written last by the backend)."""
    root = Path(run_dir) / CHECKPOINTS
    found = []
    if root.is_dir():
        for child in root.iterdir():
            match = _STEP_DIR.match(child.name)
            if match and (child / "COMPLETE").exists():
                found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def mark_checkpoint_complete(path: str | os.PathLike) -> None:
    atomic_write_text(Path(path) / "COMPLETE", "")
