"""One initial policy everywhere: shipped warm starts, keys that name what changes a build, per-seed warm starts.

Through the CLI (`lze-bench train`, `lze-bench warmstart list|check|ship`) on the tests' tiny policy; a
folder of shipped warm starts of the tests' own comes from env LZE_BENCH_WARMSTARTS, the package's own
shipped ones are checked against the recipes that use them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.cli import app
from tiny_run import TINY_TRAIN as TINY

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def train(run_dir, cache_dir, *extra):
    return runner.invoke(app, ["train", *TINY, f"backend.cache_dir={cache_dir}", f"run_dir={run_dir}", *extra])


def ok(result):
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def warmstart_of(run_dir) -> dict:
    return yaml.safe_load((Path(run_dir) / "config.yaml").read_text())["warmstart"]


@pytest.fixture()
def store(tmp_path, monkeypatch):
    folder = tmp_path / "shipped"
    monkeypatch.setenv("LZE_BENCH_WARMSTARTS", str(folder))
    return folder


def test_the_build_key_names_the_thread_count_and_the_recipe_key_does_not():
    import torch

    from lze_bench.backends.local.warmstart import recipe_key, recipe_of, warmstart_key
    from lze_bench.config import compose, to_objects

    cfg = to_objects(compose("train", TINY))
    before = torch.get_num_threads()
    try:
        keys = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            keys[threads] = warmstart_key(cfg.model, cfg.task, cfg.backend, "cpu")[0]
    finally:
        torch.set_num_threads(before)
    assert keys[1] != keys[2]
    assert recipe_key(recipe_of(cfg.model, cfg.task, cfg.backend)) == recipe_key(
        recipe_of(cfg.model, cfg.task, cfg.backend))


def test_a_shipped_warm_start_is_what_every_run_of_its_recipe_starts_from(tmp_path, store):
    built_run = tmp_path / "built"
    ok(train(built_run, tmp_path / "cache_a", "trainer.steps=1"))
    built = warmstart_of(built_run)
    assert built["shipped"] is False and built["built_on"]["threads"] == 1
    shipped = ok(runner.invoke(app, ["warmstart", "ship", built["dir"]]))
    assert f"shipped as {store / built['recipe_key']}" in shipped.output
    listed = ok(runner.invoke(app, ["warmstart", "list"]))
    assert built["recipe_key"] in listed.output and "1 thread(s)" in listed.output

    run = tmp_path / "from_shipped"
    ok(train(run, tmp_path / "cache_b", "trainer.steps=1"))
    used = warmstart_of(run)
    assert used["shipped"] is True and Path(used["dir"]) == store / built["recipe_key"]
    assert not (tmp_path / "cache_b" / "warmstart").exists()  # nothing was built on this machine
    # the same weights, so the same first step
    first = [pd.read_parquet(r / "ledger.parquet").iloc[0]["reward_mean"] for r in (built_run, run)]
    assert first[0] == first[1]

    # backend.warmstart=build ignores the shipped copy and builds here
    ok(train(tmp_path / "built_here", tmp_path / "cache_c", "trainer.steps=1", "backend.warmstart=build"))
    assert warmstart_of(tmp_path / "built_here")["shipped"] is False


def test_a_damaged_shipped_warm_start_is_refused_in_one_line(tmp_path, store):
    ok(train(tmp_path / "built", tmp_path / "cache_a", "trainer.steps=1"))
    target = Path(ok(runner.invoke(app, ["warmstart", "ship", warmstart_of(tmp_path / "built")["dir"]]))
                  .output.split("shipped as ")[1].strip())
    weights = target / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    from lze_bench.backends.local import shipped

    shipped._VERIFIED.clear()
    result = train(tmp_path / "run", tmp_path / "cache_b", "trainer.steps=1")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "model.safetensors does not match SHA256SUMS" in lines[0]
    assert "backend.warmstart=build" in lines[0]


def test_shipping_other_weights_over_a_shipped_recipe_is_refused(tmp_path, store):
    import shutil

    ok(train(tmp_path / "one", tmp_path / "cache_a", "trainer.steps=1"))
    built = Path(warmstart_of(tmp_path / "one")["dir"])
    ok(runner.invoke(app, ["warmstart", "ship", str(built)]))
    assert ok(runner.invoke(app, ["warmstart", "ship", str(built)])).output.startswith("shipped as")  # same weights
    other = tmp_path / "other"  # the same recipe with other weights (as another machine builds it)
    shutil.copytree(built, other)
    data = bytearray((other / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (other / "model.safetensors").write_bytes(bytes(data))
    result = runner.invoke(app, ["warmstart", "ship", str(other)])
    assert result.exit_code == 2 and "already shipped with other weights" in result.output


@pytest.mark.slow  # two rebuilds in fresh processes (about 40 s): .ci/run runs it
def test_warmstart_check_rebuilds_and_says_whether_the_weights_match(tmp_path, store):
    ok(train(tmp_path / "built", tmp_path / "cache_a", "trainer.steps=1"))
    key = warmstart_of(tmp_path / "built")["recipe_key"]
    ok(runner.invoke(app, ["warmstart", "ship", warmstart_of(tmp_path / "built")["dir"]]))
    env = {**os.environ, "LZE_BENCH_WARMSTARTS": str(store)}
    same = subprocess.run([sys.executable, "-m", "lze_bench.cli", "warmstart", "check", "--threads", "1"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert same.returncode == 0, same.stdout + same.stderr
    assert f"{key}: identical weights" in same.stdout

    # other weights under the same recipe, checksums in order: the rebuild must say they differ
    from safetensors.numpy import load_file, save_file

    from lze_bench.backends.local.shipped import SUMS_FILE, file_digests

    path = store / key / "model.safetensors"
    tensors = load_file(str(path))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + np.float32(0.5)
    save_file(tensors, str(path), metadata={"format": "pt"})
    (store / key / SUMS_FILE).write_text("".join(f"{d}  {n}\n" for n, d in file_digests(store / key).items()))
    differ = subprocess.run([sys.executable, "-m", "lze_bench.cli", "warmstart", "check", key, "--threads", "1"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert "weights DIFFER" in differ.stdout and "max |shipped - rebuilt| = 0.5" in differ.stdout


def test_check_names_an_unknown_key_in_one_line(store):
    result = runner.invoke(app, ["warmstart", "check", "0123456789ab"])
    assert result.exit_code == 2 and "is not a shipped warm start" in result.output


def test_each_seed_pair_gets_its_own_warm_start_with_warmstart_per_seed(tmp_path):
    cache = tmp_path / "cache"
    dirs = {}
    for selector, seed in (("uniform", 0), ("uniform", 1), ("lze", 1)):
        run = tmp_path / f"{selector}-{seed}"
        ok(train(run, cache, "trainer.steps=1", f"seed={seed}", f"selector={selector}",
                 "backend.warmstart_per_seed=true"))
        dirs[selector, seed] = warmstart_of(run)
    assert dirs["uniform", 0]["init_seed"] == 0 and dirs["uniform", 1]["init_seed"] == 1000
    assert dirs["uniform", 0]["dir"] != dirs["uniform", 1]["dir"]
    assert dirs["uniform", 1]["dir"] == dirs["lze", 1]["dir"]  # a seed pair shares its initial policy


@pytest.mark.slow  # two real runs at the default policy's size (about a minute on 2 cores): .ci/run runs it
def test_the_thread_count_changes_no_number_of_an_rl_run(tmp_path):
    """backend.threads stays out of a run's identity (a resume may change it): this is the proof, at the
    default policy's size and batch (from random weights, so no warm start is built)."""
    ledgers, weights = {}, {}
    for threads in (1, 2):
        run = tmp_path / f"t{threads}"
        args = [sys.executable, "-m", "lze_bench.cli", "train", "backend.warmstart_steps=0", "trainer.steps=2",
                "task.num_train=64", "backend.eval_size=16", f"backend.threads={threads}",
                f"backend.cache_dir={tmp_path / 'cache'}", f"run_dir={run}"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        ledger = pd.read_parquet(run / "ledger.parquet")
        ledgers[threads] = ledger[[c for c in ledger.columns if not c.startswith("time_") and "time" not in c]]
        from safetensors.numpy import load_file

        weights[threads] = load_file(str(run / "checkpoints" / "step_000002" / "model.safetensors"))
    pd.testing.assert_frame_equal(ledgers[1], ledgers[2])
    assert all(np.array_equal(weights[1][k], weights[2][k]) for k in weights[1])


def test_the_quickstart_starts_from_shipped_warm_starts():
    """Every initial policy the README's main command uses ships with the package (no build, no machine
    dependence): the policy of each seed and ASTRAL's labelling models."""
    import dataclasses

    from lze_bench.backends.local.shipped import find_shipped
    from lze_bench.backends.local.warmstart import policy_backend, recipe_key, recipe_of
    from lze_bench.config import compose, to_objects

    recipe = yaml.safe_load((REPO / "sweeps" / "quickstart.yaml").read_text())
    for seed in recipe["grid"]["seed"]:
        cfg = to_objects(compose("train", [*recipe["overrides"], "selector=astral", f"seed={seed}",
                                           *recipe["selector_overrides"]["astral"]]))
        backend = policy_backend(cfg.backend, cfg.seed)
        assert find_shipped(recipe_key(recipe_of(cfg.model, cfg.task, backend))) is not None, seed
        steps = sorted(cfg.backend.predictor.labeler_steps)
        labelers = dataclasses.replace(cfg.backend, init_seed=cfg.backend.predictor.labeler_seed,
                                       warmstart_steps=steps[-1])
        assert find_shipped(recipe_key(recipe_of(cfg.model, cfg.task, labelers, steps))) is not None
