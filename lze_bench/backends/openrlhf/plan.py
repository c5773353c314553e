"""The launch plan of one backend=openrlhf run: where it runs and how its work is dealt, resolved once.

`launch_plan(cfg)` is the one place that turns the config into the cluster shape, the actor's ranks, the
vLLM engines, Ray's CPUs, the trim unit and the rollout-store capacity (no OpenRLHF import). The run
records it in `openrlhf/command.json` next to the driver argv (launch.prepare), `--dry-run` prints it,
and every later reader takes it from there instead of working it out again: the Slurm job body (Ray's
GPUs and CPUs per node, ray_cluster.py / slurm.py), the command line (command.py), the trainer actor
(data-parallel ranks, trim unit, store capacity, the reference pass the ledger books; context.py).

Data-parallel ranks: OpenRLHF places one policy actor per GPU and groups `ring_attn_size x
tensor_parallel_size` of them on one data shard (`RayActorGroup(duplicate_actors=...)`), so the update is
dealt to `world_size / (ring_attn_size x ds_tensor_parallel_size)` ranks, and a trim unit is
`train_micro_batch_size` responses on each of them (trim.py). Those two sizes have no lze-bench key: given
in `backend.extra_args` (`--ds.ring_attn_size N`, `--ds.tensor_parallel_size N`), they are folded into
the plan (and passed to OpenRLHF unchanged). Every other OpenRLHF flag that would change the plan is set
from a config key and refused in `extra_args` with that key (command.PLAN_KEYS).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from lze_bench.errors import LzeBenchError

COMMAND_FILE = "command.json"  # under <run_dir>/openrlhf/: {"argv": [...], "plan": {...}}
# OpenRLHF flags with no lze-bench key that change the data-parallel ranks: read from backend.extra_args
FOLDED = {"--ds.ring_attn_size": "ring_attn_size", "--ds.tensor_parallel_size": "ds_tensor_parallel_size"}


@dataclass(frozen=True)
class LaunchPlan:
    nodes: int
    gpus_per_node: int
    world_size: int  # actor GPUs: nodes x gpus_per_node (one policy actor each)
    ring_attn_size: int  # --ds.ring_attn_size (backend.extra_args; 1 = none)
    ds_tensor_parallel_size: int  # --ds.tensor_parallel_size (backend.extra_args; 1 = none)
    dp_ranks: int  # data-parallel ranks: world_size / (ring_attn_size x ds_tensor_parallel_size)
    colocate_all: bool
    vllm_engines: int
    vllm_tensor_parallel_size: int
    reference_model: bool  # trainer.kl_coef > 0: OpenRLHF builds a reference model, the ledger books its pass
    ray_cpus: int  # Ray CPUs one node needs (what OpenRLHF reserves there, + 1 for the trainer actor)
    train_micro_batch_size: int
    trim_unit: int  # responses per trimmed unit: train_micro_batch_size x dp_ranks (trim.py)
    rollout_store_groups: int  # groups the replay store keeps (lze_bench.rollout_store.store_capacity)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LaunchPlan":
        names = {f.name for f in fields(cls)}
        missing = names - set(data)
        if missing:
            raise LzeBenchError(f"the launch plan lacks {', '.join(sorted(missing))}; prepare the run again with "
                                "`lze-bench train backend=openrlhf`")
        return cls(**{name: data[name] for name in names})

    def describe(self) -> list[str]:
        """`--dry-run`'s lines: one `name: value` per field (values as JSON, as command.json holds them)."""
        return [f"{f.name}: {json.dumps(getattr(self, f.name))}" for f in fields(self)]


def cluster_shape(cfg) -> tuple[int, int]:
    """(nodes, GPUs per node): backend.* when set, else the launcher's."""
    nodes = cfg.backend.num_nodes or cfg.launcher.nodes
    gpus = cfg.backend.gpus_per_node or cfg.launcher.gpus_per_node
    if not gpus or gpus <= 0:
        raise LzeBenchError(
            "backend.gpus_per_node: backend=openrlhf needs GPUs; set backend.gpus_per_node=G "
            "(or launcher.gpus_per_node=G with launcher=slurm)"
        )
    return int(nodes), int(gpus)


def folded_sizes(extra_args) -> dict[str, int]:
    """The FOLDED flags' values in `backend.extra_args` (the last one wins, as in argparse); 1 when absent."""
    sizes = {key: 1 for key in FOLDED.values()}
    tokens = [str(t) for t in extra_args]
    for index, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        flag, has_value, value = token.partition("=")
        if flag not in FOLDED:
            abbreviated = [k for k in FOLDED if k.startswith(flag)]
            if abbreviated:  # argparse would expand it; the plan reads full names only
                raise LzeBenchError(f"backend.extra_args: {flag} (= {' or '.join(abbreviated)}) changes the launch "
                                    "plan; write the flag in full")
            continue
        if not has_value:
            value = tokens[index + 1] if index + 1 < len(tokens) else ""
        try:
            size = int(value)
        except ValueError:
            size = 0
        if size <= 0:
            raise LzeBenchError(f"backend.extra_args: {flag} needs a positive integer, got {value!r}")
        sizes[FOLDED[flag]] = size
    return sizes


def _ray_cpus(gpus: int, colocate_all: bool, reference: bool) -> int:
    """What OpenRLHF reserves on one node (openrlhf.md §2 "build cluster"): one {"GPU": 1, "CPU": 1} bundle per
    actor GPU when colocated, else one CPU per vLLM GPU, per actor GPU and per reference GPU; + 1 CPU for the
    PPOTrainer actor (Ray's default). Ray's CPU count is a scheduling label, so Ray starts with at least this."""
    if colocate_all:
        return gpus + 1
    return gpus + gpus + (gpus if reference else 0) + 1


def launch_plan(cfg) -> LaunchPlan:
    """The run's plan from its config (one line naming the key or flag when it cannot be laid out)."""
    from lze_bench.rollout_store import store_capacity

    b, t = cfg.backend, cfg.trainer
    nodes, gpus = cluster_shape(cfg)
    world = nodes * gpus
    sizes = folded_sizes(b.extra_args)
    shard = sizes["ring_attn_size"] * sizes["ds_tensor_parallel_size"]
    if world % shard:
        raise LzeBenchError(f"backend.extra_args: --ds.ring_attn_size x --ds.tensor_parallel_size = {shard} must "
                            f"divide the {world} actor GPUs (backend.num_nodes x backend.gpus_per_node)")
    dp_ranks = world // shard
    reference = float(t.kl_coef) > 0
    micro = int(b.train_micro_batch_size)
    return LaunchPlan(
        nodes=nodes, gpus_per_node=gpus, world_size=world, dp_ranks=dp_ranks, colocate_all=bool(b.colocate_all),
        vllm_engines=world // int(b.vllm_tensor_parallel_size),
        vllm_tensor_parallel_size=int(b.vllm_tensor_parallel_size), reference_model=reference,
        ray_cpus=_ray_cpus(gpus, bool(b.colocate_all), reference), train_micro_batch_size=micro,
        trim_unit=micro * dp_ranks,
        rollout_store_groups=store_capacity(int(b.rollout_store_groups), cfg.selector.get("buffer_size", 0),
                                            int(t.batch_size)),
        **sizes,
    )


def command_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "openrlhf" / COMMAND_FILE


def read_command(run_dir: str | Path) -> dict:
    """The run's recorded command.json: {"argv": the driver command, "plan": the launch plan}."""
    path = command_path(run_dir)
    if not path.exists():
        raise LzeBenchError(f"{path} is missing; prepare the run with `lze-bench train backend=openrlhf` first")
    return json.loads(path.read_text())


def load_plan(run_dir: str | Path) -> LaunchPlan:
    """The plan the run recorded when it was prepared."""
    command = read_command(run_dir)
    if "plan" not in command:
        raise LzeBenchError(f"{command_path(run_dir)} has no launch plan (prepared by an older lze-bench); "
                            "prepare the run again with `lze-bench train backend=openrlhf`")
    return LaunchPlan.from_dict(command["plan"])
