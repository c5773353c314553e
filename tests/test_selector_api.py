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
