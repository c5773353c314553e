"""Preloaded by the grading pool's fork server: import math-verify and warm its parser.

Importing sympy + math-verify takes ~0.5 s and the first LaTeX parse ~0.5 s
more (ANTLR builds its DFA lazily). The fork server imports this module once,
so every worker it forks, including one restarted by the watchdog after a
hang, starts with both done. Importing it anywhere else costs the same ~1 s
and changes nothing else, which is why it is its own module.
"""

from __future__ import annotations

from lze_bench.grading.math_verify_extraction import extract_and_verify
from lze_bench.grading.verdicts import math_verify_verdict

# Forms that exercise the grammar's common paths (numbers, fractions, roots, tuples, intervals).
_WARM = ("42", "\\frac{1}{2}", "2\\sqrt{3}", "\\left( 3, \\frac{\\pi}{2} \\right)", "[1, 2)", "x^2+1", "10\\%")

for _text in _WARM:
    math_verify_verdict(_text, _text, timeout_s=3.0)
extract_and_verify("so the final answer is $\\frac{1}{2}$. The answer is 42.", "42", timeout_s=3.0)  # mode math_verify
