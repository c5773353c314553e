"""Config composition: the keys users rely on, and one-line errors for mistakes."""

from __future__ import annotations

import pytest

from lze_bench.config import compose, group_options
from lze_bench.errors import LzeBenchError


def test_stable_keys_compose_with_overrides():
    cfg = compose("train", ["selector=uniform", "seed=3", "device=cpu", "trainer.steps=7",
                            "trainer.eval_every=2", "run_dir=/tmp/x", "launcher=local"])
    assert cfg.selector.name == "uniform"
    assert (cfg.seed, cfg.device, cfg.trainer.steps, cfg.trainer.eval_every) == (3, "cpu", 7, 2)
    assert cfg.run_dir == "/tmp/x" and cfg.launcher.name == "local"
    assert cfg.backend.name == "local" and cfg.model.name == "tiny"


def test_model_path_or_hub_id_becomes_hf_preset():
    cfg = compose("train", ["model=Qwen/Qwen2.5-Math-1.5B"])
    assert cfg.model.name == "hf" and cfg.model.path == "Qwen/Qwen2.5-Math-1.5B"


@pytest.mark.parametrize(
    "override, expected",
    [
        ("selector=lzee", "unknown selector 'lzee'"),
        ("launcher=slurmm", "did you mean 'slurm'"),
        ("trainer.stpes=3", "did you mean 'trainer.steps'"),
        ("nonsense=1", "unknown config key 'nonsense'"),
        ("trainer.batch_size=-4", "trainer.batch_size: must be a positive integer"),
        ("device=tpu", "device: unknown device 'tpu'"),
        ("seed=abc", "could not be converted to Integer"),
        ("model=hf", "model.path"),
    ],
)
def test_mistakes_fail_with_one_line_naming_the_key(override, expected):
    with pytest.raises(LzeBenchError) as info:
        compose("train", [override])
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_unknown_group_option_lists_valid_choices():
    with pytest.raises(LzeBenchError) as info:
        compose("train", ["selector=nope"])
    for name in group_options("selector"):
        assert name in str(info.value)


def test_every_registered_selector_composes_with_its_defaults():
    for name in group_options("selector"):
        cfg = compose("train", [f"selector={name}"])
        assert cfg.selector.name == name
