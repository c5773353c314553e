"""Training tasks (prompt sets with verifiable answers), registered in `lze_bench.registry.TASKS`."""

from __future__ import annotations

import importlib

from lze_bench.registry import TASKS  # noqa: F401

TASK_MODULES = ("synthetic", "datasets")

for _module in TASK_MODULES:
    importlib.import_module(f"lze_bench.tasks.{_module}")
