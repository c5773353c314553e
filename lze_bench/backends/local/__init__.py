"""The embedded default backend: a tiny HF policy trained by our compact GRPO loop.

Registered here (light); torch and transformers load inside `train` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from lze_bench.registry import BACKENDS


@dataclass
class LocalBackendConfig:
    name: str = "local"


@BACKENDS.add("local")
class LocalBackend:
    Config = LocalBackendConfig

    @staticmethod
    def train(cfg):
        from lze_bench.errors import NotYetAvailable

        raise NotYetAvailable("the local backend's trainer has not landed yet (issue: embedded backend)")
