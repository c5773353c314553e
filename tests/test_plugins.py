"""Selectors from outside the package (lze_bench.plugins): `selector=MODULE:CLASS`, the `lze_bench.selectors`
entry points, their config through Hydra, their listing, and the one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.cli import app
from plugin_env import BAND, plugin_env  # noqa: F401  (fixture)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def ok(result):
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output + repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_module_file_in_the_current_directory_composes_like_a_builtin(plugin_env):
    plugin_env.module("band", BAND)
    out = ok(runner.invoke(app, ["train", "selector=band:BandSelector", "selector.low=0.3", "--cfg"]))
    selector = yaml.safe_load(out)["selector"]
    assert selector["name"] == "band" and selector["low"] == 0.3 and selector["high"] == 0.8
    assert selector["plugin"] == "band:BandSelector"
    assert selector["plugin_version"].startswith("sha256:") and len(selector["plugin_version"]) == 23


def test_the_class_part_names_a_plugin_whose_class_sets_no_name(plugin_env):
    plugin_env.module("plain", BAND.replace('    name = "band"\n', ""))
    out = ok(runner.invoke(app, ["train", "selector=plain:BandSelector", "--cfg"]))
    assert yaml.safe_load(out)["selector"]["name"] == "BandSelector"


def test_dry_run_names_the_run_directory_after_the_plugin(plugin_env):
    plugin_env.module("band", BAND)
    out = ok(runner.invoke(app, ["train", "selector=band:BandSelector", "--dry-run"]))
    assert "# run directory: runs/band-local-" in out


def test_help_names_plugins_and_completion_offers_a_plugins_keys(plugin_env):
    from lze_bench.config.help import complete_override

    plugin_env.module("band", BAND)
    out = ok(runner.invoke(app, ["train", "selector=band:BandSelector", "--help"], env={"COLUMNS": "200"}))
    assert "selector=MODULE:CLASS (a plug-in)" in out
    offered = complete_override("train", ["selector=band:BandSelector"], "selector.")
    assert {"selector.low=", "selector.high=", "selector.decay="} <= set(offered)


@pytest.mark.parametrize("override, words", [
    ("selector.lo=0.3", "unknown config key 'selector.lo'; did you mean 'selector.low'?"),
    ("selector.low=3", "selector.low: need 0 <= low <= high <= 1"),
    ("selector.low=abc", "selector.low"),
    ("selector.plugin_version=sha256:0", "selector.plugin_version: recorded by lze-bench"),
])
def test_bad_plugin_config_is_one_line(plugin_env, override, words):
    plugin_env.module("band", BAND)
    line = one_error_line(runner.invoke(app, ["train", "selector=band:BandSelector", override, "--cfg"]))
    assert words in line


def test_a_changed_plugin_file_changes_the_recorded_version(plugin_env):
    path = plugin_env.module("band", BAND)
    first = yaml.safe_load(ok(runner.invoke(app, ["train", "selector=band:BandSelector", "--cfg"])))
    plugin_env.fresh_process()
    path.write_text(BAND + "\n# changed\n")
    second = yaml.safe_load(ok(runner.invoke(app, ["train", "selector=band:BandSelector", "--cfg"])))
    assert first["selector"]["plugin_version"] != second["selector"]["plugin_version"]


def test_an_entry_point_is_listed_with_its_distribution_and_composes(plugin_env):
    plugin_env.module("band_selector", BAND)
    plugin_env.distribution("band-selector", "0.3.1", {"band": "band_selector:BandSelector"})
    out = ok(runner.invoke(app, ["selectors"], env={"COLUMNS": "400"}))
    row = next(line for line in out.splitlines() if line.startswith("│ band "))
    assert "module band_selector" in row and "distribution band-selector 0.3.1" in out
    listed = {line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ ") and line.split("│")[1].strip()}
    assert {"uniform", "lze_full", "band"} <= listed
    cfg = yaml.safe_load(ok(runner.invoke(app, ["train", "selector=band", "selector.decay=0.25", "--cfg"])))
    assert cfg["selector"]["decay"] == 0.25 and cfg["selector"]["plugin"] == "band_selector:BandSelector"
    assert cfg["selector"]["plugin_version"].startswith("band-selector 0.3.1, sha256:")


NOT_A_SELECTOR = """
    from dataclasses import dataclass

    class Thing:
        pass

    @dataclass
    class Cfg:
        name: str = "lze"

    from lze_bench.api import Selector, UpdateDecision

    class Shadow(Selector):
        Config = Cfg
        name = "lze"

    class Future(Selector):
        Config = Cfg
        name = "future"
        lze_bench_api = "2.0"

    class NoConfig(Selector):
        name = "noconfig"
"""


@pytest.mark.parametrize("spec, words", [
    ("nowhere:Band", "selector=nowhere:Band: module 'nowhere' does not import (ModuleNotFoundError"),
    ("broken:Band", "module 'broken' does not import (ZeroDivisionError"),
    ("things:Missing", "module 'things'"),
    ("things:Thing", "things:Thing is class Thing, not a selector"),
    ("things:Shadow", "is named 'lze', the name of a built-in selector"),
    ("things:Future", "is written for selector API 2.0, this lze-bench serves 1.0"),
    ("things:NoConfig", "has no Config dataclass"),
    ("things", "write an import path as MODULE:CLASS"),
])
def test_bad_import_paths_are_one_line_and_exit_2(plugin_env, spec, words):
    plugin_env.module("things", NOT_A_SELECTOR)
    plugin_env.module("broken", "x = 1 / 0\n")
    arg = f"selector={spec}" if ":" in spec else f"selector={spec}:"
    line = one_error_line(runner.invoke(app, ["train", arg, "--cfg"]))
    assert line.startswith("error: ") and words in line


def test_two_plugins_with_one_name_are_refused(plugin_env):
    plugin_env.module("band_selector", BAND)
    plugin_env.module("other_band", BAND.replace("Prompts whose", "Other prompts whose"))
    plugin_env.distribution("band-selector", "0.1.0", {"band": "band_selector:BandSelector"})
    line = one_error_line(runner.invoke(app, ["train", "selector=other_band:BandSelector", "--cfg"]))
    assert "two selector plug-ins are named 'band'" in line and "band_selector:BandSelector" in line


def test_an_entry_point_that_does_not_import_is_one_line(plugin_env):
    plugin_env.distribution("bad-dist", "1.0", {"bad": "missing_module:Sel"})
    line = one_error_line(runner.invoke(app, ["selectors"]))
    assert "entry point bad = 'missing_module:Sel' of bad-dist does not import" in line


def test_the_lze_bench_script_imports_a_module_file_from_its_current_directory(tmp_path):
    """A console script's sys.path holds its own folder, not the current directory: the loader adds it."""
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir(), bin_dir.mkdir()
    (work / "band.py").write_text(BAND)
    script = bin_dir / "lze-bench"
    script.write_text("import sys\nfrom lze_bench.cli import app\nsys.exit(app())\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(script), "train", "selector=band:BandSelector", "--cfg"], cwd=work,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["selector"]["plugin"] == "band:BandSelector"


def test_a_sweep_names_the_plugins_jobs_after_it_and_pairs_them_with_builtins(plugin_env):
    plugin_env.module("band", BAND)
    out = ok(runner.invoke(app, ["sweep", "selector=uniform,band:BandSelector", "seed=0", "trainer.steps=2",
                                 "--dry-run"], env={"COLUMNS": "400"}))
    assert "runs/band " in out and "tracking.name=band\n" in out
    assert "P0 (paired: same data order and warm start): uniform, band" in out


def test_the_quickstart_recipe_takes_one_more_selector_by_override(plugin_env):
    """The recipe's 13 selectors plus a plug-in, by the command line's selector list: 14 jobs a seed, paired."""
    plugin_env.module("band", BAND)
    grid = yaml.safe_load((REPO / "sweeps" / "quickstart.yaml").read_text())["grid"]["selector"]
    out = ok(runner.invoke(app, ["sweep", "sweep=quickstart", f"selector={','.join(grid)},band:BandSelector", "seed=0",
                                 "--dry-run"], env={"COLUMNS": "400"}))
    assert "runs/band " in out and f"P0 (paired: same data order and warm start): {', '.join(grid)}, band" in out


def test_selectors_lists_a_plugin_given_as_an_import_path(plugin_env):
    plugin_env.module("band", BAND)
    out = ok(runner.invoke(app, ["selectors", "band:BandSelector"], env={"COLUMNS": "400"}))
    row = next(line for line in out.splitlines() if line.startswith("│ band "))
    assert "module band (import path)" in row and "low=0.2, high=0.8, decay=0.5" in row and "plugin" not in row
    assert "not a selector" in one_error_line(runner.invoke(app, ["selectors", "band:BandConfig"]))


def test_the_example_package_installs_with_pip_lists_and_passes_the_check(tmp_path):
    """`pip install` of examples/band_selector (its own pyproject.toml and entry point) into a folder of its own;
    a fresh lze-bench process then lists `band` from its distribution and `check selector band` passes."""
    import shutil

    source, target = tmp_path / "band_selector", tmp_path / "site"
    shutil.copytree(REPO / "examples" / "band_selector", source)  # setuptools builds beside the sources
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(target), "COLUMNS": "200"}

    def lze_bench(*args):
        return subprocess.run([sys.executable, "-m", "lze_bench.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=600)

    listed = lze_bench("selectors")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("│ band "))
    assert "band-selector" in listed.stdout and "module band_selector" in row
    checked = lze_bench("check", "selector", "band", "--skip-large")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdicts = [line.split()[0] for line in checked.stdout.splitlines()[1:] if line.strip()]
    assert "PASS deterministic:" in checked.stdout and set(verdicts) <= {"PASS", "INFO"}, checked.stdout
