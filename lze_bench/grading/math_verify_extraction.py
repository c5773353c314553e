"""Grading mode `math_verify`: math-verify reads the answer from the whole response (lighteval's rule).

The default mode, `boxed` (extraction.py), reads only the last `\\boxed{}`:
every prompt we train and evaluate with asks for one, and a reward must not
pay a policy for ignoring the format. A base model prompted few-shot, or an
instruct model trained on GSM8K-style outputs, ends with "The answer is 18."
or "#### 18", which `boxed` grades `no_answer`. This mode grades those the
way lighteval does, for evals (`eval.grading=math_verify`) and
`lze-bench grade --grading math_verify`; rewards always use `boxed`.

Source: math-verify 0.9 `parse(text, extraction_config, fallback_mode)` on the
whole response, with the extraction targets of lighteval's math metrics
(huggingface/lighteval `src/lighteval/metrics/metrics.py`, `pass_at_k_math`
and `g_pass_at_k_math`: `ExprExtractionConfig()` and
`LatexExtractionConfig(boxed_match_priority=0)`, "match boxed first"), and
`fallback_mode="first_match"`. math-verify then tries, in its own priority
order: a `\\boxed{}` answer; LaTeX or a plain expression after an anchor
("final answer is", "answer:", "####"); finally, without an anchor, the last
expression in the text.

Choices where the sources are silent:
- the gold answer is parsed and compared exactly as in `boxed` mode
  (verdicts.parse_gold, verify_parsed: math-verify `verify` with its
  defaults), so the two modes differ only in which answer is read;
- `Grade.extracted` is the text math-verify matched (the last element of
  `parse`'s result); an empty `parse` result is `no_answer`;
- the whole-response parse is regex and sympy work on untrusted text that can
  hang, so a Grader runs it only in its watchdog pool (pool.py), never in the
  calling process; it shares the answer's one budget of timeout_s with the
  verdict; a response longer than MAX_RESPONSE_CHARS is graded wrong unparsed
  (status "error");
- no fast path: which number math-verify would pick depends on its
  anchors, so no in-process shortcut can be certain to agree with it.
"""

from __future__ import annotations

MODE = "math_verify"
MAX_RESPONSE_CHARS = 100_000  # responses of a 32k-token generation are < 100k characters


def _extraction_config() -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]


def extract_and_verify(response: str, gold: str, timeout_s: float = 5.0) -> tuple[bool, str, str | None]:
    """(correct, status, extracted) for one whole response; status ok | no_answer | timeout | error."""
    from math_verify import parse
    from math_verify.errors import TimeoutException

    from lze_bench.grading.verdicts import budget, parse_gold, verify_parsed

    if not isinstance(response, str) or len(response) > MAX_RESPONSE_CHARS:
        return False, "error", None
    seconds = budget(timeout_s)
    try:
        parsed = parse(response, extraction_config=_extraction_config(), fallback_mode="first_match",
                       parsing_timeout=seconds(), raise_on_error=True)
        if not parsed:
            return False, "no_answer", None
        extracted = parsed[-1] if isinstance(parsed[-1], str) else None
        correct, status = verify_parsed(parse_gold(gold, seconds), parsed, seconds)
        return correct, status, extracted
    except TimeoutException:
        return False, "timeout", None
    except Exception:  # noqa: BLE001 - math-verify raised: count wrong, never crash a run
        return False, "error", None


def pool_grade_response(item: tuple[str, str, float]) -> tuple[bool, str, str | None]:
    """The function a pool worker runs for one (response, gold, timeout_s)."""
    response, gold, timeout_s = item
    return extract_and_verify(response, gold, timeout_s)
