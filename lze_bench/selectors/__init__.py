"""Selectors, registered by name in `lze_bench.registry.SELECTORS`.

Importing this package registers every selector module listed here.
"""

from __future__ import annotations

import importlib

from lze_bench.registry import SELECTORS
from lze_bench.selectors.base import (  # noqa: F401  (public interface)
    RolloutBatch,
    Selector,
    SelectorExhausted,
    UpdateDecision,
    load_state,
    save_state,
    step_rng,
    top_k,
)

SELECTOR_MODULES = ("uniform", "dapo", "astral", "hive", "greso", "lze")

for _module in SELECTOR_MODULES:
    importlib.import_module(f"lze_bench.selectors.{_module}")


def build_selector(selector_cfg, *, num_prompts: int, batch_size: int | None = None) -> Selector:
    """A selector from its composed config node (or dataclass instance)."""
    from omegaconf import DictConfig, OmegaConf

    if isinstance(selector_cfg, DictConfig):
        selector_cfg = OmegaConf.to_object(selector_cfg)
    cls = SELECTORS[selector_cfg.name]
    return cls(selector_cfg, num_prompts=num_prompts, batch_size=batch_size)
