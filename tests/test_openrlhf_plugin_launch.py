"""backend=openrlhf with a selector plug-in, before any cluster: the dry run names where the Ray workers import
its module from; a plug-in they would not import is refused in one line; the driver (which did not compose the
config) registers it from the recorded `plugin` and hands the actors its folder on PYTHONPATH."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from lze_bench.cli import app
from plugin_env import BAND, plugin_env  # noqa: F401  (fixture)

runner = CliRunner()
ARGS = ["train", "backend=openrlhf", "selector=band:BandSelector", "backend.gpus_per_node=1", "model=tiny/policy",
        "--dry-run"]


def test_dry_run_of_a_module_file_plugin(plugin_env):
    plugin_env.module("band", BAND)
    result = runner.invoke(app, ARGS)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert f"run directory {plugin_env.root / 'runs' / 'band-openrlhf-'}" in result.output
    assert ("# selector plug-in band (band:BandSelector): the Ray workers import module band from "
            f"{plugin_env.root.resolve()}, which the driver adds to their PYTHONPATH") in result.output
    assert not (plugin_env.root / "runs").exists()  # a dry run writes nothing


def test_a_plugin_another_module_would_shadow_in_the_workers_is_refused_in_one_line(plugin_env, tmp_path,
                                                                                     monkeypatch):
    plugin_env.module("band", BAND)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "band.py").write_text("# another module named band, first on the PYTHONPATH the workers get\n")
    monkeypatch.setenv("PYTHONPATH", str(other))
    result = runner.invoke(app, ARGS)
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and line.startswith("error: selector plug-in band (band:BandSelector) cannot be "
                                                "imported by the Ray workers")
    assert f"from {other / 'band.py'}, not {plugin_env.root.resolve() / 'band.py'}" in line


def test_the_driver_registers_the_recorded_plugin_and_passes_its_folder_to_the_actors(plugin_env, monkeypatch):
    from lze_bench.backends.openrlhf.entry import actor_env
    from lze_bench.config import compose
    from lze_bench.registry import SELECTORS

    plugin_env.module("band", BAND)
    cfg = compose("train", ["backend=openrlhf", "selector=band:BandSelector", "run_dir=/tmp/run"])
    plugin_env.fresh_process()  # the driver: a process that has only the config
    assert "band" not in SELECTORS
    monkeypatch.setenv("PYTHONPATH", "/opt/first")
    env = actor_env(cfg, "/tmp/run/config.yaml")
    assert "band" in SELECTORS and SELECTORS["band"].Config().plugin == "band:BandSelector"
    assert env["PYTHONPATH"].split(os.pathsep) == ["/opt/first", str(plugin_env.root.resolve())]
