"""Accuracy against wall-clock time, and against GPU-hours on the scale path (report figures).

FLOPs are exact and machine-independent; wall-clock is what a lab pays and
what a selector's bookkeeping (extra passes, grading, generation rounds) costs
beyond FLOPs, so papers show both. Sources: the report's accuracy points
(`train_time_s`: the ledger's step times without the held-out evals run inside
them, data.py) and each run's hardware from its config.yaml (data.hardware).

* accuracy_vs_wallclock: every run; x in hours, minutes or seconds, the
  largest unit in which the longest run lasts at least 2. The caption says
  the hardware: "CPU" for local runs on the CPU (their torch threads), GPUs per run otherwise;
* accuracy_vs_gpu_hours: only when every run held a known number of GPUs
  (backend=openrlhf, or the local backend on CUDA): GPU-hours = wall-clock
  hours x the run's GPUs, which puts runs on different cluster shapes on one
  axis (idle GPUs included: they were held).

Wall-clock depends on the machine and on what else ran on it (sweeps run
several jobs at once on shared nodes); the captions say so.
"""

from __future__ import annotations

from pathlib import Path

from lze_bench.report.plot_style import Figure
from lze_bench.report.plots import accuracy_curves

UNITS = (("h", 3600.0), ("min", 60.0), ("s", 1.0))


def _unit(peak_s: float) -> tuple[str, float]:
    for name, seconds in UNITS:
        if peak_s / seconds >= 2 or seconds == 1.0:
            return name, seconds
    return "s", 1.0


def _hardware_text(runs) -> str:
    """How the runs were run, in words, from their configs."""
    gpus = {run.gpus for run in runs}
    if gpus == {0}:
        threads = {run.threads for run in runs}
        count = threads.pop() if len(threads) == 1 else 0
        per_run = (f"{count} torch thread{'s' if count > 1 else ''} per run" if count
                   else "torch threads per run as configured in backend.threads, 0 = all cores")
        return f"CPU, {per_run}"
    if None in gpus:
        return "hardware partly unknown (device=auto in some runs)"
    if 0 in gpus:
        return "mixed: some runs on the CPU, some on GPUs"
    counts = sorted(gpus)
    if len(counts) > 1:
        return f"{counts[0]}–{counts[-1]} GPUs per run"
    return f"{counts[0]} GPU{'s' if counts[0] > 1 else ''} per run"


def accuracy_vs_time(points, runs, styles: dict, out_dir: Path) -> list[Figure]:
    """The wall-clock figure, and the GPU-hours figure when every run's GPU count is known and > 0."""
    hardware = _hardware_text(runs)
    unit, seconds = _unit(float(points["train_time_s"].max()))
    where = "wall-clock, CPU" if hardware.startswith("CPU") else "wall-clock"
    figures = accuracy_curves(
        points.assign(x=points["train_time_s"] / seconds), "x", f"training time ({unit}, {where})",
        "accuracy_vs_wallclock", styles, out_dir,
        what=f"training wall-clock time ({hardware})",
        extra=("Time: the ledger's step times summed, held-out evals run during training excluded (Table 3's "
               "wall time includes them). Wall-clock "
               "depends on the machine and on the jobs that shared it (a sweep runs several at once); FLOPs do not."),
    )
    gpus = {(run.label, run.seed): run.gpus for run in runs}
    if all(isinstance(n, int) and n > 0 for n in gpus.values()):
        per_point = points.apply(lambda r: gpus[(r["label"], r["seed"])], axis=1)
        figures += accuracy_curves(
            points.assign(x=points["train_time_s"] / 3600.0 * per_point), "x", "GPU-hours (wall-clock × GPUs)",
            "accuracy_vs_gpu_hours", styles, out_dir,
            what=f"GPU-hours ({hardware})",
            extra=("GPU-hours: training wall-clock hours × the GPUs each run held (config.yaml: backend.num_nodes × "
                   "backend.gpus_per_node, else the launcher's), held-out evals excluded."),
        )
    return figures
