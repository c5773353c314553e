"""The band selector: its rule on a hand-made history, and lze-bench's conformance check."""

from __future__ import annotations

import numpy as np
import pytest

from band_selector import BandConfig, BandSelector
from lze_bench.api import LzeBenchError, RolloutBatch, step_rng


def test_in_band_and_unseen_prompts_come_first_in_candidate_order():
    selector = BandSelector(num_prompts=6)
    # prompt 0 always solved, 1 half solved, 2 never solved; 3-5 never rolled out
    selector.observe(RolloutBatch(prompt_ids=[0, 1, 2], rewards=[[1, 1], [1, 0], [0, 0]], step=0))
    chosen = selector.select_rollout(np.array([5, 0, 1, 2, 3]), 3, 1, step_rng(0, 1, 0))
    assert chosen.tolist() == [5, 1, 3]
    # too few inside the band: the others fill the budget, still in candidate order
    assert selector.select_rollout(np.array([2, 0, 1]), 2, 1, step_rng(0, 1, 0)).tolist() == [2, 1]


def test_the_recent_pass_rate_decays_and_round_trips():
    selector = BandSelector(BandConfig(decay=0.25), num_prompts=3)
    for reward in (1.0, 0.0):
        selector.observe(RolloutBatch(prompt_ids=[1], rewards=[[reward, reward]], step=0))
    assert selector.rate[1] == pytest.approx(0.75) and np.isnan(selector.rate[0])
    twin = BandSelector(num_prompts=3)
    twin.load_state_dict(selector.state_dict())
    np.testing.assert_array_equal(twin.rate, selector.rate)


def test_a_band_upside_down_is_one_config_error():
    with pytest.raises(LzeBenchError, match="selector.low"):
        BandConfig(low=0.9, high=0.1)


def test_it_passes_the_conformance_check():
    from lze_bench.conformance import check_selector

    report = check_selector("band_selector:BandSelector", sizes=())
    assert report.ok, [finding.line() for finding in report.findings]
