"""ASTRAL's difficulty prediction and DOTS draw (selectors.md §3 "Difficulty prediction", "Forward").

The original predictor is a learned attention head over frozen embeddings
(ASTRAL-Group/data-efficient-llm-rl `adaptive_difficulty_prediction/model.py`);
lze-bench's default `kernel` predictor keeps its mechanism with no learned
parts: cosine similarity (`phi = psi = L2-normalize`, `h = 1`), softmax at
temperature `t_att` over the reference prompts, the calibration head skipped,
then the per-round least-squares recalibration on the reference prompts
(not clipped to [0, 1], as in the original).

Cost: O(m * ref_size * d) per call; rows are processed in chunks so memory
stays O(chunk * ref_size) whatever the pool size.
"""

from __future__ import annotations

import numpy as np

from lze_bench.selectors.base import top_k

CHUNK_ROWS = 8192  # rows of similarities held at once: 8192 x ref_size float32


def _normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)  # a zero embedding stays zero (similarity 0)


def attention_base(emb: np.ndarray, ref_emb: np.ndarray, y_ref: np.ndarray, t_att: float) -> np.ndarray:
    """base float64[m] = softmax_j(cos(e_i, e_ref_j) / t_att) . y_ref (step 1 of the spec).

    Similarities and softmax weights are float32 (cosines / t_att lie in
    [-1/t_att, 1/t_att]; the prediction error ~1e-7 is far below the DOTS
    temperature's resolution), which halves the O(m * ref_size * d) matmul
    and the O(m * ref_size) exp; one chunk of rows is converted at a time.
    """
    emb = np.asarray(emb)
    keys_scaled = (_normalize(np.asarray(ref_emb, dtype=np.float64)).T / t_att).astype(np.float32)  # [d, R]
    y_ref32 = np.asarray(y_ref, dtype=np.float32)
    base = np.empty(emb.shape[0])
    for start in range(0, emb.shape[0], CHUNK_ROWS):
        rows = _normalize(np.asarray(emb[start : start + CHUNK_ROWS], dtype=np.float64)).astype(np.float32)
        scores = rows @ keys_scaled  # float32[chunk, R]
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        base[start : start + CHUNK_ROWS] = (scores @ y_ref32).astype(np.float64) / scores.sum(axis=1, dtype=np.float64)
    return base


def recalibrate(base_ref: np.ndarray, y_ref: np.ndarray) -> tuple[float, float]:
    """(a, c) of the least-squares fit y_ref ~ a * base_ref + c; (0, mean y) when base_ref is constant."""
    base_ref = np.asarray(base_ref, dtype=np.float64)
    y_ref = np.asarray(y_ref, dtype=np.float64)
    centered = base_ref - base_ref.mean()
    variance = float(np.dot(centered, centered))
    if variance == 0.0 or float(np.ptp(base_ref)) == 0.0:  # a constant base (its float mean may not be exact)
        return 0.0, float(y_ref.mean())
    slope = float(np.dot(centered, y_ref - y_ref.mean())) / variance
    return slope, float(y_ref.mean() - slope * base_ref.mean())


def kernel_predict(emb, ref_emb, y_ref, t_att: float) -> tuple[np.ndarray, np.ndarray]:
    """(base, p_hat) float64[m] for prompts with embeddings `emb` from a measured reference set."""
    base = attention_base(emb, ref_emb, y_ref, t_att)
    slope, intercept = recalibrate(attention_base(ref_emb, ref_emb, y_ref, t_att), y_ref)
    return base, slope * base + intercept


def dots_draw(p_hat: np.ndarray, count: int, alpha: float, tau: float, rng: np.random.Generator) -> np.ndarray:
    """Positions of `count` draws without replacement from softmax(-|p_hat - alpha| / tau).

    Gumbel-top-k (one `rng.gumbel(size=m)` vector in input order); the result
    is in draw order, i.e. descending perturbed key (ties by position).
    """
    logits = -np.abs(np.asarray(p_hat, dtype=np.float64) - alpha) / tau
    return top_k(logits + rng.gumbel(size=logits.size), count)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """float64[m]: 0-based ranks, ties sharing their mean rank (what Spearman's rho ranks)."""
    _, inverse, counts = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + ends - 1) / 2.0)[inverse]


def prediction_accuracy(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(mean absolute error, Spearman's rho) of predicted vs measured pass rates over the finite predictions.

    NaN when nothing was predicted; rho is NaN with fewer than 2 points or a
    constant side (no ranking to compare).
    """
    predicted = np.asarray(predicted, dtype=np.float64)
    measured = np.asarray(measured, dtype=np.float64)
    known = np.isfinite(predicted)
    if not known.any():
        return float("nan"), float("nan")
    predicted, measured = predicted[known], measured[known]
    mae = float(np.abs(predicted - measured).mean())
    if predicted.size < 2:
        return mae, float("nan")
    a, b = average_ranks(predicted), average_ranks(measured)
    a -= a.mean()
    b -= b.mean()
    denom = float(np.sqrt(np.dot(a, a) * np.dot(b, b)))
    return mae, (float(np.dot(a, b)) / denom if denom > 0 else float("nan"))
