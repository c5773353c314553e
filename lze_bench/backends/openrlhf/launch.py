"""`lze-bench train backend=openrlhf`: prepare the run directory, then run, submit or print.

* `dry_run(cfg)`: print the exact driver command (and with launcher=slurm the
  job script); writes nothing, needs no OpenRLHF.
* `train(cfg)`:
  - inside a Slurm job step (SLURM_PROCID set, e.g. a sweep job): this node's
    part of the job (slurm.node_main); rank 0 prepares the run directory;
  - launcher=slurm: prepare, then submit one submitit job (`OpenRLHFJob`) and
    return without waiting;
  - otherwise: prepare, then run the driver command on this machine.
Outside a job step, the trackers of `logger=[...]` are checked first (package
installed, a W&B key in the environment unless offline; tracking.preflight).
Preparing writes config.yaml (resolved config + lze-bench version and commit),
the prompts JSONL (and, for astral's learned head, the raw questions its
encoder embeds: head.py) and `openrlhf/command.json`: the argv the job runs and the
launch plan (plan.py) the Slurm job and the trainer read; an existing unfinished
run directory is resumed, a finished one is refused. The plan is built once per
command here and handed to everything that needs it.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

from lze_bench import env
from lze_bench.backends.openrlhf.command import RunPaths, driver_argv, format_command
from lze_bench.backends.openrlhf.plan import LaunchPlan, launch_plan
from lze_bench.errors import LzeBenchError


def resolve_paths(cfg) -> RunPaths:
    """Absolute run directory (Ray actors run elsewhere), written back into the config."""
    from omegaconf import open_dict

    from lze_bench.config import config_dict
    from lze_bench.rundir import default_run_dir

    run_dir = Path(cfg.run_dir) if cfg.run_dir else default_run_dir(config_dict(cfg))
    run_dir = run_dir.expanduser().resolve()
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return RunPaths(run_dir)


def dry_run(cfg, out=None) -> None:
    out = out or sys.stdout
    paths = resolve_paths(cfg)
    plan = launch_plan(cfg)
    argv = driver_argv(cfg, paths, plan)
    out.write(f"# backend=openrlhf: run directory {paths.run_dir}\n")
    out.write("# driver command (Ray driver; OpenRLHF 0.11.2 flags after --):\n")
    out.write(format_command(argv) + "\n")
    out.write(f"# {PLAN_HEADER}\n")
    for line in plan.describe():
        out.write(f"#   {line}\n")
    out.write(f"# each step's update trains whole units of {plan.trim_unit} responses "
              "(backend.train_micro_batch_size x data-parallel ranks; a seeded random subset, see trim.py)\n")
    from lze_bench.budget import compute_plan

    out.write(f"# {compute_plan(cfg.trainer)}\n")
    _describe_plugin(cfg, out)
    from lze_bench.backends.openrlhf.head import uses_head

    if uses_head(cfg) and str(cfg.selector.predictor) == "trained":
        from lze_bench.backends.openrlhf.head_build import describe

        for line in describe(cfg, [Path(paths.run_dir).name]):
            out.write(f"# {line}\n")
        out.write(f"# then the frozen encoder {cfg.selector.predictor_encoder} embeds every train prompt on the policy "
                  "ranks once per start, before the first step; offline compute, in offline_flops.json\n")
    elif uses_head(cfg):
        out.write(f"# astral's learned head {cfg.selector.predictor_path} (trained elsewhere, checked above): "
                  f"the frozen encoder {cfg.selector.predictor_encoder} embeds every train prompt on the policy ranks "
                  "once per start, before the first step; offline compute, in offline_flops.json, not in the ledger\n")
    if cfg.launcher.name == "slurm":
        from lze_bench.backends.openrlhf.script import job_script

        out.write("\n# Slurm job script (launcher=slurm):\n")
        out.write(job_script(cfg, plan, paths.run_dir, argv, python=argv[0]))


def _describe_plugin(cfg, out) -> None:
    """Where the Ray workers import a selector plug-in's module from (command.check has found it there)."""
    from lze_bench.plugins import PLUGINS, import_root

    info = PLUGINS.get(cfg.selector.name)
    if info is None:
        return
    root = import_root(info.name)
    where = (f"from {root}, which the driver adds to their PYTHONPATH" if root
             else f"from the installed distribution {info.distribution}")
    out.write(f"# selector plug-in {info.name} ({info.target}): the Ray workers import module "
              f"{info.target.partition(':')[0]} {where}\n")


PLAN_HEADER = "launch plan (openrlhf/command.json \"plan\"; read by the Slurm job and the trainer):"


def prepare(cfg, plan: LaunchPlan | None = None) -> tuple[RunPaths, list[str]]:
    """Write config.yaml, prompts and command.json (idempotent for an unfinished run)."""
    from omegaconf import OmegaConf

    import lze_bench
    from lze_bench.backends.openrlhf.data import write_prompts
    from lze_bench.config import config_dict, env_data_root
    from lze_bench.fingerprint import check_data, fingerprint
    from lze_bench.registry import TASKS
    from lze_bench.rundir import TRACKING_KEYS, atomic_write_json, atomic_write_text, git_commit, refuse_finished

    paths = resolve_paths(cfg)
    refuse_finished(paths.run_dir)
    from lze_bench.backends.openrlhf.head_build import require_built, uses_trained_head

    if uses_trained_head(cfg):
        require_built(cfg)  # the sweep's head step (or `lze-bench head`) builds it; a run never does
    from lze_bench import preemption

    if not preemption.requested():  # a marker left by an earlier, preempted job must not stop this run
        (paths.run_dir / preemption.MARKER).unlink(missing_ok=True)
    plan = plan or launch_plan(cfg)
    argv = driver_argv(cfg, paths, plan)
    resolved = config_dict(cfg)
    if paths.config.exists():
        previous = _read_config(paths.config)
        previous.pop("lze_bench", None)
        same = {k: v for k, v in resolved.items() if k not in TRACKING_KEYS}  # trackers may change on resume
        if {k: v for k, v in previous.items() if k not in TRACKING_KEYS} != same:
            raise LzeBenchError(
                f"run_dir {str(paths.run_dir)!r} holds an unfinished run with another config; "
                "pass a new run_dir=PATH, or the same overrides to resume it"
            )
    # loaded on every start, not only the first: the resume replays its data order against these rows
    root = env_data_root(cfg.data.root)
    rows = TASKS[cfg.task.name].load(cfg.task, root)
    check_data(paths.run_dir, {"train": fingerprint(rows)}, f"task={cfg.task.name} (data root {root or 'the hub'})")
    meta = {"version": lze_bench.__version__, "git_commit": git_commit()}
    atomic_write_text(paths.config, OmegaConf.to_yaml(OmegaConf.create({**resolved, "lze_bench": meta})))
    if not paths.prompts.exists():
        write_prompts(rows, paths.prompts, cfg.backend.prompt)
    from lze_bench.backends.openrlhf.head import QUESTIONS_FILE, uses_head, write_questions

    if uses_head(cfg) and not (paths.work / QUESTIONS_FILE).exists():
        write_questions(rows, paths.work / QUESTIONS_FILE)  # what astral's frozen encoder embeds (head.py)
    write_metadata(cfg, rows, paths.run_dir)
    atomic_write_json(paths.command, {"argv": argv, "plan": plan.to_dict()})
    return paths, argv


def write_metadata(cfg, rows: list[dict], run_dir: Path) -> None:
    """The per-prompt columns into the run directory (lze_bench.metadata), where the trainer actor reads them back;
    a column the selector reads but the task lacks fails here, before a cluster starts."""
    from omegaconf import OmegaConf

    from lze_bench.metadata import PromptMetadata
    from lze_bench.plugins import selector_class

    cls = selector_class(cfg.selector)
    selector_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls.Config), cfg.selector))
    metadata = PromptMetadata.for_run(rows, cfg.task.name, selector_cfg)
    read = list(cls.metadata_columns(selector_cfg))
    metadata.require(read, cfg.selector.name)
    metadata.write(run_dir, read)


def _read_config(path: Path) -> dict:
    """A run's config.yaml as a dict; one line when it is damaged (and it is left as is)."""
    import yaml
    from omegaconf import OmegaConf

    from lze_bench.errors import damaged_file
    from lze_bench.ledger import run_file_fix

    try:
        previous = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (yaml.YAMLError, ValueError, UnicodeDecodeError) as exc:
        raise damaged_file(path, exc, run_file_fix(path.parent)) from exc
    return previous if isinstance(previous, dict) else {}


def train(cfg) -> Path:
    from lze_bench.backends.openrlhf.command import check
    from lze_bench.runlock import hold_run_dir

    check(cfg)  # a config mistake is reported before a missing package or a job
    plan = launch_plan(cfg)
    from lze_bench.backends.openrlhf.head_build import require_built, uses_trained_head

    if uses_trained_head(cfg):
        require_built(cfg)  # the sweep's head step (or `lze-bench head`) builds it; a run never does
    if env.is_set(env.SLURM_PROCID):
        return _run_node(cfg, plan)
    from lze_bench.tracking import preflight

    preflight(cfg.logger)  # the trainer actor opens the trackers; fail here, before a cluster starts
    with hold_run_dir(resolve_paths(cfg).run_dir, "train"):  # one process per run directory (runlock.py)
        if cfg.launcher.name == "slurm":
            return _submit(cfg, plan)
        from lze_bench.backends.openrlhf import require_gpu_stack

        require_gpu_stack()
        paths, argv = prepare(cfg, plan)
        code = subprocess.run(argv, check=False).returncode
    if code != 0:
        raise LzeBenchError(f"the OpenRLHF driver exited with code {code}; rerun the same command to resume")
    return paths.run_dir


def _run_node(cfg, plan: LaunchPlan) -> Path:
    """A node of a job step that runs `lze-bench train` on every node (a sweep job): rank 0 prepares the run
    directory (and records the plan) while the others start Ray's workers, so each node holds the plan built
    from the same config rather than waiting for rank 0's file."""
    from lze_bench.backends.openrlhf.ray_cluster import NodeRole, job_hosts, node_main
    from lze_bench.runlock import hold_run_dir

    role = NodeRole.from_env(plan.gpus_per_node, plan.ray_cpus)
    with hold_run_dir(resolve_paths(cfg).run_dir, "train") if role.rank == 0 else nullcontext():  # rank 0 writes
        paths = prepare(cfg, plan)[0] if role.rank == 0 else resolve_paths(cfg)
        code = node_main(paths.run_dir, role, peers=job_hosts()[1:])
    if code != 0:
        raise LzeBenchError(f"the OpenRLHF driver exited with code {code} on {role.head_host}")
    return paths.run_dir


def _submit(cfg, plan: LaunchPlan) -> Path:
    import submitit

    from lze_bench.backends.openrlhf.slurm import OpenRLHFJob, executor_parameters

    paths, _ = prepare(cfg, plan)
    folder = paths.work / "slurm"
    try:
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=int(cfg.launcher.max_requeue))
    except RuntimeError as exc:  # submitit checks for srun
        raise LzeBenchError(f"launcher=slurm: {exc} (no srun on PATH); run here with launcher=local") from exc
    executor.update_parameters(**executor_parameters(cfg, plan))
    job = executor.submit(OpenRLHFJob(), str(paths.run_dir))  # the job reads the plan from command.json
    print(f"submitted Slurm job {job.job_id} for {paths.run_dir}", file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job_id").write_text(f"{job.job_id}\n")
    return paths.run_dir
