"""Bounded Ray placement: OpenRLHF 0.11.2 waits on its placement groups with no timeout.

`cli/train_ppo_ray.py:train()` does `pg = placement_group(bundles); ray.get(pg.ready())`
(and so do `create_vllm_engines` and `RayActorGroup` without colocation). When
the cluster cannot host the bundles (too few CPUs or GPUs) that call waits
forever and burns the allocation and its requeues. `bounded_placement(timeout)`
wraps `placement_group` in those modules so the group is awaited for at most
`timeout` seconds, then removed, raising one line that names the bundles, what
the cluster has and the key to change. A ready group passes through unchanged,
so OpenRLHF's own `ray.get(pg.ready())` returns at once.

Ray's CPU count, which these groups must fit in, is the launch plan's `ray_cpus`
(plan.py); ray_cluster.py starts Ray with at least that many.
"""

from __future__ import annotations

import contextlib
import importlib

from lze_bench.errors import LzeBenchError

PATCHED_MODULES = ("ray.util.placement_group", "openrlhf.trainer.ray.launcher", "openrlhf.trainer.ray.vllm_engine")


def bounded(create, timeout_s: float):
    """`placement_group` that fails after `timeout_s` instead of waiting forever."""
    import ray

    def placement_group(bundles, *args, **kwargs):
        group = create(bundles, *args, **kwargs)
        ready, _ = ray.wait([group.ready()], timeout=timeout_s)
        if not ready:
            ray.util.remove_placement_group(group)
            raise LzeBenchError(
                f"backend.placement_timeout_s: Ray could not place {len(bundles)} bundle(s) {bundles[0]} within "
                f"{timeout_s:.0f} s (cluster has {ray.cluster_resources()}); give Ray more CPUs/GPUs "
                "(launcher.cpus_per_task, backend.gpus_per_node) or raise backend.placement_timeout_s"
            )
        return group

    placement_group.__wrapped__ = create
    return placement_group


@contextlib.contextmanager
def bounded_placement(timeout_s: float):
    """Within the block, OpenRLHF's placement groups are awaited for at most `timeout_s` seconds."""
    pg_module = importlib.import_module("ray.util.placement_group")  # the module (ray.util's attribute is the function)
    original = pg_module.placement_group
    wrapper = bounded(original, timeout_s)
    patched = []
    for name in PATCHED_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "placement_group", None) is original:
            module.placement_group = wrapper
            patched.append(module)
    try:
        yield wrapper
    finally:
        for module in patched:
            module.placement_group = original
