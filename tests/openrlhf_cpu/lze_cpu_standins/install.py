"""Swap the CPU stand-ins into OpenRLHF before its CLI module runs (driver process only).

`openrlhf.cli.train_ppo_ray` does `from openrlhf.trainer.ray import create_vllm_engines`
and `from openrlhf.trainer.ray.ppo_actor import PolicyModelActor` at import time;
runpy executes that module afresh, so replacing the attributes on those modules
first makes `train()` build our actors (lze_bench's entry then wraps the policy
actor with `make_policy_actor`, as on a GPU). Ray actors import this package by
name, so the test puts `tests/openrlhf_cpu` on every process's PYTHONPATH.
"""

from __future__ import annotations


def install(policy: str = "standin") -> None:
    """`policy`: "standin" (policy.py, no DeepSpeed) or "deepspeed" (ds_policy.py, OpenRLHF's real actor)."""
    import openrlhf.trainer.ray as ray_pkg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    from lze_cpu_standins.engine import create_cpu_engines

    ray_pkg.create_vllm_engines = create_cpu_engines
    if policy == "deepspeed":
        from lze_cpu_standins.ds_policy import DeepSpeedCpuPolicyActor

        ppo_actor.PolicyModelActor = DeepSpeedCpuPolicyActor
    elif policy == "standin":
        from lze_cpu_standins.policy import CpuPolicyActor

        ppo_actor.PolicyModelActor = CpuPolicyActor
    else:
        raise ValueError(f"unknown test policy {policy!r} (standin or deepspeed)")
