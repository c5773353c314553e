"""Grade, grade_one, grade_batch and Grader: how a response becomes a verdict.

The order of the work, the verdict cache and the watchdog pool are described
in the package docstring (lze_bench/grading/__init__.py). Two grading modes
(GRADING_MODES) choose how the answer is read: `boxed` (extraction.py, the
default everywhere and the only one rewards use) and `math_verify`
(math_verify_extraction.py: math-verify's parse of the whole response, run
in the pool). The verdict on an extracted answer is the same in both.
"""

from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass

from lze_bench.grading.extraction import extract_answer
from lze_bench.grading.gold import normalize_gold
from lze_bench.grading.math_verify_extraction import MAX_RESPONSE_CHARS, extract_and_verify, pool_grade_response
from lze_bench.grading.verdicts import fast_verdict, math_verify_verdict, pool_grade

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 1000  # longer boxed answers are graded wrong unparsed (model answers are < 200)
GRADING_MODES = ("boxed", "math_verify")  # how the answer is read; the first is the default


def check_mode(mode: str) -> str:
    if mode not in GRADING_MODES:
        raise ValueError(f"unknown grading mode {mode!r} (choices: {', '.join(GRADING_MODES)})")
    return mode


@dataclass(frozen=True)
class Grade:
    correct: bool
    extracted: str | None  # the answer string that was graded
    status: str = "ok"  # ok | no_answer | timeout | error


def grade_one(response: str, gold, mode: str = "boxed") -> Grade:
    """In-process verdict: extraction, fast path, then math-verify in this process.

    No watchdog here: use a Grader (or grade_batch) for untrusted model output.
    """
    if check_mode(mode) == "math_verify":
        correct, status, extracted = extract_and_verify(response, normalize_gold(gold, "auto"))
        return Grade(correct, extracted, status)
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


def grade_batch(responses, golds, *, timeout_s: float = 5.0, workers: int = 0, mode: str = "boxed") -> list[Grade]:
    """Grade a batch with a shared, persistent Grader (one per (timeout_s, workers, mode))."""
    key = (float(timeout_s), int(workers), check_mode(mode))
    with _SHARED_LOCK:
        grader = _SHARED.get(key)
        if grader is None:
            grader = _SHARED[key] = Grader(timeout_s=timeout_s, workers=workers, mode=mode)
    return grader.grade(responses, golds)


_SHARED: dict[tuple[float, int, str], "Grader"] = {}
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

    def __init__(self, timeout_s: float = 5.0, workers: int = 0, mode: str = "boxed"):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.workers = int(workers)
        self.mode = check_mode(mode)
        self._pool = None
        # boxed: (answer, gold) -> (correct, status); math_verify: (response, gold) -> (correct, status, extracted)
        self._cache: dict[tuple[str, str], tuple] = {}
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
        if self.mode == "math_verify":
            return self._grade_responses(responses, golds)
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

    def _grade_responses(self, responses: list, golds: list) -> list[Grade]:
        """math_verify mode: every distinct (response, gold) not cached goes to the pool whole."""
        keys = [(r if isinstance(r, str) else "", normalize_gold(g, "auto")) for r, g in zip(responses, golds)]
        todo = {}
        for key in keys:
            if key in self._cache:
                continue
            if len(key[0]) > MAX_RESPONSE_CHARS:
                self._remember(key, (False, "error", None), "response longer than MAX_RESPONSE_CHARS")
            else:
                todo[key] = None
        if todo:
            self._run_pool(list(todo))
        out = [Grade(correct, extracted, status) for correct, status, extracted in (self._cache[k] for k in keys)]
        self.stats["no_answer"] += sum(g.status == "no_answer" for g in out)
        self.stats["graded"] += len(out)
        return out

    def _run_pool(self, keys: list[tuple[str, str]]) -> None:
        from lze_bench.grading.pool import WatchdogPool

        if self._pool is None:
            function = pool_grade_response if self.mode == "math_verify" else pool_grade
            self._pool = WatchdogPool(
                function, workers=self.workers, timeout_s=self.timeout_s + 2.0,
                preload=("lze_bench.grading.warmup",),
            )
        results = self._pool.map([(text, gold, self.timeout_s) for text, gold in keys])
        self.stats["pool"] += len(keys)
        no_text = (None,) if self.mode == "math_verify" else ()  # math_verify verdicts carry the extracted text
        for key, (status, value) in zip(keys, results):
            if status == "ok":
                self._remember(key, tuple(value), "math-verify " + value[1] if value[1] != "ok" else "")
            else:
                self._remember(key, (False, status, *no_text), f"grading worker {status}: {value}")

    def _remember(self, key: tuple[str, str], verdict: tuple, why: str) -> None:
        self._cache[key] = verdict
        if verdict[1] not in ("ok", "no_answer"):  # no answer is counted per response, where it is graded
            self.stats[verdict[1]] += 1
            logger.warning("graded wrong (%s): answer %.120r vs gold %.60r", why or verdict[1], key[0], key[1])
