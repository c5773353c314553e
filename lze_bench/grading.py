"""The one grading function: rewards in training and verdicts in evaluation.

Interface (stable; every backend and `lze-bench eval`/`grade` use it):

    extract_answer(response) -> str | None      the last \\boxed{...} (fallbacks below)
    grade_one(response, gold) -> Grade           in-process verdict
    grade_batch(responses, golds, timeout_s=, workers=) -> list[Grade]
    Grader(timeout_s=, workers=)                 a reusable pool (context manager)

A timeout or a parser error counts as wrong and is recorded in `Grade.status`,
never raised.

FIRST VERSION (foundation): grading runs in-process; the evaluation issue
replaces `grade_batch`/`Grader` with a process pool and per-answer timeouts.
"""

from __future__ import annotations

from dataclasses import dataclass

BOX_COMMANDS = ("\\boxed", "\\fbox")


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None  # the answer string that was graded
    status: str = "ok"  # ok | no_answer | timeout | error


def extract_answer(response: str) -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}` with balanced braces.

    Fallback: `\\boxed 5` (no braces, one token). No other fallback: a response
    without a boxed answer has no answer (graded wrong), which is the
    convention every prompt template states.
    """
    best = None
    for command in BOX_COMMANDS:
        start = response.rfind(command)
        if start < 0 or (best is not None and start < best[0]):
            continue
        content = _braced_after(response, start + len(command))
        if content is not None:
            best = (start, content)
    return None if best is None else best[1].strip()


def _braced_after(text: str, index: int) -> str | None:
    while index < len(text) and text[index] == " ":
        index += 1
    if index >= len(text):
        return None
    if text[index] != "{":
        token = text[index:].split()
        return token[0].rstrip(".$") if token else None
    depth = 0
    for position in range(index, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[index + 1 : position]
    return None  # unbalanced: no answer


def grade_one(response: str, gold: str) -> Grade:
    """Verify the extracted answer against the gold answer with math-verify."""
    from math_verify import parse, verify

    answer = extract_answer(response)
    if answer is None:
        return Grade(False, None, "no_answer")
    try:
        gold_parsed = parse(f"${gold}$")
        answer_parsed = parse(f"${answer}$")
        return Grade(bool(verify(gold_parsed, answer_parsed)), answer, "ok")
    except Exception:  # math-verify raised: count wrong, never crash a run
        return Grade(False, answer, "error")


def grade_batch(responses, golds, *, timeout_s: float = 5.0, workers: int = 0) -> list[Grade]:
    if len(responses) != len(golds):
        raise ValueError("responses and golds must have the same length")
    return [grade_one(r, g) for r, g in zip(responses, golds)]


class Grader:
    """A reusable grader; `with Grader() as g: g.grade(responses, golds)`."""

    def __init__(self, timeout_s: float = 5.0, workers: int = 0):
        self.timeout_s = timeout_s
        self.workers = workers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        return None

    def grade(self, responses, golds) -> list[Grade]:
        return grade_batch(responses, golds, timeout_s=self.timeout_s, workers=self.workers)
