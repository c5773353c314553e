"""Rebuild a shipped warm start on this machine and compare it with the shipped weights.

How a user sees that the shipped initial policy is the one its recipe makes (`lze-bench warmstart
check`): the recipe recorded in the shipped `warmstart.json` is rebuilt here (this machine's threads and
processor) and the weights are compared file by file, so "the same recipe gives other weights here" is a
measured statement (the largest weight difference, both held-out accuracies), not a surprise in a report.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lze_bench.errors import LzeBenchError


@dataclass
class CheckResult:
    key: str
    identical: bool
    max_gap: float  # largest |shipped - rebuilt| over every tensor (0.0 when identical)
    shipped_accuracy: float
    rebuilt_accuracy: float


def config_of(recipe: dict):
    """(model, task, backend, snapshots) config objects that give back `recipe` (refused if they do not)."""
    from lze_bench.backends.local.warmstart import recipe_of
    from lze_bench.config import compose, to_objects

    objects = to_objects(compose("train", [f"task={recipe['task'].get('name', 'synthetic')}"]))
    model = dataclasses.replace(objects.model, **recipe["model"])
    task = dataclasses.replace(objects.task, **recipe["task"])
    backend = dataclasses.replace(objects.backend, warmstart_steps=recipe["steps"],
                                  warmstart_batch_size=recipe["batch_size"], warmstart_lr=recipe["lr"],
                                  warmstart_warmup=recipe["warmup"], init_seed=recipe["init_seed"])
    snapshots = tuple(recipe.get("snapshots", ()))
    if _as_json(recipe_of(model, task, backend, snapshots)) != _as_json(recipe):  # JSON has no tuples
        raise LzeBenchError("this version of lze-bench cannot rebuild the shipped recipe (its tokenizer or format "
                            "differs); check it with the lze-bench version that shipped it")
    return model, task, backend, snapshots


def check_shipped(key: str) -> CheckResult:
    """Rebuild shipped recipe `key` on the CPU here (torch's current thread count) and compare."""
    import torch

    from lze_bench.backends.local import shipped
    from lze_bench.backends.local.warmstart import _build
    from lze_bench.grading import Grader

    if key not in shipped.shipped_keys():
        raise LzeBenchError(f"{key!r} is not a shipped warm start; `lze-bench warmstart list` names them")
    directory = shipped.store() / key
    info = shipped.read_info(directory)
    model_cfg, task_cfg, backend_cfg, snapshots = config_of(info["recipe"])
    with tempfile.TemporaryDirectory(prefix=f"lze-warmstart-check-{key}-") as tmp, \
            Grader(timeout_s=5.0, workers=1) as grader:
        out = Path(tmp) / key
        rebuilt = _build(model_cfg, task_cfg, backend_cfg, torch.device("cpu"), grader, out, _quiet, snapshots)
        identical = shipped.weight_digests(out) == shipped.weight_digests(directory)
        gap = 0.0 if identical else max_weight_gap(directory, out)
    return CheckResult(key, identical, gap, float(info["heldout_accuracy"]), float(rebuilt["heldout_accuracy"]))


def _quiet(done, total, note) -> None:
    pass


def _as_json(value):
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def max_weight_gap(a: Path, b: Path) -> float:
    """The largest absolute difference between two warm starts' tensors (every weights file they share)."""
    from safetensors.numpy import load_file

    gap = 0.0
    for path in sorted(a.rglob("*.safetensors")):
        left, right = load_file(str(path)), load_file(str(b / path.relative_to(a)))
        for name, tensor in left.items():
            gap = max(gap, float(abs(tensor.astype("float64") - right[name].astype("float64")).max()))
    return gap
