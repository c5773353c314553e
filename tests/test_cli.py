"""The command line users touch: commands listed, one-line errors, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.cli import app

runner = CliRunner()
COMMANDS = ("train", "eval", "grade", "sweep", "report", "replay", "bench", "selectors", "label")


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


def one_stderr_line(result) -> str:
    """A user mistake: exit code 2, nothing on stdout, exactly one line on stderr."""
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and not result.stdout.strip(), result.output
    return lines[0]


def test_version():
    from lze_bench import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"lze-bench {__version__}"


def test_shell_completion_script_and_override_completion(monkeypatch):
    import typer.completion

    # typer's --show-completion is a flag that detects the user's shell from the process tree (shellingham), which
    # fails where no shell is an ancestor (a detached job): the user's shell is bash here
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    script = runner.invoke(app, ["--show-completion"], prog_name="lze-bench")
    assert script.exit_code == 0 and "_LZE_BENCH_COMPLETE=complete_bash" in script.output

    def complete(words: str) -> list[str]:
        env = {"_LZE_BENCH_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        result = runner.invoke(app, [], prog_name="lze-bench", env=env)
        assert result.exit_code == 0, result.output
        return result.output.split()

    assert complete("lze-bench train selector=l") == ["selector=lze", "selector=lze_full"]
    assert complete("lze-bench train selector = l") == ["lze", "lze_full"]  # bash splits words at '='
    assert complete("lze-bench train selector=lze selector.keep_r") == ["selector.keep_ratio="]
    assert complete("lze-bench train --dr") == ["--dry-run"]
    assert "sweep=quickstart" in complete("lze-bench sweep sweep=q")


@pytest.mark.parametrize("command, groups", [
    ("train", ["selector", "backend", "model", "task", "launcher"]),
    ("eval", ["model", "eval"]),
    ("sweep", ["sweep", "selector", "backend", "model", "task", "launcher"]),
])
def test_help_lists_config_groups_with_their_options(command, groups):
    from lze_bench.config import group_options

    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for group in groups:
        assert f"{group}= " in text
        for option in group_options(group):  # from the registries and recipe folders, never a list kept by hand
            assert option in text, (group, option)
    assert f"lze-bench {command} --cfg" in text and "--dry-run" in text


def test_cfg_prints_every_key_of_the_resolved_config():
    result = runner.invoke(app, ["train", "--cfg", "selector=lze", "trainer.steps=7"])
    assert result.exit_code == 0, result.output
    cfg = yaml.safe_load(result.output)
    assert cfg["selector"]["name"] == "lze" and "keep_ratio" in cfg["selector"]
    assert cfg["trainer"]["steps"] == 7 and "max_new_tokens" in cfg["trainer"] and "launcher" in cfg


@pytest.mark.parametrize("args, needles", [
    (["train", "--dryrun"], ["--dryrun", "did you mean --dry-run?"]),
    (["eval", "--dryrun"], ["--dryrun", "did you mean --dry-run?"]),
    (["train", "--dry-run", "-m", "selector=uniform,lze"], ["-m", "lze-bench sweep"]),
    (["train", "--dry-run", "--multirun", "seed=0,1"], ["--multirun", "lze-bench sweep"]),
    (["sweep", "--multirun", "seed=0,1"], ["--multirun", "comma lists make the grid"]),
    (["train", "--dry-run", "selector=uniform,lze"], ["selector=uniform,lze", "lze-bench sweep selector=uniform,lze"]),
    (["train", "--dry-run", "lze"], ["'lze'", "KEY=VALUE"]),
    (["train", "--dry-run", "+trainer.foo=1"], ["trainer.foo", "use an existing key", "keys of trainer: steps"]),
    (["train", "--dry-run", "selector=lze", "++selector.keep_ratoi=0.5"],
     ["selector.keep_ratoi", "did you mean 'selector.keep_ratio'"]),
    (["train", "--dry-run", "+foo=1"], ["'foo'", "keys of the top level"]),
    (["train", "--dry-run", "hydra.run.dir=out"], ["hydra.run.dir", "run_dir="]),
    (["sweep", "--dry-run", "seed=glob(1*)"], ["seed=glob(1*)", "options of a config group"]),
    (["sweep", "--dry-run", "selector=glob(zz*)"], ["matches no selector", "lze"]),
    (["train", "--dry-run", "trainer.n_samples=1"], ["trainer.n_samples: GRPO group advantages need >= 2", "got 1"]),
    (["train", "--dry-run", "seed=-5"], ["seed: must be an integer >= 0, got -5"]),
    (["train", "--dry-run", "trainer.batch_size=8", "data.candidates_per_step=4"],
     ["data.candidates_per_step: 4 candidates per step is fewer than the trainer.batch_size=8"]),
    (["replay", "rollouts.parquet", "seed=-5"], ["seed: must be an integer >= 0, got -5"]),
    (["eval", "--dry-run", "eval=synthetic", "seed=-5"], ["seed: must be an integer >= 0, got -5"]),
])
def test_each_cli_mistake_is_one_line_on_stderr_and_exit_2(args, needles):
    # --dry-run where it parses: a mistake that slipped through would print a config, not start a run
    line = one_stderr_line(runner.invoke(app, args))
    for needle in needles:
        assert needle in line, line


def test_plus_may_still_add_keys_to_free_form_maps():
    result = runner.invoke(app, ["train", "--cfg", "+launcher.additional_parameters.qos=high"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output)["launcher"]["additional_parameters"] == {"qos": "high"}


def test_sweep_glob_picks_options_of_a_group():
    result = runner.invoke(app, ["sweep", "--dry-run", "selector=glob(l*)", "trainer.steps=2"],
                           env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    assert "2 jobs" in result.output and "selector=lze_full" in result.output and "uniform" not in result.output


def test_debug_env_shows_the_traceback():
    from lze_bench.errors import LzeBenchError

    result = runner.invoke(app, ["train", "--dryrun"], env={"LZE_BENCH_DEBUG": "1"})
    assert isinstance(result.exception, LzeBenchError) and "--dryrun" in str(result.exception)
    out = subprocess.run([sys.executable, "-m", "lze_bench.cli", "train", "+trainer.foo=1"], capture_output=True,
                         text=True, env={**os.environ, "LZE_BENCH_DEBUG": "1"})
    assert out.returncode == 1 and "Traceback" in out.stderr and "trainer.foo" in out.stderr


@pytest.mark.parametrize("env", [
    {"HF_HUB_OFFLINE": "1"},
    {"HF_ENDPOINT": "http://127.0.0.1:9"},  # nothing listens on the discard port: no network, answered at once
])
@pytest.mark.parametrize("command", [["train", "trainer.steps=1"], ["eval", "eval=synthetic", "limit=1"]])
def test_an_unreachable_hub_id_fails_in_one_line_without_retries(tmp_path, env, command):
    out = subprocess.run(
        [sys.executable, "-m", "lze_bench.cli", *command, "model=lze-bench-test/no-such-model",
         f"{'run_dir' if command[0] == 'train' else 'out_dir'}={tmp_path / 'out'}"],
        capture_output=True, text=True, env={**os.environ, "HF_HOME": str(tmp_path / "hf"), **env},
    )
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "model=lze-bench-test/no-such-model" in lines[0] and "hf download" in lines[0]
    assert not (tmp_path / "out").exists()  # a refused command leaves no directory behind


@pytest.mark.parametrize("command, override", [("train", "selector="), ("train", "launcher="),
                                               ("sweep", "selector=")])
def test_an_empty_group_choice_is_one_line_listing_the_choices(command, override):
    from lze_bench.config import group_options

    key = override.partition("=")[0]
    result = runner.invoke(app, [command, override, "--dry-run"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"{key} needs a value" in lines[0] and "Could not find" not in lines[0]
    assert all(name in lines[0] for name in group_options(key))
