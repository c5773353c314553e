"""backend=openrlhf's launch plan (lze_bench/backends/openrlhf/plan.py) at its interfaces.

`--dry-run` prints the plan and the prepared run's `openrlhf/command.json` holds the same one; the Slurm job
body and the trainer's run state take theirs from that file; a flag in `backend.extra_args` that would change
the plan is either folded into it (ring attention, DeepSpeed tensor parallelism: no lze-bench key) or refused
in one line naming the key to use. Runs without OpenRLHF.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.backends.openrlhf.command import RunPaths, openrlhf_flags
from lze_bench.backends.openrlhf.plan import launch_plan, load_plan
from lze_bench.cli import app
from lze_bench.config import compose
from lze_bench.errors import LzeBenchError

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "sweeps" / "qwen25_math_1p5b.yaml"
DATA = REPO / "tests" / "data"


def overrides(run: Path, *extra: str, selector: str = "uniform") -> list[str]:
    spec = yaml.safe_load(RECIPE.read_text())
    return [*spec["overrides"], f"selector={selector}", "seed=0", f"run_dir={run}", "launcher=local", "task=gsm8k",
            "task.limit=5", f"data.root={DATA}", *extra]


def printed_plan(output: str) -> dict:
    """The `#   name: value` lines under the dry run's launch-plan header, values as JSON."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# launch plan"))
    plan = {}
    for line in lines[start + 1:]:
        if not line.startswith("#   "):
            break
        name, _, value = line[4:].partition(": ")
        plan[name] = json.loads(value)
    return plan


@pytest.mark.parametrize("extra, dp_ranks", [((), 8), (("backend.extra_args=[--ds.ring_attn_size,2]",), 4)])
def test_dry_run_prints_the_plan_command_json_records(tmp_path, extra, dp_ranks):
    from lze_bench.backends.openrlhf.launch import prepare

    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", *overrides(run, *extra), "--dry-run"])
    assert result.exit_code == 0, result.output
    shown = printed_plan(result.output)
    assert shown["dp_ranks"] == dp_ranks and shown["trim_unit"] == 8 * dp_ranks  # 8 per micro-batch per rank
    assert f"whole units of {8 * dp_ranks} responses" in result.output
    paths, argv = prepare(compose("train", overrides(run, *extra)))
    recorded = json.loads(paths.command.read_text())
    assert recorded["plan"] == shown and recorded["argv"] == argv
    assert load_plan(run) == launch_plan(compose("train", overrides(run, *extra)))


def test_the_trainer_state_and_the_slurm_job_read_the_recorded_plan(tmp_path, monkeypatch):
    from lze_bench.backends.openrlhf import slurm
    from lze_bench.backends.openrlhf.context import RunContext
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.flops import FlopModel

    run = tmp_path / "run"
    cfg = compose("train", overrides(run, "backend.extra_args=[--ds.tensor_parallel_size,2]", selector="astral"))
    prepare(cfg)
    plan = load_plan(run)
    context = RunContext(cfg, num_prompts=5, flops=FlopModel(1, 1, 1), plan=plan)
    assert (context.dp_ranks, context.unit) == (4, 32)  # 8 GPUs over 2-way DeepSpeed TP; 8 per micro-batch
    assert context.store.capacity == plan.rollout_store_groups == 512 + 128  # astral's buffer + one step's prompts

    class Reached(Exception):
        pass

    def from_env(cls, gpus, cpus=1):
        raise Reached(gpus, cpus)

    monkeypatch.setattr(slurm.NodeRole, "from_env", classmethod(from_env))
    with pytest.raises(Reached) as reached:
        slurm.main([str(run)])  # the sbatch script's command: RUN_DIR only
    assert reached.value.args == (plan.gpus_per_node, plan.ray_cpus) == (8, 9)


@pytest.mark.parametrize("flag, key", [
    ("--actor.num_gpus_per_node,4", "backend.gpus_per_node"),
    ("--vllm.num_engines,4", "backend.vllm_tensor_parallel_size"),
    ("--train.colocate_actor_ref", "backend.colocate_all"),
    ("--ref.num_nodes,2", "backend.num_nodes"),
    ("--train.micro_batch_size,4", "backend.train_micro_batch_size"),
])
def test_a_flag_that_changes_the_plan_is_refused_in_one_line_naming_the_key(tmp_path, flag, key):
    cfg = compose("train", overrides(tmp_path / "run", f"backend.extra_args=[{flag}]"))
    with pytest.raises(LzeBenchError, match=f"backend.extra_args: {flag.split(',')[0]} changes the "
                                            f"launch plan; use {key}") as caught:
        openrlhf_flags(cfg, RunPaths(tmp_path / "run"))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("flag, message", [
    ("--ds.ring_attn,2", r"--ds.ring_attn \(= --ds.ring_attn_size\) changes the launch plan; write the flag in full"),
    ("--ds.ring_attn_size,3", "--ds.ring_attn_size x --ds.tensor_parallel_size = 3 must divide the 8 actor GPUs"),
    ("--ds.tensor_parallel_size,0", "--ds.tensor_parallel_size needs a positive integer"),
])
def test_folded_flags_are_read_in_full_and_must_fit_the_gpus(tmp_path, flag, message):
    cfg = compose("train", overrides(tmp_path / "run", f"backend.extra_args=[{flag}]"))
    with pytest.raises(LzeBenchError, match=message):
        launch_plan(cfg)


def test_a_folded_flag_reaches_openrlhf_and_the_per_rank_checks(tmp_path):
    cfg = compose("train", overrides(tmp_path / "run", "backend.extra_args=['--ds.ring_attn_size=4']"))
    assert "--ds.ring_attn_size=4" in openrlhf_flags(cfg, RunPaths(tmp_path / "run"))  # passed on verbatim
    # 6 prompts x 4 = 24 samples; the log-prob micro-batches are dealt to data-parallel ranks, not GPUs:
    # 6 micro-batches of 4 do not split over 8 GPUs but do over the 2 ranks of a 4-way ring
    shape = ("trainer.batch_size=6", "trainer.n_samples=4", "backend.train_micro_batch_size=3")
    with pytest.raises(LzeBenchError, match="evenly over the 8 actor GPUs"):
        openrlhf_flags(compose("train", overrides(tmp_path / "run", *shape, "backend.rollout_micro_batch_size=4")),
                       RunPaths(tmp_path / "run"))
    ring = "backend.extra_args=[--ds.ring_attn_size,4]"
    openrlhf_flags(compose("train", overrides(tmp_path / "run", ring, *shape, "backend.rollout_micro_batch_size=4")),
                   RunPaths(tmp_path / "run"))
    with pytest.raises(LzeBenchError, match=r"evenly over the 2 data-parallel ranks \(of 8 actor GPUs\)"):
        openrlhf_flags(compose("train", overrides(tmp_path / "run", ring, *shape, "backend.rollout_micro_batch_size=8")),
                       RunPaths(tmp_path / "run"))


def test_the_rollout_store_capacity_rule_is_one_function():
    from lze_bench.rollout_store import store_capacity

    assert store_capacity(-1, 512, 128) == 640  # auto: astral's buffer plus one step's fresh groups
    assert store_capacity(-1, 0, 128) == 0  # auto, no buffer: nothing replays
    assert store_capacity(16, 512, 128) == 16  # asked for
    cfg = compose("train", ["backend=openrlhf", "model=m", "backend.gpus_per_node=1", "selector=astral"])
    assert launch_plan(cfg).rollout_store_groups == cfg.selector.buffer_size + cfg.trainer.batch_size
