"""The last stage of building ASTRAL's head, shared by both backends' builds: labelled embeddings -> saved head.

`lze_bench/backends/local/predictor.py` (labellers: snapshots of a tiny warm start) and `lze_bench/sweep/heads.py`
(backend=openrlhf: public models through the eval engine) label and embed differently; from the embeddings on,
the reference/held-out split, the authors' training recipe, the validation against the kernel, the file in the
authors' format and the build record are the same.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)

INFO_FILE = "info.json"  # written last: a head directory with it is complete


def build_once(target: Path, build: Callable[[Path], dict]) -> Path:
    """`target` (a head directory: head.pt + info.json), made by `build(tmp)` unless it is there already.

    File-locked, so concurrent runs or jobs wanting one head build it once (the lock is released by the OS if
    its holder dies); built in a temporary sibling and renamed into place, so a killed build leaves nothing a
    reader would take for a head. `build` writes the head into its folder and returns the info record."""
    from filelock import FileLock

    from lze_bench.rundir import atomic_write_json

    if (target / INFO_FILE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f"{target.name}.lock")):
        if (target / INFO_FILE).exists():
            return target
        tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        atomic_write_json(tmp / INFO_FILE, {"key": target.name, **build(tmp)})
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    return target


def split_questions(count: int, recipe) -> tuple[np.ndarray, np.ndarray]:
    """(reference candidates, held-out questions): disjoint, seeded by the recipe's seed."""
    order = np.random.default_rng([recipe.seed, 5]).permutation(count)
    refs = np.sort(order[:min(recipe.ref_candidates, count)])
    rest = order[refs.size:]
    val = np.sort(rest[:int(round(recipe.val_fraction * rest.size))])
    return refs.astype(np.int64), val.astype(np.int64)


def train_and_save(embeddings: np.ndarray, rates: list[np.ndarray], recipe, head_file: Path, *, encoder: str,
                   labelers: list[str], flops: dict, times: dict) -> dict:
    """Train the head on `rates` (one pass-rate array per labeller) over `embeddings` with `recipe`'s authors'
    knobs, save it at `head_file` for `encoder`; the training FLOPs and seconds go into `flops` and `times`.
    Returns the fields of the build record both backends write (the caller adds its own)."""
    from lze_bench.predictor.checkpoint import save_head
    from lze_bench.predictor.train import LabelSet, TrainRecipe, evaluate, train_head

    refs, val = split_questions(len(embeddings), recipe)
    labels = LabelSet(embeddings, np.stack(rates), refs, val)
    train_recipe = TrainRecipe(**{f.name: getattr(recipe, f.name) for f in dataclasses.fields(TrainRecipe)})
    start = time.perf_counter()
    head, result = train_head(labels, train_recipe)
    flops["training"] = result["flops"]
    times["training"] = time.perf_counter() - start
    validation = evaluate(head, labels, train_recipe)
    config = {"loss_type": "binary_cross_entropy", "ref_size": train_recipe.ref_size, "learning_rate": recipe.lr,
              "batch_size": recipe.batch_size, "epochs": recipe.epochs, "lze_bench": {"labelers": labelers}}
    save_head(head, head_file, encoder=encoder, config=config, metrics={"epoch_losses": result["losses"]})
    log.info("ASTRAL head: %d questions x %d labellers, validation %s", len(embeddings), len(labelers), validation)
    return {"labelers": labelers, "questions": len(embeddings), "references": int(refs.size),
            "held_out": int(val.size), "flops": {k: int(v) for k, v in flops.items()},
            "label_means": [float(r.mean()) for r in rates], "time_s": {k: round(v, 2) for k, v in times.items()},
            "validation": validation, "losses": result["losses"]}
