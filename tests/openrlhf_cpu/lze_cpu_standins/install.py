"""Swap the CPU stand-ins into OpenRLHF before its CLI module runs (driver process only).

`openrlhf.cli.train_ppo_ray` does `from openrlhf.trainer.ray import create_vllm_engines`
and `from openrlhf.trainer.ray.ppo_actor import PolicyModelActor` at import time;
runpy executes that module afresh, so replacing the attributes on those modules
first makes `train()` build our actors (lze_bench's entry then wraps the policy
actor with `make_policy_actor`, as on a GPU). Ray actors import this package by
name, so the test puts `tests/openrlhf_cpu` on every process's PYTHONPATH.
"""

from __future__ import annotations


def install(policy: str = "standin", engine: str = "standin") -> None:
    """`policy`: "standin" (policy.py, no DeepSpeed) or "deepspeed" (ds_policy.py, OpenRLHF's real actor);
    `engine`: "standin" (engine.py, transformers) or "vllm" (OpenRLHF's own engines on vLLM's CPU build,
    vllm_cpu.py)."""
    import openrlhf.trainer.ray as ray_pkg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    if engine == "vllm":
        from lze_cpu_standins.vllm_cpu import install as install_vllm

        install_vllm()
    elif engine == "standin":
        from lze_cpu_standins.engine import create_cpu_engines

        ray_pkg.create_vllm_engines = create_cpu_engines
    else:
        raise ValueError(f"unknown test engine {engine!r} (standin or vllm)")
    if policy == "deepspeed":
        from lze_cpu_standins.ds_policy import DeepSpeedCpuPolicyActor, DeepSpeedVllmPolicyActor

        # with real engines the sync is OpenRLHF's own broadcast_to_vllm (on a gloo group)
        ppo_actor.PolicyModelActor = DeepSpeedVllmPolicyActor if engine == "vllm" else DeepSpeedCpuPolicyActor
    elif policy == "standin":
        from lze_cpu_standins.policy import CpuPolicyActor

        ppo_actor.PolicyModelActor = CpuPolicyActor
    else:
        raise ValueError(f"unknown test policy {policy!r} (standin or deepspeed)")
