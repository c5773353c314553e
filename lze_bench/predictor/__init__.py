"""ASTRAL's trained difficulty predictor (selectors.md §3): the head, its training, its files, its cost.

The selector (lze_bench/selectors/astral.py) is NumPy only: it reads the head's projections of every
prompt and its calibration weights through the backend's FeatureFn (`features.HeadFeatures`). Torch
lives here:

    head.py        the attention head (authors' layout and state-dict keys)
    checkpoint.py  read / write heads in the authors' released format; encoder checks
    train.py       the authors' training recipe; held-out evaluation against the kernel
    encoder.py     frozen encoder embeddings: mean of the last hidden state over the raw question
    features.py    serve the head's arrays to the selector; the run's `offline_flops.json`

Labelling models and the cached build of `predictor=trained` are the local backend's
(lze_bench/backends/local/predictor.py). Offline compute (labelling rollouts, encoder passes, head
training) is not in any step's ledger row: the build counts it and the run directory records it in
`offline_flops.json`, which the report charges to ASTRAL in its `(+offline)` rows (selectors.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

OFFLINE_FILE = "offline_flops.json"


@dataclass
class AuthorsTraining:
    """The authors' head-training knobs (run_train.sh / train.py), shared by both backends' head builds
    (`HeadRecipe` here, `backends.openrlhf.head_build.HeadBuildConfig`)."""

    epochs: int = 20  # run_train.sh --epochs 20
    batch_size: int = 256  # run_train.sh batch_size=256
    ref_size: int = 256  # run_train.sh ref_size=256 (capped at ref_candidates)
    lr: float = 1e-3  # run_train.sh --lr 1e-3
    warmup_steps: int = 100  # train.py --warmup_steps default (capped at total // 10)
    hidden_size: int = 896  # run_train.sh hidden_size
    num_layers: int = 3  # run_train.sh num_layers=3
    seed: int = 1  # run_train.sh --seed 1


@dataclass
class HeadRecipe(AuthorsTraining):
    """How the local backend builds ASTRAL's head for `selector.predictor=trained` (cached, shared by runs).

    Labelling models (ours, standing in for the paper's public models, App. C.1): snapshots of a
    separate tiny warm start (its own init seed, never the policy's) at `labeler_steps`; the last
    snapshot is also the frozen encoder. Labelled questions: the run's train pool plus `sft_questions`
    of the task's sft split (never the held-out test split); `ref_candidates` of them are the reference
    candidates. Training: the authors' recipe (train.py).
    """

    labeler_seed: int = 1  # init seed of the labellers' warm start (the policy's is backend.init_seed)
    # snapshots used as labellers: the policy's warm-start recipe (backend.warmstart_steps=300) with another seed,
    # so the last is about as strong as the policy's start and the others weaker (150 steps alone: 8.5% held-out)
    labeler_steps: List[int] = field(default_factory=lambda: [150, 225, 300])
    sft_questions: int = 128  # sft-split questions labelled besides the train pool
    ref_candidates: int = 128  # labelled questions that serve as references (shared by every labeller)
    samples: int = 8  # responses per question per labeller (the trainer's n is the usual 8)
    val_fraction: float = 0.2  # labelled questions held out to compare trained head vs kernel

    def __post_init__(self):
        from lze_bench.config.schema import require

        require(len(self.labeler_steps) >= 1 and min(self.labeler_steps) > 0, "backend.predictor.labeler_steps",
                f"must be a non-empty list of positive warm-start steps, got {list(self.labeler_steps)}")
        for key in ("samples", "epochs", "batch_size", "ref_size", "hidden_size", "num_layers", "ref_candidates"):
            require(getattr(self, key) > 0, f"backend.predictor.{key}", f"must be > 0, got {getattr(self, key)}")
        require(self.sft_questions >= 0, "backend.predictor.sft_questions", "must be >= 0")
        require(0 <= self.val_fraction < 1, "backend.predictor.val_fraction", "must be in [0, 1)")
        require(self.lr > 0, "backend.predictor.lr", f"must be > 0, got {self.lr}")
