"""Swap the CPU stand-ins into OpenRLHF before its CLI module runs (driver process only).

`openrlhf.cli.train_ppo_ray` does `from openrlhf.trainer.ray import create_vllm_engines`
and `from openrlhf.trainer.ray.ppo_actor import PolicyModelActor` at import time;
runpy executes that module afresh, so replacing the attributes on those modules
first makes `train()` build our actors. Ray actors import this package by name,
so the test puts `tests/openrlhf_cpu` on every process's PYTHONPATH.
"""

from __future__ import annotations


def install() -> None:
    import openrlhf.trainer.ray as ray_pkg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    from lze_cpu_standins.engine import create_cpu_engines
    from lze_cpu_standins.policy import CpuPolicyActor

    ray_pkg.create_vllm_engines = create_cpu_engines
    ppo_actor.PolicyModelActor = CpuPolicyActor
