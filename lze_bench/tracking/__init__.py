"""Live experiment tracking: `logger=[wandb,tensorboard]` on every backend (default: none).

The run directory stays the record (`ledger.parquet`, `evals.parquet`,
`heldout.jsonl`); a tracker is a live view of the same rows, sent when they
are written:

* every ledger column of every step as `ledger/<column>` (plus
  `ledger/kept_fraction` = groups_kept / prompts_rolled_out, the report's
  figure), with the backend's own per-step metrics as `<backend>/<key>`
  (backend=openrlhf: OpenRLHF's `logs_dict`: policy_loss, kl, actor_lr,
  timing/..., rollout/...);
* the local backend's held-out evals: `heldout/accuracy`, `heldout/level_<L>`
  (step = updates done, 0 = the initial policy);
* `lze-bench eval run=RUN_DIR` results as they reach `evals.parquet`:
  `eval/<benchmark>/<settings_key>/<accuracy|ci_low|ci_high|pass@k|maj@k>`
  (step = the checkpoint's updates done; one series per eval setting).

Every event carries its file's step and the run's `cum_flops` at that point.
W&B: `define_metric` makes `<section>/cum_flops` each section's x-axis, and
`ledger/step`, `ledger/cum_time_s` (wall time) are defined too, one click away
(wandb.py). TensorBoard has no chosen x-axis, so it gets one folder per axis
(tensorboard.py): `<run_dir>/tensorboard/` by step, `<run_dir>/tensorboard/cum_flops/`
by cum_flops.

The option and its shape follow verl's `trainer.logger=[console,wandb]`
(verl/utils/tracking.py). Choices where the sources are silent:
* secrets only from the environment: W&B reads `WANDB_API_KEY` (or the
  `wandb login` netrc) itself; no config key holds a key, and OpenRLHF's
  `--logger.wandb.key` is refused (command.py), since OpenRLHF would write it
  to argv, config.yaml and its W&B config;
* tracking keys (`logger`, `tracking.*`) are not part of a run's identity
  (rundir.TRACKING_KEYS): adding a tracker keeps the run directory, resume and pairing;
* a value that is not a finite number (NaN: no eval at this step, astral's
  metrics under another selector) is not logged: a gap, not a zero;
* one W&B run per run directory: its id is kept in `<run_dir>/tracking.json`,
  so a resumed run and later evals continue it. Steps re-run after a resume
  or requeue replace their first copies: TensorBoard purges them (purge_step),
  W&B is rewound to just before the first of them (`resume_from`, with the W&B
  step of every event kept in tracking.json; eval events past that point are
  sent again from evals.parquet), so each history holds every step once, in
  order;
* backend=openrlhf logs from its trainer actor (the single controller that
  writes the ledger), through this package rather than OpenRLHF's own
  WandbLogger/TensorboardLogger, which would need the key on the command line;
  OpenRLHF's metrics arrive through us.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from lze_bench.errors import LzeBenchError, missing_dependency
from lze_bench.registry import LOGGERS, unknown_choice

from lze_bench.tracking import tensorboard as _tensorboard  # noqa: F401  (registers "tensorboard")
from lze_bench.tracking import wandb as _wandb  # noqa: F401  (registers "wandb")
from lze_bench.tracking.tracker import Tracker, eval_key

__all__ = ["LOGGERS", "Tracker", "TrackingConfig", "check_loggers", "preflight", "open_tracker", "log_evals"]


@dataclass
class TrackingConfig:
    """Names a tracker shows a run under (W&B; TensorBoard needs none). Never part of the run's identity."""

    project: Optional[str] = None  # W&B project; null: env WANDB_PROJECT, else "lze-bench"
    entity: Optional[str] = None  # W&B team or user; null: env WANDB_ENTITY, else your default entity
    group: Optional[str] = None  # W&B group; a sweep sets its own name here
    name: Optional[str] = None  # W&B run name; null: the run directory's name (a sweep: the job name)
    tags: List[str] = field(default_factory=list)  # W&B tags; selector:NAME, seed:N, backend:NAME are always added


def check_loggers(names) -> None:
    """One line for an unknown tracker name (`logger=[wandbb]`)."""
    for name in names:
        if str(name) not in LOGGERS:
            raise LzeBenchError(f"logger: {unknown_choice('logger', name, LOGGERS)}; e.g. logger=[wandb,tensorboard]")


def preflight(names) -> None:
    """Before a run starts: each tracker's package is installed, and W&B online has a key in the environment."""
    for name in names:
        entry = LOGGERS[str(name)]
        if importlib.util.find_spec(entry.module) is None:
            raise missing_dependency(entry.module, entry.extra, why=f"logger=[{name}]")
        entry.preflight()


def open_tracker(container: dict, run_dir: str | os.PathLike, resume: tuple[int, float] | None = None) -> Tracker:
    """The trackers a resolved config asks for (`logger`), opened on `run_dir`; no tracker: a no-op Tracker.

    `resume` = (updates done, cum_flops) where a training invocation starts (0, 0.0
    for a fresh run): what a tracker logged past that point is superseded by the
    steps run again. None (evals): nothing is superseded.
    """
    names = list(container.get("logger") or [])
    check_loggers(names)
    sinks = [LOGGERS[name](Path(run_dir), container, resume) for name in names]
    tracker = Tracker(sinks, str(container["backend"]["name"]))
    for sink in sinks:  # W&B rewound past eval events: they are sent again, from the record
        if getattr(sink, "resend", None):
            wanted = {tuple(key) for key in sink.resend}
            rows = [row for row in _eval_rows(Path(run_dir)) if tuple(eval_key(row)) in wanted]
            tracker.log_evals(rows, sinks=[sink])
    return tracker


def _eval_rows(run_dir: Path) -> list[dict]:
    """evals.parquet as records (read here: the ledger module sits above this package)."""
    from lze_bench.rundir import read_parquet

    path = run_dir / "evals.parquet"
    return read_parquet(path).to_dict("records") if path.exists() else []


def log_evals(run_dir: str | os.PathLike, rows: list[dict], recorded: list[tuple] = (),
              history: list[dict] = ()) -> None:
    """Send eval rows (EVAL_COLUMNS + cum_flops) not yet in `evals.parquet` to the run's trackers.

    Called by the eval runner before it appends the rows, with `recorded` the
    (checkpoint, benchmark, settings_key) keys `evals.parquet` already holds (a
    rerun of `lze-bench eval` that skips finished benchmarks sends nothing twice).
    The eval files are the record and are written whether or not this works, so
    any failure of a tracker (not installed where evals run, no key, no network)
    is a warning.
    """
    import logging

    container = _run_config(Path(run_dir))
    if not container.get("logger"):
        return
    seen = set(recorded)
    fresh = [r for r in rows if (r["checkpoint"], r["benchmark"], r.get("settings_key")) not in seen]
    if not fresh:
        return
    replaced = {tuple(eval_key(r)) for r in rows}
    everything = [r for r in history if tuple(eval_key(r)) not in replaced] + list(rows)
    try:
        with open_tracker(container, run_dir) as tracker:
            tracker.log_evals(fresh, history=everything)
    except Exception as exc:  # noqa: BLE001  (third-party trackers raise anything; the evals must still be written)
        logging.getLogger(__name__).warning("evals not sent to logger=%s: %s", container["logger"],
                                            str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _run_config(run_dir: Path) -> dict:
    import yaml

    path = run_dir / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
