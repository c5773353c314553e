"""Selectors, registered by name in `lze_bench.registry.SELECTORS`.

`BUILTIN_SELECTORS` lists them; they are registered the first time the registry is read.
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

# The built-in selectors: name -> "module:Class" under this package, in the order they were added. Each
# module imports only lze_bench.api (and its own private helpers), as a plug-in does; the registry calls
# `register_builtins` before it is first read (lze_bench.registry.Registry's loader).
BUILTIN_SELECTORS = {
    "uniform": "uniform:UniformSelector", "dapo": "dapo:DapoSelector", "astral": "astral:AstralSelector",
    "hive": "hive:HiveSelector", "greso": "greso:GresoSelector", "lze": "lze:LzeSelector",
    "lze_full": "lze:LzeFullSelector", "mopps": "mopps:MoppsSelector", "adarft": "adarft:AdarftSelector",
    "sec": "sec:SecSelector", "pods": "pods:PodsSelector", "reinforce_ada": "reinforce_ada:ReinforceAdaSelector",
    "speed": "speed:SpeedSelector",
}
SELECTOR_MODULES = tuple(dict.fromkeys(target.partition(":")[0] for target in BUILTIN_SELECTORS.values()))


def register_builtins() -> None:
    for name, target in BUILTIN_SELECTORS.items():
        module, _, cls = target.partition(":")
        SELECTORS.add(name)(getattr(importlib.import_module(f"lze_bench.selectors.{module}"), cls))


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
