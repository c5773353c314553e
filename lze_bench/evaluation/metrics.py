"""Benchmark metrics from per-sample verdicts: avg@n, unbiased pass@k, maj@k, their 95 % intervals, seed spread.

Input: `correct` bool[P, n] (P problems, n samples each) and, for maj@k, the
extracted answers str|None[P][n].

- avg@n: mean over problems of the fraction of correct samples (= accuracy
  for n = 1).
- pass@k: the unbiased estimator of Chen et al. 2021 ("Evaluating Large
  Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k), averaged
  over problems; computed as a running product to stay exact for large n.
- maj@k: majority vote over the first k samples; answers are grouped by their
  extracted string with whitespace removed (equivalent but differently written
  answers are separate votes: a choice, since a full equivalence clustering
  would need O(k^2) math-verify calls); ties go to the answer seen first;
  samples without an answer do not vote; a problem with no answer at all is wrong.

Intervals (95 %), one method for all three metrics. Each metric is the mean
over problems of a per-problem value v_i in [0, 1] (avg@n: the fraction of
correct samples; pass@k: the problem's unbiased estimate; maj@k: 0 or 1), and
problems are the independent units (the samples of one problem are not). The
interval is Wilson's score interval (Wilson 1927) for p = mean(v) at an
*effective* number of trials n_eff = p(1 - p) / (s^2 / P), s^2 the sample
variance (ddof 1) of v over the P problems: Kish's design effect, the Wilson
interval with an effective sample size recommended for clustered proportions
(Korn & Graubard 1998, Survey Methodology 24:193; Dean & Pagano 2015, J. Survey
Stat. Methodol. 3:484). Choices where those sources are silent:
- n_eff is clipped to [P, P·m], m = the independent trials a problem can hold:
  n for avg@n, floor(n / k) for pass@k (its disjoint k-sample blocks), 1 for
  maj@k, each times the number of seeds pooled (`summarize_seeds`). With a
  binary v (n = 1, maj@k of one seed) n_eff = P: exactly Wilson's interval of
  (correct problems) / P, method "wilson"; otherwise method "wilson_deff";
- at p = 0 or 1 (and with one problem) s^2 says nothing about how a problem's
  samples are correlated, so n_eff = P, the conservative end: 0 of P problems
  gives [0, z^2 / (P + z^2)], never a zero-width interval (the percentile
  bootstrap over problems used before gave [0, 0] there); s^2 = 0 with p
  strictly inside (0, 1) (every problem the same fraction) gives P·m.

Seeds (`eval.seeds`, `summarize_seeds`): the same problems sampled once per
seed. A metric's value is the mean over seeds (equal to the mean over problems
of each problem's seed-averaged value), reported with its per-seed values and
their standard deviation (ddof 1, the spread a re-run with another seed shows)
and the interval above on the seed-averaged per-problem values (m times the
number of seeds).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

Z95 = 1.959963984540054  # standard normal quantile 0.975


def avg_at_n(correct: np.ndarray) -> float:
    correct = _as_matrix(correct)
    return float(correct.mean(axis=1).mean()) if correct.size else float("nan")


def pass_at_k_one(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k(correct: np.ndarray, k: int) -> float:
    values = per_problem(correct, None, "pass", k)
    return float(values.mean()) if values.size else float("nan")


def majority_correct(answers: list[str | None], correct: list[bool]) -> bool:
    """Is the most frequent answer (first seen wins ties) a correct one?"""
    keys = ["".join(a.split()) if a is not None else None for a in answers]
    votes = Counter(key for key in keys if key is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(key for key in keys if key is not None and votes[key] == top)
    return bool(correct[keys.index(winner)])


def maj_at_k(answers: list[list[str | None]], correct: np.ndarray, k: int) -> float:
    values = per_problem(correct, answers, "maj", k)
    return float(values.mean()) if values.size else float("nan")


def per_problem(correct: np.ndarray, answers: list[list[str | None]] | None, metric: str, k: int = 1) -> np.ndarray:
    """float[P]: each problem's value of `metric` ("avg" | "pass" | "maj"; `answers` only for maj)."""
    correct = _as_matrix(correct)
    if metric == "avg":
        return correct.mean(axis=1) if correct.size else np.zeros(0)
    if metric == "pass":
        n = correct.shape[1]
        return np.array([pass_at_k_one(n, int(c), k) for c in correct.sum(axis=1)], dtype=float)
    if metric == "maj":
        return np.array([majority_correct(list(a[:k]), list(c[:k])) for a, c in zip(answers, correct)], dtype=float)
    raise ValueError(f"unknown metric {metric!r}")


def trials_per_problem(metric: str, n: int, k: int = 1) -> int:
    """m of the module docstring: independent trials one problem's samples can hold for `metric`."""
    return {"avg": n, "pass": n // k, "maj": 1}[metric]


def wilson(p: float, trials: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a proportion p over `trials` (which may be fractional: an effective count)."""
    if not trials > 0:
        return float("nan"), float("nan")
    denominator = 1 + z * z / trials
    center = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    low = 0.0 if p <= 0 else max(0.0, center - half)  # exact ends at p = 0 and 1 (no rounding residue)
    return low, 1.0 if p >= 1 else min(1.0, center + half)


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    return wilson(successes / trials, trials, z) if trials else (float("nan"), float("nan"))


def effective_trials(values: np.ndarray, max_per_problem: int) -> float:
    """n_eff of the module docstring, clipped to [P, P·max_per_problem]."""
    problems = values.size
    p = float(values.mean())
    variance = float(values.var(ddof=1)) if problems > 1 else 0.0
    if problems < 2 or p <= 0.0 or p >= 1.0:
        return float(problems)
    ceiling = float(problems * max(1, max_per_problem))
    if variance <= 0.0:
        return ceiling
    return min(max(p * (1 - p) / (variance / problems), float(problems)), ceiling)


def problem_interval(values: np.ndarray, max_per_problem: int) -> tuple[float, float, str]:
    """(low, high, method) of the 95 % interval of mean(values), values float[P] in [0, 1]."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan"), float("nan"), "wilson"
    binary = bool(np.all((values == 0) | (values == 1)))
    trials = float(values.size) if binary else effective_trials(values, max_per_problem)
    low, high = wilson(float(values.mean()), trials)
    return low, high, "wilson" if binary else "wilson_deff"


def summarize(correct: np.ndarray, answers: list[list[str | None]], ks: list[int]) -> dict:
    """Every metric of one benchmark run, as plain floats: accuracy (avg@n) with ci_low/ci_high/ci_method,
    pass@k and maj@k with `<metric>_ci_low` / `<metric>_ci_high` for each k."""
    return summarize_seeds([correct], [answers], ks)


def summarize_seeds(corrects: list[np.ndarray], answers: list[list[list[str | None]]], ks: list[int]) -> dict:
    """`summarize` over S seeds of the same problems (corrects: S x bool[P, n], rows in the same problem order).

    Each metric is the mean over seeds; with S > 1 also `<metric>_per_seed` (list) and `<metric>_std`
    (ddof 1); the interval is over the seed-averaged per-problem values (module docstring)."""
    corrects = [_as_matrix(c) for c in corrects]
    shapes = {c.shape for c in corrects}
    if len(shapes) != 1:
        raise ValueError(f"every seed must have the same problems and samples, got shapes {sorted(shapes)}")
    problems, n = corrects[0].shape
    seeds = len(corrects)
    out = {"num_problems": int(problems), "samples_per_problem": int(n)}
    metrics = [("accuracy", "avg", 1)] + [(f"{m}@{k}", m, k) for k in sorted(set(ks)) for m in ("pass", "maj")]
    for name, metric, k in metrics:
        values = np.array([per_problem(c, a, metric, k) for c, a in zip(corrects, answers)])  # float[S, P]
        per_seed = [float(v.mean()) if problems else float("nan") for v in values]
        low, high, method = problem_interval(values.mean(axis=0), seeds * trials_per_problem(metric, n, k))
        prefix = "" if name == "accuracy" else f"{name}_"
        out[name] = float(np.mean(per_seed))
        out[f"{prefix}ci_low"], out[f"{prefix}ci_high"] = low, high
        if name == "accuracy":
            out["ci_method"] = method
        if seeds > 1:
            out[f"{name}_per_seed"] = per_seed
            out[f"{name}_std"] = float(np.std(per_seed, ddof=1))
    return out


def _as_matrix(correct) -> np.ndarray:
    array = np.asarray(correct, dtype=bool)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(f"correct must be bool[problems, samples], got shape {array.shape}")
    return array
