"""Every `--dry-run` command the README and the pages under docs/ show runs as written (from an empty directory)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lze_bench.cli import app

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]


def readme_dry_runs() -> list[str]:
    """Lines of the README's and the docs pages' ```bash blocks that start with `lze-bench` and pass --dry-run
    (each command once: some are shown in two places)."""
    blocks = [block for page in PAGES for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S)]
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return list(dict.fromkeys(line for line in lines if line.startswith("lze-bench ") and "--dry-run" in line))


def test_readme_has_dry_run_examples():
    assert len(readme_dry_runs()) >= 3


@pytest.mark.parametrize("command", readme_dry_runs())
def test_readme_dry_run_command_runs_as_written(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, f"{command}\n{result.output}"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("ledger.parquet"))
