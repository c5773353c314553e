"""Synthetic verifiable arithmetic task (placeholder schema; generator lands with the local backend)."""

from __future__ import annotations

from dataclasses import dataclass

from lze_bench.registry import TASKS


@dataclass
class SyntheticTaskConfig:
    name: str = "synthetic"
    seed: int = 0


TASKS.add("synthetic")(type("SyntheticTask", (), {"Config": SyntheticTaskConfig}))
