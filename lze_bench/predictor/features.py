"""Serve ASTRAL's learned head to the NumPy selector, and record its offline cost in the run directory.

`serve_head(...)` (a backend calls it once, at setup, for `selector=astral` with
`predictor=trained|checkpoint`; the local backend: backends/local/predictor.py) loads the head (refused
unless it was trained with the run's encoder), embeds every train prompt with the frozen encoder, projects the embeddings with the head's phi and psi once (they are
fixed functions of fixed embeddings; the authors recompute them every round), and returns the backend's
FeatureFn extended with `head_query`, `head_key`, `head_embedding` and `head_calibration`
(selectors/astral.py).

`<run_dir>/offline_flops.json` records what was spent outside the training steps, in FLOPs:
    labeling   labelling rollouts (generation F(prompt + response) per sample)      (trained)
    encoder    encoder forwards: the labelled questions (trained) + this run's prompts, and the two
               projections of this run's prompts
    training   the head's training, 3x forward per batch                            (trained)
    total      their sum
A `checkpoint` head was trained elsewhere: its labelling and training cost is unknown here and recorded as
null (only this run's encoder passes are counted). None of it is in the ledger, whose FLOPs are the
online compute the paper compares at; the report charges it separately ("offline charged").
The per-round attention over the references is NumPy in the selector and uncounted, like the kernel's.
"""

from __future__ import annotations

import numpy as np

from lze_bench.predictor import OFFLINE_FILE
from lze_bench.rundir import atomic_write_json


class HeadFeatures:
    """The backend's FeatureFn plus the head's arrays, indexed by prompt id; anything else goes to `inner`."""

    def __init__(self, inner, embedding: np.ndarray, query: np.ndarray, key: np.ndarray, calibration: np.ndarray):
        self.__dict__.update(inner=inner, arrays={"head_embedding": embedding, "head_query": query,
                                                  "head_key": key}, calibration=calibration)

    def __call__(self, name, ids):
        if name == "head_calibration":
            return self.calibration
        if name in self.arrays:
            return self.arrays[name][np.asarray(ids, dtype=np.int64)]
        return self.inner(name, ids)

    def __getattr__(self, name):  # take_costs, embeddings_charged, ...: the backend's own
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)


def serve_head(path, encoder, questions: list[str], inner, run_dir, predictor: str, built: dict) -> HeadFeatures:
    """The FeatureFn for a learned-head ASTRAL run; writes `<run_dir>/offline_flops.json`.

    `path`: the head file (refused unless trained with `encoder`); `built`: the build's info (labellers,
    FLOPs, validation) when lze-bench trained it, {} for a checkpoint trained elsewhere.
    """
    from pathlib import Path

    from lze_bench.predictor.checkpoint import load_head

    head, config = load_head(path, encoder=encoder.name, embedding_dim=encoder.width)
    embedding, encoder_flops = encoder.embed(questions)
    query, key = head.project(embedding)
    spent = built.get("flops", {})
    flops = {
        "labeling": spent.get("labeling"),
        "encoder": int(spent.get("encoder", 0)) + encoder_flops + 2 * len(questions) * head.projection_flops(),
        "training": spent.get("training"),
    }
    flops["total"] = int(sum(v for v in flops.values() if v is not None))
    atomic_write_json(Path(run_dir) / OFFLINE_FILE, {
        "predictor": predictor, "head": str(path), "encoder": encoder.name, "flops": flops,
        "labelers": built.get("labelers", config.get("lze_bench", {}).get("labelers")),
        "questions_labeled": built.get("questions"), "validation": built.get("validation"),
        "time_s": built.get("time_s"), "labeler_warmstart": built.get("labeler_warmstart"),
        "note": ("trained here: labelling rollouts, encoder passes, head training" if built else
                 "checkpoint trained elsewhere: its labelling and training cost is unknown (null)"),
    })
    return HeadFeatures(inner, embedding, query, key, head.calibration_arrays())
