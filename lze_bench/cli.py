"""The `lze-bench` command line (Typer owns argv; Hydra only composes).

Every command that takes configuration accepts Hydra overrides as trailing
arguments (`lze-bench train selector=lze selector.keep_ratio=0.4 seed=1`);
argv.py checks them and gives those commands their `--help` config panel and
Tab completion.
Errors a user can fix print one line and exit with code 2; set
LZE_BENCH_DEBUG=1 for the traceback. Heavy imports (torch, backends) happen
inside the command that needs them, so `--help` stays fast.
"""

from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path
from typing import Optional

import typer

from lze_bench import __version__, env
from lze_bench.argv import ConfigCommand, OverridesOrCommandGroup, overrides
from lze_bench.errors import LzeBenchError

# torch warns on import when the deprecated `pynvml` package is installed (OpenRLHF's dependencies bring
# it): a note for whoever installed it, not for a user of this command
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}

app = typer.Typer(
    name="lze-bench",
    help="Benchmark online prompt selection for RL post-training (GRPO) with honest FLOP accounting.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"lze-bench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="Print the version and exit."),
):
    pass


def friendly_errors(fn):
    """Turn LzeBenchError into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LzeBenchError as exc:
            if env.debug():
                raise
            typer.echo(f"error: {' '.join(str(exc).split())}", err=True)  # one line, whatever the message holds
            raise typer.Exit(code=2)

    return wrapper


def _compose(name: str, overrides: list[str]):
    from lze_bench.config import compose

    return compose(name, overrides)


def _print_config(cfg) -> None:
    from omegaconf import OmegaConf

    typer.echo(OmegaConf.to_yaml(cfg, resolve=True), nl=False)


CFG_HELP = "Print every key of the resolved config (defaults included) and exit."


@app.command(cls=ConfigCommand, context_settings=EXTRA_ARGS)
@friendly_errors
def train(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved config (and launch command); run nothing."),
    show_cfg: bool = typer.Option(False, "--cfg", help=CFG_HELP),
):
    """Train one policy with one selector; writes one run directory.

    Example: lze-bench train selector=lze seed=1 trainer.steps=40
    """
    cfg = _compose("train", overrides(ctx))
    if show_cfg:
        _print_config(cfg)
        return
    from lze_bench.registry import BACKENDS

    backend = BACKENDS[cfg.backend.name]
    if dry_run:
        if hasattr(backend, "dry_run"):
            backend.dry_run(cfg)
        else:
            _print_config(cfg)
        return
    from lze_bench.backends import run_training

    run_dir = run_training(cfg)
    typer.echo(f"run directory: {run_dir}")


@app.command(name="eval", cls=ConfigCommand, context_settings=EXTRA_ARGS)
@friendly_errors
def eval_(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved config (sweep_dir=: the jobs); run nothing."),
    show_cfg: bool = typer.Option(False, "--cfg", help=CFG_HELP),
):
    """Evaluate a checkpoint (model=PATH_OR_HF_ID), every checkpoint of a run (run=RUN_DIR), or of every
    run of a sweep as jobs (sweep_dir=SWEEP_DIR launcher=local|slurm; `lze-bench sweep status SWEEP_DIR` shows them).

    Example: lze-bench eval model=runs/x/checkpoints/step_000060 eval=math_suite
    """
    args = overrides(ctx)
    cfg = _compose("eval", args)
    if show_cfg:
        _print_config(cfg)
        return
    if cfg.sweep_dir:
        from lze_bench.sweep import evals as eval_sweep

        eval_sweep.main(cfg, args, dry_run=dry_run)
        return
    if dry_run:
        _print_config(cfg)
        return
    from lze_bench.evaluation import runner as evaluation

    evaluation.run_eval(cfg)


@app.command()
@friendly_errors
def grade(
    predictions: Path = typer.Argument(..., help="JSONL with rows {response, gold} (other fields kept)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write graded rows here (JSONL)."),
    timeout_s: float = typer.Option(5.0, "--timeout", help="Seconds allowed per answer; a timeout counts wrong."),
    workers: int = typer.Option(0, "--workers", help="Grading processes (0 = one per core)."),
    grading: str = typer.Option("boxed", "--grading", help="How answers are read: boxed (the last \\boxed{}) or "
                                "math_verify (math-verify reads the whole response, as lighteval does)."),
):
    """Re-grade a predictions file with the one grading function and print the accuracy."""
    from lze_bench.evaluation import grade_file as grading_file

    if workers < 0:
        raise LzeBenchError(f"--workers {workers}: a number of grading processes must be >= 0 (0 = one per core)")
    grading_file.grade_file(predictions, out, timeout_s=timeout_s, workers=workers, mode=grading)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise typer.BadParameter(f"{text!r} is not a number of seconds > 0 (e.g. 5)")
    return value


sweep_app = typer.Typer(cls=OverridesOrCommandGroup, invoke_without_command=True, context_settings=EXTRA_ARGS,
                        add_completion=False, pretty_exceptions_enable=False)
app.add_typer(sweep_app, name="sweep")
warmstart_app = typer.Typer(help="The warm starts shipped with lze-bench: list them, rebuild and compare, ship one.",
                            no_args_is_help=True)
app.add_typer(warmstart_app, name="warmstart")
check_app = typer.Typer(help="Check a plug-in against the harness's contracts.", no_args_is_help=True)
app.add_typer(check_app, name="check")


@sweep_app.callback()
@friendly_errors
def sweep(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="List the jobs (and Slurm scripts); submit nothing."),
    show_cfg: bool = typer.Option(False, "--cfg", help="Print the sweep's own resolved config (its recipe) and exit."),
):
    """Run a grid of trainings with submitit: `sweep sweep=NAME` or inline multirun overrides.

    Examples: lze-bench sweep sweep=quickstart; lze-bench sweep selector=uniform,lze seed=0,1 trainer.steps=20
    """
    if ctx.invoked_subcommand:  # `sweep status ...`: the sub-command does the work
        return
    from lze_bench import sweep as sweep_module

    if show_cfg:
        _print_config(_compose("sweep", sweep_module.split_args(overrides(ctx))[0]))
        return
    sweep_module.main(overrides(ctx), dry_run=dry_run)


@sweep_app.command(name="status")
@friendly_errors
def sweep_status(
    sweep_dir: Path = typer.Argument(..., help="The sweep directory (it holds manifest.json)."),
    watch: bool = typer.Option(False, "--watch", help="Refresh until every job has ended."),
    every: float = typer.Option(5.0, "--every", parser=_seconds, metavar="SECONDS",
                                help="Seconds between refreshes with --watch."),
):
    """Show a sweep's jobs: state, steps done, scheduler job id, tries, pairing."""
    from lze_bench.sweep.status import show_status

    show_status(sweep_dir, watch=watch, every_s=every)


@app.command()
@friendly_errors
def report(
    sweep_dir: Path = typer.Argument(..., help="A sweep directory, or a folder of run directories."),
    name: Optional[str] = typer.Option(None, "--name", help="Report name (default: the folder's name)."),
    out_root: Path = typer.Option(Path("reports"), "--out-root", help="Reports are written to OUT_ROOT/NAME/."),
    target_fraction: Optional[float] = typer.Option(
        None, "--target-fraction", help="Table 2's target: this share of uniform's gain over the initial policy "
        "(default: lze_bench.report.paired.ReportOptions)."),
    eval_suite: Optional[list[str]] = typer.Option(
        None, "--eval-suite", help="Use the eval results of this suite name or settings key (repeatable); needed "
        "when a benchmark has results under several settings."),
):
    """Tables and plots from ledgers and eval summaries (reads files only)."""
    from lze_bench import report as report_module
    from lze_bench.report.paired import ReportOptions

    chosen = {"eval_suites": tuple(eval_suite or ())}
    if target_fraction is not None:
        chosen["target_fraction"] = target_fraction
    options = ReportOptions(**chosen)
    report_module.main(sweep_dir, name=name, out_root=out_root, options=options)


@app.command(cls=ConfigCommand, context_settings=EXTRA_ARGS)
@friendly_errors
def replay(
    ctx: typer.Context,
    rollouts: Path = typer.Argument(..., help="rollouts.parquet of a run, or JSONL rows {step, prompt_id, rewards}."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the rows plus rolled_out/kept/kept_rollouts columns here."),
    show_cfg: bool = typer.Option(False, "--cfg", help=CFG_HELP),
):
    """Replay a recorded rollout log through a selector (counterfactual selection).

    Example: lze-bench replay runs/x/rollouts.parquet selector=lze --out lze.parquet
    """
    from lze_bench import replay as replay_module

    cfg = _compose("replay", overrides(ctx))
    if show_cfg:
        _print_config(cfg)
        return
    replay_module.run_replay(rollouts, cfg, out)


@app.command(cls=ConfigCommand, context_settings=EXTRA_ARGS)
@friendly_errors
def label(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="The labels file to write (JSON; give it as selector.labels=FILE)."),
    samples: int = typer.Option(64, "--samples", help="Rollouts per train prompt (AdaRFT: robust from 64)."),
    reference: str = typer.Option("labeler", "--reference",
                                  help="labeler: ASTRAL's last labelling model (not the policy); policy: the run's "
                                       "initial policy for `seed`."),
):
    """Make AdaRFT's difficulty labels, 100 x (1 - pass rate), from a reference model's rollouts (local backend).

    The file records the rollouts' FLOPs: a run that reads it is charged them as offline FLOPs.
    Example: lze-bench label task.num_train=128 --out labels.json; then
    lze-bench train selector=adarft selector.labels=labels.json task.num_train=128
    """
    cfg = _compose("train", overrides(ctx))
    if cfg.backend.name != "local":
        raise LzeBenchError(f"lze-bench label: backend={cfg.backend.name} has no labeller; labels are made on "
                            "backend=local (the file then serves either backend's runs of the same data)")
    from lze_bench.backends.local.labels import make_labels
    from lze_bench.config import to_objects

    record = make_labels(to_objects(cfg), out, samples=samples, reference=reference)
    rates = record["columns"]["pass_rate"]
    typer.echo(f"labels: {out} ({record['prompts']} prompts x {samples} samples, mean pass rate "
               f"{sum(rates) / len(rates):.3f}, {record['flops']:.3e} FLOPs charged to runs that read it)")


@app.command(cls=ConfigCommand, context_settings=EXTRA_ARGS)
@friendly_errors
def head(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the build step and its FLOP estimate; build nothing."),
):
    """Build ASTRAL's learned head for `train` overrides (backend=openrlhf, selector.predictor=trained).

    `lze-bench sweep` runs this step itself before its runs; use it for a lone `lze-bench train`.
    Example: lze-bench head backend=openrlhf selector=astral selector.predictor=trained ...
    """
    from lze_bench.backends.openrlhf.head_build import check_recipe, describe, uses_trained_head
    from lze_bench.sweep.heads import build_head

    cfg = _compose("train", overrides(ctx))
    if not uses_trained_head(cfg):
        raise LzeBenchError("lze-bench head builds ASTRAL's head of backend=openrlhf selector=astral "
                            "selector.predictor=trained; pass those overrides (backend=local builds its own)")
    check_recipe(cfg)
    if dry_run:
        typer.echo("\n".join(describe(cfg, ["this recipe"])))
        return
    typer.echo(f"ASTRAL head: {build_head(cfg)}")


@app.command(context_settings=EXTRA_ARGS)
@friendly_errors
def bench(
    ctx: typer.Context,
    what: str = typer.Argument(..., help="selectors | grading | train | generation | overhead"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the figures as JSON here."),
):
    """Measure performance (time, throughput) and print a table; extra key=value options per benchmark."""
    from lze_bench.bench import run_bench

    run_bench(what, overrides(ctx), json_path)


@warmstart_app.command(name="list")
@friendly_errors
def warmstart_list():
    """The shipped warm starts: recipe key, init seed, steps, held-out accuracy, where they were built."""
    from lze_bench.backends.local import shipped

    keys = shipped.shipped_keys()
    if not keys:
        typer.echo("no warm start is shipped with this install")
    for key in keys:
        typer.echo(shipped.describe(key))


@warmstart_app.command(name="check")
@friendly_errors
def warmstart_check(
    keys: Optional[list[str]] = typer.Argument(None, help="Recipe keys to rebuild (default: every shipped one)."),
    threads: int = typer.Option(0, "--threads", help="torch CPU threads for the rebuild (0 = torch's default)."),
):
    """Rebuild shipped warm starts on this machine; exit 0 if the weights are identical, 1 if any differ."""
    from lze_bench.backends.local import shipped
    from lze_bench.backends.local.model import setup_torch
    from lze_bench.backends.local.rebuild import check_shipped
    from lze_bench.backends.local.warmstart import build_numerics, cpu_model

    keys = keys or shipped.shipped_keys()
    if not keys:
        raise LzeBenchError("no warm start is shipped with this install; nothing to check")
    setup_torch(threads)
    here = build_numerics("cpu")
    differ = 0
    for key in keys:
        typer.echo(f"{key}: rebuilding on {cpu_model()} ({here['cpu_capability']}, {here['threads']} thread(s))")
        result = check_shipped(key)
        gap = "" if result.identical else f"; max |shipped - rebuilt| = {result.max_gap:.3g}"
        typer.echo(f"{key}: {'identical weights' if result.identical else 'weights DIFFER'}{gap}; held-out "
                   f"accuracy shipped {result.shipped_accuracy:.3f}, rebuilt {result.rebuilt_accuracy:.3f}")
        differ += not result.identical
    if differ:
        raise typer.Exit(code=1)


@warmstart_app.command(name="ship")
@friendly_errors
def warmstart_ship(built: Path = typer.Argument(..., help="A built warm start: <cache>/warmstart/<key> "
                                                            "(a run's config.yaml names it).")):
    """Add a built warm start to the shipped ones (maintainers: the weights committed reports start from)."""
    from lze_bench.backends.local import shipped

    typer.echo(f"shipped as {shipped.ship(built)}")


@app.command()
@friendly_errors
def selectors(
    paths: Optional[list[str]] = typer.Argument(None, metavar="[MODULE:CLASS]...",
                                                help="Plug-ins given as import paths to list too."),
):
    """List the registered selectors (built-in and plug-ins), where each comes from, and their defaults."""
    import dataclasses

    from rich.console import Console
    from rich.table import Table

    from lze_bench.plugins import PLUGINS, RECORDED_FIELDS, builtin_names, load_entry_points, load_import_path
    from lze_bench.registry import SELECTORS

    load_entry_points()
    for path in paths or ():
        load_import_path(path)
    table = Table(title="selectors (selector=NAME or MODULE:CLASS, override defaults as selector.KEY=VALUE)")
    table.add_column("name", style="bold")
    table.add_column("from")
    table.add_column("summary")
    table.add_column("defaults")
    builtins = builtin_names()
    for name in sorted(SELECTORS):
        cls = SELECTORS[name]
        summary = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        defaults = ", ".join(f"{f.name}={getattr(cls.Config(), f.name)!r}" for f in dataclasses.fields(cls.Config)
                             if f.name != "name" and f.name not in RECORDED_FIELDS)
        origin = "built-in" if name in builtins else PLUGINS[name].origin()
        table.add_row(name, origin, summary, defaults or "-")
    Console(width=max(120, Console().width)).print(table)


@check_app.command(name="selector")
@friendly_errors
def check_selector(
    target: str = typer.Argument(..., help="A selector name (built-in or entry point) or MODULE:CLASS."),
    skip_large: bool = typer.Option(False, "--skip-large", help="Time one step at 10^4 prompts only, not 10^6."),
):
    """Check a selector's contracts, one line per property (exit 1 if any fails), and time one step.

    Example: lze-bench check selector band_selector:BandSelector
    """
    from lze_bench.conformance import check_selector as run_checks
    from lze_bench.conformance import timing_batch

    report = run_checks(target, sizes=(10**4,) if skip_large else (10**4, 10**6))
    typer.echo(f"selector {report.name}")
    for finding in report.findings:
        typer.echo(finding.line())
    for size, seconds in report.timings:
        figure = f"{seconds * 1e3:.1f} ms" if isinstance(seconds, float) else f"not measured ({seconds})"
        typer.echo(f"INFO step time at {size:,} prompts: {figure} (selector calls of one step, batch "
                   f"{timing_batch(size)}, after one untimed step; this machine as loaded now)")
    if not report.ok:
        raise typer.Exit(code=1)


def main() -> None:  # pragma: no cover - entry point for `python -m lze_bench`
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
