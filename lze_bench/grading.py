"""The one grading function: rewards in training and verdicts in evaluation.

Interface (stable; every backend and `lze-bench eval`/`grade` use it):

    extract_answer(response) -> str | None      the last complete \\boxed{...}
    grade_one(response, gold) -> Grade           in-process verdict (no pool)
    grade_batch(responses, golds, timeout_s=, workers=) -> list[Grade]
    Grader(timeout_s=, workers=)                 a reusable pool (context manager)
    normalize_gold(value, style)                 dataset gold -> the string graded against

A timeout or a parser error counts as wrong, is recorded in `Grade.status`
(ok | no_answer | timeout | error) and logged, never raised (design.md "Grading").

How a batch is graded (`Grader.grade`), cheapest first:
1. extraction (`extract_answer`), linear in the response length;
2. a verdict cache keyed by (gold, answer): RL groups repeat answers;
3. the exact fast path (`fast_verdict`, lze_bench/evaluation/verdicts.py):
   both sides plain numbers (integers, `10,000`, decimals, `\\frac{a}{b}`,
   `a/b`) of at most 40 characters are compared as exact fractions; a non-empty
   answer string identical to the gold string is correct. It decides only where
   math-verify gives the same verdict (equal numbers; two different exact
   rationals); unequal decimals are left to math-verify, which rounds. This
   path does bounded work, so it runs in-process even inside the training
   loop (integer-answer tasks: nearly every answer) and cannot hang;
4. everything else: math-verify `parse` + `verify` in a `WatchdogPool`
   (lze_bench/evaluation/pool.py: forkserver/spawn workers, never fork). Inside
   a worker's main thread math-verify's own SIGALRM timeouts stop slow Python
   code (one budget of timeout_s per answer, in whole seconds); the parent's
   watchdog kills a worker whose answer passes timeout_s + 2 s (a hang in C
   code that no signal interrupts, a crash) and restarts it. math-verify never runs in the calling process of a Grader,
   so one adversarial answer costs at most one timeout, never the run.

Choices where the spec is silent: an answer longer than MAX_ANSWER_CHARS is
graded wrong without parsing (status "error"); identical (gold, answer) pairs
share a verdict for the Grader's lifetime (timeouts included, so a policy that
repeats an adversarial answer does not pay the timeout n times).
"""

from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass

from lze_bench.evaluation.verdicts import fast_verdict, math_verify_verdict, pool_grade  # noqa: F401 (re-exported)

logger = logging.getLogger(__name__)

BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 1000  # longer boxed answers are graded wrong unparsed (model answers are < 200)
MAX_BOX_TRIES = 8  # boxed occurrences tried from the end: keeps extraction linear in the response


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None  # the answer string that was graded
    status: str = "ok"  # ok | no_answer | timeout | error


# --- extraction ----------------------------------------------------------------


def extract_answer(response: str) -> str | None:
    """The content of the last complete `\\boxed{...}` / `\\fbox{...}` (balanced braces).

    Fallbacks, in order: an earlier complete box when the last one is cut off
    (a truncated generation that re-states its answer) or empty (a response
    that echoes the prompt's "within \\boxed{}"); `\\boxed 5` (no braces, one
    token, trailing `.`/`$` dropped). At most the last MAX_BOX_TRIES boxes are
    tried, so the work stays linear in the response length. Nothing else: a response without a
    boxed answer has no answer (graded wrong), which is the convention every
    prompt template states; "Answer: X" lines are deliberately not read, so a
    policy is never rewarded for ignoring the format it was asked for.
    """
    if not isinstance(response, str):
        return None
    positions = []
    for command in BOX_COMMANDS:
        start = response.rfind(command)
        tries = 0
        while start >= 0 and tries < MAX_BOX_TRIES:
            positions.append((start, command))
            start = response.rfind(command, 0, start)
            tries += 1
    for start, command in sorted(positions, reverse=True)[:MAX_BOX_TRIES]:
        content = _braced_after(response, start + len(command))
        if content is not None and content.strip():
            return content.strip()
    return None


def _braced_after(text: str, index: int) -> str | None:
    while index < len(text) and text[index] == " ":
        index += 1
    if index >= len(text):
        return None
    if text[index] != "{":
        if text[index].isalpha():  # `\boxedfoo` is another command, not a box
            return None
        token = text[index:index + 200].split()
        return (token[0].rstrip(".$") or None) if token else None
    depth = 0
    for position in range(index, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[index + 1 : position]
    return None  # unbalanced: cut off


# --- gold answers --------------------------------------------------------------

GOLD_STYLES = ("auto", "gsm8k", "integer", "latex", "boxed")


def normalize_gold(value, style: str = "auto") -> str:
    """A dataset's gold answer as the string graded against (SOURCE.md of each dataset).

    gsm8k: the text after the last `####`, thousands commas removed (`#### 10,000` -> `10000`);
    integer (AIME, AMC): `"025"` -> `25`, `27.0` -> `27`; latex (MATH): stripped, outer `$` removed;
    boxed (a worked solution, MATH train): the last `\\boxed{}` of the text, via `extract_answer`;
    auto: a whole float -> integer, a string with `####` -> gsm8k, else latex.
    Raises ValueError (data.py adds file, line and field) when the value does not fit its style.
    """
    if style not in GOLD_STYLES:
        raise ValueError(f"unknown gold style {style!r} (choices: {', '.join(GOLD_STYLES)})")
    if value is None or isinstance(value, bool):
        raise ValueError(f"gold answer is {value!r}")
    if style == "auto":
        if isinstance(value, (int, float)):
            style = "integer" if float(value).is_integer() else "latex"
        else:
            style = "gsm8k" if "####" in str(value) else "latex"
    if style == "gsm8k":
        text = str(value)
        if "####" not in text:
            raise ValueError("no '#### <answer>' line in a GSM8K answer")
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    elif style == "boxed":
        text = extract_answer(str(value)) or ""
        if not text:
            raise ValueError("no \\boxed{} answer in the solution")
    elif style == "integer":
        try:
            number = float(str(value).strip().replace(",", ""))
        except ValueError:
            raise ValueError(f"expected an integer answer, got {value!r}") from None
        if not number.is_integer():
            raise ValueError(f"expected an integer answer, got {value!r}")
        text = str(int(number))
    else:
        text = str(value).strip()
        if len(text) >= 2 and text[0] == "$" and text[-1] == "$":
            text = text.strip("$").strip()
    if not text:
        raise ValueError("gold answer is empty")
    return text


def grade_one(response: str, gold) -> Grade:
    """In-process verdict: extraction, fast path, then math-verify in this process.

    No watchdog here: use a Grader (or grade_batch) for untrusted model output.
    """
    answer = extract_answer(response)
    if answer is None:
        return Grade(False, None, "no_answer")
    gold_text = normalize_gold(gold, "auto")
    if len(answer) > MAX_ANSWER_CHARS:
        return Grade(False, answer, "error")
    fast = fast_verdict(answer, gold_text)
    if fast is not None:
        return Grade(fast, answer, "ok")
    correct, status = math_verify_verdict(answer, gold_text)
    return Grade(correct, answer, status)


# --- batches -------------------------------------------------------------------------


def grade_batch(responses, golds, *, timeout_s: float = 5.0, workers: int = 0) -> list[Grade]:
    """Grade a batch with a shared, persistent Grader (one per (timeout_s, workers))."""
    key = (float(timeout_s), int(workers))
    with _SHARED_LOCK:
        grader = _SHARED.get(key)
        if grader is None:
            grader = _SHARED[key] = Grader(timeout_s=timeout_s, workers=workers)
    return grader.grade(responses, golds)


_SHARED: dict[tuple[float, int], "Grader"] = {}
_SHARED_LOCK = threading.Lock()


@atexit.register
def _close_shared() -> None:
    for grader in list(_SHARED.values()):
        grader.close()
    _SHARED.clear()


class Grader:
    """A reusable grader; `with Grader() as g: g.grade(responses, golds)`.

    The worker pool starts on the first answer that needs math-verify and is
    kept until `close()`, so a training loop pays its start-up once.
    `workers=0` means one per available core.
    """

    CACHE_MAX = 200_000

    def __init__(self, timeout_s: float = 5.0, workers: int = 0):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.workers = int(workers)
        self._pool = None
        self._cache: dict[tuple[str, str], tuple[bool, str]] = {}
        self._lock = threading.Lock()
        # graded: answers; fast / pool: distinct (answer, gold) pairs decided each way
        self.stats = {"graded": 0, "no_answer": 0, "fast": 0, "pool": 0, "timeout": 0, "error": 0}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def clear_cache(self) -> None:
        """Forget verdicts (the pool stays up): lets a benchmark time cold answers."""
        self._cache.clear()

    def worker_cpu_s(self) -> float:
        """CPU seconds the pool's workers have used (0 before the pool starts)."""
        return self._pool.cpu_seconds() if self._pool is not None else 0.0

    def grade(self, responses, golds) -> list[Grade]:
        responses, golds = list(responses), list(golds)
        if len(responses) != len(golds):
            raise ValueError("responses and golds must have the same length")
        with self._lock:
            return self._grade(responses, golds)

    def _grade(self, responses: list, golds: list) -> list[Grade]:
        if len(self._cache) > self.CACHE_MAX:  # bounded memory; never cleared mid-batch
            self._cache.clear()
        answers = [extract_answer(r) for r in responses]
        gold_texts = [normalize_gold(g, "auto") for g in golds]
        todo: dict[tuple[str, str], None] = {}
        for answer, gold in zip(answers, gold_texts):
            if answer is None or (answer, gold) in self._cache:
                continue
            if len(answer) > MAX_ANSWER_CHARS:
                self._remember((answer, gold), (False, "error"), "answer longer than MAX_ANSWER_CHARS")
                continue
            fast = fast_verdict(answer, gold)
            if fast is not None:
                self._cache[(answer, gold)] = (fast, "ok")
                self.stats["fast"] += 1
            else:
                todo[(answer, gold)] = None
        if todo:
            self._run_pool(list(todo))
        out = []
        for answer, gold in zip(answers, gold_texts):
            if answer is None:
                self.stats["no_answer"] += 1
                out.append(Grade(False, None, "no_answer"))
            else:
                correct, status = self._cache[(answer, gold)]
                out.append(Grade(correct, answer, status))
        self.stats["graded"] += len(out)
        return out

    def _run_pool(self, keys: list[tuple[str, str]]) -> None:
        from lze_bench.evaluation.pool import WatchdogPool

        if self._pool is None:
            self._pool = WatchdogPool(
                pool_grade, workers=self.workers, timeout_s=self.timeout_s + 2.0,
                preload=("lze_bench.evaluation.grading_warmup",),
            )
        results = self._pool.map([(answer, gold, self.timeout_s) for answer, gold in keys])
        self.stats["pool"] += len(keys)
        for key, (status, value) in zip(keys, results):
            if status == "ok":
                self._remember(key, value, "math-verify " + value[1] if value[1] != "ok" else "")
            else:
                self._remember(key, (False, status), f"grading worker {status}: {value}")

    def _remember(self, key: tuple[str, str], verdict: tuple[bool, str], why: str) -> None:
        self._cache[key] = verdict
        if verdict[1] != "ok":
            self.stats[verdict[1]] += 1
            logger.warning("graded wrong (%s): answer %.120r vs gold %.60r", why or verdict[1], key[0], key[1])
