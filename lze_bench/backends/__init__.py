"""Training backends, registered by name in `lze_bench.registry.BACKENDS`.

Each backend package registers itself from a light `__init__.py`; heavy
imports (torch, openrlhf, vllm) happen only inside its `train` function, so
`lze-bench --help` stays fast.
"""

from __future__ import annotations

import importlib

from lze_bench.registry import BACKENDS

BACKEND_MODULES = ("local", "openrlhf")

for _module in BACKEND_MODULES:
    importlib.import_module(f"lze_bench.backends.{_module}")


def run_training(cfg):
    """Run `lze-bench train` with the composed config on its backend; returns the run dir."""
    return BACKENDS[cfg.backend.name].train(cfg)
