"""`lze-bench sweep`: many `train` runs, submitted with submitit (design.md "Data flows one way").

    lze-bench sweep sweep=quickstart                        # a recipe from sweeps/quickstart.yaml
    lze-bench sweep selector=uniform,lze seed=0,1 trainer.steps=20   # inline multirun
    lze-bench sweep sweep=quickstart launcher=slurm launcher.partition=gpu wait=false
    lze-bench sweep status runs/sweeps/quickstart [--watch] [--every SECONDS]   # its own sub-command (cli.py)

Arguments are split in two: the sweep's own keys (`sweep=NAME`, `sweep.*`,
`sweep_dir=`, `wait=`, `poll_s=`), composed as the primary config `sweep`; and
everything else, which are `train` overrides, where `key=a,b` (Hydra's
multirun syntax, also `range(0,3)`) adds a grid axis. One job per grid point
(grid.py); jobs, run dirs and statuses are kept in `<sweep_dir>/manifest.json`
(manifest.py); submission and waiting are in submit.py.

Choices where the sources are silent:
* default sweep_dir: `runs/sweeps/<name>`, where name is the spec's `name`, else
  the recipe file's name, else `multirun-<hash of the overrides>`, so running the
  same command again finds the same directory (and skips finished jobs);
* `wait=true` by default (the command returns when every job has ended, with a
  live table), so `launcher=local` jobs are not orphaned; `wait=false` submits
  and returns (check later with `sweep status`);
* the launcher is a `train` key (`launcher=slurm launcher.partition=gpu`), so each
  run's config.yaml records where it ran; it cannot be a grid axis.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

SWEEP_KEYS = ("sweep", "sweep_dir", "wait", "poll_s")  # everything else is a train override
DEFAULT_ROOT = Path("runs") / "sweeps"


@dataclass
class SweepSpec:
    """A sweep recipe (`sweeps/NAME.yaml`, option `sweep=NAME`).

    grid: key -> list of values; the jobs are the cartesian product, in key order.
    overrides: `train` overrides every job gets (e.g. `trainer.steps=40`,
    `launcher=slurm`); command-line overrides come after them and win, and a
    command-line `key=v` (or `key=a,b`) replaces the grid axis of that key.
    selector_overrides: selector name -> `selector.KEY=VALUE` overrides for that
    selector's jobs only, applied after `overrides` and before the command line.
    eval: the eval step that follows the sweep, as `lze-bench eval sweep_dir=<this
    sweep>` overrides (e.g. `[eval=math_suite, device=cuda, generation.backend=vllm]`);
    `--dry-run` and the finished sweep print that command. Nothing runs it on its own.
    """

    name: Optional[str] = None  # default: the file name
    description: str = ""
    grid: Dict[str, Any] = field(default_factory=dict)
    overrides: List[str] = field(default_factory=list)
    # selector name -> overrides only its jobs get (e.g. astral: [selector.ref_size=8]); they keep
    # jobs paired, since pairing ignores the selector's own settings
    selector_overrides: Dict[str, List[str]] = field(default_factory=dict)
    eval: List[str] = field(default_factory=list)  # `lze-bench eval sweep_dir=...` overrides of the step after
    # what a reader of its report must know that no ledger holds (how it reproduces on another machine, ...):
    # kept in manifest.json, printed by `lze-bench report` under "Notes from the recipe"
    notes: List[str] = field(default_factory=list)

    def __post_init__(self):
        for key, values in self.grid.items():
            require(isinstance(values, (list, tuple)) and len(values) > 0 or isinstance(values, (str, int, float)),
                    f"sweep.grid.{key}", "must be a non-empty list of values")
        for item in self.overrides:
            require("=" in str(item), "sweep.overrides", f"{item!r} is not a key=value override")
        for selector, items in self.selector_overrides.items():
            for item in items:
                require(str(item).startswith("selector.") and "=" in str(item), f"sweep.selector_overrides.{selector}",
                        f"{item!r} is not a selector.KEY=VALUE override")
        for item in self.eval:
            require("=" in str(item) and not str(item).startswith("sweep_dir="), "sweep.eval",
                    f"{item!r} is not a key=value eval override (sweep_dir is the sweep's own)")


def eval_command(spec: "SweepSpec", sweep_dir: Path) -> str | None:
    """The `lze-bench eval sweep_dir=...` command a recipe names as its next step, or None."""
    import shlex

    if not spec.eval:
        return None
    return " ".join(["lze-bench", "eval", f"sweep_dir={shlex.quote(str(sweep_dir))}",
                     *(shlex.quote(str(item)) for item in spec.eval)])


@dataclass
class SweepCommandConfig:
    """The primary config `sweep`: which recipe, where its directory is, whether to wait."""

    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"sweep": None}])
    sweep: SweepSpec = field(default_factory=SweepSpec)
    sweep_dir: Optional[str] = None  # default runs/sweeps/<name>
    wait: bool = True  # block until every job has ended (live table); false: submit and return
    poll_s: float = 5.0  # seconds between status checks while waiting

    def __post_init__(self):
        require(self.poll_s > 0, "poll_s", f"must be > 0, got {self.poll_s}")


def _register() -> None:
    from lze_bench.config import CONFIGS

    if "sweep" not in CONFIGS:
        CONFIGS.add("sweep")(SweepCommandConfig)


_register()


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(sweep-level overrides, train overrides)."""
    sweep_args, train_args = [], []
    for item in args:
        key = item.partition("=")[0].lstrip("+~")
        is_sweep = key in SWEEP_KEYS or key.startswith("sweep.")
        (sweep_args if is_sweep else train_args).append(item)
    return sweep_args, train_args


def sweep_name(spec_name: str | None, sweep_args: list[str], train_args: list[str]) -> str:
    """The spec's name, else the recipe's file name, else `multirun-<hash>` of the train overrides."""
    if spec_name:
        return spec_name
    for item in sweep_args:
        key, _, value = item.partition("=")
        if key.lstrip("+") == "sweep" and value:
            return Path(value).stem if value.endswith((".yaml", ".yml")) else value
    digest = hashlib.sha256("\n".join(train_args).encode()).hexdigest()[:8]
    return f"multirun-{digest}"


def main(args: list[str], dry_run: bool = False) -> None:
    """CLI entry: plan (and unless dry_run, submit) a sweep (`sweep status` is its own command in cli.py)."""
    from lze_bench.config import compose, to_objects

    sweep_args, train_args = split_args(args)
    command = to_objects(compose("sweep", sweep_args))
    spec: SweepSpec = command.sweep
    name = sweep_name(spec.name, sweep_args, train_args)
    sweep_dir = Path(command.sweep_dir) if command.sweep_dir else DEFAULT_ROOT / name
    if not spec.grid and not spec.overrides and not train_args:
        raise LzeBenchError(
            "nothing to sweep: pass sweep=NAME (a YAML in sweeps/) or train overrides with "
            "comma lists, e.g. selector=uniform,lze seed=0,1"
        )
    from lze_bench.sweep.grid import plan_jobs

    plan = plan_jobs(spec, train_args, sweep_dir.resolve(), name=name)
    from lze_bench.sweep.heads import describe_steps, head_steps, run_steps

    heads = head_steps(plan)  # ASTRAL's learned head, built once before the runs that share it
    if dry_run:
        from lze_bench.sweep.status import print_plan
        from lze_bench.sweep.submit import sbatch_preview

        slurm = plan.launcher.get("name") == "slurm"
        print_plan(plan, sweep_dir, sbatch_preview(plan, len(plan.jobs)) if slurm else None,
                   then=eval_command(spec, sweep_dir), before=describe_steps(heads))
        return
    from lze_bench.sweep.submit import run_sweep

    run_steps(plan, heads)
    run_sweep(plan, wait=command.wait, poll_s=command.poll_s, command_line=args)
    then = eval_command(spec, sweep_dir)
    if then:
        print(f"next (this recipe's eval step): {then}", file=sys.stderr)
