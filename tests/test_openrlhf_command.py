"""backend=openrlhf: the OpenRLHF command line and the Slurm job script for the recipe, field by field.

Pure string generation: runs without OpenRLHF (openrlhf.md §9, §10, §12).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.backends.openrlhf.command import REWARD_FUNC, RunPaths, driver_argv, openrlhf_flags
from lze_bench.cli import app
from lze_bench.config import compose
from lze_bench.errors import LzeBenchError

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "sweeps" / "qwen25_math_1p5b.yaml"


def recipe_overrides(selector: str = "uniform", seed: int = 0, extra=()) -> list[str]:
    spec = yaml.safe_load(RECIPE.read_text())
    return [*spec["overrides"], f"selector={selector}", f"seed={seed}", *extra]


def flag_map(flags: list[str]) -> dict[str, list[str]]:
    """--flag -> its values ([] for a switch); a flag given twice is an error here."""
    out: dict[str, list[str]] = {}
    current = None
    for token in flags:
        if token.startswith("--"):
            assert token not in out, f"{token} given twice"
            out[token] = []
            current = token
        else:
            out[current].append(token)
    return out


@pytest.fixture()
def recipe_cfg(tmp_path):
    return compose("train", recipe_overrides(extra=[f"run_dir={tmp_path / 'run'}"]))


def test_recipe_grid_is_baseline_plus_selectors_the_backend_runs():
    spec = yaml.safe_load(RECIPE.read_text())
    assert spec["grid"]["selector"][0] == "uniform"
    from lze_bench.backends.openrlhf.command import runnable_selectors

    assert sorted(spec["grid"]["selector"]) == recipe_selectors()
    assert set(recipe_selectors()) <= set(runnable_selectors())
    assert spec["grid"]["seed"] == [0, 1, 2]


def recipe_selectors() -> list:
    """Every selector the backend runs: the recipe compares them all with uniform."""
    from lze_bench.backends.openrlhf.command import runnable_selectors

    return runnable_selectors()


def test_recipe_runs_the_per_rollout_selectors_with_their_own_settings(tmp_path):
    """pods, speed and reinforce_ada (decisions per rollout) in the 1.5B recipe: each composes with its
    selector_overrides into OpenRLHF flags at the recipe's shared n = 8; SPEED takes its authors' 1.5B
    script (8 + 16 rollouts) and continues in multiples of the node's GPUs."""
    spec = yaml.safe_load(RECIPE.read_text())
    for name in ("pods", "speed", "reinforce_ada"):
        own = spec.get("selector_overrides", {}).get(name, [])
        cfg = compose("train", recipe_overrides(name, extra=[*own, f"run_dir={tmp_path / name}"]))
        flags = flag_map(openrlhf_flags(cfg, RunPaths(tmp_path / name)))
        assert flags["--rollout.n_samples_per_prompt"] == ["8"], name
        if name == "speed":
            assert (cfg.selector.n_init, cfg.selector.n_continue) == (8, 16)
            assert cfg.selector.n_gpus == cfg.backend.gpus_per_node == 8


def test_recipe_flags_field_by_field(recipe_cfg, tmp_path):
    run = tmp_path / "run"
    flags = flag_map(openrlhf_flags(recipe_cfg, RunPaths(run)))
    expected = {
        "--actor.model_name_or_path": ["Qwen/Qwen2.5-Math-1.5B"],
        "--actor.num_nodes": ["1"],
        "--actor.num_gpus_per_node": ["8"],
        "--vllm.num_engines": ["8"],
        "--vllm.tensor_parallel_size": ["1"],
        "--vllm.gpu_memory_utilization": ["0.6"],
        "--vllm.enable_sleep": [],
        "--train.colocate_all": [],
        "--ds.zero_stage": ["2"],
        "--ds.param_dtype": ["bf16"],
        "--ds.enable_sleep": [],
        "--ds.packing_samples": [],
        "--actor.gradient_checkpointing_enable": [],
        "--ds.attn_implementation": ["flash_attention_2"],
        "--algo.advantage.estimator": ["group_norm"],
        "--rollout.n_samples_per_prompt": ["8"],
        "--rollout.batch_size": ["128"],
        "--train.batch_size": ["1024"],
        "--rollout.micro_batch_size": ["16"],
        "--train.micro_batch_size": ["8"],
        "--train.max_epochs": ["1"],
        "--train.num_episodes": ["1"],
        "--data.max_len": ["4096"],
        "--rollout.max_new_tokens": ["3072"],
        "--rollout.temperature": ["1"],
        "--rollout.top_p": ["1"],
        "--actor.adam.lr": ["1e-06"],
        "--actor.adam.weight_decay": ["0"],
        "--actor.max_norm": ["1"],
        "--actor.lr_scheduler": ["constant_with_warmup"],  # equal compute: no decay with the step count
        "--actor.lr_warmup_ratio": ["0.03"],
        "--actor.min_lr_ratio": ["0.1"],
        "--actor.eps_clip_low_high": ["0.2", "0.28"],
        "--actor.loss_agg_mode": ["token-mean"],
        "--algo.kl.init_coef": ["0"],
        "--train.seed": ["0"],
        "--data.prompt_dataset": [str(run / "openrlhf" / "prompts.jsonl")],
        "--data.input_key": ["input"],
        "--data.label_key": ["label"],
        "--data.apply_chat_template": [],
        "--reward.remote_url": [str(REWARD_FUNC)],
        "--ckpt.path": [str(run / "openrlhf" / "ckpt")],
        "--ckpt.save_steps": ["-1"],  # our trainer saves (trainer.trainer._checkpoint_if_due)
        "--ckpt.save_hf": [],
        "--ckpt.max_num": ["2"],
        "--ckpt.load_enable": [],
        "--ckpt.output_dir": [str(run / "openrlhf" / "final")],
        "--ckpt.best_metric_key": ["none"],
        "--eval.steps": ["-1"],
        "--logger.logging_steps": ["1"],
    }
    assert flags == expected
    assert REWARD_FUNC.is_file() and REWARD_FUNC.name == "reward_func.py"


def test_driver_argv_is_entry_module_then_openrlhf_flags(recipe_cfg, tmp_path):
    paths = RunPaths(tmp_path / "run")
    argv = driver_argv(recipe_cfg, paths, python="python3")
    assert argv[:6] == ["python3", "-m", "lze_bench.backends.openrlhf.entry", "--lze-config",
                        str(tmp_path / "run" / "config.yaml"), "--"]
    assert argv[6:] == openrlhf_flags(recipe_cfg, paths)


def test_kl_adds_reference_model_and_kl_loss(tmp_path):
    cfg = compose("train", recipe_overrides(extra=["trainer.kl_coef=0.001", "trainer.scale_rewards=false",
                                                   "launcher.nodes=2", "backend.num_nodes=null"]))
    flags = flag_map(openrlhf_flags(cfg, RunPaths(tmp_path)))
    assert flags["--ref.num_nodes"] == ["2"] and flags["--ref.num_gpus_per_node"] == ["8"]
    assert flags["--actor.num_nodes"] == ["2"] and flags["--vllm.num_engines"] == ["16"]
    assert flags["--algo.kl.init_coef"] == ["0.001"]
    assert flags["--algo.kl.use_loss"] == [] and flags["--algo.kl.estimator"] == ["k3"]
    assert flags["--algo.advantage.estimator"] == ["dr_grpo"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["trainer.batch_size=100"], "trainer.batch_size: 100 prompts x 8 samples = 800 must be divisible"),
        (["backend.vllm_tensor_parallel_size=3"], "backend.vllm_tensor_parallel_size: 3 must divide the 8 GPUs"),
        (["trainer.max_new_tokens=4096"], "backend.max_len: 4096 must exceed trainer.max_new_tokens=4096"),
        (["backend.colocate_all=false"], "sleep modes need backend.colocate_all=true"),
        (["backend.gpus_per_node=null", "launcher.gpus_per_node=0"], "backend.gpus_per_node: backend=openrlhf needs"),
        (["model=tiny"], "model: backend=openrlhf trains a Hugging Face model"),
        (["backend.extra_args=[--train.async_enable]"], "--train.async_enable is not supported"),
        (["backend.extra_args=[--algo.dynamic_filtering_enable]"], "the selector replaces OpenRLHF's dynamic"),
        (["backend.extra_args=[--rollout.vllm_generate_batch_size,256]"], "train a step late"),
        (["backend.extra_args=[--train.batch_size,512]"], "--train.batch_size is already set from the config"),
        (["backend.zero_stage=0"], "backend.zero_stage: 0 has no offload_states"),
        (["backend.ckpt_max_num=1"], "backend.ckpt_max_num: 1 keeps no loadable checkpoint"),
        (["backend.extra_args=[--train.dynamic_batch_enable]"], "--train.dynamic_batch_enable is not supported"),
        (["backend.extra_args=[--train.dynamic_batch]"], "--train.dynamic_batch (= --train.dynamic_batch_enable)"),
        (["backend.vllm_sync_backend=mpi"], "backend.vllm_sync_backend: 'mpi' is not an OpenRLHF sync backend"),
    ],
)
def test_invariants_fail_with_one_line(tmp_path, extra, message):
    keys = {item.split("=", 1)[0] for item in extra}
    overrides = [o for o in recipe_overrides() if o.split("=", 1)[0] not in keys] + extra
    cfg = compose("train", overrides)
    with pytest.raises(LzeBenchError) as info:
        openrlhf_flags(cfg, RunPaths(tmp_path))
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["backend.prompt=qwen"], "backend.prompt: unknown prompt 'qwen'; use one of default, qwen25_math"),
        (["backend.prompt=qwen25_math", "backend.apply_chat_template=false"], "needs backend.apply_chat_template=true"),
    ],
)
def test_bad_prompt_convention_fails_at_composition_with_one_line(extra, message):
    with pytest.raises(LzeBenchError) as info:
        compose("train", recipe_overrides() + extra)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_weight_sync_backend_is_openrlhfs_flag_only_when_not_its_default(tmp_path):
    """backend.vllm_sync_backend=gloo (no CUDA IPC: what the CPU tests run) becomes --vllm.sync_backend gloo; the
    default, nccl, leaves OpenRLHF's own default in place and the command as it was."""
    default = openrlhf_flags(compose("train", recipe_overrides()), RunPaths(tmp_path))
    assert "--vllm.sync_backend" not in default
    gloo = openrlhf_flags(compose("train", recipe_overrides(extra=["backend.vllm_sync_backend=gloo"])),
                          RunPaths(tmp_path))
    at = gloo.index("--vllm.sync_backend")
    assert gloo[at + 1] == "gloo" and [f for f in gloo if f != "--vllm.sync_backend" and f != "gloo"] == default


def test_extra_args_pass_through_verbatim(tmp_path):
    cfg = compose("train", recipe_overrides(extra=["backend.extra_args=[--actor.entropy_coef,0.0]"]))
    flags = openrlhf_flags(cfg, RunPaths(tmp_path))
    assert flags[-2:] == ["--actor.entropy_coef", "0.0"]


def every_selector():
    from lze_bench.registry import SELECTORS

    import lze_bench.selectors  # noqa: F401  (registers them)

    return sorted(SELECTORS)


@pytest.mark.parametrize("selector", every_selector())
def test_dry_run_works_for_every_registered_selector(tmp_path, selector):
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", *recipe_overrides(extra=["launcher=local", f"run_dir={run}",
                                                                        f"selector={selector}"]), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "lze_bench.backends.openrlhf.entry" in result.output and not run.exists()
    assert "whole units of 64 responses" in result.output  # 8 per micro-batch x 8 GPUs


def test_dry_run_cli_prints_exact_command(tmp_path):
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", *recipe_overrides(extra=["launcher=local", f"run_dir={run}"]),
                                      "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"# backend=openrlhf: run directory {run}"
    assert "-m lze_bench.backends.openrlhf.entry" in lines[2]
    assert "  --rollout.batch_size 128 \\" in lines and "  --train.batch_size 1024 \\" in lines
    last = lines.index("  --logger.logging_steps 1")  # the command, then the launch plan (test_openrlhf_plan.py)
    assert lines[last + 1].startswith("# launch plan") and "whole units of" in lines[-2]
    assert lines[-1] == ("# the run stops at the first step whose cum_flops reaches trainer.flop_budget=3e+18 "
                         "(trainer.steps=400 is a cap); HF checkpoints at every multiple of 3e+17 FLOPs, "
                         "after the last step")
    assert "#SBATCH" not in result.output
    assert not run.exists()  # a dry run writes nothing


def test_dry_run_slurm_prints_job_script_field_by_field(tmp_path):
    run = tmp_path / "run"
    extra = [f"run_dir={run}", "launcher.partition=gpu", "launcher.account=proj", "launcher.nodes=2",
             "backend.num_nodes=null", "launcher.setup=['source /fs/venv/bin/activate']"]
    result = CliRunner().invoke(app, ["train", *recipe_overrides(extra=extra), "--dry-run"])
    assert result.exit_code == 0, result.output
    script = result.output.split("# Slurm job script (launcher=slurm):\n", 1)[1]
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    log_dir = run / "openrlhf" / "slurm"
    assert sbatch == [  # submitit's own renderer (sorted flags), the parameters the submission uses
        "#SBATCH --account=proj",
        "#SBATCH --cpus-per-task=64",
        f"#SBATCH --error={log_dir}/%j_0_log.err",
        "#SBATCH --exclusive",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --job-name=lze-run",
        "#SBATCH --mem=512GB",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={log_dir}/%j_0_log.out",
        "#SBATCH --partition=gpu",
        "#SBATCH --requeue",
        "#SBATCH --signal=USR2@180",  # launcher.signal_delay_s: the step in hand is saved
        "#SBATCH --time=1440",
        "#SBATCH --wckey=submitit",
    ]
    assert "source /fs/venv/bin/activate" in lines
    head = next(line for line in lines if line.startswith("#   rank 0:"))
    for part in (f"{sys.executable} -m ray.scripts.scripts start --head --block", "--port=<port>", "--num-gpus=8",
                 "--num-cpus=64", "--disable-usage-stats",
                 "--include-dashboard=false", "/tmp/ray_$SLURM_JOB_ID"):
        assert part in head
    worker = next(line for line in lines if line.startswith("#   rank>0:"))
    assert "'--address=<head-ip>:<port>' --block" in worker
    assert "#     --actor.num_nodes 2 \\" in lines and "#     --vllm.num_engines 16 \\" in lines
    assert "# Ray and the driver run with OMP_NUM_THREADS=4 (CPUs / (2 x GPUs))." in lines
    srun = next(line for line in lines if line.startswith("srun "))
    assert srun == (f"srun --unbuffered --output {log_dir}/%j_%t_log.out --error {log_dir}/%j_%t_log.err "
                    f"--cpus-per-task=64 --kill-on-bad-exit=1 {sys.executable} -m lze_bench.backends.openrlhf.slurm "
                    f"{run}")  # GPUs and Ray CPUs: the launch plan in the run's command.json


def test_dry_run_needs_no_openrlhf_ray_or_torch(tmp_path):
    code = (
        "import sys\n"
        "from lze_bench.config import compose\n"
        "from lze_bench.backends.openrlhf.launch import dry_run\n"
        f"cfg = compose('train', {recipe_overrides(extra=[f'run_dir={tmp_path}'])!r})\n"
        "import io; dry_run(cfg, io.StringIO())\n"
        "heavy = [m for m in ('openrlhf', 'ray', 'vllm', 'deepspeed', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.fixture(scope="module")
def recipe_dry_run(tmp_path_factory):
    """`lze-bench sweep sweep=qwen25_math_1p5b --dry-run` with an empty cache (composes 39 jobs: run once, read
    by the tests below)."""
    cache = tmp_path_factory.mktemp("cache")
    result = CliRunner(env={"COLUMNS": "400", "LZE_BENCH_CACHE": str(cache)}).invoke(
        app, ["sweep", "sweep=qwen25_math_1p5b", "--dry-run"])
    assert result.exit_code == 0, result.output
    return result


def test_sweep_dry_run_lists_the_recipe_its_budget_checkpoints_and_eval_step(recipe_dry_run):
    result = recipe_dry_run
    assert f"{3 * len(recipe_selectors())} jobs" in result.output  # every recipe selector x 3 seeds
    assert ("every job: the run stops at the first step whose cum_flops reaches trainer.flop_budget=3e+18 "
            "(trainer.steps=400 is a cap); HF checkpoints at every multiple of 3e+17 FLOPs, after the last step"
            in result.output)
    assert ("then evaluate (the recipe's eval step): lze-bench eval sweep_dir=runs/sweeps/qwen25_math_1p5b "
            "eval=math_suite device=cuda generation.backend=vllm" in result.output)


def test_sweep_dry_run_prints_astrals_head_step_and_its_flop_estimate(recipe_dry_run):
    """The recipe's astral runs its authors' learned head: one head step before the runs, shared by the three astral
    jobs, with its labellers, encoder and an upper-bound FLOP estimate from lze_bench.flops."""
    from types import SimpleNamespace

    import yaml

    from lze_bench.backends.openrlhf.head_build import PUBLIC_SHAPES, POOL_SIZES
    from lze_bench.flops import FlopModel

    out = " ".join(recipe_dry_run.output.split())
    assert ("before the runs, head step (selector.predictor=trained, one head shared by astral-s0, astral-s1, "
            "astral-s2)") in out and "[to build before the runs]" in out
    spec = yaml.safe_load(RECIPE.read_text())
    labelers = next(o for o in spec["overrides"] if o.startswith("backend.predictor.labelers="))
    labelers = labelers.partition("=")[2].strip("[]").split(",")
    assert f"the policy's prompt): {', '.join(labelers)}" in out
    assert "frozen encoder: Qwen/Qwen2.5-Math-1.5B-Instruct" in out
    # the labelling bound: every labeller, every MATH question x 8 samples, each sequence at backend.max_len tokens
    questions = POOL_SIZES["math"]
    bound = sum(FlopModel.from_hf_config(SimpleNamespace(**PUBLIC_SHAPES[m])).forward([4096] * (questions * 8))
                for m in labelers)
    assert f"questions: {questions:,} = task=math's train pool" in out
    assert f"labeling {bound:.3g}," in out and "total ?" not in out


@pytest.mark.parametrize(
    "installed, message",
    [
        (None, "openrlhf is not installed (backend=openrlhf runs OpenRLHF's Ray GRPO trainer); "
               "install it with: pip install 'lze-bench[openrlhf]'"),
        ("0.11.0", "openrlhf 0.11.0 is installed, but backend=openrlhf supports only openrlhf==0.11.2"),
    ],
)
def test_missing_or_unsupported_openrlhf_is_one_clear_line(monkeypatch, installed, message):
    from importlib import metadata

    from lze_bench.backends.openrlhf import require_openrlhf

    def version(name):
        if installed is None:
            raise metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(LzeBenchError) as info:
        require_openrlhf()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


DATA = Path(__file__).parent / "data"  # benchmark slices: GSM8K train rows 1-5 (tests/data/gsm8k/SOURCE.md)


def test_prepare_writes_config_prompts_and_the_exact_argv(tmp_path):
    import json

    from omegaconf import OmegaConf

    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.rundir import mark_done

    run = tmp_path / "run"
    overrides = recipe_overrides(extra=[f"run_dir={run}", "task=gsm8k", "task.limit=5", f"data.root={DATA}"])
    paths, argv = prepare(compose("train", overrides))
    assert paths.run_dir == run
    saved = OmegaConf.load(paths.config)
    assert saved.run_dir == str(run) and saved.backend.name == "openrlhf" and "version" in saved.lze_bench
    lines = paths.prompts.read_text().splitlines()
    assert len(lines) == 5 and json.loads(json.loads(lines[0])["label"]) == {"id": 0, "answer": "72"}
    assert json.loads((paths.work / "command.json").read_text())["argv"] == argv
    assert argv == driver_argv(compose("train", overrides), paths)
    prepare(compose("train", overrides))  # an unfinished run prepares again unchanged (resume, requeue)
    with pytest.raises(LzeBenchError, match="holds an unfinished run with another config"):
        prepare(compose("train", overrides + ["trainer.lr=2e-6"]))
    mark_done(run)
    with pytest.raises(LzeBenchError, match="holds a finished run"):
        prepare(compose("train", overrides))


def test_only_replaying_selectors_get_the_re_centred_loss(tmp_path):
    def flags_for(selector, *extra):
        cfg = compose("train", recipe_overrides(extra=[f"selector={selector}", *extra]))
        return flag_map(openrlhf_flags(cfg, RunPaths(tmp_path)))

    astral = flags_for("astral")
    assert astral["--algo.advantage.is_correction_level"] == ["token"]
    assert astral["--algo.advantage.is_correction_mode"] == ["clip"]
    assert astral["--algo.advantage.is_correction_threshold"] == ["0", "inf"]
    for selector in ("uniform", "lze", "hive"):
        assert "--algo.advantage.is_correction_level" not in flags_for(selector)
    assert "--algo.advantage.is_correction_level" not in flags_for("astral", "backend.rollout_store_groups=0")


def test_a_second_train_on_an_openrlhf_run_dir_is_refused_in_one_line(tmp_path, hold_lock):
    run = tmp_path / "run"
    holder = hold_lock(run, "train")
    result = CliRunner().invoke(app, ["train", *recipe_overrides(extra=[f"run_dir={run}"])])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"run_dir='{run}' is in use by another lze-bench train (pid {holder.pid} " in lines[0]
    assert not (run / "config.yaml").exists()  # refused before writing anything


@pytest.mark.parametrize("change", ["an answer", "a row fewer"])
def test_a_resume_on_changed_training_data_is_refused_in_one_line(tmp_path, change):
    """The config is the same (task=gsm8k, data.root=ROOT) but ROOT/gsm8k/train.jsonl changed since the start."""
    import json
    import shutil

    from lze_bench.backends.openrlhf.launch import prepare

    root, run = tmp_path / "data", tmp_path / "run"
    shutil.copytree(DATA / "gsm8k", root / "gsm8k")
    overrides = recipe_overrides(extra=[f"run_dir={run}", "task=gsm8k", f"data.root={root}"])
    paths, _ = prepare(compose("train", overrides))
    recorded = json.loads((run / "data.json").read_text())
    assert recorded["train"]["rows"] == 5
    train = root / "gsm8k" / "train.jsonl"
    rows = [json.loads(line) for line in train.read_text().splitlines() if line.strip()]
    if change == "an answer":
        rows[2]["answer"] = rows[2]["answer"].replace("####", "#### 1")
    else:
        rows = rows[:-1]
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    prompts, config = paths.prompts.read_bytes(), paths.config.read_bytes()
    with pytest.raises(LzeBenchError) as caught:
        prepare(compose("train", overrides))
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{run / 'data.json'}: the run started on 5 (sha256 ")
    assert f"task=gsm8k (data root {root}) now gives {4 if change == 'a row fewer' else 5} (sha256 " in message
    assert "restore the data it started with, or start over in a new run_dir=PATH" in message
    assert paths.prompts.read_bytes() == prompts and paths.config.read_bytes() == config
    assert json.loads((run / "data.json").read_text()) == recorded
