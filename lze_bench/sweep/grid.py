"""Grid expansion: a sweep recipe plus command-line overrides -> one planned job per grid point.

Every job is composed here, in the submitting process, as the `train` config
it will run (so a bad key fails before anything is submitted) and gets:

* a name from its grid values (`lze-s1`, `uniform-s0-lr0.001`): selector first,
  `s<seed>`, then `<leaf><value>` for other axes;
* `run_dir = <sweep_dir>/runs/<name>`;
* `config_hash`: rundir.config_hash of the resolved config (without run_dir and
  launcher), which detects a re-run whose config changed under the same name;
* `pair_key`: the same hash with the selector removed. Jobs with equal pair keys
  differ only in the selector, so they share the data order (seeded by `seed`)
  and the warm start (cached by its config hash): they are *paired*.
  The manifest lists each pair group.

Each job also gets its tracker names (`tracking.group` = the sweep name,
`tracking.name` = the job name, tag `pair:<pair_key>`), outside every hash, so
`logger=[wandb]` shows a sweep as one W&B group whose runs pair by seed.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from lze_bench.errors import LzeBenchError
from lze_bench.rundir import config_hash

log = logging.getLogger(__name__)

RUNS = "runs"  # run dirs live in <sweep_dir>/runs/<job name>
NOT_SWEEPABLE = ("launcher", "run_dir")


@dataclass
class PlannedJob:
    name: str
    overrides: list[str]  # train overrides, run_dir excluded
    axes: dict[str, str]  # grid key -> value of this job
    run_dir: Path
    config_hash: str
    pair_key: str
    selector: str
    seed: int
    steps: int
    flop_budget: float | None = None  # trainer.flop_budget: the work the run is asked to do, when set
    compute: str = ""  # budget.compute_plan of its trainer: where it stops, where it checkpoints (dry runs print it)
    # jobs with one non-empty value build one cached artifact in their first run (ASTRAL's trained head on the local
    # backend): a local sweep starts the others of the group once one has finished (submit.startable)
    build_group: str = ""

    @property
    def train_overrides(self) -> list[str]:
        return [*self.overrides, f"run_dir={self.run_dir}"]

    def manifest_fields(self, sweep_dir: Path) -> dict:
        """This job's entry in the sweep manifest (manifest.merge_plan)."""
        return {"overrides": self.overrides, "axes": self.axes, "run_dir": str(Path(self.run_dir).relative_to(sweep_dir)),
                "config_hash": self.config_hash, "pair_key": self.pair_key, "selector": self.selector,
                "seed": self.seed, "steps": self.steps, "flop_budget": self.flop_budget}

    def call(self):
        """The picklable callable submitit runs (job.TrainJob)."""
        from lze_bench.sweep.job import TrainJob

        return TrainJob(self.overrides, str(self.run_dir), self.config_hash)


@dataclass
class SweepPlan:
    name: str
    sweep_dir: Path
    jobs: list[PlannedJob]
    launcher: dict  # the resolved launcher node shared by every job
    pairs: dict[str, list[str]] = field(default_factory=dict)  # pair_key -> job names
    manifest_extra: dict = field(default_factory=dict)  # the recipe's `notes`, kept in manifest.json for the report


def _value_str(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def grid_axes(spec_grid: dict, spec_overrides: list[str], train_args: list[str]):
    """(fixed overrides, ordered axes {key: [values]}) from a recipe and the command line.

    Hydra's override parser reads the command line, so `key=a,b`,
    `key=range(0,3)` and quoting behave as in Hydra's own multirun.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    axes: dict[str, list[str]] = {}
    for key, values in spec_grid.items():
        # a YAML list (list or ListConfig), or one scalar / "a,b" string
        values = str(values).split(",") if isinstance(values, (str, int, float, bool)) else list(values)
        axes[str(key)] = [_value_str(v) for v in values]
    fixed = [str(o) for o in spec_overrides]
    try:
        parsed = OverridesParser.create().parse_overrides(list(train_args))
    except Exception as exc:  # hydra's parse errors are multi-line
        raise LzeBenchError(f"cannot parse overrides: {str(exc).splitlines()[0]}") from exc
    for override in parsed:
        key = override.get_key_element()
        axes.pop(key, None)  # the command line replaces a recipe axis of the same key
        if override.is_sweep_override():
            axes[key] = _sweep_values(override, key)
        else:
            fixed.append(override.input_line)
    for key in axes:
        if key.lstrip("+~") in NOT_SWEEPABLE:
            raise LzeBenchError(f"{key} cannot be swept (one {key} per sweep); pass a single value")
    return fixed, axes


def _sweep_values(override, key: str) -> list[str]:
    """The values of one sweep override. `glob(l*)` is matched against the options of its config
    group here: Hydra expands a glob only inside its own app (the config loader `compose` lacks)."""
    from hydra.core.override_parser.types import ValueType

    from lze_bench.config import REGISTRY_GROUPS, YAML_GROUPS, group_options

    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        group = key.lstrip("+~")
        if group not in REGISTRY_GROUPS and group not in YAML_GROUPS:
            groups = ", ".join(sorted({*REGISTRY_GROUPS, *YAML_GROUPS}))
            raise LzeBenchError(f"{override.input_line}: glob() picks options of a config group ({groups}); "
                                f"for {group} list the values with commas")
        options = group_options(group)
        values = override.value().filter(options)
        if not values:
            raise LzeBenchError(f"{override.input_line}: matches no {group} (options: {', '.join(options)})")
        return values
    try:
        return list(override.sweep_string_iterator())
    except Exception as exc:  # hydra's messages are multi-line
        raise LzeBenchError(f"{override.input_line}: {str(exc).splitlines()[0]}") from exc


_SAFE = re.compile(r"[^A-Za-z0-9_.=-]+")


def job_name(axes: dict[str, str]) -> str:
    """`selector` value, then `s<seed>`, then `<leaf key><value>` of the other axes."""
    parts = []
    if "selector" in axes:
        parts.append(axes["selector"])
    if "seed" in axes:
        parts.append(f"s{axes['seed']}")
    for key, value in axes.items():
        if key not in ("selector", "seed"):
            parts.append(f"{key.lstrip('+~').rsplit('.', 1)[-1]}{value}")
    return _SAFE.sub("_", "-".join(parts)) or "job"


def plan_jobs(spec, train_args: list[str], sweep_dir: Path, name: str) -> SweepPlan:
    """Compose every grid point's train config; fail on the first bad one (nothing submitted)."""
    from lze_bench.budget import compute_plan
    from lze_bench.config import compose, config_dict

    fixed, axes = grid_axes(dict(spec.grid), list(spec.overrides), train_args)
    recipe_fixed, cli_fixed = fixed[: len(spec.overrides)], fixed[len(spec.overrides):]
    by_selector = {str(k): [str(o) for o in v] for k, v in dict(spec.selector_overrides or {}).items()}
    keys = list(axes)
    jobs: list[PlannedJob] = []
    launcher = None
    for values in itertools.product(*(axes[k] for k in keys)):
        point = dict(zip(keys, values))
        selector = point.get("selector") or _fixed_value(fixed, "selector")
        extra = by_selector.get(str(selector), [])
        overrides = [*recipe_fixed, *extra, *cli_fixed, *(f"{k}={v}" for k, v in point.items())]
        composed = compose("train", overrides)
        cfg = config_dict(composed)
        # a plug-in given as MODULE:CLASS is named by its registered name, as in its run's config
        jname = job_name({**point, "selector": cfg["selector"]["name"]} if "selector" in point else point)
        if launcher is None:
            launcher = cfg["launcher"]
        without_selector = {k: v for k, v in cfg.items() if k != "selector"}
        pair_key = config_hash(without_selector)
        jobs.append(
            PlannedJob(
                name=jname,
                overrides=[*overrides, *tracking_overrides(fixed, name, jname, pair_key)],
                axes=point,
                run_dir=sweep_dir / RUNS / jname,
                config_hash=config_hash(cfg),
                pair_key=pair_key,
                selector=str(cfg["selector"]["name"]),
                seed=int(cfg["seed"]),
                steps=int(cfg["trainer"]["steps"]),
                flop_budget=cfg["trainer"].get("flop_budget"),
                compute=compute_plan(composed.trainer),  # run_dir and the tracking keys leave the trainer as is
                build_group=_build_group(cfg),
            )
        )
    _check_unique(jobs)
    plan = SweepPlan(name=name, sweep_dir=sweep_dir, jobs=jobs, launcher=launcher or {},
                     manifest_extra={"notes": [str(n) for n in getattr(spec, "notes", None) or []]})
    for job in jobs:
        plan.pairs.setdefault(job.pair_key, []).append(job.name)
    _warn_unpaired(plan)
    return plan


def _build_group(cfg: dict) -> str:
    """The key of the cached head a local-backend ASTRAL job with `predictor=trained` builds in its first run if
    it is missing: the config's hash without what the head does not depend on (seed, selector knobs other than the
    predictor, tracking, run_dir); "" for any other job. On backend=openrlhf the sweep builds heads before the runs
    (sweep/heads.py)."""
    selector = cfg["selector"]
    if cfg["backend"]["name"] != "local" or selector["name"] != "astral" or selector.get("predictor") != "trained":
        return ""
    shared = {k: v for k, v in cfg.items() if k not in ("seed", "selector", "tracking", "run_dir")}
    return config_hash(shared)


def tracking_overrides(fixed: list[str], sweep: str, job: str, pair_key: str) -> list[str]:
    """W&B names of a sweep job (lze_bench.tracking): group = the sweep, run name = the job, tag `pair:<key>`
    shared by the jobs that differ only in the selector. Not part of any hash (rundir.TRACKING_KEYS);
    a `tracking.*` key given by the user wins."""
    given = {item.partition("=")[0].lstrip("+~") for item in fixed}
    wanted = {"tracking.group": sweep, "tracking.name": job, "tracking.tags": f"['pair:{pair_key}']"}
    return [f"{key}={value}" for key, value in wanted.items() if key not in given]


def _fixed_value(fixed: list[str], key: str) -> str | None:
    """The value a fixed `key=value` override sets (the last one wins), else None."""
    value = None
    for item in fixed:
        name, sep, rest = item.partition("=")
        if sep and name.lstrip("+~") == key:
            value = rest
    return value


def _check_unique(jobs: list[PlannedJob]) -> None:
    seen: dict[str, PlannedJob] = {}
    for job in jobs:
        if job.name in seen:
            raise LzeBenchError(
                f"two grid points give the job name {job.name!r} ({seen[job.name].axes} and {job.axes}); "
                "use distinct values"
            )
        seen[job.name] = job


def _warn_unpaired(plan: SweepPlan) -> None:
    """A selector comparison is only paired when each group holds every selector of the sweep."""
    selectors = {job.selector for job in plan.jobs}
    if len(selectors) < 2:
        return
    by_name = {job.name: job for job in plan.jobs}
    for key, names in plan.pairs.items():
        present = {by_name[n].selector for n in names}
        if present != selectors:
            log.warning(
                "jobs %s are not paired with every selector (missing %s): a setting other than the "
                "selector differs between them", ", ".join(names), ", ".join(sorted(selectors - present))
            )
