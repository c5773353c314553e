"""The command line users touch: commands listed, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from lze_bench.cli import app

runner = CliRunner()
COMMANDS = ("train", "eval", "grade", "sweep", "report", "replay", "bench", "selectors")


def test_help_lists_every_command():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "lze_bench.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "selectors" in out.stdout


def test_selectors_lists_registered_selectors_with_defaults():
    from lze_bench.config import group_options

    result = runner.invoke(app, ["selectors"])
    assert result.exit_code == 0
    for name in group_options("selector"):
        assert name in result.output


def test_bad_override_exits_2_with_one_line():
    result = runner.invoke(app, ["train", "trainer.batch_size=-1"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "trainer.batch_size" in lines[0]


def test_train_dry_run_prints_resolved_config_and_runs_nothing(tmp_path):
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["train", "--dry-run", "selector=uniform", f"run_dir={run_dir}"])
    assert result.exit_code == 0
    assert "selector:" in result.output and "uniform" in result.output
    assert not run_dir.exists()
