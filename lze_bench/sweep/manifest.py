"""The sweep manifest (`<sweep_dir>/manifest.json`) and each job's status.

The manifest maps job name -> overrides, run dir (relative to the sweep dir, so a
sweep directory can be moved or copied), config hash, pair key, submitit job id,
attempts and the last known status. It is written atomically by the one process
that submits; `sweep status` only reads it.

A job's status is *derived from files and the scheduler*, never trusted from
the manifest alone, so a crashed submitter or a job killed by the cluster is
seen as it is:

1. `done`       its results exist: a training job's run dir has DONE (the backend
                writes it last); an eval job's (`kind: eval`, lze_bench/sweep/evals.py)
                checkpoints each have every benchmark's result with its settings key;
2. `failed`     the job recorded an error in its outcome file (the traceback's last
                line is kept), or it ended without its results: it returned, or
                submitit wrote its result pickle, or it left the scheduler without
                a result (killed, cancelled, out of memory, node failure);
3. `queued` / `running`   the scheduler still has it (squeue for Slurm; the
                controller process for the local executor);
4. `unknown`    the scheduler could not be asked (squeue failed);
5. `new`        never submitted.

Status never unpickles submitit's `<job>_0_result.pkl`: a sweep directory on a
shared filesystem may hold a planted pickle, and unpickling runs what it names.
The jobs (lze_bench/sweep/job.py) write `<job>_<task>_outcome.json` next to it,
with "success" or "error" and the traceback, when their call returns or raises;
the pickle is only looked at for whether it exists (the job ended), e.g. for a
job submitted by an lze-bench older than the outcome file, or one whose call
never started.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lze_bench.errors import LzeBenchError
from lze_bench.rundir import atomic_write_json, is_done, read_parquet

MANIFEST = "manifest.json"
SUBMITIT = "submitit"  # submitit's folder (pickles, logs) inside the sweep dir
VERSION = 1
FINAL = ("done", "failed")


def manifest_path(sweep_dir: str | os.PathLike) -> Path:
    return Path(sweep_dir) / MANIFEST


def load_manifest(sweep_dir: str | os.PathLike) -> dict | None:
    path = manifest_path(sweep_dir)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise LzeBenchError(f"{path} is not UTF-8 text (byte {exc.start}); it was not written by lze-bench sweep: "
                            "restore it, or plan the sweep again in another directory") from exc
    except json.JSONDecodeError as exc:
        raise LzeBenchError(f"{path} is not valid JSON ({exc}); it was not written by lze-bench sweep") from exc
    if not isinstance(data, dict) or data.get("version") != VERSION or "jobs" not in data:
        raise LzeBenchError(f"{path} is not a lze-bench sweep manifest (version {VERSION})")
    return data


def require_manifest(sweep_dir: str | os.PathLike) -> dict:
    data = load_manifest(sweep_dir)
    if data is None:
        raise LzeBenchError(f"no {MANIFEST} in {str(sweep_dir)!r}; is it a sweep directory (see `lze-bench sweep`)?")
    return data


def save_manifest(sweep_dir: str | os.PathLike, data: dict) -> None:
    data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    atomic_write_json(manifest_path(sweep_dir), data)


def new_manifest(plan, command_line: list[str]) -> dict:
    return {
        "version": VERSION,
        "kind": getattr(plan, "kind", "train"),
        "name": plan.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": ["lze-bench", getattr(plan, "command", "sweep"), *command_line],
        "launcher": plan.launcher,
        **getattr(plan, "manifest_extra", {}),
        "pairs": {},
        "jobs": {},
    }


def merge_plan(data: dict, plan) -> dict:
    """Add the plan's jobs to a manifest; a job whose config changed under the same name is an error
    (jobs whose `config_hash` is None, eval jobs, are not checked: their settings key names their folder)."""
    for job in plan.jobs:
        old = data["jobs"].get(job.name)
        if old is not None and job.config_hash is not None and old.get("config_hash") != job.config_hash:
            raise LzeBenchError(
                f"job {job.name!r} in {plan.sweep_dir} was run with another config (hash {old['config_hash']}, "
                f"now {job.config_hash}); pass a new sweep_dir=PATH, or delete {old['run_dir']} and its manifest entry"
            )
        entry = old or {"status": "new", "job_id": None, "attempts": 0, "error": None}
        entry.update(job.manifest_fields(plan.sweep_dir))
        data["jobs"][job.name] = entry
    data["launcher"] = plan.launcher
    data.update(getattr(plan, "manifest_extra", {}))  # the recipe's notes as it reads now
    data["pairs"] = {}
    for name, entry in data["jobs"].items():
        if entry.get("pair_key"):
            data["pairs"].setdefault(entry["pair_key"], []).append(name)
    return data


def run_dir_of(sweep_dir: str | os.PathLike, entry: dict) -> Path:
    """The entry's run directory. Its `..` (an eval sweep's `../../<run>`) is collapsed by name, so the run is
    found before the eval sweep's own folder exists (`eval sweep_dir=... --dry-run`)."""
    return Path(os.path.normpath(Path(sweep_dir) / entry["run_dir"]))


def runs_of(root: str | os.PathLike) -> list[tuple[Path, dict]]:
    """(run dir, grid values) of every run under a sweep dir (its manifest's jobs) or, without a
    manifest, of every run directory (ledger.parquet) one or two levels under a plain folder."""
    from lze_bench.ledger import LEDGER_FILE

    root = Path(root)
    manifest = load_manifest(root)
    if manifest is not None:
        return [(run_dir_of(root, e), dict(e.get("axes", {}))) for _, e in sorted(manifest["jobs"].items())]
    found = sorted({p.parent for pattern in ("*/" + LEDGER_FILE, "*/*/" + LEDGER_FILE) for p in root.glob(pattern)})
    return [(path, {}) for path in found]


def result_pickle(sweep_dir: str | os.PathLike, job_id: str) -> Path:
    """submitit's result file of task 0 (JobPaths naming: <job_id>_0_result.pkl); never unpickled here."""
    return Path(sweep_dir) / SUBMITIT / f"{job_id}_0_result.pkl"


def outcome_path(folder: str | os.PathLike, job_id: str, task: int = 0) -> Path:
    """The outcome file a job writes into submitit's folder (job.recorded_outcome)."""
    return Path(folder) / f"{job_id}_{int(task)}_outcome.json"


def read_result(sweep_dir: str | os.PathLike, job_id: str) -> tuple[str, str] | None:
    """("success", "") or ("error", traceback text) from the job's outcome file; ("error", why) when only
    submitit's result pickle says it ended; None while neither exists."""
    path = outcome_path(Path(sweep_dir) / SUBMITIT, job_id)
    if path.exists():
        try:
            data = json.loads(path.read_text())
            return str(data["outcome"]), str(data.get("error") or "")
        except (OSError, ValueError, KeyError, TypeError) as exc:  # half-written or foreign
            return "error", f"unreadable outcome {path.name}: {exc}"
    pickle_path = result_pickle(sweep_dir, job_id)
    if pickle_path.exists():
        return "error", (f"the job ended without {path.name} (its submitit {pickle_path.name} is not unpickled: "
                         f"it could run code); see {SUBMITIT}/{job_id}_0_log.err")
    return None


def last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


LEFT_SCHEDULER = "the job left the scheduler without a result (killed, cancelled, timed out or lost)"


def derive_status(sweep_dir: str | os.PathLike, entry: dict, live: dict[str, str] | None) -> tuple[str, str | None]:
    """(status, error line) of one job; `live` maps job id -> scheduler state (queued/running),
    None when the scheduler could not be asked (status `unknown` until it answers).

    Finished files with the job still live are not done yet: the job writes after them (an eval job appends
    its `evals.parquet` rows after the result files that count as finished; a training job exits after
    DONE), so a sweep that returned then could leave a report without the last rows."""
    job_id = entry.get("job_id")
    if entry_done(sweep_dir, entry):
        if job_id and live and job_id in live:
            return live[job_id], None
        return "done", None
    if not job_id:
        return "new", None
    result = read_result(sweep_dir, job_id)
    if result is not None:
        outcome, value = result
        if outcome == "error":
            return "failed", last_line(value)
        missing = "some results are missing" if entry.get("kind") == "eval" else "its run dir has no DONE marker"
        return "failed", f"the job returned but {missing}"
    if live is None:
        return "unknown", "the scheduler did not answer (squeue)"
    if job_id in live:
        return live[job_id], None
    return "failed", LEFT_SCHEDULER


def checkpoints_finished(eval_dir: str | os.PathLike, entry: dict) -> int:
    """How many of an eval job's checkpoints have every benchmark's result under its settings key (under each
    sampling seed's key, and their aggregate, with several seeds: evaluation.seeds.checkpoint_finished)."""
    from lze_bench.evaluation.seeds import checkpoint_finished
    from lze_bench.rundir import EVALS

    run_dir = run_dir_of(eval_dir, entry)
    keys = entry.get("seed_settings_keys") or [entry["settings_key"]]  # manifests written before eval.seeds: one
    return sum(checkpoint_finished(run_dir / EVALS / checkpoint, keys, entry["settings_key"], entry["benchmarks"])
               for checkpoint in entry["checkpoints"])


def entry_done(sweep_dir: str | os.PathLike, entry: dict) -> bool:
    if entry.get("kind") == "eval":
        return checkpoints_finished(sweep_dir, entry) == len(entry["checkpoints"])
    return is_done(run_dir_of(sweep_dir, entry))


def ledger_position(sweep_dir: str | os.PathLike, entry: dict) -> tuple[int, float]:
    """(steps, cum_flops) of the run's ledger so far; (0, 0.0) when it has none yet."""
    path = run_dir_of(sweep_dir, entry) / "ledger.parquet"
    if not path.exists():
        return 0, 0.0
    try:
        column = read_parquet(path, columns=["cum_flops"])["cum_flops"]
        return len(column), float(column.iloc[-1]) if len(column) else 0.0
    except Exception:  # a damaged ledger: its run's own resume names it; a status table still shows
        return 0, 0.0


def done_fraction(entry: dict, status: str, steps: int, cum_flops: float) -> float:
    """How much of what the run was asked to do is done: 1 once done; with a FLOP budget the share of
    the budget spent (or of the step cap, if that binds first), else the share of the step cap."""
    if status == "done":
        return 1.0
    cap = int(entry.get("steps") or 0)
    by_steps = steps / cap if cap > 0 else 0.0
    budget = entry.get("flop_budget")
    by_flops = cum_flops / float(budget) if budget else 0.0
    return min(1.0, max(by_steps, by_flops))
