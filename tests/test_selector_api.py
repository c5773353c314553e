"""lze_bench.api: the public selector names are the harness's own objects, and the version rule."""

from __future__ import annotations

import pytest

import lze_bench.api as api
from lze_bench.errors import LzeBenchError
from lze_bench.selectors import base


def test_public_names_are_the_harness_objects_not_copies():
    for name in ("Selector", "StatelessSelector", "RolloutBatch", "UpdateDecision", "step_rng", "top_k",
                 "TAG_SELECT_ROLLOUT", "TAG_SELECT_UPDATE", "TAG_BEGIN_EPOCH", "TAG_PROBE", "SelectorExhausted"):
        assert getattr(api, name) is getattr(base, name), name
    assert set(api.__all__) <= set(dir(api))


@pytest.mark.parametrize("declared", [None, "1", "1.x", "1.0", api.API_VERSION])
def test_compatible_versions_pass(declared):
    api.check_api_version(declared, "mod:Cls")


@pytest.mark.parametrize("declared, words", [("2.0", "written for selector API 2.0"), ("0.9", "0.9"),
                                              ("1.99", "1.99"), ("one", "not a version")])
def test_incompatible_versions_are_one_line_naming_the_class(declared, words):
    with pytest.raises(LzeBenchError, match="mod:Cls") as info:
        api.check_api_version(declared, "mod:Cls")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_the_builtin_selectors_import_only_the_public_api_from_lze_bench():
    """Each built-in selector module (and its private helpers) takes from lze-bench only `lze_bench.api` and the
    helper modules beside it: what a plug-in can use is enough to write all thirteen."""
    import ast
    from pathlib import Path

    import lze_bench.selectors as package

    folder = Path(package.__file__).parent
    interface = {"__init__.py", "base.py", "stats.py", "topk.py"}  # what lze_bench.api re-exports
    helpers = {f"lze_bench.selectors.{path.stem}" for path in folder.glob("*.py") if path.name not in interface}
    checked = 0
    for path in sorted(folder.glob("*.py")):
        if path.name in interface:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if name == "lze_bench" or name.startswith("lze_bench."):
                    assert name == "lze_bench.api" or name in helpers, f"{path.name} imports {name}"
        checked += 1
    builtin_modules = {target.partition(":")[0] for target in package.BUILTIN_SELECTORS.values()}
    assert builtin_modules <= {f"{name.rpartition('.')[2]}" for name in helpers} and checked >= len(builtin_modules)
