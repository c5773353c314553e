"""Train ASTRAL's difficulty head on pass rates measured by other models (selectors.md §3; paper App. C.1).

Recipe: ASTRAL-Group/data-efficient-llm-rl at 59df918, `adaptive_difficulty_prediction/run_bash/run_train.sh`
and `train.py` (`train_full_epoch`): binary cross-entropy on the measured pass rate, Adam lr 1e-3, a linear
warm-up over min(100, total_steps // 10) steps then linear decay to 0 (`get_linear_schedule_with_warmup`),
20 epochs, 256 labelled questions per batch (shuffled, the last batch kept), and for every batch 256
reference questions drawn without replacement from the reference candidates, shared by the batch; each
row's reference labels are those of the model that measured the row (`TeacherDataset.load_train_data`).
Dropout is on while training (`model.train()`).

Choices where the source is silent (ours): the draws come from `torch.Generator` / `numpy` seeded by the
recipe's `seed`, so a head is reproducible; a share `val_fraction` of the labelled questions is held out
(never a query while training) to measure the head against the kernel on the same references
(`evaluate`): MAE, Spearman and Pearson of the recalibrated prediction, as the RL trainer uses it.

FLOPs (booked as offline compute by the caller): forward = phi on the batch's queries + psi on its
references (`projection_flops` each) + the scores and the weighted sum (2·B·K·(h + 1)); training counts
3x forward per batch (forward + backward), as the policy's update does (lze_bench.flops).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from lze_bench.predictor.head import DifficultyHead
from lze_bench.selectors.astral_predict import head_predict, kernel_predict, prediction_metrics


@dataclass
class LabelSet:
    """Embeddings of labelled questions and the pass rates each labelling model measured on them."""

    embeddings: np.ndarray  # float32[Q, d] frozen encoder embeddings
    rates: np.ndarray  # float32[M, Q] pass rate of question q by model m
    ref: np.ndarray  # int64[R] the reference candidates (indices into the questions)
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # held-out query questions


@dataclass
class TrainRecipe:
    epochs: int = 20  # run_train.sh --epochs 20
    batch_size: int = 256  # run_train.sh batch_size=256
    ref_size: int = 256  # run_train.sh ref_size=256
    lr: float = 1e-3  # run_train.sh --lr 1e-3
    warmup_steps: int = 100  # train.py default --warmup_steps 100 (capped at total // 10)
    hidden_size: int = 896  # run_train.sh / the RL script's TEACHER_MODEL_HIDDEN_SIZE
    num_layers: int = 3  # run_train.sh num_layers=3
    seed: int = 1  # run_train.sh --seed 1


def lr_factor(step: int, warmup: int, total: int) -> float:
    """`get_linear_schedule_with_warmup`: step / warmup, then (total - step) / (total - warmup), floor 0."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def batch_flops(head: DifficultyHead, rows: int, refs: int) -> int:
    """FLOPs of one forward over `rows` queries against `refs` references."""
    return (rows + refs) * head.projection_flops() + 2 * rows * refs * (head.hidden + 1)


def train_head(labels: LabelSet, recipe: TrainRecipe, log=None) -> tuple[DifficultyHead, dict]:
    """(the trained head in eval mode, {"flops", "losses", "steps"})."""
    torch.manual_seed(recipe.seed)
    models, questions = labels.rates.shape
    train_q = np.setdiff1d(np.arange(questions), labels.val)
    pairs = np.stack(np.meshgrid(np.arange(models), train_q, indexing="ij"), -1).reshape(-1, 2)  # (model, question)
    head = DifficultyHead(labels.embeddings.shape[1], recipe.hidden_size, recipe.num_layers)
    optimizer = torch.optim.Adam(head.parameters(), lr=recipe.lr)
    batches = -(-len(pairs) // recipe.batch_size)
    total = batches * recipe.epochs
    warmup = min(recipe.warmup_steps, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, warmup, total))
    emb = torch.as_tensor(labels.embeddings, dtype=torch.float32)
    rates = torch.as_tensor(labels.rates, dtype=torch.float32)
    rng = np.random.default_rng([recipe.seed, 7])
    ref_size = min(recipe.ref_size, labels.ref.size)
    flops, losses = 0, []
    head.train()
    for epoch in range(recipe.epochs):
        order = rng.permutation(len(pairs))
        epoch_loss = 0.0
        for start in range(0, len(pairs), recipe.batch_size):
            rows = pairs[order[start:start + recipe.batch_size]]
            ref = torch.as_tensor(labels.ref[rng.choice(labels.ref.size, ref_size, replace=False)])
            model_idx, query_idx = torch.as_tensor(rows[:, 0]), torch.as_tensor(rows[:, 1])
            pred = head(emb[query_idx], emb[ref], rates[model_idx][:, ref])
            loss = torch.nn.functional.binary_cross_entropy(pred, rates[model_idx, query_idx])
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            flops += 3 * batch_flops(head, len(rows), ref_size)
            epoch_loss += float(loss.detach()) / batches
        losses.append(epoch_loss)
        if log is not None:
            log(epoch, epoch_loss)
    return head.eval(), {"flops": int(flops), "losses": losses, "steps": int(total)}


def evaluate(head: DifficultyHead, labels: LabelSet, recipe: TrainRecipe, t_att: float = 0.1) -> dict:
    """Held-out questions, each labelling model in turn: trained head vs the cosine kernel, same references.

    Both predictions are recalibrated on the references as the RL trainer does. Returns
    {"trained": {mae, spearman, pearson}, "kernel": {...}, "questions": k, "models": M} (metrics pooled
    over models).
    """
    if labels.val.size == 0:
        return {}
    rng = np.random.default_rng([recipe.seed, 11])
    ref = labels.ref[rng.choice(labels.ref.size, min(recipe.ref_size, labels.ref.size), replace=False)]
    query, key = head.project(labels.embeddings)
    calibration = head.calibration_arrays()
    predicted = {"trained": [], "kernel": []}
    measured = []
    for rates in labels.rates.astype(np.float64):
        predicted["trained"].append(head_predict(query[labels.val], key[ref], rates[ref], calibration,
                                                 query[ref])[1])
        predicted["kernel"].append(kernel_predict(labels.embeddings[labels.val], labels.embeddings[ref], rates[ref],
                                                  t_att)[1])
        measured.append(rates[labels.val])
    truth = np.concatenate(measured)
    out = {name: prediction_metrics(np.concatenate(values), truth) for name, values in predicted.items()}
    return {**out, "questions": int(labels.val.size), "models": int(labels.rates.shape[0])}
