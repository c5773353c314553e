"""docs/writing-a-selector.md runs as written: every command of its ```bash blocks, in order, from a copy of the
repository's examples/ (`pip install -e .` is stood in for by the distribution's metadata on sys.path: nothing is
installed into the test's environment)."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from lze_bench.cli import app
from plugin_env import plugin_env  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "writing-a-selector.md"


def doc_lines() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_tutorial_has_the_check_train_compare_and_install_commands():
    lines = doc_lines()
    assert any(line.startswith("lze-bench check selector ") for line in lines)
    assert sum(line.startswith("lze-bench train selector=") and "$TINY" in line for line in lines) == 2
    assert any(line.startswith("lze-bench report ") for line in lines) and "pip install -e ." in lines


def test_the_tutorial_commands_run_as_written(plugin_env, tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__", "runs"))
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader may add the current directory
    monkeypatch.setenv("LZE_BENCH_CACHE", str(tmp_path / "cache"))
    variables, outputs = {}, {}
    for line in doc_lines():
        if line.startswith("cd "):
            monkeypatch.chdir(Path.cwd() / line[3:])
        elif re.match(r"^[A-Z_]+=", line):
            name, _, value = line.partition("=")
            variables[name] = shlex.split(value)[0]
        elif line == "pip install -e .":
            install_stand_in(plugin_env, Path.cwd(), monkeypatch)
        else:
            assert line.startswith("lze-bench "), line
            for name, value in variables.items():
                line = line.replace(f"${name}", value)
            result = CliRunner().invoke(app, shlex.split(line)[1:], env={"COLUMNS": "400"})
            assert result.exit_code == 0, f"{line}\n{result.output}{result.exception!r}"
            outputs[line.split(" --")[0][:40]] = result.output
    checked = next(out for key, out in outputs.items() if key.startswith("lze-bench check selector"))
    assert checked.count("PASS ") == 4
    table = (Path.cwd() / "reports" / "band-vs-uniform" / "table1.md").read_text()
    assert "| band |" in table and "| uniform |" in table
    listed = next(out for key, out in outputs.items() if key == "lze-bench selectors")
    assert "distribution band-selector 0.1.0 (entry point)" in listed


def install_stand_in(plugin_env, project: Path, monkeypatch) -> None:
    """What `pip install -e .` leaves for lze-bench to find: the module importable, the entry points declared."""
    plugin_env.fresh_process()  # a fresh process after the install
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    plugin_env.distribution(meta["name"], meta["version"], meta["entry-points"]["lze_bench.selectors"])
    monkeypatch.syspath_prepend(str(project))


def test_the_example_package_tests_pass():
    """The example's own tests (a plug-in author's CI) run against this checkout."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/band_selector/tests"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "4 passed" in out.stdout
