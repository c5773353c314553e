"""ASTRAL's difficulty prediction and DOTS draw (selectors.md §3 "Difficulty prediction", "Forward").

Two predictors, both NumPy over arrays the backend supplies:

* `head_predict` (`predictor=trained|checkpoint`): the authors' learned attention head
  (ASTRAL-Group/data-efficient-llm-rl `adaptive_difficulty_prediction/model.py`, trained offline by
  lze_bench.predictor). The backend projects every prompt's frozen encoder embedding once with the
  head's phi and psi (torch, lze_bench/predictor/head.py) and hands over phi, psi and the calibration
  MLP's weights; here: `base = softmax_j(<phi_i, psi_j> / sqrt(h)) . y_ref` (t_att = 1, the authors'),
  `T, b` from the MLP on (mean, unbiased std) of y_ref, `p = sigmoid(logit(clip(base)) / clip(T) + b)`.
* `kernel_predict` (`predictor=kernel`, lze-bench's default): the same mechanism with no learned parts:
  cosine similarity (`phi = psi = L2-normalize`, `h = 1`), softmax at temperature `t_att`, the
  calibration skipped.

Both end with the per-round least-squares recalibration on the reference prompts (not clipped to
[0, 1], as in the original: `teacher_utils.py` `predict`, LinearRegression on the refs).

Cost: O(m * ref_size * d) per call; rows are processed in chunks so memory
stays O(chunk * ref_size) whatever the pool size.
"""

from __future__ import annotations

import numpy as np

from lze_bench.api import top_k


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


def softmax_base(rows: np.ndarray, keys_scaled: np.ndarray, y_ref: np.ndarray) -> np.ndarray:
    """float64[m]: softmax_j(rows . keys_scaled[:, j]) . y_ref, float32 scores, chunked over rows."""
    y_ref32 = np.asarray(y_ref, dtype=np.float32)
    base = np.empty(rows.shape[0])
    for start in range(0, rows.shape[0], CHUNK_ROWS):
        scores = np.asarray(rows[start:start + CHUNK_ROWS], dtype=np.float32) @ keys_scaled  # [chunk, R]
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        base[start:start + CHUNK_ROWS] = (scores @ y_ref32).astype(np.float64) / scores.sum(axis=1, dtype=np.float64)
    return base


def calibrate(base: np.ndarray, y_ref: np.ndarray, calibration: np.ndarray) -> np.ndarray:
    """The head's group calibration: sigmoid(logit(clip(base, 1e-4, 1 - 1e-4)) / clip(T, .01, 10) + b).

    `calibration` float[52] = W1 [10, 2], b1 [10], W2 [2, 10], b2 [2] of MLP(2 -> 10 -> ReLU -> 2) on
    (mean(y_ref), std(y_ref, unbiased)); T = softplus(out_0), b = tanh(out_1). One reference: std 0 (ours;
    the original's unbiased std is NaN there).
    """
    weights = np.asarray(calibration, dtype=np.float64)
    w1, b1, w2, b2 = weights[:20].reshape(10, 2), weights[20:30], weights[30:50].reshape(2, 10), weights[50:52]
    y_ref = np.asarray(y_ref, dtype=np.float64)
    stats = np.array([y_ref.mean(), y_ref.std(ddof=1) if y_ref.size > 1 else 0.0])
    out = w2 @ np.maximum(w1 @ stats + b1, 0.0) + b2
    temperature = float(np.clip(np.logaddexp(0.0, out[0]), 1e-2, 10.0))
    clipped = np.clip(np.asarray(base, dtype=np.float64), 1e-4, 1 - 1e-4)
    logits = np.log(clipped) - np.log1p(-clipped)
    with np.errstate(over="ignore"):  # exp overflows to inf far below the threshold: the sigmoid is then 0, as it is
        return 1.0 / (1.0 + np.exp(-(logits / temperature + np.tanh(out[1]))))


def head_predict(query: np.ndarray, key_ref: np.ndarray, y_ref: np.ndarray, calibration: np.ndarray,
                 query_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, p_hat) float64[m] of the trained head for prompts with phi `query` [m, h].

    `key_ref` = psi of the reference prompts [R, h], `query_ref` = their phi (the head predicts the
    references too, and the fit y_ref ~ a * p[ref] + c recalibrates every prediction).
    """
    keys = (np.asarray(key_ref, dtype=np.float32).T / np.float32(np.sqrt(key_ref.shape[1])))  # [h, R]
    p = calibrate(softmax_base(query, keys, y_ref), y_ref, calibration)
    slope, intercept = recalibrate(calibrate(softmax_base(query_ref, keys, y_ref), y_ref, calibration), y_ref)
    return p, slope * p + intercept


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
    """float64[m]: 0-based ranks, ties sharing their mean rank (what Spearman's rho ranks).

    One argsort (ties may come in any order: they all get the group's mean), then the tie groups of the
    sorted values: a group spanning sorted positions [start, end) has mean rank (start + end - 1) / 2.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        return np.zeros(0)
    order = np.argsort(values)
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    ends = np.append(starts[1:], values.size)
    ranks = np.empty(values.size)
    ranks[order] = np.repeat((starts + ends - 1) / 2.0, ends - starts)
    return ranks


def prediction_metrics(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """{"mae", "spearman", "pearson"} of predicted vs measured pass rates (NaN where undefined)."""
    mae, rho = prediction_accuracy(predicted, measured)
    predicted = np.asarray(predicted, dtype=np.float64)
    measured = np.asarray(measured, dtype=np.float64)
    known = np.isfinite(predicted)
    if np.count_nonzero(known) < 2:
        return {"mae": mae, "spearman": rho, "pearson": float("nan")}
    a, b = predicted[known] - predicted[known].mean(), measured[known] - measured[known].mean()
    denom = float(np.sqrt(np.dot(a, a) * np.dot(b, b)))
    return {"mae": mae, "spearman": rho, "pearson": float(np.dot(a, b)) / denom if denom > 0 else float("nan")}


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
