"""ASTRAL's difficulty predictor: an attention head over frozen prompt embeddings (torch; selectors.md §3).

Source: github ASTRAL-Group/data-efficient-llm-rl at 59df918,
`adaptive_difficulty_prediction/model.py` (`build_projection`,
`RegressionHead`, `ResidualHead` with `scaling="group_logit_temp"`,
`FewShotRegressor`) and `rl_training/verl/verl/trainer/ppo/teacher_utils.py`
(the copy the RL trainer loads); paper arXiv 2506.05316 App. C.1. Our own
code, laid out so that `state_dict()` has the authors' key names and shapes
(`regressor.sim_head.query_proj.*`, `regressor.sim_head.ref_proj.*`,
`regressor.mlp.*`), which is what `checkpoint.py` reads and writes.

For query prompts with embeddings `q` [B, d] and reference prompts with
embeddings `r` [K, d] and measured pass rates `y` [B, K] (each query row may
have its own labels: during training, those of the model that measured it):

    phi, psi  = LayerNorm(d) -> Linear(d, h) -> GELU -> Dropout(0.1) -> Linear(h, h) -> GELU -> Dropout(0.1)
                -> Linear(h, h) -> LayerNorm(h)        (num_layers = 3, h = 896; separate weights)
    base      = softmax_j(<phi(q_i), psi(r_j)> / sqrt(h) / tau) . y_i      (tau = 1.0)
    T, b      = softplus, tanh of MLP(2 -> 10 -> ReLU -> 2)((mean_j y_ij, std_j y_ij))   (std unbiased)
    p_i       = sigmoid(logit(clamp(base_i, 1e-4, 1 - 1e-4)) / clamp(T, 0.01, 10) + b)

(The authors compute the scores with a batched matmul of the expanded
reference projections; `q @ r.T` is the same product.) The RL trainer then
recalibrates `p` linearly on the reference prompts (selectors.md §3 step 3);
that step is the selector's (`astral_predict.head_predict`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

HIDDEN = 896  # the authors' hidden size (run_train.sh / final_ds_teacher_replay.sh)
LAYERS = 3  # run_train.sh num_layers=3
CLAMP = 1e-4  # logit input clamp (model.py)
T_RANGE = (1e-2, 10.0)  # temperature clamp (model.py)
CALIBRATION_SIZE = 2 * 10 + 10 + 10 * 2 + 2  # packed MLP parameters, see `calibration_arrays`


def projection(input_size: int, hidden: int, num_layers: int, dropout: float = 0.1) -> nn.Sequential:
    """LayerNorm -> [Linear -> GELU -> Dropout] x (L-1) -> Linear -> LayerNorm (the authors' module order)."""
    layers: list[nn.Module] = [nn.LayerNorm(input_size)]
    for index in range(num_layers):
        layers.append(nn.Linear(input_size if index == 0 else hidden, hidden))
        if index < num_layers - 1:
            layers += [nn.GELU(), nn.Dropout(dropout)]
    layers.append(nn.LayerNorm(hidden))
    return nn.Sequential(*layers)


class AttentionHead(nn.Module):
    """phi (query_proj) and psi (ref_proj); `forward` gives the attention-weighted reference labels."""

    def __init__(self, input_size: int, hidden: int, num_layers: int):
        super().__init__()
        self.query_proj = projection(input_size, hidden, num_layers)
        self.ref_proj = projection(input_size, hidden, num_layers)

    def forward(self, query: torch.Tensor, ref: torch.Tensor, ref_values: torch.Tensor, tau: float = 1.0):
        q, r = self.query_proj(query), self.ref_proj(ref)  # [B, h], [K, h]
        scores = (q @ r.T) / math.sqrt(r.shape[-1]) / tau
        weights = torch.softmax(scores - scores.max(dim=-1, keepdim=True).values, dim=-1)
        return (weights * ref_values).sum(dim=-1)  # [B]


class CalibratedHead(nn.Module):
    """The attention head plus the group temperature/bias calibration (`scaling="group_logit_temp"`)."""

    def __init__(self, input_size: int, hidden: int, num_layers: int):
        super().__init__()
        self.sim_head = AttentionHead(input_size, hidden, num_layers)
        self.mlp = nn.Sequential(nn.Linear(2, 10), nn.ReLU(), nn.Linear(10, 2))

    def forward(self, query, ref, ref_values, tau: float = 1.0):
        base = self.sim_head(query, ref, ref_values, tau)
        stats = torch.stack([ref_values.mean(dim=-1), ref_values.std(dim=-1)], dim=-1)  # [B, 2], std unbiased
        temp_bias = self.mlp(stats)
        temperature = F.softplus(temp_bias[:, 0]).clamp(*T_RANGE)
        bias = torch.tanh(temp_bias[:, 1])
        return torch.sigmoid(torch.logit(base.clamp(CLAMP, 1 - CLAMP)) / temperature + bias)


class DifficultyHead(nn.Module):
    """The whole predictor; `state_dict()` keys are the authors' (`regressor.*`)."""

    def __init__(self, input_size: int, hidden: int = HIDDEN, num_layers: int = LAYERS):
        super().__init__()
        self.input_size, self.hidden, self.num_layers = int(input_size), int(hidden), int(num_layers)
        self.regressor = CalibratedHead(self.input_size, self.hidden, self.num_layers)

    def forward(self, query, ref, ref_values):
        """p float[B] for query embeddings [B, d], reference embeddings [K, d], labels [B, K] (or [K])."""
        ref_values = ref_values.expand(query.shape[0], -1) if ref_values.dim() == 1 else ref_values
        return self.regressor(query, ref, ref_values)

    @torch.no_grad()
    def project(self, embeddings: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
        """(phi, psi) float32[m, h] of embeddings [m, d] in eval mode: what the selector's NumPy side reads."""
        self.eval()
        device = next(self.parameters()).device
        queries, keys = [], []
        for start in range(0, len(embeddings), chunk):
            rows = torch.as_tensor(np.asarray(embeddings[start:start + chunk], dtype=np.float32), device=device)
            queries.append(self.regressor.sim_head.query_proj(rows).float().cpu().numpy())
            keys.append(self.regressor.sim_head.ref_proj(rows).float().cpu().numpy())
        empty = np.zeros((0, self.hidden), dtype=np.float32)
        return (np.concatenate(queries) if queries else empty), (np.concatenate(keys) if keys else empty)

    def calibration_arrays(self) -> np.ndarray:
        """float64[52]: the calibration MLP packed as W1 [10, 2], b1 [10], W2 [2, 10], b2 [2] (row-major)."""
        first, last = self.regressor.mlp[0], self.regressor.mlp[2]
        parts = [first.weight, first.bias, last.weight, last.bias]
        return np.concatenate([p.detach().double().cpu().numpy().reshape(-1) for p in parts])

    def projection_flops(self) -> int:
        """FLOPs of phi or psi on one embedding (2 per multiply-add of the Linear layers)."""
        d, h, layers = self.input_size, self.hidden, self.num_layers
        return 2 * (d * h + (layers - 1) * h * h)
