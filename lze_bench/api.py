"""The public selector API: everything a selector written outside lze-bench may import.

    from lze_bench.api import Selector, UpdateDecision

    class BandSelector(Selector):
        lze_bench_api = "1.0"   # the API version this class was written against
        ...

A selector is a class derived from `Selector` with a `Config` dataclass (every field defaulted; the
first field `name: str`), `select_rollout` and `select_update` (see docs/writing-a-selector.md and
docs/selectors.md §0 for the call order). The names below are the whole public surface; they are
re-exported from where they live (lze_bench.selectors.base, .stats, .topk, lze_bench.errors,
lze_bench.config.schema), so built-in and plug-in selectors run the same code.

Versioning (`API_VERSION`, "MAJOR.MINOR"): a minor release only adds names or optional fields; a
major release may remove or change one. A plug-in declares the version it was written against as a
class attribute `lze_bench_api = "1.0"` (or "1.x", or "1") on its selector class: a class attribute
and not a module one, because an entry point names a class and one module may hold selectors
written at different times. lze-bench refuses, in one line, a class whose declared major differs
from its own or whose minor is newer than its own (it would use names this version lacks). A class
that declares nothing is loaded as written against the current version.

Public (this module):
  Selector, StatelessSelector            base classes and the protocol's defaults
  RolloutBatch, UpdateDecision           what a selector reads and what it returns
  FeatureFn, EXTRA_FIELDS                lazily computed extras a selector may `require`
  STEP_METRICS                           the diagnostics `step_metrics()` may report
  TAG_SELECT_ROLLOUT, TAG_SELECT_UPDATE, TAG_BEGIN_EPOCH, TAG_PROBE, step_rng
                                         how the harness seeds each call's rng (reproduce it in tests)
  top_k, top_k_mask, gumbel_top_k, gumbel_where, gumbel_noise, median
                                         deterministic top-k, Gumbel-top-k and its noise, a float64 median
  group_stats, reward_stats, pass_rates, binary_ones, varied_rows, row_counts, first_of_each
                                         per-group reward statistics and per-row counts
  SelectorExhausted, LzeBenchError       errors: one line for the user
  require                                one-line validation of a Config field in __post_init__
  API_VERSION, check_api_version         this module's version and the compatibility rule

The built-in selectors (lze_bench/selectors/*.py) import nothing else from lze-bench but their own
private helper modules (tests/test_selector_api.py checks it), so they are examples of what a plug-in can
do with this module alone.

Private (may change in any release): the built-in selectors' own modules and state helpers
(lze_state, greso_state, astral_predict, dapo.keep_first_informative, ...), which are
tuned to one method each; `save_state` / `load_state` and `build_selector`, which are the harness's
side of the protocol (a selector returns a dict from `state_dict`, it never writes files); the
registries (`lze_bench.registry`), which plug-ins reach through `selector=MODULE:CLASS` or the
`lze_bench.selectors` entry-point group instead of registering themselves.
"""

from __future__ import annotations

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.selectors.base import (EXTRA_FIELDS, STEP_METRICS, TAG_BEGIN_EPOCH, TAG_PROBE, TAG_SELECT_ROLLOUT,
                                      TAG_SELECT_UPDATE, FeatureFn, RolloutBatch, Selector, SelectorExhausted,
                                      StatelessSelector, UpdateDecision, step_rng, top_k)
from lze_bench.selectors.stats import (binary_ones, first_of_each, group_stats, pass_rates, reward_stats, row_counts,
                                       varied_rows)
from lze_bench.selectors.topk import gumbel_noise, gumbel_top_k, gumbel_where, median, top_k_mask

API_VERSION = "1.0"

__all__ = [
    "API_VERSION", "check_api_version",
    "Selector", "StatelessSelector", "RolloutBatch", "UpdateDecision", "FeatureFn", "EXTRA_FIELDS", "STEP_METRICS",
    "TAG_SELECT_ROLLOUT", "TAG_SELECT_UPDATE", "TAG_BEGIN_EPOCH", "TAG_PROBE", "step_rng",
    "top_k", "top_k_mask", "gumbel_top_k", "gumbel_where", "gumbel_noise", "median",
    "group_stats", "reward_stats", "pass_rates", "binary_ones", "varied_rows", "row_counts", "first_of_each",
    "SelectorExhausted", "LzeBenchError", "require",
]


def _parse(version: str) -> tuple[int, int | None]:
    """(major, minor or None for "x" / absent) of "1", "1.x" or "1.3"; ValueError otherwise."""
    major, _, minor = str(version).strip().partition(".")
    return int(major), (None if minor in ("", "x", "*") else int(minor))


def check_api_version(declared, where: str) -> None:
    """Refuse, in one line naming `where`, a plug-in written against an API this version cannot serve."""
    if declared is None:
        return
    ours_major, ours_minor = _parse(API_VERSION)
    try:
        major, minor = _parse(declared)
    except ValueError:
        raise LzeBenchError(f"{where}: lze_bench_api = {declared!r} is not a version; write \"1.0\" or \"1.x\" "
                            f"(this lze-bench serves {API_VERSION})") from None
    if major != ours_major or (minor is not None and minor > ours_minor):
        raise LzeBenchError(f"{where} is written for selector API {declared}, this lze-bench serves {API_VERSION} "
                            f"(lze_bench.api); install an lze-bench that serves {major}.x, or port the selector")
