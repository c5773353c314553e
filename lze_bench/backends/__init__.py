"""Training backends, registered by name in `lze_bench.registry.BACKENDS`.

Each backend package registers itself from a light `__init__.py`; heavy
imports (torch, openrlhf, vllm) happen only inside its `train` function, so
`lze-bench --help` stays fast.
"""

from __future__ import annotations

import importlib

from lze_bench.errors import LzeBenchError
from lze_bench.registry import BACKENDS

BACKEND_MODULES = ("local", "openrlhf")

for _module in BACKEND_MODULES:
    importlib.import_module(f"lze_bench.backends.{_module}")


def run_training(cfg):
    """Run `lze-bench train` with the composed config on its backend; returns the run dir.

    A backend that does not stop on `trainer.flop_budget` / evaluate on
    `trainer.eval_every_flops` (no `honours_flop_budget = True`) is refused
    them, rather than running a comparison on the wrong compute.
    """
    backend = BACKENDS[cfg.backend.name]
    if not getattr(backend, "honours_flop_budget", False):
        for key in ("flop_budget", "eval_every_flops"):
            if cfg.trainer.get(key) is not None:
                raise LzeBenchError(f"trainer.{key}: backend={cfg.backend.name} does not honour it yet; "
                                    f"drop it and bound the run with trainer.steps")
    predictor = cfg.selector.get("predictor", "kernel")
    served = tuple(getattr(backend, "astral_predictors", ("kernel",)))
    if predictor not in served:
        raise LzeBenchError(f"selector.predictor={predictor}: backend={cfg.backend.name} does not serve ASTRAL's "
                            f"learned head that way (it serves {', '.join(served)}; backend=local serves all); "
                            + ("pass a trained head with selector.predictor=checkpoint selector.predictor_path=HEAD.pt "
                               "selector.predictor_encoder=ENCODER, or " if "checkpoint" in served else "")
                            + "use selector.predictor=kernel")
    return backend.train(cfg)
