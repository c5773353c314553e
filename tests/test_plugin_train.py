"""A selector plug-in from a module file in the current directory trains on the local backend, resumes only
with the plug-in it started with, and replays a rollout log (tiny settings: tests/support/tiny_run.py)."""

from __future__ import annotations

import pandas as pd
import yaml
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.ledger import read_ledger
from lze_bench.rundir import is_done
from plugin_env import BAND, plugin_env  # noqa: F401  (fixture)
from tiny_run import TINY_TRAIN as TINY

runner = CliRunner()


def ok(result):
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_a_module_file_plugin_trains_resumes_only_unchanged_and_replays(plugin_env, tmp_path):

    path = plugin_env.module("band", BAND)
    run_dir, cache = tmp_path / "run", tmp_path / "cache"
    args = ["train", "selector=band:BandSelector", "selector.low=0.1", *TINY, f"backend.cache_dir={cache}",
            f"run_dir={run_dir}", "trainer.steps=3"]
    ok(runner.invoke(app, [*args, "backend.stop_after_steps=2"]))
    assert not is_done(run_dir) and len(read_ledger(run_dir)) == 2
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["selector"]["name"] == "band" and config["selector"]["plugin"] == "band:BandSelector"

    # the plug-in changed under the run: its resume is refused like any changed config
    plugin_env.fresh_process()
    path.write_text(BAND.replace("decay * new)", "decay * new)  # edited"))
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "holds a run with a different config" in result.output
    assert len(read_ledger(run_dir)) == 2  # refused before anything was written

    # the plug-in it started with: the run resumes and finishes
    plugin_env.fresh_process()
    path.write_text(BAND)
    ok(runner.invoke(app, args))
    assert is_done(run_dir) and read_ledger(run_dir)["step"].tolist() == [0, 1, 2]

    out = tmp_path / "replayed.parquet"
    ok(runner.invoke(app, ["replay", str(run_dir / "rollouts.parquet"), "selector=band:BandSelector",
                           "selector.low=0.1", "--out", str(out)]))
    replayed = pd.read_parquet(out)
    assert {"rolled_out", "kept"} <= set(replayed.columns) and replayed["rolled_out"].any()
