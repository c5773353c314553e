"""ASTRAL difficulty heads on disk, in the authors' format (selectors.md §3, `predictor=checkpoint`).

Format (ASTRAL-Group/data-efficient-llm-rl at 59df918: `adaptive_difficulty_prediction/train.py` saves it,
`rl_training/verl/verl/trainer/ppo/teacher_utils.py` `TeacherModelWorker.init_model` loads it): one
`torch.save` of a dict

    model_state_dict   every parameter; the head is the `regressor.*` entries
                       (regressor.sim_head.query_proj.{0,1,4,7,8}.*, .ref_proj.*, regressor.mlp.{0,2}.*)
    config             the training recipe, including `model_name` (the frozen encoder), `hidden_size`,
                       `num_layers`, `scaling` ("group_logit_temp")
    train_metrics      losses per epoch

`save_head` writes exactly that (plus `config["lze_bench"]`: what lze-bench adds: the encoder's embedding
width, the labelers, the offline FLOPs), so a head trained here loads in the authors' trainer and a head
released by the authors loads here. `load_head` refuses, in one line each: a file without `regressor.*`
weights, another scaling, weights whose shapes do not form the head, and a head whose encoder differs
from the one the run embeds with (by name when the file records one, and always by embedding width).
Loading uses `torch.load(weights_only=True)`: no pickled code runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from lze_bench.errors import LzeBenchError
from lze_bench.predictor.head import DifficultyHead

PREFIX = "regressor."
QUERY_NORM = "regressor.sim_head.query_proj.0.weight"  # LayerNorm(d): its length is the encoder's width


def save_head(head: DifficultyHead, path: str | os.PathLike, *, encoder: str, config: dict | None = None,
              metrics: dict | None = None) -> Path:
    """Write `head` in the authors' format (atomic rename); `encoder` is recorded as `config["model_name"]`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "model_state_dict": {key: value.detach().cpu() for key, value in head.state_dict().items()},
        "config": {**(config or {}), "model_name": str(encoder), "hidden_size": head.hidden,
                   "num_layers": head.num_layers, "scaling": "group_logit_temp", "tau": 1.0,
                   "has_embeddings": True, "method": "residual"},
        "train_metrics": metrics or {},
    }
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(body, tmp)
    os.replace(tmp, path)
    return path


def read_head(path: str | os.PathLike) -> tuple[DifficultyHead, dict]:
    """(head in eval mode, the file's config) from a head file; shapes checked, encoder not yet."""
    path = Path(path)
    if not path.exists():
        raise LzeBenchError(f"selector.predictor_path={str(path)!r}: no such file; pass an ASTRAL head "
                            "(adaptive_difficulty_prediction_model_*.pt or one written by `lze-bench predictor`)")
    try:
        body = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a foreign or truncated file: one line
        raise LzeBenchError(f"{path}: not a readable ASTRAL head ({str(exc).splitlines()[0]})") from exc
    if not isinstance(body, dict) or not isinstance(body.get("model_state_dict"), dict):
        raise LzeBenchError(f"{path}: no 'model_state_dict' entry; an ASTRAL head file is a dict with one")
    state = {k[len(PREFIX):]: v for k, v in body["model_state_dict"].items() if k.startswith(PREFIX)}
    if f"{QUERY_NORM[len(PREFIX):]}" not in state:
        raise LzeBenchError(f"{path}: no '{QUERY_NORM}' weights; not an ASTRAL attention head")
    config = dict(body.get("config") or {})
    scaling = config.get("scaling", "group_logit_temp")
    if scaling != "group_logit_temp":
        raise LzeBenchError(f"{path}: scaling={scaling!r}; lze-bench runs ASTRAL's 'group_logit_temp' head only")
    linears = sorted(int(k.split(".")[2]) for k, v in state.items()
                     if k.startswith("sim_head.query_proj.") and k.endswith(".weight") and v.dim() == 2)
    input_size = int(state[QUERY_NORM[len(PREFIX):]].shape[0])
    hidden = int(state[f"sim_head.query_proj.{linears[0]}.weight"].shape[0]) if linears else 0
    head = DifficultyHead(input_size, hidden, len(linears))
    try:
        head.regressor.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise LzeBenchError(f"{path}: the regressor.* weights do not form an ASTRAL head "
                            f"({str(exc).splitlines()[0]})") from exc
    return head.eval(), config


def load_head(path: str | os.PathLike, *, encoder: str, embedding_dim: int) -> tuple[DifficultyHead, dict]:
    """The head of `path`, checked against the encoder the run embeds prompts with (name and width)."""
    head, config = read_head(path)
    recorded = config.get("model_name")
    if recorded is not None and str(recorded) != str(encoder):
        raise LzeBenchError(f"{path}: this head was trained on embeddings of {recorded!r}, not {encoder!r}; "
                            f"set selector.predictor_encoder={recorded} (or train a head for {encoder!r})")
    if head.input_size != int(embedding_dim):
        raise LzeBenchError(f"{path}: this head takes {head.input_size}-dim embeddings, but encoder {encoder!r} "
                            f"gives {embedding_dim}; use the encoder it was trained with")
    return head, config
