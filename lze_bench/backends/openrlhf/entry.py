"""The Ray driver: OpenRLHF's CLI, unchanged, with our trainer class (openrlhf.md §9 "Entry point").

    python -m lze_bench.backends.openrlhf.entry --lze-config RUN_DIR/config.yaml -- <OpenRLHF flags>

is exactly what `lze-bench train backend=openrlhf --dry-run` prints. It
1. checks the OpenRLHF version (pinned, one clear line otherwise);
2. calls `ray.init` itself (address from `backend.ray_address` or env
   LZE_RAY_ADDRESS, set by ray_cluster.py on the head node) with OpenRLHF's three
   default env vars plus LZE_RUN_DIR, LZE_CONFIG and the grading settings, so
   every actor (trainer, vLLM, DeepSpeed) sees them; OpenRLHF's `train()` then
   skips its own `ray.init`;
3. replaces `openrlhf.trainer.ppo_trainer.PPOTrainer` by `ray.remote(LzePPOTrainer)`
   (`train()` imports it lazily, at call time) and OpenRLHF's policy actor by
   ours (actor.py: per-step batch size, feature passes) before the CLI module
   imports it;
4. runs `openrlhf.cli.train_ppo_ray` as `__main__` with the flags as argv:
   OpenRLHF's own parser, validation and `train()` run unchanged;
5. when it returns, checks the ledger is complete, compacts the rollout log,
   writes DONE, then deletes the DeepSpeed states a finished run no longer
   needs (unless `backend.keep_ds_states`; checkpoints.remove_ds_states).
Before OpenRLHF starts, the run's launch plan is read (plan.py: a run prepared
without one fails here, not in the trainer actor), an interrupted first checkpoint is set aside
(checkpoints.py), and OpenRLHF's placement groups are awaited for at most
`backend.placement_timeout_s` (placement.py). The driver's PYTHONPATH is passed
to every actor so they import the same lze_bench, with the folder of a selector
plug-in's module file added (lze_bench.plugins.worker_pythonpath); the driver and
the trainer actor register the plug-in from the config's recorded `plugin`.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from pathlib import Path

from lze_bench import env as lze_env
from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

OPENRLHF_CLI = "openrlhf.cli.train_ppo_ray"


def parse_argv(argv: list[str]) -> tuple[str, list[str]]:
    """`--lze-config PATH -- FLAGS...` -> (PATH, FLAGS)."""
    if len(argv) < 3 or argv[0] != "--lze-config" or argv[2] != "--":
        raise LzeBenchError("usage: python -m lze_bench.backends.openrlhf.entry --lze-config CONFIG.yaml -- FLAGS...")
    return argv[1], list(argv[3:])


def actor_env(cfg, config_path: str) -> dict[str, str]:
    """Env vars for every Ray actor: OpenRLHF's defaults (respecting the caller's) plus ours.

    PYTHONPATH: the driver's, plus the folder a selector plug-in's module file was imported from (the actors
    start in another directory), registering the plug-in here from the config's recorded `plugin` first."""
    from lze_bench.plugins import selector_class, worker_pythonpath

    selector_class(cfg.selector)
    pythonpath = worker_pythonpath(cfg.selector, lze_env.value(lze_env.PYTHONPATH))
    return {
        lze_env.TOKENIZERS_PARALLELISM.name: lze_env.value(lze_env.TOKENIZERS_PARALLELISM),
        lze_env.NCCL_DEBUG.name: lze_env.value(lze_env.NCCL_DEBUG),
        lze_env.RAY_ZERO_COPY.name: lze_env.value(lze_env.RAY_ZERO_COPY),
        "LZE_RUN_DIR": str(cfg.run_dir),
        "LZE_CONFIG": str(os.path.abspath(config_path)),
        "LZE_GRADE_TIMEOUT_S": str(cfg.backend.grade_timeout_s),
        "LZE_GRADE_WORKERS": str(cfg.backend.grade_workers),
        # reward_func.py: the reward OpenRLHF trains on (trainer.reward_shape of the verdict)
        lze_env.REWARD_SHAPE.name: str(cfg.trainer.get("reward_shape", "binary")),
        **({lze_env.PYTHONPATH.name: pythonpath} if pythonpath else {}),
        # read by vLLM at engine start in the rollout actors (backend.vllm_batch_invariant)
        **({"VLLM_BATCH_INVARIANT": "1"} if getattr(cfg.backend, "vllm_batch_invariant", False) else {}),
    }


def install_trainer():
    """Make OpenRLHF's `train()` build our trainer and policy actors; returns the trainer ActorClass."""
    import ray
    import openrlhf.trainer.ppo_trainer as ppo_trainer_module
    import openrlhf.trainer.ray.ppo_actor as ppo_actor_module

    from lze_bench.backends.openrlhf.actor import make_policy_actor
    from lze_bench.backends.openrlhf.trainer import LzePPOTrainer

    actor_class = ray.remote(LzePPOTrainer)
    ppo_trainer_module.PPOTrainer = actor_class
    ppo_actor_module.PolicyModelActor = make_policy_actor(ppo_actor_module.PolicyModelActor)
    return actor_class


def run(config_path: str, flags: list[str]) -> None:
    from lze_bench.backends.openrlhf import require_gpu_stack
    from lze_bench.backends.openrlhf.checkpoints import remove_ds_states, set_aside_unloadable
    from lze_bench.backends.openrlhf.command import RunPaths
    from lze_bench.backends.openrlhf.context import finish_run, load_run_config
    from lze_bench.backends.openrlhf.placement import bounded_placement
    from lze_bench.backends.openrlhf.plan import load_plan

    require_gpu_stack()
    cfg = load_run_config(config_path)
    load_plan(cfg.run_dir)  # the trainer actor deals its update by it (context.py); missing: one line, before Ray
    actor_vars = actor_env(cfg, config_path)
    lze_env.set_names_here(actor_vars)  # the driver process reads them too
    import ray

    address = cfg.backend.ray_address or lze_env.ray_address() or None
    set_aside_unloadable(RunPaths(Path(cfg.run_dir)).ckpt)
    ray.init(address=address, runtime_env={"env_vars": actor_vars})
    try:
        install_trainer()
        saved_argv = sys.argv
        sys.argv = [OPENRLHF_CLI, *flags]
        try:
            with bounded_placement(float(cfg.backend.placement_timeout_s)):
                runpy.run_module(OPENRLHF_CLI, run_name="__main__", alter_sys=True)
        finally:
            sys.argv = saved_argv
        from lze_bench.preemption import requested

        if requested(cfg.run_dir):  # the trainer saved its last step and stopped; the job requeues (slurm.py)
            log.warning("stopped for a preemption after a checkpoint; the requeued job resumes there")
            return
        finish_run(cfg.run_dir, cfg.trainer)
        if not cfg.backend.keep_ds_states:
            remove_ds_states(RunPaths(Path(cfg.run_dir)).ckpt)
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config_path, flags = parse_argv(list(sys.argv[1:] if argv is None else argv))
        run(config_path, flags)
    except LzeBenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
