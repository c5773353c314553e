"""The one grading function: rewards in training and verdicts in evaluation.

Interface (stable; every backend and `lze-bench eval`/`grade` use it):

    extract_answer(response) -> str | None      the last complete \\boxed{...}
    grade_one(response, gold, mode=) -> Grade    in-process verdict (no pool)
    grade_batch(responses, golds, timeout_s=, workers=, mode=) -> list[Grade]
    Grader(timeout_s=, workers=, mode=)          a reusable pool (context manager)
    normalize_gold(value, style)                 dataset gold -> the string graded against

`mode` (GRADING_MODES) says how the answer is read: "boxed" (default; the
only mode training rewards use) or "math_verify" (math_verify_extraction.py:
math-verify's own parse of the whole response, as lighteval grades, for
evals of base models and GSM8K-style "The answer is 18." / "#### 18").

A timeout or a parser error counts as wrong, is recorded in `Grade.status`
(ok | no_answer | timeout | error) and logged, never raised (design.md "Grading").

How a batch is graded (`Grader.grade`, mode "boxed"), cheapest first:
1. extraction (`extract_answer`), linear in the response length;
2. a verdict cache keyed by (gold, answer): RL groups repeat answers;
3. the exact fast path (`fast_verdict`, verdicts.py):
   both sides plain numbers (integers, `10,000`, decimals, `\\frac{a}{b}`,
   `a/b`) of at most 40 characters are compared as exact fractions; a non-empty
   answer string identical to the gold string is correct. It decides only where
   math-verify gives the same verdict (equal numbers; two different exact
   rationals); unequal decimals are left to math-verify, which rounds. This
   path does bounded work, so it runs in-process even inside the training
   loop (integer-answer tasks: nearly every answer) and cannot hang;
4. everything else: math-verify `parse` + `verify` in a `WatchdogPool`
   (pool.py: forkserver/spawn workers, never fork). Inside
   a worker's main thread math-verify's own SIGALRM timeouts stop slow Python
   code (one budget of timeout_s per answer, in whole seconds); the parent's
   watchdog kills a worker whose answer passes timeout_s + 2 s (a hang in C
   code that no signal interrupts, a crash) and restarts it. math-verify never runs in the calling process of a Grader,
   so one adversarial answer costs at most one timeout, never the run.

Choices where the spec is silent: an answer longer than MAX_ANSWER_CHARS is
graded wrong without parsing (status "error"); identical (gold, answer) pairs
share a verdict for the Grader's lifetime (timeouts included, so a policy that
repeats an adversarial answer does not pay the timeout n times).

Modules, each below the one that uses it:

    extraction.py   response -> answer string (strict \\boxed{}): mode "boxed"
    math_verify_extraction.py   mode "math_verify": math-verify parses the whole response (pool only)
    gold.py         dataset gold -> the string graded against (normalize_gold)
    verdicts.py     one (answer, gold) pair: the exact fast path, math-verify
    pool.py         WatchdogPool: the process pool math-verify runs in
    warmup.py       preloaded by the pool's fork server (imports math-verify, warms its parser)
    grader.py       Grade, grade_one, grade_batch, Grader: the steps above in order

This package imports nothing else from lze_bench: data loading, tasks,
evaluation, the backends and `lze-bench grade` all sit above it
(tests/test_layout.py checks the direction).
"""

from lze_bench.grading.extraction import BOX_COMMANDS, MAX_BOX_TRIES, extract_answer
from lze_bench.grading.gold import GOLD_STYLES, normalize_gold
from lze_bench.grading.grader import GRADING_MODES, MAX_ANSWER_CHARS, Grade, Grader, grade_batch, grade_one
from lze_bench.grading.verdicts import fast_verdict, math_verify_verdict, pool_grade

__all__ = [
    "BOX_COMMANDS", "GOLD_STYLES", "GRADING_MODES", "MAX_ANSWER_CHARS", "MAX_BOX_TRIES", "Grade", "Grader",
    "extract_answer",
    "fast_verdict", "grade_batch", "grade_one", "math_verify_verdict", "normalize_gold", "pool_grade",
]
