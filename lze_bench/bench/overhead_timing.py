"""Step and phase times of one OpenRLHF job from its TensorBoard events, and the interval of a ratio over rounds
(for `lze-bench bench overhead`, overhead.py).

A step's wall time is the interval between consecutive steps' first TensorBoard events: each driver writes its
step's scalars once per step, in `save_logs_and_checkpoints`, so the interval covers the whole loop (generation,
OpenRLHF's update, lze-bench's ledger and rollout writes, logging). The phases are OpenRLHF's own timers, which
both drivers log (`timing/generation`, `timing/make_experience`, `timing/ppo_train`, `timing/broadcast`; lze-bench
under `openrlhf/`, plain OpenRLHF under `train/`); what the interval holds beyond their sum (`timing/step_total`)
is the step's work outside OpenRLHF's timers: the log and checkpoint hook, the experiences' hand-over to the
policy actors.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

PHASES = ("generation", "make_experience", "ppo_train", "broadcast")
OUTSIDE = "outside_timers"  # interval - timing/step_total


@dataclass
class RunTiming:
    """One job's timed steps: the step intervals kept and, per phase, its value at those steps (seconds)."""

    intervals: list[float]
    phases: dict[str, list[float]]

    @property
    def step_s(self) -> float:
        return statistics.median(self.intervals)

    def phase_s(self, name: str) -> float | None:
        values = self.phases.get(name) or []
        return statistics.median(values) if values else None


def _value(value) -> float | None:
    """A scalar summary's value; None for another kind (OpenRLHF also logs a text sample each step)."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    from tensorboard.util import tensor_util

    array = tensor_util.make_ndarray(value.tensor)
    return float(array) if array.size == 1 and array.dtype.kind in "fiu" else None


def read_steps(folder: Path, recursive: bool) -> dict[int, dict]:
    """{step: {"wall": first event's wall time, tag: value, ...}} of the TensorBoard events in `folder` (with
    `recursive`, its subfolders too: OpenRLHF writes under a run-named one; lze-bench's `cum_flops/` subfolder
    counts FLOPs, not steps, and is not read)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps: dict[int, dict] = {}
    pattern = "events.out.tfevents.*"
    for path in sorted(folder.rglob(pattern) if recursive else folder.glob(pattern)):
        for event in EventFileLoader(str(path)).Load():
            if not event.HasField("summary"):
                continue
            step = steps.setdefault(event.step, {"wall": event.wall_time})
            step["wall"] = min(step["wall"], event.wall_time)
            for value in event.summary.value:
                number = _value(value)
                if number is not None:
                    step[value.tag] = number
    return steps


def run_timing(folder: Path, *, recursive: bool, prefix: str, steps: int, skip: int) -> RunTiming:
    """The first `steps` logged steps of a job: the intervals ending at steps `skip`.. (0-based; the first `skip`
    steps carry engine warm-up), and OpenRLHF's phase timers (tags `prefix + "timing/..."`) of the same steps."""
    logged = read_steps(folder, recursive)
    order = sorted(logged)[:steps]
    intervals, phases = [], {name: [] for name in (*PHASES, OUTSIDE)}
    for index in range(max(1, skip), len(order)):
        before, step = order[index - 1], order[index]
        values = logged[step]
        interval = values["wall"] - logged[before]["wall"]
        intervals.append(interval)
        for name in PHASES:
            if prefix + "timing/" + name in values:
                phases[name].append(values[prefix + "timing/" + name])
        if prefix + "timing/step_total" in values:
            phases[OUTSIDE].append(interval - values[prefix + "timing/step_total"])
    return RunTiming(intervals, phases)


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean of `values` (one per round; rounds are independent
    repetitions, so the interval comes from their spread)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
