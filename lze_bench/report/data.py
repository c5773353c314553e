"""Read a sweep's run directories into DataFrames for the report (files only: design.md "Data flows one way").

Sources, per run: `config.yaml` (selector, seed), `DONE` (stop reason, FLOP budget), `ledger.parquet`,
`rollouts.parquet` (+ part files) and `evals.parquet`, all through
lze_bench.ledger's readers. Nothing imports torch or a backend.

Choices where the sources are silent:
* which runs: a sweep directory's manifest names them (job -> run dir); any other
  folder is searched (two levels deep) for run directories (ledger.parquet).
  Only finished runs (DONE) are reported; unfinished ones are named in a warning,
  so a half-done sweep never mixes partial curves into final numbers;
* runs that differ in a setting besides selector, seed and the sweep's axes are
  refused in one line naming the keys (report/comparable.py): a paired delta
  between them would mix in that setting;
* a run's *label* (one line, one colour, one table row) is its selector, plus its
  other grid values when the sweep varied more than selector and seed
  (`lze-lr0.001`); seeds of one label are averaged;
* accuracy points: the ledger's `heldout_accuracy` (benchmark `heldout`, the
  synthetic held-out set, measured every eval_every steps), the initial policy's
  held-out accuracy from `heldout.jsonl` (its `updates == 0` row; the ledger has
  no row before the first update), and the evals.parquet rows the report uses
  (report/suites.py: one settings key per benchmark; benchmark name from the row). Ledger steps count from 0 and
  checkpoint `step_K` is saved after K updates (the local backend), so an eval of
  checkpoint K sits at ledger step K-1 (its cumulative FLOPs and wall time),
  and K = 0 (the initial policy) at 0 FLOPs, 0 s. The `step` column of the
  accuracy points is the ledger step (-1 for the initial policy). evals.parquet's
  own `cum_flops` column is not used, so every source goes through this one rule;
* wall-clock: `train_time_s`, the ledger's step times without the held-out
  evaluations run inside them (cumulative `time_step_s - time_eval_s`), so a
  selector's curve is not shifted by how many evals its FLOP schedule
  triggered; evals of `lze-bench eval` never were in the ledger's times;
* hardware, from config.yaml: backend=openrlhf uses (backend.num_nodes or
  launcher.nodes) x (backend.gpus_per_node or launcher.gpus_per_node) GPUs for
  its whole wall-clock; the local backend one GPU with device=cuda[:N], none
  (CPU, `backend.threads` torch threads, 0 = all cores) with device=cpu, and
  an unknown count (None) with device=auto.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.errors import LzeBenchError, damaged_file
from lze_bench.ledger import LEDGER_FILE, read_ledger, read_rollouts
from lze_bench.report.comparable import check_comparable
from lze_bench.report.offline import offline_flops
from lze_bench.rundir import CONFIG, DONE, is_done

log = logging.getLogger(__name__)

HELDOUT = "heldout"
HELDOUT_LOG = "heldout.jsonl"  # the local backend's held-out evals, `updates` = 0 for the initial policy


@dataclass
class Run:
    label: str
    selector: str
    seed: int
    run_dir: Path
    ledger: pd.DataFrame
    done: dict  # the DONE summary: stopped_by ("budget" | "steps"), flop_budget, ... ({} for older runs)
    gpus: int | None = 0  # GPUs the run held throughout (0: a CPU run; None: not known from config.yaml)
    threads: int = 0  # CPU runs: torch threads (0 = all cores)


def _read_config(run_dir: Path) -> dict:
    import yaml

    path = run_dir / CONFIG
    if not path.exists():
        return {}
    fix = "restore it (train writes it when the run starts) or move the run out of the folder being reported"
    try:
        with path.open() as handle:
            cfg = yaml.safe_load(handle) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise damaged_file(path, exc, f"it is not valid YAML; {fix}") from exc
    if not isinstance(cfg, dict):  # a YAML list or scalar: the run's settings cannot be read from it
        raise damaged_file(path, TypeError(f"holds a {type(cfg).__name__}, not a mapping of settings"), fix)
    return cfg


def _label(axes: dict, selector: str) -> str:
    from lze_bench.sweep.grid import job_name

    rest = {k: v for k, v in axes.items() if k not in ("seed", "selector")}
    return job_name({"selector": selector, **rest}) if rest else selector


def discover(root: Path) -> list[tuple[Path, dict]]:
    """(run dir, grid values) of every run under a sweep dir (manifest) or a plain folder (sweep.manifest.runs_of)."""
    from lze_bench.sweep.manifest import runs_of

    return runs_of(root)


def load_runs(root: str | Path) -> list[Run]:
    root = Path(root)
    if not root.is_dir():
        raise LzeBenchError(f"{str(root)!r} is not a directory; pass a sweep directory or a folder of run directories")
    runs, unfinished, configs = [], [], []
    for run_dir, axes in discover(root):
        if not is_done(run_dir) or not (run_dir / LEDGER_FILE).exists():
            unfinished.append(run_dir.name)
            continue
        cfg = _read_config(run_dir)
        selector = str((cfg.get("selector") or {}).get("name") or axes.get("selector") or "unknown")
        seed = int(cfg.get("seed", axes.get("seed", 0)))
        ledger = read_ledger(run_dir)
        ledger["train_time_s"] = (ledger["time_step_s"] - ledger["time_eval_s"]).cumsum()
        gpus, threads = hardware(cfg)
        runs.append(Run(_label(axes, selector), selector, seed, run_dir, ledger, _read_done(run_dir), gpus, threads))
        configs.append((run_dir, {k: v for k, v in axes.items() if k not in ("seed", "selector")}, cfg))
    if unfinished:
        log.warning("left out %d unfinished run(s) (no DONE): %s", len(unfinished), ", ".join(unfinished))
    if not runs:
        raise LzeBenchError(f"no finished run (ledger.parquet + DONE) under {str(root)!r}")
    seen = {}
    for run in runs:
        key = (run.label, run.seed)
        if key in seen:
            raise LzeBenchError(f"runs {seen[key]} and {run.run_dir} are both {run.label} seed {run.seed}; "
                                "report one of them (move the other out of the folder)")
        seen[key] = run.run_dir
    check_comparable(configs)  # before any delta: runs that differ in more than selector and seed are refused
    return runs


def hardware(cfg: dict) -> tuple[int | None, int]:
    """(GPUs, CPU threads) of a run from its config.yaml (see the module docstring)."""
    backend, launcher = cfg.get("backend") or {}, cfg.get("launcher") or {}
    if backend.get("name") == "openrlhf":
        per_node = backend.get("gpus_per_node") or launcher.get("gpus_per_node")
        nodes = backend.get("num_nodes") or launcher.get("nodes") or 1
        return (int(per_node) * int(nodes) if per_node else None), 0
    device = str(cfg.get("device", "cpu"))
    if device.startswith("cuda"):
        return 1, 0
    return (0 if device == "cpu" else None), int(backend.get("threads") or 0)


def _read_done(run_dir: Path) -> dict:
    """The run's DONE summary; one line naming the file when it is not a JSON object (it is left as is).

    An empty DONE (older runs) is an empty summary, which is also the way out offered for a damaged one:
    the run's curves do not depend on it, only its stop reason and FLOP budget do."""
    import json

    path = run_dir / DONE
    try:
        text = path.read_text().strip()
        summary = json.loads(text) if text else {}
        if not isinstance(summary, dict):
            raise ValueError(f"a JSON {type(summary).__name__}, not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise damaged_file(path, exc, "restore it from a copy, or empty it (the report then shows that run without "
                                      "its stop reason and FLOP budget)") from exc
    return summary


def heldout_problems(runs: list[Run]) -> int | None:
    """Problems in the held-out eval (heldout.jsonl `problems`), if every run that logs it agrees."""
    import json

    sizes = set()
    for run in runs:
        path = run.run_dir / HELDOUT_LOG
        if path.exists():
            sizes |= {json.loads(line).get("problems") for line in path.read_text().splitlines() if line.strip()}
    sizes.discard(None)
    return int(sizes.pop()) if len(sizes) == 1 else None


def flop_budget(runs: list[Run]) -> float | None:
    """The FLOP budget every run was given (DONE `flop_budget`), or None when runs differ or have none."""
    budgets = {run.done.get("flop_budget") for run in runs}
    return float(budgets.pop()) if len(budgets) == 1 and None not in budgets else None


def no_common_budget(runs: list[Run]) -> str:
    """Why the runs have no common FLOP budget, in words: none had one (they stopped after their step counts),
    or they were given different ones (each budget and its runs)."""
    from lze_bench.report.formats import sci

    by_budget: dict = {}
    for run in runs:
        by_budget.setdefault(run.done.get("flop_budget"), []).append(f"{run.label} seed {run.seed}")
    consequence = "Table 1 is then not an equal-compute comparison."
    if set(by_budget) == {None}:
        return ("No common `trainer.flop_budget`: runs stopped after their step counts, so selectors that spend "
                f"fewer FLOPs per step also got less compute; {consequence}")
    groups = sorted(by_budget.items(), key=lambda item: (item[0] is None, item[0] or 0.0))
    parts = [f"{sci(float(b)) + ' FLOPs' if b is not None else 'none (its step count)'}: {', '.join(sorted(names))}"
             for b, names in groups]
    return (f"No common `trainer.flop_budget`: the runs were given different budgets ({'; '.join(parts)}), so "
            f"they got different compute; {consequence}")


def after_updates(ledger: pd.DataFrame, updates: int, column: str) -> float:
    """`cum_flops`/`cum_time_s` after `updates` actor updates: the ledger row of step updates-1
    (ledger steps count from 0; checkpoint step_K is saved after K updates); 0 for the initial policy."""
    if updates <= 0:
        return 0.0
    rows = ledger.loc[ledger["step"] == updates - 1, column]
    return float(rows.iloc[0]) if len(rows) else float("nan")


def initial_heldout(run_dir: Path) -> float | None:
    """The initial policy's held-out accuracy (`updates == 0`) from the local backend's heldout.jsonl, if any."""
    import json

    path = run_dir / HELDOUT_LOG
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if row.get("updates") == 0 and row.get("accuracy") is not None:
            return float(row["accuracy"])
    return None


def accuracy_points(runs: list[Run], evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (run, benchmark, eval point): label, selector, seed, benchmark, step, cum_flops, cum_time_s,
    train_time_s (wall-clock without held-out evals), accuracy.

    `evals`: the eval results to use (report.suites.choose: one settings key per benchmark);
    None: every run's results, when each benchmark has one settings key.
    """
    from lze_bench.report.suites import choose, eval_results

    evals = choose(eval_results(runs)) if evals is None else evals
    rows = []
    for run in runs:
        led = run.ledger
        initial = initial_heldout(run.run_dir)
        if initial is not None:
            rows.append((run.label, run.selector, run.seed, HELDOUT, -1, 0.0, 0.0, 0.0, initial))
        held = led[led["heldout_accuracy"].notna()]
        for _, r in held.iterrows():
            rows.append((run.label, run.selector, run.seed, HELDOUT, int(r["step"]), float(r["cum_flops"]),
                         float(r["cum_time_s"]), float(r["train_time_s"]), float(r["heldout_accuracy"])))
        for _, r in evals[evals["run_dir"] == str(run.run_dir)].iterrows() if len(evals) else ():
            step = int(r["step"])
            rows.append((run.label, run.selector, run.seed, str(r["benchmark"]), step - 1,
                         after_updates(led, step, "cum_flops"), after_updates(led, step, "cum_time_s"),
                         after_updates(led, step, "train_time_s"), float(r["accuracy"])))
    columns = ["label", "selector", "seed", "benchmark", "step", "cum_flops", "cum_time_s", "train_time_s", "accuracy"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["label", "seed", "benchmark", "step"], kind="stable").reset_index(drop=True)


def run_summary(runs: list[Run], points: pd.DataFrame) -> pd.DataFrame:
    """One row per run: final accuracy per benchmark and the ledger's totals (the CSV of all per-seed numbers)."""
    rows = []
    for run in runs:
        led = run.ledger
        row = {
            "label": run.label, "selector": run.selector, "seed": run.seed, "run": run.run_dir.name,
            "steps": int(led["step"].max()) + 1 if len(led) else 0,
            "flops_rollout": float(led["flops_rollout"].sum()),
            "flops_logprob": float(led["flops_logprob"].sum()),
            "flops_train": float(led["flops_train"].sum()),
            "flops_select": float(led["flops_select"].sum()),
            "flops_total": float(led["flops_total"].sum()),
            "prompts_considered": int(led["prompts_considered"].sum()),
            "prompts_rolled_out": int(led["prompts_rolled_out"].sum()),
            "groups_kept": int(led["groups_kept"].sum()),
            "kept_fraction": _ratio(led["groups_kept"].sum(), led["prompts_rolled_out"].sum()),
            "rolled_out_fraction": _ratio(led["prompts_rolled_out"].sum(), led["prompts_considered"].sum()),
            "wall_time_s": float(led["time_step_s"].sum()),
            "gpus": run.gpus,
            "gen_rounds_per_step": float(led["gen_rounds"].mean()) if len(led) else float("nan"),
            "generated_per_step": float(led["samples"].mean()) if len(led) else float("nan"),
            "trained_per_step": _mean_of(led, "responses_trained"),
            "prompts_dropped": int(led["prompts_dropped"].sum()),
            "offline_flops": offline_flops(run.run_dir),
            "stopped_by": run.done.get("stopped_by"),
        }
        mine = points[(points["label"] == run.label) & (points["seed"] == run.seed)]
        for bench, group in mine.groupby("benchmark"):
            row[f"final_accuracy_{bench}"] = float(group.sort_values("step")["accuracy"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["label", "seed"], kind="stable").reset_index(drop=True)


def _mean_of(ledger: pd.DataFrame, column: str) -> float:
    """Mean per step of a column the backends write beside LEDGER_COLUMNS (`responses_trained`), over the steps
    that hold it; NaN (Table 3 shows "–") for a ledger written before the column existed."""
    return float(ledger[column].mean()) if column in ledger and ledger[column].notna().any() else float("nan")


def _ratio(num, den) -> float:
    return float(num) / float(den) if float(den) > 0 else float("nan")


def per_step(runs: list[Run]) -> pd.DataFrame:
    """Per run and step: kept fraction (groups kept / prompts rolled out) and zero-variance fraction."""
    frames = []
    for run in runs:
        led = run.ledger
        frames.append(pd.DataFrame({
            "label": run.label, "seed": run.seed, "step": led["step"].to_numpy(),
            "kept_fraction": np.where(led["prompts_rolled_out"] > 0,
                                      led["groups_kept"] / led["prompts_rolled_out"].clip(lower=1), np.nan),
            "zero_variance_frac": led["zero_variance_frac"].to_numpy(),
        }))
    return pd.concat(frames, ignore_index=True)


def pass_rates(runs: list[Run]) -> pd.DataFrame:
    """Per rolled-out prompt and step: its pass rate = mean reward of its n responses (rewards in [0, 1])."""
    frames = []
    for run in runs:
        rolls = read_rollouts(run.run_dir)
        if rolls.empty:
            continue
        rates = [float(np.mean(r)) if len(r) else np.nan for r in rolls["rewards"]]
        frames.append(pd.DataFrame({"label": run.label, "seed": run.seed, "step": rolls["step"].astype(int),
                                    "pass_rate": rates}))
    if not frames:
        return pd.DataFrame(columns=["label", "seed", "step", "pass_rate"])
    return pd.concat(frames, ignore_index=True)
