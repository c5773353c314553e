"""CI tests what a user installs: its first stage runs the README's install lines, its second the declared floors.

`.ci/run` builds a fresh virtual environment with the README quick start's two install lines and runs the README's
test command there; then it holds every direct dependency at the floor `pyproject.toml` declares (`.ci/floors.txt`)
beside the optional stacks and runs the suite again. These tests keep the three files in step, so a range in
`pyproject.toml` cannot drift from the versions CI runs.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
CI_RUN = REPO / ".ci" / "run"


def readme_quick_start_lines() -> list[str]:
    """The README's quick-start install block, comments dropped, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quick start.*?```bash\n(.*?)```", text, flags=re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def declared() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {Requirement(line).name.lower(): Requirement(line) for line in project["dependencies"]}


def floors() -> dict[str, str]:
    pins = {}
    for line in (REPO / ".ci" / "floors.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def floor_of(requirement: Requirement) -> str | None:
    return next((spec.version for spec in requirement.specifier if spec.operator == ">="), None)


def test_ci_installs_the_readme_environment_with_the_readmes_own_lines():
    """CI's pip lines are the README's, except PyTorch's CPU index URL, which this CI machine's pip already is."""
    lines = readme_quick_start_lines()
    assert lines[0].startswith("pip install torch==") and lines[-1] == "pip install -e '.[test]'"
    expected = [re.sub(r"\s+--index-url\s+\S+", "", line) for line in lines]
    run = CI_RUN.read_text(encoding="utf-8")
    readme_stage = run[run.index("# --- 1."):run.index("# --- 2.")]
    pip_lines = [line.split("#")[0].strip() for line in readme_stage.splitlines()
                 if line.strip().startswith("pip install")]
    assert [line.replace(" -q", "") for line in pip_lines] == expected
    assert "python3 -m venv" in readme_stage, "the README's environment starts empty"
    assert "tests -q" in readme_stage and "def tests" not in readme_stage


def test_every_floor_in_pyproject_is_the_version_ci_holds_in_its_floors_stage():
    requirements, pins = declared(), floors()
    for name, requirement in requirements.items():
        if str(requirement.specifier).startswith("=="):
            continue  # pinned outright (the antlr runtime)
        assert floor_of(requirement) is not None, f"pyproject.toml: {name} has no floor (>=)"
        assert name in pins, f".ci/floors.txt lacks {name} (pyproject.toml's floor: {floor_of(requirement)})"
        assert pins[name] == floor_of(requirement), \
            f"{name}: pyproject.toml's floor is {floor_of(requirement)}, .ci/floors.txt holds {pins[name]}"
    assert set(pins) <= set(requirements), f"floors of undeclared packages: {sorted(set(pins) - set(requirements))}"


def test_each_floor_lies_inside_its_declared_range():
    requirements = declared()
    for name, version in floors().items():
        assert requirements[name].specifier.contains(version, prereleases=True), \
            f"{name}=={version} is outside pyproject.toml's {requirements[name].specifier}"


def test_the_stack_stage_installs_the_project_under_the_floors():
    run = CI_RUN.read_text(encoding="utf-8")
    stack_stage = run[run.index("# --- 2."):]
    assert "-c .ci/floors.txt -e '.[test]'" in stack_stage
    assert 'LZE_BENCH_CI_CONSTRAINTS="$PWD/.ci/floors.txt"' in stack_stage
    for script in ("openrlhf.sh", "vllm_cpu.sh"):
        assert "LZE_BENCH_CI_CONSTRAINTS" in (REPO / ".ci" / script).read_text(encoding="utf-8"), script
