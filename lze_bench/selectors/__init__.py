"""Selectors, registered by name in `lze_bench.registry.SELECTORS`.

Importing this package registers every selector module listed here.
"""

from __future__ import annotations

import importlib

from lze_bench.registry import SELECTORS  # noqa: F401  (re-exported)
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

SELECTOR_MODULES = ("uniform", "dapo", "astral", "hive", "greso", "lze", "mopps", "adarft", "sec", "pods", "reinforce_ada", "speed")

for _module in SELECTOR_MODULES:
    importlib.import_module(f"lze_bench.selectors.{_module}")


def build_selector(selector_cfg, *, num_prompts: int, batch_size: int | None = None, metadata=None) -> Selector:
    """A selector from its composed config node (or dataclass instance).

    `metadata`: the run's fixed per-prompt columns (a `lze_bench.metadata.PromptMetadata`, or a dict
    name -> array[N]); a selector that reads some (`metadata_columns`) gets them, one line when one is missing.
    """
    from omegaconf import DictConfig, OmegaConf

    # a plug-in named by a config this process did not compose; by name: the loader stands above selectors
    cls = importlib.import_module("lze_bench.plugins").selector_class(selector_cfg)
    if isinstance(selector_cfg, DictConfig):
        selector_cfg = OmegaConf.to_object(selector_cfg)
    names = cls.metadata_columns(selector_cfg)
    if not names:
        return cls(selector_cfg, num_prompts=num_prompts, batch_size=batch_size)
    from lze_bench.metadata import PromptMetadata

    if not isinstance(metadata, PromptMetadata):
        table = PromptMetadata(num_prompts)
        for name, values in (metadata or {}).items():
            table.add(name, values, "metadata")
        metadata = table
    return cls(selector_cfg, num_prompts=num_prompts, batch_size=batch_size,
               metadata=metadata.require(names, selector_cfg.name))
