"""Environment variables: read only through lze_bench/env.py, and its table documented in docs/design.md."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lze_bench import env

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "lze_bench"
ENVIRONMENT_ACCESS = re.compile(r"\bos\.environ\b|\bgetenv\b|\bfrom os import environ\b|\bputenv\b")
# Files that may still read the environment themselves (none: every module goes through env.py).
STILL_READING: set[str] = set()


def test_only_env_py_touches_the_environment():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == "env.py" or name in STILL_READING:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ENVIRONMENT_ACCESS.search(line):
                found.append(f"lze_bench/{name}:{number}: {line.strip()}")
    assert not found, "read or set it through lze_bench/env.py:\n" + "\n".join(found)


def test_the_exceptions_still_exist():
    assert all((PACKAGE / name).is_file() for name in STILL_READING)


def documented_rows() -> dict[str, list[str]]:
    """`NAME` -> the other cells of its row in design.md's "Environment variables" table."""
    text = (REPO / "docs" / "design.md").read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_table_entry_is_documented_as_it_is():
    rows = documented_rows()
    for var in env.TABLE:
        default = f"`{var.default}`" if var.default is not None else "no value"
        assert rows.get(var.name) == [default, ", ".join(var.used_by), var.meaning], var.name
    assert set(rows) == {var.name for var in env.TABLE}, "design.md lists a variable the table lacks"


def test_table_names_are_unique_and_their_modules_exist():
    names = [var.name for var in env.TABLE]
    assert len(names) == len(set(names))
    for var in env.TABLE:
        for module in var.used_by:
            assert (PACKAGE / module).is_file(), f"{var.name}: no lze_bench/{module}"


@pytest.mark.parametrize("setting", [None, ""])
def test_unset_or_empty_gives_the_default(monkeypatch, setting):
    for var in (env.CACHE, env.PROGRESS, env.WANDB_PROJECT, env.DATA, env.DEBUG):
        if setting is None:
            monkeypatch.delenv(var.name, raising=False)
        else:
            monkeypatch.setenv(var.name, setting)
    assert env.cache_dir() == "~/.cache/lze-bench"
    assert env.progress_shown() and env.wandb_project() == "lze-bench"
    assert env.data_root() is None and not env.debug()


def test_typed_accessors_read_the_value_now(monkeypatch):
    monkeypatch.setenv("LZE_BENCH_PROGRESS", "0")
    monkeypatch.setenv("LZE_BENCH_RECIPES", os.pathsep.join(["/a", "", "/b"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", " yes ")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3,")
    monkeypatch.setenv("LZE_BENCH_DEBUG", "1")
    assert not env.progress_shown()
    assert env.recipe_roots() == ["/a", "/b"]
    assert env.hub_offline() and env.debug()
    assert env.visible_devices() == ["2", "3"]


def test_temporarily_restores_what_was_there(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with env.temporarily({env.OMP_NUM_THREADS: "1", env.MKL_NUM_THREADS: "1"}):
        assert (os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == ("1", "1")
        assert env.child_env({env.PLAIN_RAY_ADDRESS: "h:1"})["RAY_ADDRESS"] == "h:1"
    assert os.environ["OMP_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ
