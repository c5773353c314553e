"""Our config -> the exact OpenRLHF 0.11.2 command line (dotted flags, openrlhf.md §1, §12).

Pure string generation (no OpenRLHF import), so `train --dry-run` prints it on a
laptop. Every value OpenRLHF reads comes from here; the Ray driver (entry.py)
receives this list verbatim as OpenRLHF's argv, and our own keys travel in the
run directory's config.yaml (argparse rejects unknown flags).

Invariants checked here, each a one-line LzeBenchError naming the key:
* `train.batch_size == rollout.batch_size x n` (one optimizer step per training
  step, openrlhf.md §9) and divisible by train micro batch x GPUs (DeepSpeed);
* colocated vLLM engines x TP == actor GPUs (OpenRLHF asserts it);
* `ds_enable_sleep` needs ZeRO stage >= 1 (stage 0 has no `offload_states`);
  `ckpt_max_num >= 2` (OpenRLHF's `save_ckpt` deletes the oldest tag before
  writing the new one: with 1, a crash mid-save leaves nothing to resume);
* refused: async training, OpenRLHF's dynamic filtering (the selector replaces
  it), `vllm_generate_batch_size` (extras would be trained a step late), an
  agent function (the reward must be ours), dynamic batching (our per-step
  accumulation window, actor.py, is the batch), OpenRLHF's own trackers
  (`--logger.wandb.*`, `--logger.tensorboard_dir`: `logger=[...]` replaces
  them, lze_bench.tracking), and any flag we already set;
* the launch plan (plan.py) is built once and every number below that is about
  where the run goes (nodes, GPUs, engines, ranks) comes from it; a flag in
  `extra_args` that would change it is refused naming its config key
  (PLAN_KEYS), except ring attention and DeepSpeed tensor parallelism, which
  have no key and are folded into the plan (plan.FOLDED);
* astral's learned head (head.check_head): `predictor=trained` is refused, a
  `predictor=checkpoint` head file must exist, be an ASTRAL head and record
  `selector.predictor_encoder` as its encoder.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from lze_bench.advantages import OPENRLHF_NAMES, resolved_estimator
from lze_bench.backends.openrlhf.plan import LaunchPlan, command_path, launch_plan
from lze_bench.errors import LzeBenchError

ENTRY_MODULE = "lze_bench.backends.openrlhf.entry"
REWARD_FUNC = Path(__file__).resolve().with_name("reward_func.py")

REFUSED = {
    "--train.async_enable": "async training uses other trainer classes that the selector hook does not cover",
    "--algo.dynamic_filtering_enable": "the selector replaces OpenRLHF's dynamic filtering (use selector=dapo)",
    "--algo.dynamic_filtering_range": "the selector replaces OpenRLHF's dynamic filtering (use selector=dapo)",
    "--rollout.vllm_generate_batch_size": "extra groups would sit in OpenRLHF's buffer and train a step late",
    "--train.agent_func_path": "rewards must come from lze-bench's grading (reward_func.py)",
    "--train.dynamic_batch_enable": "lze-bench sets DeepSpeed's accumulation window per step from the trimmed update "
                                    "(actor.py); OpenRLHF's token-budget windows would replace it",
    # OpenRLHF's own trackers take the W&B key as a flag (argv, config.yaml, W&B config) and never see
    # the ledger; lze_bench.tracking logs both from the trainer actor
    "--logger.wandb.key": "use logger=[wandb] with WANDB_API_KEY in the environment (a key in a flag is saved in the run)",
    "--logger.wandb.org": "use logger=[wandb] tracking.entity=NAME",
    "--logger.wandb.project": "use logger=[wandb] tracking.project=NAME",
    "--logger.wandb.group": "use logger=[wandb] tracking.group=NAME",
    "--logger.wandb.run_name": "use logger=[wandb] tracking.name=NAME",
    "--logger.tensorboard_dir": "use logger=[tensorboard] (event files in <run_dir>/tensorboard/)",
}

# OpenRLHF flags that shape the launch plan (plan.py), refused in extra_args whether or not we set them, each with
# the lze-bench key that sets it; ring attention and DeepSpeed TP have no key and are folded (plan.FOLDED)
PLAN_KEYS = {
    "--actor.num_nodes": "backend.num_nodes",
    "--actor.num_gpus_per_node": "backend.gpus_per_node",
    "--ref.num_nodes": "backend.num_nodes (the reference model shares the actor's GPUs; it exists when "
                       "trainer.kl_coef > 0)",
    "--ref.num_gpus_per_node": "backend.gpus_per_node (the reference model shares the actor's GPUs; it exists when "
                               "trainer.kl_coef > 0)",
    "--vllm.num_engines": "backend.vllm_tensor_parallel_size (engines = GPUs / TP)",
    "--vllm.tensor_parallel_size": "backend.vllm_tensor_parallel_size",
    "--train.colocate_all": "backend.colocate_all",
    "--train.colocate_actor_ref": "backend.colocate_all (Ray's CPUs are planned for all-or-nothing colocation)",
    "--train.micro_batch_size": "backend.train_micro_batch_size",
}


@dataclass(frozen=True)
class RunPaths:
    """Where one run's files live; absolute, because Ray actors do not share our cwd."""

    run_dir: Path

    @property
    def config(self) -> Path:
        return self.run_dir / "config.yaml"

    @property
    def work(self) -> Path:  # everything OpenRLHF itself writes
        return self.run_dir / "openrlhf"

    @property
    def prompts(self) -> Path:
        return self.work / "prompts.jsonl"

    @property
    def ckpt(self) -> Path:
        return self.work / "ckpt"

    @property
    def final(self) -> Path:
        return self.work / "final"

    @property
    def command(self) -> Path:  # the driver argv and the launch plan (plan.py)
        return command_path(self.run_dir)


def _num(value) -> str:
    if isinstance(value, bool):
        raise TypeError("flags are switches, not values")
    return format(value, "g") if isinstance(value, float) else str(value)


def openrlhf_flags(cfg, paths: RunPaths, plan: LaunchPlan | None = None) -> list[str]:
    """The OpenRLHF 0.11.2 argv for this config (flags only, no program name); `plan`: the run's launch plan
    (built from cfg when not given)."""
    plan = plan or launch_plan(cfg)
    check(cfg, plan)
    b, t = cfg.backend, cfg.trainer
    nodes, gpus = plan.nodes, plan.gpus_per_node
    flags: list[str] = []

    def add(flag: str, *values) -> None:
        flags.append(flag)
        flags.extend(_num(v) for v in values)

    def switch(flag: str, on: bool) -> None:
        if on:
            flags.append(flag)

    add("--actor.model_name_or_path", cfg.model.path)
    add("--actor.num_nodes", nodes)
    add("--actor.num_gpus_per_node", gpus)
    if plan.reference_model:  # the reference model exists only with a KL term
        add("--ref.num_nodes", nodes)
        add("--ref.num_gpus_per_node", gpus)
    add("--vllm.num_engines", plan.vllm_engines)
    add("--vllm.tensor_parallel_size", plan.vllm_tensor_parallel_size)
    add("--vllm.gpu_memory_utilization", float(b.vllm_gpu_memory_utilization))
    switch("--vllm.enable_sleep", b.vllm_enable_sleep)
    switch("--vllm.enforce_eager", b.vllm_enforce_eager)
    switch("--vllm.enable_prefix_caching", b.vllm_enable_prefix_caching)
    if b.vllm_sync_backend != "nccl":  # OpenRLHF's default; left out so GPU commands read as before
        add("--vllm.sync_backend", b.vllm_sync_backend)
    switch("--train.colocate_all", plan.colocate_all)
    add("--ds.zero_stage", b.zero_stage)
    add("--ds.param_dtype", b.param_dtype)
    switch("--ds.enable_sleep", b.ds_enable_sleep)
    switch("--ds.adam_offload", b.adam_offload)
    switch("--ds.packing_samples", b.packing_samples)
    switch("--actor.gradient_checkpointing_enable", b.gradient_checkpointing)
    add("--ds.attn_implementation", b.attn_implementation)
    # trainer.advantage_estimator under OpenRLHF's name for the same formula (lze_bench/advantages.py)
    add("--algo.advantage.estimator", OPENRLHF_NAMES[resolved_estimator(t)])
    add("--rollout.n_samples_per_prompt", t.n_samples)
    add("--rollout.batch_size", t.batch_size)
    add("--train.batch_size", t.batch_size * t.n_samples)
    add("--rollout.micro_batch_size", b.rollout_micro_batch_size)
    add("--train.micro_batch_size", plan.train_micro_batch_size)
    add("--train.max_epochs", t.ppo_epochs)
    add("--train.num_episodes", 1)  # data passes are ours (selection.DataOrder); trainer.steps ends the run
    add("--data.max_len", b.max_len)
    add("--rollout.max_new_tokens", t.max_new_tokens)
    add("--rollout.temperature", float(t.temperature))
    add("--rollout.top_p", float(t.top_p))
    add("--actor.adam.lr", float(t.lr))
    add("--actor.adam.weight_decay", float(t.weight_decay))
    add("--actor.max_norm", float(t.grad_clip))
    add("--actor.lr_scheduler", b.lr_scheduler)
    add("--actor.lr_warmup_ratio", float(b.lr_warmup_ratio))
    add("--actor.min_lr_ratio", float(b.min_lr_ratio))
    add("--actor.eps_clip_low_high", float(t.clip_eps_low), float(t.clip_eps_high))
    add("--actor.loss_agg_mode", b.loss_agg_mode)
    add("--algo.kl.init_coef", float(t.kl_coef))
    if t.kl_coef > 0:
        flags.append("--algo.kl.use_loss")
        add("--algo.kl.estimator", b.kl_estimator)
    if plan.rollout_store_groups > 0:  # astral: loss re-centred on the replayed groups' behaviour log-probs (update.py)
        from lze_bench.backends.openrlhf.replay_loss import replay_is_flags

        flags.extend(replay_is_flags())
    add("--train.seed", cfg.seed)
    add("--data.prompt_dataset", str(paths.prompts))
    add("--data.input_key", "input")
    add("--data.label_key", "label")
    switch("--data.apply_chat_template", b.apply_chat_template)
    add("--reward.remote_url", str(REWARD_FUNC))
    add("--ckpt.path", str(paths.ckpt))
    add("--ckpt.save_steps", -1)  # lze-bench's trainer saves, at its own step count (trainer.py)
    flags.append("--ckpt.save_hf")
    add("--ckpt.max_num", b.ckpt_max_num)
    flags.append("--ckpt.load_enable")  # resume whenever a DeepSpeed checkpoint exists (requeue)
    add("--ckpt.output_dir", str(paths.final))
    add("--ckpt.best_metric_key", "none")
    add("--eval.steps", -1)  # held-out evals are `lze-bench eval run=...` on the HF checkpoints
    add("--logger.logging_steps", 1)  # OpenRLHF's trackers stay off: logger=[...] logs from our trainer (tracking)
    flags.extend(str(a) for a in b.extra_args)
    _check_extra_args(list(b.extra_args), set(f for f in flags[: len(flags) - len(b.extra_args)] if f.startswith("--")))
    return flags


def driver_argv(cfg, paths: RunPaths, plan: LaunchPlan | None = None, python: str | None = None) -> list[str]:
    """The exact command the Ray driver runs: `backend.driver_wrapper` (if any), our entry module, then
    OpenRLHF's flags."""
    return [*(str(a) for a in cfg.backend.driver_wrapper), python or sys.executable, "-m", ENTRY_MODULE,
            "--lze-config", str(paths.config), "--", *openrlhf_flags(cfg, paths, plan)]


def format_command(argv: list[str]) -> str:
    """Shell-quoted, one flag (with its values) per line, so every flag can be checked."""
    head, lines, current = [], [], None
    for token in argv:
        if token.startswith("--") and token != "--":
            if current is not None:
                lines.append(current)
            current = [token]
        elif current is None:
            head.append(token)
        else:
            current.append(token)
    if current is not None:
        lines.append(current)
    out = [" ".join(shlex.quote(t) for t in head)] + ["  " + " ".join(shlex.quote(t) for t in line) for line in lines]
    return " \\\n".join(out)


def check(cfg, plan: LaunchPlan | None = None) -> None:
    """Config invariants for this backend (one line each); `plan`: the run's launch plan (built when not given)."""
    b, t = cfg.backend, cfg.trainer
    if not cfg.model.path:
        raise LzeBenchError("model: backend=openrlhf trains a Hugging Face model; pass model=PATH_OR_HF_ID")
    _check_plan_flags([str(a) for a in b.extra_args])  # before the plan reads them
    plan = plan or launch_plan(cfg)
    world, ranks = plan.world_size, plan.dp_ranks
    # the update is dealt to data-parallel ranks: one per actor GPU unless ring attention or DeepSpeed TP share
    dealt = f"{ranks} actor GPUs" if ranks == world else f"{ranks} data-parallel ranks (of {world} actor GPUs)"
    if t.n_samples < 2:
        raise LzeBenchError(f"trainer.n_samples: GRPO group advantages need >= 2 samples per prompt, got {t.n_samples}")
    if b.colocate_all and world % b.vllm_tensor_parallel_size:
        raise LzeBenchError(
            f"backend.vllm_tensor_parallel_size: {b.vllm_tensor_parallel_size} must divide the {world} GPUs "
            "(colocated vLLM engines x TP == actor GPUs)"
        )
    if b.vllm_sync_backend not in ("nccl", "gloo"):
        raise LzeBenchError(f"backend.vllm_sync_backend: {b.vllm_sync_backend!r} is not an OpenRLHF sync backend; "
                            "use nccl (GPUs, the default) or gloo")
    if (b.vllm_enable_sleep or b.ds_enable_sleep) and not b.colocate_all:
        raise LzeBenchError("backend.vllm_enable_sleep/ds_enable_sleep: sleep modes need backend.colocate_all=true")
    if b.ds_enable_sleep and b.zero_stage == 0:
        raise LzeBenchError("backend.zero_stage: 0 has no offload_states (DeepSpeed's stage-0 optimizer), which "
                            "backend.ds_enable_sleep needs; use backend.zero_stage=1, 2 or 3, or ds_enable_sleep=false")
    if t.eval_every_flops is not None:
        raise LzeBenchError("trainer.eval_every_flops: backend=openrlhf runs no held-out eval while training; use "
                            "trainer.checkpoint_every_flops=FLOPS and evaluate the checkpoints with lze-bench eval")
    if b.ckpt_max_num < 2:
        raise LzeBenchError(f"backend.ckpt_max_num: {b.ckpt_max_num} keeps no loadable checkpoint while a new one is "
                            "written (OpenRLHF deletes the oldest tag first); use 2 or more")
    if b.max_len <= t.max_new_tokens:
        raise LzeBenchError(
            f"backend.max_len: {b.max_len} must exceed trainer.max_new_tokens={t.max_new_tokens} (prompt + response)"
        )
    samples = t.batch_size * t.n_samples
    if samples % plan.trim_unit:
        raise LzeBenchError(
            f"trainer.batch_size: {t.batch_size} prompts x {t.n_samples} samples = {samples} must be divisible by "
            f"backend.train_micro_batch_size x the {dealt} = {b.train_micro_batch_size} x {ranks} "
            "(DeepSpeed accumulation)"
        )
    # OpenRLHF cuts the step's samples into micro-batches of rollout.micro_batch_size
    # (experience_maker.split_rollout_samples) and deals them to the DP ranks in
    # ceil-sized chunks (RayActorGroup.async_run_method_batch): an uneven count leaves
    # a rank short or empty, and DeepSpeed's collectives then hang.
    micro, rest = divmod(samples, b.rollout_micro_batch_size)
    if rest or micro % ranks:
        raise LzeBenchError(
            f"backend.rollout_micro_batch_size: {samples} samples in micro-batches of {b.rollout_micro_batch_size} "
            f"must split evenly over the {dealt} (whole micro-batches, the same count per rank)"
        )
    _check_selector(cfg)


def runnable_selectors() -> list[str]:
    """Registered selectors this backend runs: every one (features: features.py; replay, per-rollout keeps and
    advantages: update.py; per-prompt rollout counts: generator.py; held groups: selection.py, context.py)."""
    from lze_bench.registry import SELECTORS

    import lze_bench.selectors  # noqa: F401  (registers them)

    return sorted(SELECTORS)


def _check_selector(cfg) -> None:
    from lze_bench import env
    from lze_bench.plugins import selector_class, worker_pythonpath
    from lze_bench.registry import SELECTORS

    name = cfg.selector.name
    if name not in SELECTORS and not cfg.selector.get("plugin"):
        raise LzeBenchError(f"selector={name} is not registered; see `lze-bench selectors`")
    selector_class(cfg.selector).check_run(cfg.selector, max_gen_rounds=int(cfg.backend.max_gen_rounds))
    worker_pythonpath(cfg.selector, env.value(env.PYTHONPATH))  # a plug-in the Ray workers cannot import: one line
    from lze_bench.backends.openrlhf.head import check_head

    check_head(cfg)  # astral's learned head: the file, its format, its encoder (one line each)


def _resolve(flag: str, known) -> list[str]:
    """Flags `flag` can stand for under argparse's prefix matching (OpenRLHF's parser has allow_abbrev on)."""
    return [flag] if flag in known else sorted(k for k in known if k.startswith(flag))


def _flags(extra: list[str]) -> list[str]:
    """The flag names in `extra` (`--name=value` and `--name value` alike)."""
    return [token.split("=", 1)[0] for token in extra if token.startswith("--")]


def _check_plan_flags(extra: list[str]) -> None:
    """Refuse a flag that would change the launch plan, naming the key that sets it (by destination, as below)."""
    for flag in _flags(extra):
        planned = _resolve(flag, PLAN_KEYS)
        if planned:
            raise LzeBenchError(f"backend.extra_args: {_named(flag, planned)} changes the launch plan; "
                                f"use {PLAN_KEYS[planned[0]]}")


def _check_extra_args(extra: list[str], ours: set[str]) -> None:
    """Refuse by destination: `--train.async_e` is `--train.async_enable` to OpenRLHF's argparse."""
    _check_plan_flags(extra)
    for flag in _flags(extra):
        refused = _resolve(flag, REFUSED)
        if refused:
            raise LzeBenchError(
                f"backend.extra_args: {_named(flag, refused)} is not supported by backend=openrlhf: {REFUSED[refused[0]]}"
            )
        taken = _resolve(flag, ours)
        if taken:
            raise LzeBenchError(
                f"backend.extra_args: {_named(flag, taken)} is already set from the config; change the "
                "lze-bench key instead (see `lze-bench train backend=openrlhf --dry-run`)"
            )


def _named(flag: str, resolved: list[str]) -> str:
    return flag if resolved == [flag] else f"{flag} (= {' or '.join(resolved)})"
