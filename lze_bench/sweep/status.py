"""Tables of a sweep's jobs (and of its eval sweeps): `sweep status DIR [--watch]`, the live view while waiting, `--dry-run`.

CLI-facing output (rich). On a terminal the table refreshes in place; when
stdout is not a terminal (CI, logs) each status change is one printed line,
so logs stay readable.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lze_bench.errors import LzeBenchError
from lze_bench.registry import display_order
from lze_bench.rundir import read_progress
from lze_bench.sweep.manifest import (FINAL, checkpoints_finished, derive_status, done_fraction, ledger_position,
                                      require_manifest, run_dir_of)

STYLE = {"done": "green", "failed": "red", "running": "cyan", "queued": "yellow", "new": "dim", "unknown": "magenta"}


def jobs_table(sweep_dir: Path, data: dict, title: str | None = None) -> Group:
    """The jobs table, then one line per failed job with its error (errors are too long for a column).

    `steps` is the ledger's steps against the step cap, or, before the first step, what the
    run is doing (its progress.json: "warm start 120/300"); `FLOPs` is `cum_flops` against the
    run's FLOP budget. The caption counts the work the runs were asked to do: the share of each
    run's FLOP budget when one is set (a step cap that binds first, or a finished run, counts
    as all of it), else of its step cap."""
    if data.get("kind") == "eval":
        return eval_jobs_table(sweep_dir, data, title)
    table = Table(title=title or f"sweep {data.get('name', '')}: {sweep_dir}")
    for column in ("job", "selector", "seed", "status", "steps", "FLOPs", "job id", "tries", "pair"):
        table.add_column(column, overflow="fold")
    pair_index = pair_labels(e.get("pair_key") for _, e in sorted_jobs(data))
    work = []  # (done fraction, flop budget or None, steps made, step cap, cum_flops) per job
    for name, entry in sorted_jobs(data):
        status = entry.get("status", "new")
        made, cum_flops = ledger_position(sweep_dir, entry)
        budget = entry.get("flop_budget")
        work.append((done_fraction(entry, status, made, cum_flops), budget, made, int(entry.get("steps", 0)),
                     cum_flops))
        flops = f"{cum_flops:.2g}/{float(budget):.2g}" if budget else (f"{cum_flops:.2g}" if made else "-")
        table.add_row(
            name, entry.get("selector", ""), str(entry.get("seed", "")), f"[{STYLE.get(status, '')}]{status}[/]",
            steps_cell(sweep_dir, entry, status, made), flops, str(entry.get("job_id") or "-"),
            str(entry.get("attempts", 0)), f"P{pair_index.get(entry.get('pair_key'), '?')}",
        )
    counts = Counter(e.get("status", "new") for e in data["jobs"].values())
    table.caption = (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {work_summary(work)}; "
                     "same Pk = paired")
    return Group(table, *failure_lines(data))


def eval_jobs_table(sweep_dir: Path, data: dict, title: str | None = None) -> Group:
    """An eval sweep's jobs (`kind: eval`, lze_bench/sweep/evals.py): checkpoints with every benchmark's
    result under the settings key, against the job's checkpoints; the caption names the suite and settings."""
    table = Table(title=title or f"evals {data.get('name', '')}: {sweep_dir}")
    for column in ("job", "selector", "seed", "status", "checkpoints", "job id", "tries"):
        table.add_column(column, overflow="fold")
    made_total = planned_total = 0
    for name, entry in sorted_jobs(data):
        status = entry.get("status", "new")
        made, planned = checkpoints_finished(sweep_dir, entry), len(entry["checkpoints"])
        made_total, planned_total = made_total + made, planned_total + planned
        table.add_row(name, entry.get("selector", ""), str(entry.get("seed", "")),
                      f"[{STYLE.get(status, '')}]{status}[/]", f"{made}/{planned}", str(entry.get("job_id") or "-"),
                      str(entry.get("attempts", 0)))
    counts = Counter(e.get("status", "new") for e in data["jobs"].values())
    share = f"{100 * made_total / planned_total:.0f}%" if planned_total else "-"
    table.caption = (", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                     + f"; checkpoints {made_total}/{planned_total} ({share}); {data.get('settings', '')}")
    return Group(table, *failure_lines(data))


def failure_lines(data: dict) -> list[Text]:
    return [Text(f"{name}: {entry['error']}", style="red") for name, entry in data["jobs"].items()
            if entry.get("status") in ("failed", "unknown") and entry.get("error")]


def steps_cell(sweep_dir: Path, entry: dict, status: str, made: int) -> str:
    """`made/cap`, or before the first ledger row of a live run, what it is doing."""
    cell = f"{made}/{entry.get('steps', '?')}"
    if made or status not in ("queued", "running"):
        return cell
    now = read_progress(run_dir_of(sweep_dir, entry))
    if not now or now.get("phase") == "training":
        return cell
    phase = str(now.get("phase"))
    if now.get("note") == "another job is building it":
        phase = "waiting for the warm start"
    if now.get("total"):
        phase += f" {now.get('done') or 0}/{now['total']}"
    return f"{cell} ({phase})"


def work_summary(work: list[tuple[float, float | None, int, int, float]]) -> str:
    """The caption's account of the work done, against what the runs were asked to do."""
    if not work:
        return "nothing planned"
    budgets = [budget for _, budget, _, _, _ in work]
    if all(budgets):
        asked = sum(float(b) for b in budgets)
        done = sum(fraction * float(b) for fraction, b, _, _, _ in work)
        spent = sum(cum for *_, cum in work)
        return f"FLOP budgets {100 * done / asked:.0f}% done ({spent:.3g} of {asked:.3g} FLOPs spent)"
    if not any(budgets):
        made, caps = sum(m for _, _, m, _, _ in work), sum(c for _, _, _, c, _ in work)
        share = sum(fraction * cap for fraction, _, _, cap, _ in work) / caps if caps else 0.0
        return f"steps {made}/{caps} ({100 * share:.0f}% done)"
    mean = sum(fraction for fraction, *_ in work) / len(work)
    return f"{100 * mean:.0f}% done (of the FLOP budget where set, else of the step cap)"


def sorted_jobs(data: dict) -> list[tuple[str, dict]]:
    """Jobs in the reports' selector order (lze_bench.registry.display_order), then seed, then name
    (the manifest itself is written with sorted keys)."""
    rank = {name: i for i, name in enumerate(display_order({e.get("selector", "") for e in data["jobs"].values()}))}
    return sorted(data["jobs"].items(), key=lambda kv: (rank.get(kv[1].get("selector", ""), 99),
                                                        int(kv[1].get("seed", 0)), kv[0]))


def pair_labels(keys) -> dict[str, int]:
    """Pair key -> k of its label `Pk`, numbered in order of first appearance."""
    labels: dict[str, int] = {}
    for key in keys:
        labels.setdefault(key, len(labels))
    return labels


class SweepDisplay:
    """Live table on a terminal; one line per status change otherwise."""

    def __init__(self, sweep_dir: Path, data: dict, console: Console | None = None):
        self.sweep_dir, self.data = Path(sweep_dir), data
        self.console = console or Console()
        self.live = Live(console=self.console, refresh_per_second=1) if self.console.is_terminal else None
        self.seen: dict[str, str] = {}

    def __enter__(self):
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live:  # the live view's last frame stays on screen
            self.live.update(jobs_table(self.sweep_dir, self.data))
            self.live.__exit__(*exc)
        else:
            self.console.print(jobs_table(self.sweep_dir, self.data))
        return False

    def update(self, data: dict) -> None:
        self.data = data
        if self.live:
            self.live.update(jobs_table(self.sweep_dir, data))
            return
        for name, entry in data["jobs"].items():
            status = entry.get("status", "new")
            phase = self._phase(entry) if status == "running" else None
            if self.seen.get(name) != (status, phase):
                self.seen[name] = (status, phase)
                error = f" ({entry['error']})" if status == "failed" and entry.get("error") else ""
                doing = f": {phase}" if phase else ""
                self.console.print(f"[sweep] {name}: {status} (job {entry.get('job_id') or '-'}){doing}{error}",
                                   markup=False, highlight=False, soft_wrap=True)  # one log line each

    def _phase(self, entry: dict) -> str | None:
        """What a running job does before its first step (progress.json), for one line per change."""
        now = read_progress(run_dir_of(self.sweep_dir, entry)) or {}
        if now.get("note") == "another job is building it":
            return "waiting for the warm start another job is building"
        if now.get("phase") == "warm start" and now.get("total"):
            return f"warm start ({now['total']} steps, cached for every run of this recipe)"
        return now.get("phase")


def current(sweep_dir: Path) -> dict:
    """The manifest with every status derived now (read-only: the submitter owns the file)."""
    from lze_bench.sweep.scheduler import scheduler_states

    data = require_manifest(sweep_dir)
    kind = data.get("launcher", {}).get("name", "local")
    live = scheduler_states(kind, [e["job_id"] for e in data["jobs"].values() if e.get("job_id")])
    for entry in data["jobs"].values():
        entry["status"], entry["error"] = derive_status(sweep_dir, entry, live)
    return data


def manifest_dirs(sweep_dir: Path) -> list[Path]:
    """The folders with a manifest to show for DIR: DIR itself (a training sweep, or one eval
    sweep's folder) and each eval sweep of it (`DIR/evals/*/manifest.json`)."""
    from lze_bench.sweep.manifest import MANIFEST

    found = [sweep_dir] if (sweep_dir / MANIFEST).exists() else []
    found += sorted(path.parent for path in sweep_dir.glob(f"evals/*/{MANIFEST}"))
    if not found:
        require_manifest(sweep_dir)  # the usual one-line error
    return found


def status_group(sweep_dir: Path) -> tuple[Group, bool, list[str]]:
    """Every table for DIR; whether no job in them can progress any more (every job ended, or what has not
    is never submitted: `stalled`); and the lines saying why a watch stops or keeps waiting."""
    tables, ended, notes = [], True, []
    for folder in manifest_dirs(sweep_dir):
        data = current(folder)
        tables.append(jobs_table(folder, data))
        stuck, note = stalled(folder, data)
        ended = ended and stuck
        notes += [note] if note else []
    return Group(*tables), ended, notes


def stalled(folder: Path, data: dict) -> tuple[bool, str | None]:
    """(whether no job of this manifest can progress, the line that says why, or why a watch waits).

    A `new` job is submitted only by the `lze-bench sweep` that holds the folder's lock (it throttles local jobs,
    and a failed submission, e.g. `launcher=slurm` without srun, leaves every job new): with no such process the
    job never moves, so waiting on it would never end."""
    from lze_bench.runlock import is_held

    counts = Counter(entry["status"] for entry in data["jobs"].values())
    if counts["unknown"]:
        return False, f"{folder}: waiting: the scheduler did not answer about {counts['unknown']} job(s) (squeue)"
    if counts["queued"] or counts["running"]:
        return False, None
    if not counts["new"]:
        return True, None
    if is_held(folder, "sweep"):
        return False, f"{folder}: waiting: {counts['new']} new job(s) are still to be submitted by the running sweep"
    command = " ".join(data.get("command") or ["lze-bench", "sweep", "..."])
    return True, (f"{folder}: {counts['new']} job(s) were never submitted and no lze-bench sweep is running for "
                  f"this directory; nothing will change them: run the sweep again to submit them ({command})")


def show_status(sweep_dir: Path, watch: bool = False, every_s: float = 5.0) -> None:
    """`sweep status DIR [--watch] [--every SECONDS]`: the training jobs, then each eval sweep's jobs,
    refreshed until all end with `watch`."""
    sweep_dir = Path(sweep_dir)
    console = Console()
    if not watch:
        group, _, notes = status_group(sweep_dir)
        console.print(group)
        for note in notes:
            console.print(note, markup=False, highlight=False, soft_wrap=True)
        return
    with Live(status_group(sweep_dir)[0], console=console, refresh_per_second=1) as live:
        while True:
            group, ended, notes = status_group(sweep_dir)
            live.update(Group(group, *(Text(note) for note in notes)))  # why it stops, or why it still waits
            if ended:
                break
            time.sleep(every_s)


def print_plan(plan, sweep_dir: Path, sbatch_script: str | None = None, then: str | None = None,
               before: list[str] = ()) -> None:
    """`--dry-run`: the jobs, their pairing, where each run stops and checkpoints (lze_bench.budget), the steps
    that run before them (`before`: ASTRAL's head step, sweep/heads.py), the eval step that follows (`then`,
    the recipe's `eval`) and (Slurm) the sbatch script; nothing is written."""
    from lze_bench.sweep.manifest import load_manifest

    console = Console()
    old = (load_manifest(plan.sweep_dir) or {}).get("jobs", {})
    table = Table(title=f"sweep {plan.name}: {len(plan.jobs)} jobs -> {sweep_dir} (dry run: nothing submitted)")
    for column in ("job", "grid values", "run dir", "config", "pair", "now"):
        table.add_column(column, overflow="fold")
    pair_index = pair_labels(job.pair_key for job in plan.jobs)
    for job in plan.jobs:
        axes = " ".join(f"{k}={v}" for k, v in job.axes.items())
        now = planned_status(job, old.get(job.name))
        table.add_row(job.name, axes, str(job.run_dir.relative_to(plan.sweep_dir)), job.config_hash, f"P{pair_index[job.pair_key]}", now)
    console.print(table)
    changed = [job.name for job in plan.jobs if config_changed(job, old.get(job.name))]
    grid_values = {f"{k}={v}" for j in plan.jobs for k, v in j.axes.items()}
    in_effect = {job.name: effective(job.overrides) for job in plan.jobs}
    common = set.intersection(*(set(in_effect[job.name]) for job in plan.jobs)) - grid_values if plan.jobs else set()
    console.print(f"every job: {' '.join(sorted(common)) or '(defaults)'}", highlight=False)
    for selector in sorted({job.selector for job in plan.jobs}):
        extra = sorted({o for job in plan.jobs if job.selector == selector for o in in_effect[job.name]}
                       - common - grid_values)
        if extra:
            console.print(f"{selector} jobs also: {' '.join(extra)}", highlight=False)
    for key, names in plan.pairs.items():
        console.print(f"P{pair_index[key]} (paired: same data order and warm start): {', '.join(names)}", highlight=False)
    for line, names in compute_plans(plan).items():
        console.print(f"{'every job' if len(names) == len(plan.jobs) else ', '.join(names)}: {line}", highlight=False)
    for line in before:
        console.print(f"before the runs, {line}" if not line.startswith(" ") else line, highlight=False,
                      soft_wrap=True, markup=False)  # "[built (reused)]" is text, not a style tag
    launcher = plan.launcher
    console.print(f"launcher: {launcher.get('name')} (array_parallelism={launcher.get('array_parallelism')}, "
                  f"cpus_per_task={launcher.get('cpus_per_task')}, timeout_min={launcher.get('timeout_min')})", highlight=False)
    if then:
        console.print(f"then evaluate (the recipe's eval step): {then}", highlight=False, soft_wrap=True)
    if sbatch_script is not None:
        console.print("sbatch script submitit would submit:", highlight=False)
        console.print(sbatch_script, markup=False, highlight=False, soft_wrap=True)
    if changed:  # the real run refuses before submitting anything (manifest.merge_plan): say so, and exit as it would
        raise LzeBenchError(
            f"the real run would refuse: {len(changed)} job(s) in {plan.sweep_dir} were run with another config "
            f"({', '.join(changed)}); pass a new sweep_dir=PATH, or delete their run dirs and manifest entries")


def effective(overrides: list[str]) -> list[str]:
    """The overrides that take effect: of several for one key (a recipe's `trainer.steps=2`, then the command
    line's `trainer.steps=4`) only the last, which Hydra applies over the others."""
    last = {str(item).partition("=")[0].lstrip("+~"): str(item) for item in overrides}
    return list(last.values())


def config_changed(job, entry: dict | None) -> bool:
    """Whether the manifest has this job under another config hash (the real run refuses it: merge_plan)."""
    return entry is not None and job.config_hash is not None and entry.get("config_hash") != job.config_hash


def planned_status(job, entry: dict | None) -> str:
    """What the real run will do with the job: refuse it (config changed), skip it (done) or (re)submit it."""
    if config_changed(job, entry):
        return f"config changed (was {entry.get('config_hash')}): refused"
    if (job.run_dir / "DONE").exists():
        return "done (skip)"
    return (entry or {}).get("status", "new")


def compute_plans(plan) -> dict[str, list[str]]:
    """Each distinct `budget.compute_plan` line of the planned jobs -> the jobs it describes (each job's line
    was taken when `grid.plan_jobs` composed its config: composing every job again doubled a dry run's time)."""
    lines: dict[str, list[str]] = {}
    for job in plan.jobs:
        lines.setdefault(job.compute, []).append(job.name)
    return lines


def print_eval_plan(plan, sbatch_script: str | None = None) -> None:
    """`eval sweep_dir=DIR --dry-run`: the eval jobs, what is already finished, the data, the launcher and
    (Slurm) the sbatch script; nothing is written."""
    from lze_bench.evaluation.settings import describe
    from lze_bench.sweep.manifest import checkpoints_finished

    console = Console(width=max(120, Console().width))
    table = Table(title=f"evals {plan.name}: {len(plan.jobs)} jobs -> {plan.sweep_dir} (dry run: nothing submitted)")
    for column in ("job", "selector", "seed", "checkpoints", "now"):
        table.add_column(column, overflow="fold")
    todo = 0
    for job in plan.jobs:
        made = checkpoints_finished(plan.sweep_dir, job.manifest_fields(plan.sweep_dir))
        todo += made < len(job.checkpoints)
        now = "done (skip)" if made == len(job.checkpoints) else f"{made}/{len(job.checkpoints)} finished"
        table.add_row(job.name, job.selector, str(job.seed), " ".join(job.checkpoints), now)
    console.print(table)
    console.print(f"suite {plan.suite}, settings {plan.key}: {describe(plan.settings)}", highlight=False)
    console.print("benchmarks (checked): " + ", ".join(f"{name} {n} problems" for name, n in plan.problems.items()),
                  highlight=False)
    if plan.pending:
        console.print(f"left out (not finished): {', '.join(plan.pending)}", highlight=False)
    launcher = plan.launcher
    console.print(f"launcher: {launcher.get('name')} (array_parallelism={launcher.get('array_parallelism')}, "
                  f"gpus_per_node={launcher.get('gpus_per_node', 0)}, cpus_per_task={launcher.get('cpus_per_task')}, "
                  f"timeout_min={launcher.get('timeout_min')}); {todo} job(s) to submit", highlight=False)
    if sbatch_script is not None:
        console.print("sbatch script submitit would submit:", highlight=False)
        console.print(sbatch_script, markup=False, highlight=False, soft_wrap=True)
