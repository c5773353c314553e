"""The training signal as trainer settings: `trainer.advantage_estimator` and `trainer.reward_shape`.

Advantages against the estimators' formulas on small reward arrays computed by hand; rewards from hand-made
grades through the config; the OpenRLHF flags and reward hook; a tiny local run with both settings, and its
resume refused once either changes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from lze_bench.advantages import group_advantages, resolved_estimator
from lze_bench.config import compose, to_objects
from lze_bench.config.schema import TrainerConfig
from lze_bench.errors import LzeBenchError
from lze_bench.grading import Grade
from lze_bench.reward_shape import grade_reward, shaped_rewards

REPO = Path(__file__).resolve().parents[1]
ROOT3 = np.sqrt(1 / 3)  # the unbiased std of [1, 0, 0, 1]


@pytest.mark.parametrize("estimator, expected", [
    ("grpo", [0.5 / (ROOT3 + 1e-6), -0.5 / (ROOT3 + 1e-6), -0.5 / (ROOT3 + 1e-6), 0.5 / (ROOT3 + 1e-6)]),
    ("dr_grpo", [0.5, -0.5, -0.5, 0.5]),
    ("rloo", [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3]),  # r_i minus the mean of the 3 others
])
def test_each_estimator_is_its_formula_on_a_binary_group(estimator, expected):
    rewards = np.array([1, 0, 0, 1], dtype=np.float32)
    np.testing.assert_allclose(group_advantages(rewards, estimator), expected, rtol=1e-6)


def test_rloo_on_shaped_rewards_and_over_a_kept_subset():
    rewards = np.array([1, 0.1, 0, 1, 0.1], dtype=np.float32)  # deepscaler rewards; sum 2.2
    others = [1.2 / 4, 2.1 / 4, 2.2 / 4, 1.2 / 4, 2.1 / 4]
    np.testing.assert_allclose(group_advantages(rewards, "rloo"), rewards - np.array(others), rtol=1e-6)
    # statistics over a kept pool (PODS): leave-one-out inside it; a rollout outside is centred on its mean
    kept = np.array([True, True, False, True, False])
    got = group_advantages(rewards, "rloo", kept)
    np.testing.assert_allclose(got[kept], [1 - 0.55, 0.1 - 1.0, 1 - 0.55], rtol=1e-6)
    np.testing.assert_allclose(got[~kept], rewards[~kept] - 2.1 / 3, rtol=1e-6)
    # one rollout in the pool: no others, no std; advantage 0 for it under every estimator
    lone = np.array([True, False, False, False, False])
    for estimator in ("grpo", "dr_grpo", "rloo"):
        assert group_advantages(rewards, estimator, lone)[0] == 0.0


def test_dr_grpo_over_every_rollout_generated_is_reinforce_adas_estimator():
    """Reinforce-Ada: r - mean over the whole pool of a prompt's rollouts (stats over every generated one)."""
    rewards = np.array([0, 0, 0, 1, 0, 0, 1, 1, 0], dtype=np.float32)
    np.testing.assert_allclose(group_advantages(rewards, "dr_grpo"), rewards - 3 / 9, rtol=1e-6)


def test_the_default_is_grpo_and_bit_identical_to_the_group_normalised_reward():
    rewards = np.array([1, 0, 0, 1, 1, 0, 0, 0], dtype=np.float32)
    r64 = rewards.astype(np.float64)
    expected = ((r64 - r64.mean()) / (r64.std(ddof=1) + 1e-6)).astype(np.float32)
    assert resolved_estimator(TrainerConfig()) == "grpo"
    assert np.array_equal(group_advantages(rewards, resolved_estimator(TrainerConfig())), expected)


def test_scale_rewards_keeps_its_meaning_and_a_contradiction_is_one_line():
    assert resolved_estimator(TrainerConfig(scale_rewards=False)) == "dr_grpo"
    assert resolved_estimator(TrainerConfig(scale_rewards=True)) == "grpo"
    assert resolved_estimator(TrainerConfig(advantage_estimator="rloo", scale_rewards=False)) == "rloo"
    assert resolved_estimator({"scale_rewards": True}) == "grpo"  # a config.yaml from before the key existed
    with pytest.raises(LzeBenchError, match="trainer.scale_rewards=true: rloo never divides"):
        TrainerConfig(advantage_estimator="rloo", scale_rewards=True)


@pytest.mark.parametrize("override, expected", [
    ("trainer.advantage_estimator=ppo",
     "trainer.advantage_estimator: unknown estimator 'ppo'; use grpo, dr_grpo, rloo"),
    ("trainer.reward_shape=graded", "trainer.reward_shape: unknown shape 'graded'; use binary, deepscaler"),
])
def test_an_unknown_value_is_one_line(override, expected):
    with pytest.raises(LzeBenchError) as info:
        to_objects(compose("train", [override]))
    assert str(info.value) == expected


GRADES = [Grade(True, "5"), Grade(False, "4"), Grade(False, None, "no_answer"), Grade(False, "x", "timeout")]


@pytest.mark.parametrize("shape, expected", [("binary", [1.0, 0.0, 0.0, 0.0]),
                                             ("deepscaler", [1.0, 0.1, 0.0, 0.1])])
def test_config_to_rewards_on_hand_made_grades(shape, expected):
    trainer = to_objects(compose("train", [f"trainer.reward_shape={shape}"])).trainer
    assert [grade_reward(g, trainer.reward_shape) for g in GRADES] == pytest.approx(expected)
    flat = shaped_rewards([g.correct for g in GRADES], [g.status != "no_answer" for g in GRADES], shape)
    assert flat.dtype == np.float32 and flat.tolist() == pytest.approx(expected)
    if shape == "binary":  # what the trainers computed before the setting: 1.0 if correct else 0.0, float32
        assert np.array_equal(flat, np.array([1.0 if g.correct else 0.0 for g in GRADES], dtype=np.float32))


@pytest.mark.parametrize("overrides, flag", [
    ([], "group_norm"), (["trainer.advantage_estimator=dr_grpo"], "dr_grpo"),
    (["trainer.advantage_estimator=rloo"], "rloo"), (["trainer.scale_rewards=false"], "dr_grpo")])
def test_openrlhf_gets_its_own_name_for_the_estimator(tmp_path, overrides, flag):
    from lze_bench.backends.openrlhf.command import RunPaths, openrlhf_flags

    recipe = yaml.safe_load((REPO / "sweeps" / "qwen25_math_1p5b.yaml").read_text())["overrides"]
    cfg = compose("train", [*recipe, "selector=uniform", f"run_dir={tmp_path / 'run'}", *overrides])
    flags = openrlhf_flags(cfg, RunPaths(tmp_path / "run"))
    assert flags[flags.index("--algo.advantage.estimator") + 1] == flag


def test_openrlhfs_per_rollout_estimators_are_ours():
    from lze_bench.backends.openrlhf.update import ESTIMATOR_OF

    assert ESTIMATOR_OF == {"group_norm": "grpo", "dr_grpo": "dr_grpo", "rloo": "rloo"}


def test_openrlhf_selectors_see_verdicts_and_the_update_shaped_rewards_across_a_merge():
    """A held group (shaped rewards, verdicts kept) extended by rollouts whose shape changed nothing."""
    from lze_bench.backends.openrlhf.selection import Group, groups_batch, merge_groups

    held = Group(1, np.array([1, 0.1], np.float32), np.array([3, 3]), np.array([5, 5]),
                 verdicts=np.array([1, 0], np.float32))
    new = Group(1, np.array([0, 1], np.float32), np.array([3, 3]), np.array([5, 5]))  # verdicts None: the same
    merged = merge_groups(held, new)
    assert merged.rewards.tolist() == pytest.approx([1, 0.1, 0, 1])
    assert groups_batch([merged], step=0).rewards.tolist() == [[1, 0, 0, 1]]


@pytest.mark.parametrize("shape, reward", [("binary", 0.0), ("deepscaler", 0.1)])
def test_openrlhf_reward_hook_trains_on_the_shape_and_scores_the_verdict(monkeypatch, shape, reward):
    from lze_bench.backends.openrlhf import reward_func as rf
    from lze_bench.backends.openrlhf.data import make_label

    monkeypatch.setenv("LZE_REWARD_SHAPE", shape)
    try:
        wrong = rf.reward_func(["Q: 2+2? A: so $\\boxed{5}$"], ["Q: 2+2? A:"], [make_label(0, "4")])
        bare = rf.reward_func(["Q: 2+2? A: I do not know"], ["Q: 2+2? A:"], [make_label(0, "4")])
        right = rf.reward_func(["Q: 2+2? A: $\\boxed{4}$"], ["Q: 2+2? A:"], [make_label(0, "4")])
    finally:
        rf.shutdown_grader()
    assert (wrong["rewards"], wrong["scores"]) == (pytest.approx(reward), 0.0)
    assert (bare["rewards"], bare["scores"]) == (0.0, 0.0)
    assert (right["rewards"], right["scores"]) == (1.0, 1.0)


def test_a_tiny_local_run_with_both_settings_and_its_resume_refused_when_either_changes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import lze_bench.backends.local.step as step_module
    from lze_bench.cli import app
    from lze_bench.ledger import read_rollouts
    from tiny_run import TINY_TRAIN

    updates, update = [], step_module.grpo_update

    def recording_update(model, optimizer, groups, *args, **kwargs):  # what the update trains on
        updates.extend((g.gen_step, g.prompt_id, g.rewards.tolist()) for g in groups)
        return update(model, optimizer, groups, *args, **kwargs)

    def three_kinds(self, responses, golds):  # the tiny policy boxes no answer yet: right, wrong, no answer
        return [(Grade(True, "1"), Grade(False, "2"), Grade(False, None, "no_answer"))[i % 3]
                for i in range(len(responses))]

    monkeypatch.setattr(step_module, "grpo_update", recording_update)
    monkeypatch.setattr("lze_bench.grading.Grader.grade", three_kinds)
    runner = CliRunner()
    base = ["train", *TINY_TRAIN, f"backend.cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}",
            "trainer.steps=2"]
    signal = ["trainer.advantage_estimator=rloo", "trainer.reward_shape=deepscaler"]
    result = runner.invoke(app, [*base, *signal, "backend.stop_after_steps=1"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["trainer"]["advantage_estimator"] == "rloo" and config["trainer"]["reward_shape"] == "deepscaler"
    # the rollout log keeps the verdicts the selectors read; the update trains on their deepscaler shape
    log = read_rollouts(tmp_path / "run")
    verdicts = {(int(r.step), int(r.prompt_id)): list(r.rewards) for r in log.itertuples()}
    assert set(np.concatenate(list(verdicts.values()))) <= {0.0, 1.0}
    assert updates and all(len(rewards) == len(verdicts[(gen_step, pid)]) for gen_step, pid, rewards in updates)
    trained = np.concatenate([rewards for *_, rewards in updates])
    logged = np.concatenate([verdicts[(gen_step, pid)] for gen_step, pid, _ in updates])
    assert np.array_equal(trained == 1.0, logged == 1.0)  # right stays 1
    assert set(np.round(trained[logged == 0.0], 6).tolist()) == {0.0, 0.1}  # wrong with an answer, without
    for changed in (["trainer.advantage_estimator=grpo", signal[1]], [signal[0], "trainer.reward_shape=binary"]):
        refused = runner.invoke(app, [*base, *changed])
        assert refused.exit_code == 2 and "different config" in refused.output
    resumed = runner.invoke(app, [*base, *signal])
    assert resumed.exit_code == 0, resumed.output + repr(resumed.exception)


def test_the_report_states_the_training_signal(tmp_path):
    from types import SimpleNamespace

    from lze_bench.report.training import training_note

    def run(name, label, seed, trainer):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump({"trainer": trainer}))
        return SimpleNamespace(run_dir=tmp_path / name, label=label, seed=seed)

    same = [run("a", "uniform", 0, {"advantage_estimator": "rloo", "reward_shape": "deepscaler"}),
            run("b", "speed", 0, {"advantage_estimator": "rloo", "reward_shape": "deepscaler"})]
    note = training_note(same)
    assert note.startswith("Training signal, every run: advantages `trainer.advantage_estimator=rloo`")
    assert "`trainer.reward_shape=deepscaler`, 1 correct, 0.1 wrong" in note
    older = run("c", "sec", 1, {"scale_rewards": False})  # written before the keys: Dr. GRPO, binary
    note = training_note([*same, older])
    assert note.startswith("**Training signal differs between runs**")
    assert "`advantage_estimator=dr_grpo`, `reward_shape=binary`: sec seed 1" in note


def test_runs_recorded_before_the_signal_keys_keep_their_hash_and_new_settings_hash_apart():
    """A config.yaml written before `advantage_estimator` / `reward_shape` existed (scale_rewards true or false, no
    estimator) hashes as today's equivalent config, so its run directory, sweep job and resume keep their
    identity; rloo and a shaped reward, which such runs could not express, hash apart."""
    from lze_bench.config import compose, config_dict
    from lze_bench.rundir import config_hash

    def recorded_before(overrides, scale):
        old = config_dict(compose("train", overrides))
        trainer = {k: v for k, v in old["trainer"].items() if k not in ("advantage_estimator", "reward_shape")}
        return {**old, "trainer": {**trainer, "scale_rewards": scale}}

    default = config_dict(compose("train", []))
    assert config_hash(default) == config_hash(recorded_before([], True))
    dr = config_dict(compose("train", ["trainer.advantage_estimator=dr_grpo"]))
    assert config_hash(dr) == config_hash(recorded_before([], False))
    assert config_hash(dr) == config_hash(config_dict(compose("train", ["trainer.scale_rewards=false"])))
    hashes = {config_hash(config_dict(compose("train", [o]))) for o in (
        "trainer.advantage_estimator=grpo", "trainer.advantage_estimator=rloo", "trainer.reward_shape=deepscaler")}
    assert len(hashes) == 3 and config_hash(default) in hashes
