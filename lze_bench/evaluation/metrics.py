"""Benchmark metrics from per-sample verdicts: avg@n, unbiased pass@k, maj@k, CIs.

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
- confidence interval (95 %): for n = 1 the Wilson score interval of a
  binomial proportion (Wilson 1927); for n > 1 a percentile bootstrap over
  problems (samples of one problem are not independent), 2000 resamples, seeded.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

Z95 = 1.959963984540054  # standard normal quantile 0.975
BOOTSTRAP_RESAMPLES = 2000


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
    correct = _as_matrix(correct)
    n = correct.shape[1]
    return float(np.mean([pass_at_k_one(n, int(c), k) for c in correct.sum(axis=1)])) if correct.size else float("nan")


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
    correct = _as_matrix(correct)
    if not correct.size:
        return float("nan")
    return float(np.mean([majority_correct(list(a[:k]), list(c[:k])) for a, c in zip(answers, correct)]))


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    if trials == 0:
        return float("nan"), float("nan")
    p = successes / trials
    denominator = 1 + z * z / trials
    center = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def bootstrap_interval(per_problem: np.ndarray, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    per_problem = np.asarray(per_problem, dtype=float)
    if per_problem.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, per_problem.size, size=(resamples, per_problem.size))
    means = per_problem[picks].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def accuracy_interval(correct: np.ndarray, seed: int = 0) -> tuple[float, float, str]:
    """(low, high, method) of the 95 % interval of avg@n."""
    correct = _as_matrix(correct)
    if correct.shape[1] == 1:
        low, high = wilson_interval(int(correct.sum()), correct.shape[0])
        return low, high, "wilson"
    low, high = bootstrap_interval(correct.mean(axis=1), seed=seed)
    return low, high, "bootstrap"


def summarize(correct: np.ndarray, answers: list[list[str | None]], ks: list[int], seed: int = 0) -> dict:
    """Every metric of one benchmark run, as plain floats."""
    correct = _as_matrix(correct)
    low, high, method = accuracy_interval(correct, seed=seed)
    out = {
        "num_problems": int(correct.shape[0]),
        "samples_per_problem": int(correct.shape[1]),
        "accuracy": avg_at_n(correct),
        "ci_low": low,
        "ci_high": high,
        "ci_method": method,
    }
    for k in sorted(set(ks)):
        out[f"pass@{k}"] = pass_at_k(correct, k)
        out[f"maj@{k}"] = maj_at_k(answers, correct, k)
    return out


def _as_matrix(correct) -> np.ndarray:
    array = np.asarray(correct, dtype=bool)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(f"correct must be bool[problems, samples], got shape {array.shape}")
    return array
