"""Verdicts for one (answer, gold) pair: the exact fast path and math-verify.

Re-exported by lze_bench.grading, whose docstring says how a batch moves
through these two functions; the grading pool's workers run `pool_grade`.

`fast_verdict` decides only where math-verify's verdict is certain: equal
plain numbers, or two different exact rationals (integers, `10,000`,
`\\frac{a}{b}`, `a/b`, optionally with a leading `\\$`, a trailing
`\\text{unit}` or degree sign, which math-verify drops too); unequal decimals
go to math-verify, which rounds (`0.333333` equals `\\frac{1}{3}` there). An
answer string identical to the gold string is correct.

`math_verify_verdict` runs math-verify `parse` + `verify` with math-verify's
own SIGALRM timeouts, sharing one per-answer budget (see its docstring).
Parses are memoized per process (math-verify's own cache holds 20 entries; a
gold recurs once per sample).
"""

from __future__ import annotations

import re
import threading
import time
from fractions import Fraction
from itertools import product

FAST_MAX_CHARS = 40

# --- exact fast path -------------------------------------------------------------

_NUMBER = re.compile(r"^([+-]?)(\d{1,3}(?:,\d{3})+|\d*\.\d+|\d+\.?)$")
_FRAC = re.compile(r"^([+-]?)\\[dt]?frac\{([+-]?\d+)\}\{([+-]?\d+)\}$")
_SLASH = re.compile(r"^([+-]?)(\d+)/(\d+)$")
# Decorations math-verify drops around a number (checked against it in tests/test_grading.py):
# a leading dollar sign, a trailing unit in \text{}/\mbox{}, a trailing degree sign.
_DOLLAR = re.compile(r"^\\\$\s*")
_UNIT = re.compile(r"\s*\\(?:text|mbox)\{[A-Za-z ]*\}$")
_DEGREE = re.compile(r"\s*\^\s*(?:\\circ|\{\\circ\})$")


def _rational(text: str) -> tuple[Fraction, bool] | None:
    """(value, exact) for a plain number; exact is False when written as a decimal."""
    text = text.strip().strip("$").strip().replace("{,}", ",")
    if len(text) > FAST_MAX_CHARS:
        return None
    text = _DEGREE.sub("", _UNIT.sub("", _DOLLAR.sub("", text))).strip()
    match = _NUMBER.match(text)
    if match:
        body = match.group(2).replace(",", "").rstrip(".")
        value = Fraction(body or "0")
        return (-value if match.group(1) == "-" else value), "." not in body
    match = _FRAC.match(text) or _SLASH.match(text)
    if match and int(match.group(3)) != 0:
        value = Fraction(int(match.group(2)), int(match.group(3)))
        return (-value if match.group(1) == "-" else value), True
    return None


def fast_verdict(answer: str, gold: str) -> bool | None:
    """True/False where math-verify's verdict is certain without parsing; None otherwise."""
    if answer and answer.strip() == gold.strip():
        return True
    ours, theirs = _rational(answer), _rational(gold)
    if ours is None or theirs is None:
        return None
    if ours[0] == theirs[0]:
        return True
    return False if ours[1] and theirs[1] else None  # unequal decimals: math-verify rounds


# --- math-verify -------------------------------------------------------------------


def math_verify_verdict(answer: str, gold: str, timeout_s: float = 5.0) -> tuple[bool, str]:
    """(correct, status) from math-verify within one budget of `timeout_s` per answer.

    Every math-verify call (parse gold, parse answer, one verify per pair of
    parsed forms) gets the budget's remainder as its own SIGALRM timeout, in
    whole seconds and at least 1 (signal.alarm's unit), so one answer costs at
    most timeout_s + 1 s. Outside the main thread signals are unavailable:
    math-verify then runs without timeouts and the budget is only checked
    between calls (grade_one only; pool workers are always main threads).
    """
    from math_verify import parse
    from math_verify.errors import TimeoutException

    seconds = budget(timeout_s)
    try:
        gold_parsed = parse_gold(gold, seconds)
        answer_parsed = _parse_cached(answer, seconds, parse)
        return verify_parsed(gold_parsed, answer_parsed, seconds)
    except TimeoutException:
        return False, "timeout"
    except Exception:  # noqa: BLE001 - math-verify raised: count wrong, never crash a run
        return False, "error"


def budget(timeout_s: float):
    """`seconds()`: the budget's remainder as a SIGALRM timeout (whole seconds, >= 1; None off the main
    thread, where signals are unavailable); raises math-verify's TimeoutException once it is spent."""
    from math_verify.errors import TimeoutException

    deadline = time.monotonic() + timeout_s
    alarms = threading.current_thread() is threading.main_thread()

    def seconds() -> int | None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutException("grading budget spent")
        return max(1, int(left)) if alarms else None

    return seconds


def parse_gold(gold: str, seconds) -> list:
    """The gold string as math-verify parses it (`$gold$`, default extraction), memoized per process."""
    from math_verify import parse

    return _parse_cached(gold, seconds, parse)


def verify_parsed(gold_parsed: list, answer_parsed: list, seconds) -> tuple[bool, str]:
    """(correct, status): math-verify `verify` on every pair of parsed forms; correct if any pair matches.
    A pair whose comparison raises makes the status "error" unless another pair matches; a timeout raises."""
    from math_verify import verify
    from math_verify.errors import TimeoutException

    status = "ok"
    for gold_expr, answer_expr in product(gold_parsed, answer_parsed):
        try:
            if verify(gold_expr, answer_expr, timeout_seconds=seconds(), raise_on_error=True):
                return True, "ok"
        except TimeoutException:
            raise
        except Exception:  # noqa: BLE001 - one failed comparison; others may still match
            status = "error"
    return False, status


_PARSED: dict[str, list] = {}  # per process; bounded below
_PARSED_MAX = 8192


def _parse_cached(text: str, seconds, parse) -> list:
    """math-verify's own lru_cache holds 20 entries; golds recur per sample, so keep more."""
    hit = _PARSED.get(text)
    if hit is None:
        hit = parse(f"${text}$", parsing_timeout=seconds(), raise_on_error=True)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = hit
    return hit


def pool_grade(item: tuple[str, str, float]) -> tuple[bool, str]:
    """The function a pool worker runs for one (answer, gold, timeout_s)."""
    answer, gold, timeout_s = item
    return math_verify_verdict(answer, gold, timeout_s)
