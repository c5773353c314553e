"""`lze-bench bench overhead`'s figures from job timings: the round rows, the mean ratio with its Student-t interval
over rounds, the phase rows and the notes (tests/test_openrlhf_vllm.py runs the command on a real CPU job, one
round; the interval and the alternating order are checked here, where they cost nothing)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lze_bench.bench.overhead import WIDE_PCT, _notes, _rows, order_of_round
from lze_bench.bench.overhead_timing import OUTSIDE, PHASES, RunTiming, t_interval


def timing(step_s: float, generation_s: float) -> RunTiming:
    """A job whose timed steps all took step_s, generation_s of it in OpenRLHF's generation timer."""
    return RunTiming([step_s, step_s], {"generation": [generation_s, generation_s]})


def rounds_of(pairs: list[tuple[float, float]]) -> list[dict]:
    """One round per (lze-bench step, OpenRLHF step), in the bench's alternating order."""
    return [{"k": k, "first": order_of_round(k)[0], "lze": timing(lze, 0.5), "openrlhf": timing(plain, 0.4),
             "load": (0.5, 0.7)} for k, (lze, plain) in enumerate(pairs, start=1)]


def test_rounds_alternate_which_driver_runs_first():
    assert [order_of_round(k) for k in (1, 2, 3, 4)] == [["lze", "openrlhf"], ["openrlhf", "lze"]] * 2


def test_t_interval_is_the_students_t_interval_of_the_mean():
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    # t(0.975, 2 df) = 4.302653; sample sd 1; n 3
    assert mean == 2.0 and high - mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert mean - low == pytest.approx(high - mean)
    assert t_interval([1.1])[0] == 1.1 and all(math.isnan(v) for v in t_interval([1.1])[1:])


def test_rows_give_each_round_the_mean_ratio_with_its_interval_and_the_phases():
    rows = _rows(rounds_of([(1.1, 1.0), (1.2, 1.0), (0.9, 1.0)]))
    names = [row["row"] for row in rows]
    assert names[:4] == ["round 1 (lze-bench first)", "round 2 (openrlhf first)", "round 3 (lze-bench first)",
                         "step (mean over rounds)"]
    assert names[4:] == [f"phase {name}" for name in (*PHASES, OUTSIDE)]
    summary = rows[3]
    ratios = [1.1, 1.2, 0.9]
    assert summary["ratio"] == pytest.approx(sum(ratios) / 3)
    _, low, high = t_interval([row["ratio"] for row in rows[:3]])
    assert (summary["ratio_ci95_low"], summary["ratio_ci95_high"]) == (low, high) and low < summary["ratio"] < high
    assert summary["extra_s"] == pytest.approx(summary["lze_bench_s"] - summary["openrlhf_s"])
    phases = {row["row"]: row for row in rows[4:]}
    assert phases["phase generation"]["extra_s"] == pytest.approx(0.1)
    assert phases["phase ppo_train"]["lze_bench_s"] is None  # not logged: empty, not 0


def test_notes_flag_a_wide_interval_and_one_round_has_none(tmp_path):
    wide = _rows(rounds_of([(1.1, 1.0), (1.3, 1.0)]))
    notes = _notes(wide, 2, 6, 1, tmp_path)
    assert any("harness overhead per step: 1.200x [" in note for note in notes)
    assert f"(> {WIDE_PCT:g} %)" in notes[-1] and "raise rounds=" in notes[-1]
    narrow = _rows(rounds_of([(1.02, 1.0), (1.02, 1.0), (1.021, 1.0)]))
    assert not any("raise rounds=" in note for note in _notes(narrow, 3, 6, 1, tmp_path))

    one = _rows(rounds_of([(1.05, 1.0)]))
    assert one[1]["ratio"] == pytest.approx(1.05)
    assert one[1]["ratio_ci95_low"] is None and one[1]["ratio_ci95_high"] is None  # no NaN in the JSON
    notes = _notes(one, 1, 6, 1, Path("out"))
    assert any("1.050x" in note and "one round: no interval" in note for note in notes)
    assert not any("raise rounds=" in note for note in notes)
