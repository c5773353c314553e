"""Run a method on every policy rank and wait for them without hanging (inside the trainer actor).

`call_ranks(group, method_name, duplicate, **lists)` is how the controller asks
the policy ranks for the selector's feature passes (features.ActorFeatures):
OpenRLHF's `RayActorGroup.async_run_method_batch` deals the list items to the
ranks, and the per-rank result lists come back flattened, one result per item
and in order, ring/tensor-parallel duplicates dropped.

Two choices, both about a GPU run going wrong cheaply:

* **No state reload.** A feature pass is a no-grad forward. Under
  `ds.enable_sleep` OpenRLHF offloads the optimizer states, the contiguous
  gradient buffer, the fp32 master weights and the low-precision gradients
  (`offload_deepspeed_states`), never the low-precision weights the forward
  reads: OpenRLHF's own old-log-prob forward (`make_experience`) runs in that
  state. Reloading would bring gigabytes of optimizer state back next to an
  awake vLLM for nothing, the likeliest place for an out-of-memory error.
* **Fail fast.** Under ZeRO-3 each forward gathers the partitioned weights
  collectively; if one rank raises (say, out of memory), the others wait in
  that collective until the process group's timeout (60 minutes in
  OpenRLHF). `ray.get` on all refs would wait for them too, so we wait with
  `ray.wait` and raise as soon as any rank has failed, naming it; the driver
  then tears the job down.
"""

from __future__ import annotations

from lze_bench.errors import LzeBenchError


def call_ranks(group, method_name: str, duplicate: int = 1, **lists) -> list:
    """One result per list item, in order (see the module docstring); raises at the first failing rank."""
    refs = group.async_run_method_batch(method_name=method_name, **lists)
    per_rank = wait_all(refs, what=method_name)
    return [item for chunk in per_rank[::max(1, int(duplicate))] for item in chunk]


def wait_all(refs: list, what: str) -> list:
    """`ray.get(refs)`, except that the first failure raises at once instead of after every other ref."""
    import ray

    position = {ref: index for index, ref in enumerate(refs)}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(ready[0])
        except Exception as exc:  # RayTaskError, RayActorError, ...: the rank's own error is in its text
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise LzeBenchError(f"{what} failed on policy rank {position[ready[0]]} ({first}); "
                                f"not waiting for the other {len(pending)} rank(s)") from exc
    return ray.get(list(refs))
