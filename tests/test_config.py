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


@pytest.mark.parametrize(
    "overrides",
    [
        ["selector=lze", "seed=1", "trainer.flop_budget=6e11", "tracking.tags=['pair:ab']", "run_dir=/tmp/x"],
        ["backend=openrlhf", "selector=astral", "seed=2", "model=hf", "model.path=org/name", "data.root=null"],
        ["selector=uniform", "task.num_train=64", "logger=[tensorboard]", "trainer.steps=5"],
    ],
)
def test_composing_from_a_kept_group_composition_equals_hydras_own(overrides):
    """Value overrides applied to a kept composition of the group choices give what one full Hydra compose
    gives (same YAML, same struct flag), and the kept composition is what was used."""
    from omegaconf import OmegaConf

    import lze_bench.config as config

    config._BASE_CONFIGS.clear()
    compose("train", overrides)  # keeps the group composition
    kept = dict(config._BASE_CONFIGS)
    assert len(kept) == 1
    reused = compose("train", overrides)
    assert config._BASE_CONFIGS == kept, "the second compose composed its groups again"
    given = config.rewrite_model_override(overrides)
    whole = config._hydra_compose("train", config.backend_trainer_defaults(given) + given)
    assert OmegaConf.to_yaml(reused) == OmegaConf.to_yaml(whole)
    assert OmegaConf.is_struct(reused) and OmegaConf.is_struct(whole)


def test_a_recipe_file_given_again_by_path_is_read_again(tmp_path):
    """Two recipe files with one name: the second is composed from its own content, not the first's."""
    for folder, steps in (("a", 3), ("b", 4)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "grid.yaml").write_text(f"name: grid\noverrides: [trainer.steps={steps}]\n")
    first = compose("sweep", [f"sweep={tmp_path / 'a' / 'grid.yaml'}"])
    second = compose("sweep", [f"sweep={tmp_path / 'b' / 'grid.yaml'}"])
    assert list(first.sweep.overrides) == ["trainer.steps=3"]
    assert list(second.sweep.overrides) == ["trainer.steps=4"]
