"""Grading verdicts (design.md "Grading").

Cases: tests/data/grading_cases.jsonl, each naming a real benchmark row
(<file> of the full benchmark, 1-based line; the row is in the slice
tests/data/<file>) whose gold answer it grades against, plus a hand-labelled
model-style response (equivalent forms and wrong ones).
`correct` is the label under grading mode "boxed" (the default);
`correct_math_verify`, where present, the label under mode "math_verify"
(math-verify reads the whole response), else the same as `correct`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from lze_bench.data import get_spec
from lze_bench.grading import Grade, Grader, extract_answer, grade_batch, grade_one, normalize_gold
from lze_bench.grading.pool import WatchdogPool
from lze_bench.grading.verdicts import fast_verdict, math_verify_verdict

CASES = [json.loads(line) for line in (Path(__file__).parent / "data" / "grading_cases.jsonl").read_text().splitlines()]


def _case_id(case: dict) -> str:
    return f"{case['file'].split('/')[0]}:{case['line']}:{case['form']}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_case_gold_is_the_real_benchmark_answer(case, benchmark_line):
    name = case["file"].split("/")[0]
    line = benchmark_line(case["file"], case["line"])
    raw = json.loads(line)[get_spec(name).answer_field]
    assert normalize_gold(raw, get_spec(name).gold_style) == case["gold"]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_grade_one_matches_label(case):
    grade = grade_one(case["response"], case["gold"])
    assert grade.correct is case["correct"], grade


def _label(case: dict, mode: str) -> bool:
    return case.get("correct_math_verify", case["correct"]) if mode == "math_verify" else case["correct"]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_grade_one_math_verify_mode_matches_label(case):
    grade = grade_one(case["response"], case["gold"], mode="math_verify")
    assert grade.correct is _label(case, "math_verify"), grade


def test_math_verify_mode_reads_sentence_and_hash_answers_that_boxed_does_not():
    for response in ("She sells 9 eggs at $2 each. The answer is 18.", "9 * 2 = <<9*2=18>>18\n#### 18"):
        assert grade_one(response, "18") == Grade(False, None, "no_answer")
        assert grade_one(response, "18", mode="math_verify") == Grade(True, "18", "ok")
    assert grade_one("I have no idea.", "18", mode="math_verify") == Grade(False, None, "no_answer")


def test_grader_math_verify_mode_matches_labels_through_the_pool():
    with Grader(timeout_s=5.0, workers=2, mode="math_verify") as pooled:
        grades = pooled.grade([c["response"] for c in CASES], [c["gold"] for c in CASES])
        stats = dict(pooled.stats)
    wrong = [(c["form"], c["gold"], g) for c, g in zip(CASES, grades) if g.correct is not _label(c, "math_verify")]
    assert not wrong
    assert stats["pool"] > 0 and stats["fast"] == 0  # the whole response is parsed in the pool, never in-process
    assert stats["no_answer"] == sum(g.status == "no_answer" for g in grades)


def test_unknown_grading_mode_is_refused():
    with pytest.raises(ValueError, match="grading mode 'boxd'.*boxed, math_verify"):
        Grader(mode="boxd")


@pytest.fixture(scope="module")
def grader():
    with Grader(timeout_s=5.0, workers=2) as shared:
        yield shared


def test_grader_pool_matches_labels(grader):
    grades = grader.grade([c["response"] for c in CASES], [c["gold"] for c in CASES])
    wrong = [(c["form"], c["gold"], g) for c, g in zip(CASES, grades) if g.correct is not c["correct"]]
    assert not wrong
    assert grader.stats["pool"] > 0 and grader.stats["fast"] > 0  # both paths were exercised


@pytest.mark.parametrize("case", [c for c in CASES if extract_answer(c["response"])], ids=_case_id)
def test_fast_path_agrees_with_math_verify(case):
    answer = extract_answer(case["response"])
    fast = fast_verdict(answer, case["gold"])
    if fast is not None:
        assert fast == math_verify_verdict(answer, case["gold"])[0]


@pytest.mark.parametrize(
    "answer,gold",
    [("18", "18"), ("\\$1,800", "1800"), ("18^{\\circ}", "18"), ("18 \\text{ cm}", "18"), ("0.5", "\\frac{1}{2}"),
     ("-\\dfrac{6}{4}", "-1.5"), ("3.", "3"), ("025", "25"), ("2/3", "\\frac{4}{6}"), ("10{,}000", "10000"),
     ("17", "18"), ("\\frac{1}{3}", "\\frac{1}{2}"), ("-5", "5"), ("1,000", "100")],
)
def test_fast_path_number_forms_agree_with_math_verify(answer, gold):
    fast = fast_verdict(answer, gold)
    assert fast is not None
    assert fast == math_verify_verdict(answer, gold)[0]


def test_fast_path_defers_where_math_verify_rounds():
    assert fast_verdict("0.333333", "\\frac{1}{3}") is None  # math-verify: equal at 6 decimals
    assert math_verify_verdict("0.333333", "\\frac{1}{3}")[0] is True
    assert fast_verdict("10\\%", "10") is None


@pytest.mark.parametrize(
    "response,expected",
    [
        ("no box here", None),
        ("\\boxed{a} then \\boxed{b}", "b"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed 42.", "42"),
        ("\\boxed{5} and a cut-off \\boxed{6", "5"),
        ("\\boxed{5}. I put the answer within \\boxed{}.", "5"),
        ("\\boxed{ 7 }", "7"),
        ("\\fbox{3} later \\boxed{4}", "4"),
        ("\\boxedfoo{3}", None),
        ("\\boxed{" * 100_000, None),  # linear time, no answer
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    "value,style,expected",
    [("Natalia ... = 72 clips.\n#### 72", "gsm8k", "72"), ("#### 10,000", "gsm8k", "10000"), ("025", "integer", "25"),
     (27.0, "integer", "27"), (-1.0, "integer", "-1"), (" $\\frac{1}{2}$ ", "latex", "\\frac{1}{2}"),
     (3.0, "auto", "3"), ("x #### 5", "auto", "5"), ("\\pi", "auto", "\\pi")],
)
def test_normalize_gold(value, style, expected):
    assert normalize_gold(value, style) == expected


@pytest.mark.parametrize("value,style", [("72", "gsm8k"), ("abc", "integer"), (2.5, "integer"), ("", "latex"), (None, "auto")])
def test_normalize_gold_rejects(value, style):
    with pytest.raises(ValueError):
        normalize_gold(value, style)


ADVERSARIAL = [
    "2^{2^{2^{2^{30}}}}", "10^{10^{10^{10}}}", "(10^{6})!", "{" * 450 + "1" + "}" * 450,
    "\\frac{1}{" * 60 + "1" + "}" * 60, "{" * 5000 + "1" + "}" * 5000,
]


def test_adversarial_answers_are_wrong_not_fatal():
    with Grader(timeout_s=1.0, workers=2) as adversarial_grader:
        grades = adversarial_grader.grade([f"\\boxed{{{a}}}" for a in ADVERSARIAL] + ["\\boxed{5}"], ["5"] * 7)
    assert [g.correct for g in grades] == [False] * 6 + [True]
    assert {g.status for g in grades[:3]} == {"timeout"}  # math-verify's own timeout in the worker
    assert grades[5].status == "error"  # longer than MAX_ANSWER_CHARS: never parsed


def test_watchdog_kills_a_hung_worker_and_goes_on():
    with WatchdogPool(time.sleep, workers=2, timeout_s=0.5) as pool:
        results = pool.map([0, 3600, 0, 0])
        assert [status for status, _ in results] == ["ok", "timeout", "ok", "ok"]
        assert pool.restarts == 1
        assert pool.map([0, 0]) == [("ok", None), ("ok", None)]  # the pool still works


def test_worker_crash_counts_as_error():
    with WatchdogPool(os._exit, workers=1, timeout_s=5.0) as pool:
        status, why = pool.map([3])[0]
    assert status == "error" and "exit code 3" in why


def test_worker_exception_counts_as_error():
    with WatchdogPool(int, workers=1, timeout_s=5.0) as pool:
        results = pool.map(["1", "x", "2"])
    assert results[0] == ("ok", 1) and results[2] == ("ok", 2)
    assert results[1][0] == "error" and results[1][1].startswith("ValueError")


def test_grader_from_a_thread_and_shared_grade_batch():
    out: list = []
    thread = threading.Thread(target=lambda: out.extend(grade_batch(["\\boxed{\\sqrt{4}}", "x"], ["2", "2"], workers=1)))
    thread.start()
    thread.join(timeout=120)
    assert out == [Grade(True, "\\sqrt{4}", "ok"), Grade(False, None, "no_answer")]


def test_grader_caches_repeated_pairs(grader):
    before = grader.stats["pool"]
    grades = grader.grade(["\\boxed{2\\sqrt{2}}"] * 8, ["\\sqrt{8}"] * 8)
    assert all(g.correct for g in grades)
    assert grader.stats["pool"] - before <= 1


def test_grader_rejects_mismatched_lengths(grader):
    with pytest.raises(ValueError):
        grader.grade(["a"], ["1", "2"])
