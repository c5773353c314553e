"""backend=openrlhf for a real model: trainer defaults, the install stack it needs, the one-GPU smoke sweep.

Runs without OpenRLHF (config composition, messages, files).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lze_bench.backends.openrlhf.command import RunPaths, openrlhf_flags
from lze_bench.config import compose
from lze_bench.errors import LzeBenchError

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "sweeps" / "qwen25_math_1p5b.yaml"


def test_hf_model_never_inherits_the_tiny_trainer_defaults(tmp_path):
    from lze_bench.backends.openrlhf import TRAINER_DEFAULTS

    cfg = compose("train", ["backend=openrlhf", "model=Qwen/Qwen2.5-Math-1.5B", "backend.gpus_per_node=8"])
    assert (cfg.trainer.max_new_tokens, cfg.trainer.lr, cfg.trainer.batch_size) == (3072, 1e-6, 128)
    recipe = dict(o.split("=", 1) for o in yaml.safe_load(RECIPE.read_text())["overrides"])
    for key, value in TRAINER_DEFAULTS.items():  # the recipe's values, but for its equal-compute stopping
        if key not in ("steps", "checkpoint_every"):  # a FLOP budget with trainer.steps as a cap, FLOP checkpoints
            assert float(recipe[f"trainer.{key}"].split("#")[0]) == value, key
    assert float(recipe["trainer.flop_budget"]) > 0 and float(recipe["trainer.checkpoint_every_flops"]) > 0
    mine = compose("train", ["backend=openrlhf", "model=Qwen/X", "backend.gpus_per_node=8", "trainer.lr=2e-6"])
    assert mine.trainer.lr == 2e-6 and mine.trainer.max_new_tokens == 3072
    assert compose("train", []).trainer.lr == 3e-5  # the embedded backend keeps its own


@pytest.mark.parametrize("module, command", [("flash_attn", "pip install flash-attn==2.8.3 --no-build-isolation"),
                                             ("vllm", "pip install 'lze-bench[openrlhf]' (vllm==0.29.0)"),
                                             ("deepspeed", "pip install deepspeed==0.19.6")])
def test_missing_gpu_package_names_its_install_command(monkeypatch, module, command):
    import importlib.util
    from importlib import metadata

    from lze_bench.backends.openrlhf import require_gpu_stack

    monkeypatch.setattr(metadata, "version", lambda name: "0.11.2")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else object())
    with pytest.raises(LzeBenchError) as info:
        require_gpu_stack()
    assert str(info.value) == f"{module} is not installed (OpenRLHF 0.11.2 imports it); install it with: {command}"


def test_extras_pin_openrlhf_tested_stack():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["openrlhf"] == ["openrlhf[vllm]==0.11.2", "ray[default]==2.55.0"]
    assert extras["vllm"] == ["vllm==0.29.0"]


def test_smoke_1gpu_sweep_runs_every_backend_selector_on_one_gpu(tmp_path):
    from lze_bench.backends.openrlhf.command import runnable_selectors

    from lze_bench.registry import SELECTORS

    spec = yaml.safe_load((REPO / "sweeps" / "smoke_1gpu.yaml").read_text())
    # GSM8K carries no per-prompt column: every selector that reads none (adarft and sec read a level),
    # the per-rollout ones (pods, speed, reinforce_ada) with smoke-sized settings of their own
    on_gsm8k = [s for s in runnable_selectors() if not SELECTORS[s].metadata_columns(SELECTORS[s].Config())]
    assert {"adarft", "sec"}.isdisjoint(on_gsm8k) and {"mopps", "pods", "speed", "reinforce_ada"} <= set(on_gsm8k)
    assert spec["grid"]["selector"][0] == "uniform" and sorted(spec["grid"]["selector"]) == sorted(on_gsm8k)
    for selector in spec["grid"]["selector"]:
        own = spec.get("selector_overrides", {}).get(selector, [])
        cfg = compose("train", [*spec["overrides"], f"selector={selector}", *own, "seed=0",
                                f"run_dir={tmp_path / selector}"])
        flags = openrlhf_flags(cfg, RunPaths(tmp_path / selector))
        assert flags[flags.index("--actor.num_gpus_per_node") + 1] == "1"
        assert flags[flags.index("--vllm.num_engines") + 1] == "1"
        assert cfg.trainer.flop_budget == 1e14 and cfg.trainer.steps == 4 and cfg.launcher.name == "local"
    readme = "".join((REPO / name).read_text() for name in ("README.md", "docs/cluster.md", "docs/sweeps.md"))
    assert "lze-bench sweep sweep=smoke_1gpu --dry-run" in readme and "eval=smoke" in readme


@pytest.mark.parametrize("recipe", ["qwen25_math_1p5b", "smoke_1gpu"])
def test_gpu_recipes_evaluate_on_the_gpu(recipe, tmp_path):
    """A GPU recipe's eval step (its `eval:` list, and every `lze-bench eval` its comments show) uses the GPU and
    vLLM, and composes as written."""
    import re

    text = (REPO / "sweeps" / f"{recipe}.yaml").read_text()
    step = [str(item) for item in yaml.safe_load(text)["eval"]]
    shown = [c.split()[2:] for c in re.findall(r"lze-bench eval [^\n(#]*", text)]
    commands = [step] + [args for args in shown if "..." not in args]  # "..." stands for the eval step
    for args in commands:
        assert "device=cuda" in args and "generation.backend=vllm" in args, args
        cfg = compose("eval", [a for a in args if not a.startswith(("run=", "sweep_dir="))]
                      + [f"sweep_dir={tmp_path}"])
        assert cfg.device == "cuda" and cfg.generation.backend == "vllm"
