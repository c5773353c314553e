"""A non-editable install (the built wheel in a fresh virtual environment) finds the
built-in recipes from any directory, and a `./sweeps` folder there adds its own."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


# what a wheel is built from: the sdist's inputs (pyproject.toml, setup.py, MANIFEST.in, the package, the recipes)
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "lze_bench", "sweeps", "evals")


def source_copy(root: Path) -> Path:
    """The build's inputs copied under `root`: setuptools writes build/ and *.egg-info beside its sources, and in
    the checkout those would be shared with an editable install or another test process building at the same
    time (CI runs two suites at once)."""
    source = root / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    return source


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(root / "dist"), str(source_copy(root))], check=True)
    wheel = next((root / "dist").glob("lze_bench-*.whl"))
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    # --ignore-installed: an lze-bench visible from here (editable install, PYTHONPATH) must not stop the wheel
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--ignore-installed", str(wheel)], env=clean_env(), check=True)
    inherit_site_packages(python)
    return env_dir


def inherit_site_packages(python: Path) -> None:
    """The project's dependencies come from the *running* interpreter's site-packages, lze_bench from the wheel.

    `venv.create(system_site_packages=True)` would not do: it links the base interpreter
    (`sys._base_executable`), so under a virtual environment the new venv sees the base
    Python's packages, not this one's (typer missing). A `.pth` file in the new venv appends
    this interpreter's site directories to `sys.path`, after the venv's own site-packages
    (so the wheel wins). Their own `.pth` files are not processed, so an editable install of
    this checkout (its import hook lives in a `.pth` file) cannot shadow the wheel either.
    """
    dirs = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    dirs = [d for d in dirs if Path(d).is_dir()]
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    (Path(target) / "_lze_bench_test_deps.pth").write_text("".join(f"{d}\n" for d in dirs))


def clean_env() -> dict:
    """This process's environment without what would put a checkout before the wheel."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LZE_BENCH_RECIPES", "LZE_BENCH_WARMSTARTS")}


def run_cli(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(env_dir / "bin" / "lze-bench"), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=300)


def test_wheel_finds_builtin_and_local_recipes(wheel_venv, tmp_path):
    where = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", "import lze_bench; print(lze_bench.__file__)"],
                           cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=True).stdout
    assert str(wheel_venv) in where and str(REPO) not in where  # the wheel, not the checkout
    sweep = run_cli(wheel_venv, tmp_path, "sweep", "sweep=quickstart", "--dry-run")
    assert sweep.returncode == 0, sweep.stderr + sweep.stdout
    assert "quickstart" in sweep.stdout
    evaluation = run_cli(wheel_venv, tmp_path, "eval", f"model={tmp_path / 'm'}", "eval=math_suite", "--dry-run")
    assert evaluation.returncode == 0, evaluation.stderr + evaluation.stdout
    assert "math500" in evaluation.stdout
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "mine.yaml").write_text("grid:\n  seed: [0, 1, 2]\n")
    mine = run_cli(wheel_venv, tmp_path, "sweep", "sweep=mine", "--dry-run")
    assert mine.returncode == 0, mine.stderr + mine.stdout
    assert "3 jobs" in mine.stdout
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "grid.yaml").write_text("grid:\n  seed: [0, 1]\n")
    by_path = run_cli(wheel_venv, tmp_path, "sweep", "sweep=elsewhere/grid.yaml", "--dry-run")
    assert by_path.returncode == 0 and "2 jobs" in by_path.stdout, by_path.stderr + by_path.stdout
    missing = run_cli(wheel_venv, tmp_path, "sweep", "sweep=nowhere.yaml", "--dry-run")
    assert missing.returncode == 2 and "sweep=nowhere.yaml" in missing.stderr + missing.stdout


def test_wheel_carries_the_shipped_warm_starts_with_their_checksums(wheel_venv, tmp_path):
    """A wheel install starts from the same initial policies as the checkout: every shipped file, checksums
    in order (`lze-bench warmstart list` reads them from the installed package)."""
    from lze_bench.backends.local.shipped import INFO_FILE, PACKAGE_STORE

    listed = run_cli(wheel_venv, tmp_path, "warmstart", "list")
    assert listed.returncode == 0, listed.stderr + listed.stdout
    keys = sorted(p.name for p in PACKAGE_STORE.glob("*") if (p / INFO_FILE).is_file())
    assert keys, f"no shipped warm start in {PACKAGE_STORE}"
    for key in keys:
        assert key in listed.stdout
    probe = ("from lze_bench.backends.local.shipped import PACKAGE_STORE, mismatched_files, shipped_keys;"
             "print(PACKAGE_STORE); print([k for k in shipped_keys() if mismatched_files(PACKAGE_STORE / k)])")
    out = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", probe], cwd=tmp_path, env=clean_env(),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert str(wheel_venv) in out[0] and out[1] == "[]"
