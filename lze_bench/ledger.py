"""Ledger schemas, atomic writers and readers: the only thing reports read.

Three tables live in a run directory:

* `ledger.parquet`   one row per training step (LEDGER_COLUMNS, extra columns allowed)
* `rollouts.parquet` one row per rolled-out prompt per step (ROLLOUT_COLUMNS); while a
  run is going, rows sit in `rollouts/part-step_NNNNNN.parquet` files (one per
  step, so a step costs O(its rows)); `compact_rollouts` merges them at the end
  and `read_rollouts` reads both.
* `evals.parquet`    one row per (checkpoint, benchmark, eval settings) result
  (EVAL_COLUMNS), written by `lze-bench eval run=RUN_DIR` (or `eval sweep_dir=DIR`).
  A row is keyed by (checkpoint, benchmark, settings_key): the same settings
  evaluated again replace their row, other settings are kept beside it
  (lze_bench.evaluation.settings defines the key). A file without the
  `settings_key` column (written before results were keyed by settings) is
  refused with one line: its rows' settings cannot be known. Each sampling seed
  of `eval.seeds` is its own settings key, so its own row (`seed` column); a
  seed aggregate is derived, never a row. Every metric's 95 % interval is a
  column (lze_bench.evaluation.metrics: Wilson at the effective number of
  trials); the pass@k / maj@k ones (EVAL_INTERVAL_COLUMNS) came later and read
  as NaN from a file written before them, as do the shares of responses cut at
  max_new_tokens and of prompts truncated to fit the context (EVAL_CUT_COLUMNS).

FLOP columns: per-step counts are exact integers (int64); `cum_flops` is a
float64 running sum, because a long run of a 7B model passes 2^63 FLOPs
(relative rounding 1e-16, far below anything a plot shows).

Every reader goes through `_read_parquet`: a file that exists but cannot be
read (truncated, half-copied) is one error line naming it and the fix, raised
before anything is written, so the damaged file is never overwritten. It reads
through one open handle (rundir.read_parquet), so a reader beside a live run
sees the file before or after a step's rename, never a mix of the two.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.errors import LzeBenchError, damaged_file
from lze_bench.rundir import atomic_write_bytes, read_parquet

LEDGER_FILE = "ledger.parquet"
ROLLOUTS_FILE = "rollouts.parquet"
ROLLOUT_PARTS = "rollouts"
EVALS_FILE = "evals.parquet"

# column -> dtype; every backend writes all of these every step.
LEDGER_COLUMNS: dict[str, str] = {
    "step": "int64",
    "epoch": "int64",
    "prompts_considered": "int64",  # candidates offered to select_rollout (all rounds)
    "prompts_rolled_out": "int64",  # prompts generated for training (all rounds, probes excluded)
    "prompts_probed": "int64",  # measurement-only rollouts (ASTRAL reference set)
    "prompts_dropped": "int64",  # ids at a pass's end never offered (a first round's drop_last; data_order.py)
    "groups_kept": "int64",  # fresh groups that reached the actor update
    "groups_replayed": "int64",  # stored groups added to the update (ASTRAL replay)
    "gen_rounds": "int64",  # rollout rounds this step (dapo, greso, hive: 1 or more)
    "samples": "int64",  # responses generated (rolled out x n, probes included)
    "prompt_tokens": "int64",  # prompt tokens of every generated response
    "generated_tokens": "int64",  # response tokens of every generated response
    "trained_tokens": "int64",  # prompt + response tokens of every trained sequence, summed over PPO epochs
    "flops_rollout": "int64",
    "flops_logprob": "int64",
    "flops_train": "int64",
    "flops_select": "int64",  # extra passes a selector asked for (entropy, embeddings)
    "flops_total": "int64",
    "cum_flops": "float64",
    "time_rollout_s": "float64",
    "time_grade_s": "float64",
    "time_select_s": "float64",
    "time_update_s": "float64",
    "time_eval_s": "float64",
    "time_step_s": "float64",
    "cum_time_s": "float64",
    "reward_mean": "float64",  # over every rolled-out response of the step
    "zero_variance_frac": "float64",  # over rolled-out groups
    "kept_zero_variance": "int64",  # zero-variance groups that still reached the update (pods: over the kept rollouts)
    "partial": "bool",  # the selector's generation cap cut the step short
    "heldout_accuracy": "float64",  # NaN on steps without an eval
}

ROLLOUT_COLUMNS = ("step", "prompt_id", "rewards", "response_tokens", "kept")

EVAL_COLUMNS: dict[str, str] = {
    "step": "int64",  # training step of the checkpoint (0 = initial policy)
    "checkpoint": "object",
    "benchmark": "object",
    "num_problems": "int64",
    "samples_per_problem": "int64",
    "accuracy": "float64",  # avg@n
    "ci_low": "float64",  # 95 % interval of accuracy
    "ci_high": "float64",
    "pass_at_k": "float64",  # unbiased pass@k (Chen et al. 2021) at k below
    "maj_at_k": "float64",  # majority vote of the first k samples
    "pass_at_k_ci_low": "float64",  # 95 % intervals of pass@k and maj@k (NaN in files written before them)
    "pass_at_k_ci_high": "float64",
    "maj_at_k_ci_low": "float64",
    "maj_at_k_ci_high": "float64",
    "k": "int64",  # the largest k of the suite's ks
    "suite": "object",  # the suite's name (a label: not part of the key)
    "settings_key": "object",  # 12 hex digits over the settings below (evaluation/settings.py)
    # the settings (samples per problem is `samples_per_problem`)
    "split": "object",  # "" = the benchmark's own test split
    "temperature": "float64",  # 0 = greedy
    "top_p": "float64",
    "max_new_tokens": "int64",
    "limit": "int64",  # first N problems; 0 = every problem
    "seed": "int64",
    "prompt_template": "object",  # template name ("default": the benchmark's own)
    "chat_template": "bool",
    "grading": "object",  # "boxed": the last \boxed{} of the response
    # recorded, not part of the key
    "generation_backend": "object",  # hf | vllm
    "dtype": "object",  # the dtype generation ran in (float32, bfloat16, ...); "" for results written before it was
    "cum_flops": "float64",  # the run's cum_flops when the checkpoint was saved (reports recompute it from the ledger)
    "cut_response_frac": "float64",  # share of responses that stopped at max_new_tokens (NaN in older files)
    "cut_prompt_frac": "float64",  # share of prompts truncated from the left to fit the context (NaN in older files)
}
EVAL_KEY = ("checkpoint", "benchmark", "settings_key")
EVAL_INTERVAL_COLUMNS = ("pass_at_k_ci_low", "pass_at_k_ci_high", "maj_at_k_ci_low", "maj_at_k_ci_high")
EVAL_CUT_COLUMNS = ("cut_response_frac", "cut_prompt_frac")
EVALS_LOCK = ".evals.lock"  # flock'd around the read-modify-write of evals.parquet (concurrent eval jobs)

FLOP_PARTS = ("flops_rollout", "flops_logprob", "flops_train", "flops_select")


def step_flops(row: dict) -> int:
    """A step's `flops_total`: the sum of its FLOP_PARTS (every part must be in the row)."""
    return sum(int(row[part]) for part in FLOP_PARTS)


def run_file_fix(run_dir: str | os.PathLike) -> str:
    """What to do about a damaged file the run cannot rebuild (its ledger, rollouts, config)."""
    return f"restore it from a copy, or start the run over (delete {str(run_dir)!r} or pass another run_dir=PATH)"


def _read_parquet(path: Path, fix: str) -> pd.DataFrame:
    from pyarrow import ArrowException

    try:
        return read_parquet(path)
    except (ArrowException, OSError, ValueError, EOFError) as exc:  # ArrowInvalid: truncated / not Parquet
        raise damaged_file(path, exc, fix) from exc


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    atomic_write_bytes(path, buffer.getvalue())


class Ledger:
    """The per-step ledger of one run; rewritten atomically after each append.

    A step's row is small and a run has at most thousands of steps, so
    rewriting the whole file keeps it valid Parquet at every instant.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LEDGER_FILE
        self.frame = read_ledger(run_dir) if self.path.exists() else _empty(LEDGER_COLUMNS)

    @property
    def last_step(self) -> int:
        return int(self.frame["step"].max()) if len(self.frame) else -1

    @property
    def cum_flops(self) -> float:
        return float(self.frame["cum_flops"].iloc[-1]) if len(self.frame) else 0.0

    @property
    def cum_time_s(self) -> float:
        return float(self.frame["cum_time_s"].iloc[-1]) if len(self.frame) else 0.0

    def append(self, row: dict) -> dict:
        """Add one step. Fills `flops_total`, `cum_flops`, `cum_time_s` when absent."""
        row = dict(row)
        row.setdefault("flops_select", 0)
        row.setdefault("flops_total", step_flops(row))
        row.setdefault("cum_flops", self.cum_flops + float(row["flops_total"]))
        row.setdefault("cum_time_s", self.cum_time_s + float(row["time_step_s"]))
        row.setdefault("heldout_accuracy", float("nan"))
        missing = [c for c in LEDGER_COLUMNS if c not in row]
        if missing:
            raise LzeBenchError(f"ledger row for step {row.get('step')} is missing columns: {', '.join(missing)}")
        if int(row["step"]) <= self.last_step:
            raise LzeBenchError(
                f"ledger already has step {self.last_step}; refusing duplicate step {row['step']}"
            )
        new = _typed(pd.DataFrame([row]), LEDGER_COLUMNS)
        self.frame = new if not len(self.frame) else pd.concat([self.frame, new], ignore_index=True)
        _write_parquet(self.path, self.frame)
        return row

    def truncate_after(self, step: int) -> None:
        """Drop rows after `step` (resume from a checkpoint taken at `step`)."""
        keep = self.frame["step"] <= int(step)
        if not keep.all():
            self.frame = self.frame[keep].reset_index(drop=True)
            _write_parquet(self.path, self.frame)


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


def _typed(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    for name, dtype in columns.items():
        if name in frame:
            frame[name] = frame[name].astype(dtype)
    return frame


def read_ledger(run_dir: str | os.PathLike) -> pd.DataFrame:
    """The ledger of a run directory, with LEDGER_COLUMNS typed."""
    path = Path(run_dir) / LEDGER_FILE
    if not path.exists():
        raise LzeBenchError(f"no ledger at {path}; is {str(run_dir)!r} a run directory?")
    frame = _read_parquet(path, run_file_fix(run_dir))
    missing = [c for c in LEDGER_COLUMNS if c not in frame]
    if missing:
        raise LzeBenchError(f"{path} lacks ledger columns: {', '.join(missing)}")
    return _typed(frame, LEDGER_COLUMNS)


# --- rollout log -------------------------------------------------------------

_PART = re.compile(r"^part-step_(\d+)\.parquet$")


class RolloutLog:
    """Rows of rolled-out prompts, one part file per step until compacted."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.parts = self.run_dir / ROLLOUT_PARTS

    def append(self, step: int, rows: pd.DataFrame | list[dict]) -> None:
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        missing = [c for c in ROLLOUT_COLUMNS if c not in frame]
        if missing:
            raise LzeBenchError(f"rollout rows of step {step} lack columns: {', '.join(missing)}")
        _write_parquet(self.parts / f"part-step_{int(step):06d}.parquet", frame)

    def check_readable(self, step: int) -> None:
        """Read every part file a resume keeps (steps up to `step`): a damaged one is one line now, before any
        step trains, not at the end of the run when the parts are compacted."""
        if self.parts.is_dir():
            for path in sorted(self.parts.iterdir()):
                match = _PART.match(path.name)
                if match and int(match.group(1)) <= int(step):
                    _read_parquet(path, run_file_fix(self.run_dir))

    def truncate_after(self, step: int) -> None:
        """Forget rows of steps after `step` (resume)."""
        if self.parts.is_dir():
            for path in self.parts.iterdir():
                match = _PART.match(path.name)
                if match and int(match.group(1)) > int(step):
                    path.unlink()
        compacted = self.run_dir / ROLLOUTS_FILE
        if compacted.exists():
            frame = _read_parquet(compacted, run_file_fix(self.run_dir))
            if (frame["step"] > int(step)).any():
                _write_parquet(compacted, frame[frame["step"] <= int(step)].reset_index(drop=True))

    def compact(self) -> Path:
        """Merge the part files into rollouts.parquet (end of run) and remove them."""
        frame = read_rollouts(self.run_dir)
        target = self.run_dir / ROLLOUTS_FILE
        _write_parquet(target, frame)
        if self.parts.is_dir():
            for path in self.parts.iterdir():
                if _PART.match(path.name):
                    path.unlink()
            self.parts.rmdir() if not any(self.parts.iterdir()) else None
        return target


def read_rollouts(run_dir: str | os.PathLike) -> pd.DataFrame:
    """All rollout rows of a run (compacted file plus any part files), by step."""
    run_dir = Path(run_dir)
    frames = []
    if (run_dir / ROLLOUTS_FILE).exists():
        frames.append(_read_parquet(run_dir / ROLLOUTS_FILE, run_file_fix(run_dir)))
    parts = run_dir / ROLLOUT_PARTS
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if _PART.match(path.name):
                frames.append(_read_parquet(path, run_file_fix(run_dir)))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in ROLLOUT_COLUMNS})
    frame = pd.concat(frames, ignore_index=True)
    # the same row in the compacted file and a part file (a crash mid-compaction) is kept once;
    # a prompt rolled out in two rounds of one step is two rows (`round` tells them apart)
    key = ["step", "prompt_id", "round"] if "round" in frame else ["step", "prompt_id"]
    frame = frame.drop_duplicates(subset=key, keep="last")
    return frame.sort_values(["step"], kind="stable").reset_index(drop=True)


# --- eval results ------------------------------------------------------------


def append_eval_rows(run_dir: str | os.PathLike, rows: list[dict]) -> pd.DataFrame:
    """Add eval results; a (checkpoint, benchmark, settings_key) evaluated again replaces its row.

    Read, merge and write happen under an exclusive lock on `<run_dir>/.evals.lock`, so eval
    jobs of one run that finish at once (one job per checkpoint) never lose each other's rows.
    """
    path = Path(run_dir) / EVALS_FILE
    new = _typed(_with_intervals(pd.DataFrame(rows)), EVAL_COLUMNS)
    missing = [c for c in EVAL_COLUMNS if c not in new]
    if missing:
        raise LzeBenchError(f"eval rows lack columns: {', '.join(missing)}")
    with _locked(Path(run_dir) / EVALS_LOCK):
        old = read_evals(run_dir) if path.exists() else None
        frame = new if old is None or old.empty else pd.concat([old, new], ignore_index=True)
        frame = frame.drop_duplicates(subset=list(EVAL_KEY), keep="last")
        frame = frame.sort_values(["step", "benchmark", "settings_key"], kind="stable").reset_index(drop=True)
        _write_parquet(path, frame)
    return frame


def read_evals(run_dir: str | os.PathLike) -> pd.DataFrame:
    """A run's eval results (EVAL_COLUMNS typed); empty without a file; one-line error for an old file."""
    path = Path(run_dir) / EVALS_FILE
    if not path.exists():
        return _empty(EVAL_COLUMNS)
    frame = _with_intervals(_read_parquet(path, _evals_fix(run_dir)))
    missing = [c for c in EVAL_COLUMNS if c not in frame]
    if missing:
        raise LzeBenchError(
            f"{path} has no {', '.join(missing)} column(s): it was written before eval results were keyed by "
            "their settings, so which suite, n or limit each row used is unknown; delete it and run "
            f"`lze-bench eval run={run_dir}` again"
        )
    return _typed(frame, EVAL_COLUMNS)


def _evals_fix(run_dir) -> str:
    # `eval run=DIR` returns the entries it skips as done, so a fresh evals.parquet gets every row back
    return (f"move it away and run `lze-bench eval run={run_dir}` again with the settings used: it rebuilds the "
            "rows from evals/<checkpoint>/<settings>/summary.json without generating anything again")


def _with_intervals(frame: pd.DataFrame) -> pd.DataFrame:
    """EVAL_INTERVAL_COLUMNS and EVAL_CUT_COLUMNS came after the settings key: rows (and files) without them
    read as NaN (unknown, not zero)."""
    for column in (*EVAL_INTERVAL_COLUMNS, *EVAL_CUT_COLUMNS):
        if column not in frame:
            frame[column] = float("nan")
    if "dtype" not in frame:  # came later still: which dtype ran is unknown for older rows
        frame["dtype"] = ""
    return frame


@contextlib.contextmanager
def _locked(lock_path: Path):
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def zero_variance_fraction(rewards: np.ndarray) -> float:
    """Fraction of groups (rows of float[G, n]) whose rewards are all equal."""
    rewards = np.asarray(rewards)
    if rewards.size == 0:
        return float("nan")
    return float(np.mean(rewards.max(axis=1) <= rewards.min(axis=1)))
