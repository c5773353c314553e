"""The synthetic task: deterministic, balanced, held out, and graded by the one grading function."""

from __future__ import annotations

from collections import Counter

import pytest

from lze_bench.errors import LzeBenchError
from lze_bench.grading import grade_one
from lze_bench.tasks.synthetic import LEVELS, SyntheticTaskConfig, load_split

SMALL = SyntheticTaskConfig(num_train=120, num_test=60, num_sft=240)


def test_same_seed_same_rows_and_other_seed_other_rows():
    assert load_split("train", SMALL) == load_split("train", SyntheticTaskConfig(**vars(SMALL)))
    other = load_split("train", SyntheticTaskConfig(**{**vars(SMALL), "seed": 1}))
    assert [r["problem"] for r in other] != [r["problem"] for r in load_split("train", SMALL)]


def test_rows_have_the_public_fields_and_ids_are_row_indices():
    rows = load_split("train", SMALL)
    assert [r["id"] for r in rows] == list(range(len(rows)))
    assert set(rows[0]) == {"id", "problem", "answer", "level", "solution"}


def test_levels_are_balanced_and_differ_in_steps():
    rows = load_split("test", SMALL)
    counts = Counter(r["level"] for r in rows)
    assert sorted(counts) == sorted(LEVELS) and len(set(counts.values())) == 1
    steps = {level: max(r["solution"].count("\n") for r in rows if r["level"] == level) for level in LEVELS}
    for level, spec in LEVELS.items():
        assert steps[level] == spec.ops  # one line per operation, then the boxed answer
    assert len({spec.ops for spec in LEVELS.values()}) == len(LEVELS)
    for row in rows:  # distinct terms: "the term after the one just used" is unambiguous
        terms = row["problem"].split("+")[1:]
        assert len(set(terms)) == len(terms)


def test_warm_start_data_stops_at_sft_max_level_and_mixes_terse_answers():
    rows = load_split("sft", SyntheticTaskConfig(num_train=10, num_test=60, num_sft=2000))
    assert {r["level"] for r in rows} == set(range(1, SMALL.sft_max_level + 1))
    terse = [r for r in rows if r["solution"] == f"\\boxed{{{r['answer']}}}"]
    assert all(r["level"] > 1 for r in terse)  # one-step problems always show their step
    multi = [r for r in rows if r["level"] > 1]
    assert abs(len(terse) / len(multi) - SMALL.sft_terse_fraction) < 0.05
    train = {r["problem"]: r for r in load_split("train", SMALL)}
    for row in rows:  # the rest are the same worked solutions as the train/test rows have
        if row not in terse and row["problem"] in train:
            assert row["solution"] == train[row["problem"]]["solution"]


def test_worked_solution_is_correct_arithmetic_and_grades_correct():
    for row in load_split("train", SMALL):
        lines = row["solution"].splitlines()
        terms = [int(t) for t in row["problem"].split("+")]
        assert sum(terms) == int(row["answer"])
        for index, line in enumerate(lines[:-1]):  # step k adds term k to the running total
            assert line == f"{sum(terms[:index + 1])}+{terms[index + 1]}={sum(terms[:index + 2])}"
        assert lines[-1] == f"\\boxed{{{row['answer']}}}"
        assert grade_one(row["solution"], row["answer"]).correct


def test_train_and_sft_never_contain_a_test_problem():
    test = {r["problem"] for r in load_split("test", SMALL)}
    assert len(test) == SMALL.num_test  # test problems are distinct
    assert not test & {r["problem"] for r in load_split("train", SMALL)}
    assert not test & {r["problem"] for r in load_split("sft", SMALL)}


def test_bad_split_and_bad_levels_fail_with_one_line():
    with pytest.raises(LzeBenchError, match="no split 'dev'"):
        load_split("dev", SMALL)
    with pytest.raises(LzeBenchError, match="task.min_level"):
        SyntheticTaskConfig(min_level=4, max_level=2)


def test_level_range_restricts_rows():
    rows = load_split("train", SyntheticTaskConfig(min_level=2, max_level=3, num_train=20, num_test=10, num_sft=10))
    assert {r["level"] for r in rows} == {2, 3}
