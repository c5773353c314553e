"""Run OpenRLHF 0.11.2's DeepSpeed policy actor on CPU: the few CUDA calls it makes, answered on CPU (tests only).

DeepSpeed itself runs on CPU with `DS_ACCELERATOR=cpu` (gloo process group, its
CPU accelerator, bf16); OpenRLHF assumes CUDA in a handful of places, each
answered here in the calling process and nowhere else:

* `torch.cuda.set_device(local_rank)` and `torch.cuda.synchronize()`
  (`DeepspeedStrategy.setup_distributed`, `torch_dist_barrier_and_cuda_sync`,
  `PolicyModelActor.fit`, `offload_deepspeed_states`): no-ops;
* `torch.cuda.current_device()` (`ppo_train`, `forward`, `all_reduce`,
  `_optimizer_step_loss_norm`): the CPU device, so tensors stay where they are;
* `torch.cuda.empty_cache()`: a no-op;
* `torch.cuda.current_stream()` (the stream `broadcast_to_vllm` hands its sync
  group): None, which the gloo sync group (vllm_cpu.py) ignores;
* `init_device_mesh("cuda", ...)` in `setup_distributed`: the same mesh on "cpu";
* `NaiveReplayBuffer.__init__` builds `torch.device(f"cuda:{current_device()}")`:
  its target device becomes CPU;

DeepSpeed's optimizer is its own FusedAdam, as on a GPU (its CPU build is
JIT-compiled once into TORCH_EXTENSIONS_DIR, like the shared-memory comm op;
`torch_adam` would skip the build but ZeRO-3's `offload_states` accepts only
FusedAdam).

`install()` is idempotent and is called by the test actor classes before any
OpenRLHF code runs in a process (Ray workers import this module by name from
tests/openrlhf_cpu on their PYTHONPATH). Nothing in lze_bench imports it.
"""

from __future__ import annotations

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    import torch

    cpu = torch.device("cpu")
    torch.cuda.set_device = lambda *args, **kwargs: None
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.empty_cache = lambda *args, **kwargs: None
    torch.cuda.current_stream = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: cpu
    _patch_device_mesh()
    _patch_replay_buffer(cpu)
    _INSTALLED = True


def _patch_device_mesh() -> None:
    import openrlhf.utils.deepspeed.deepspeed as strategy_module

    original = strategy_module.init_device_mesh

    def init_device_mesh(device_type, *args, **kwargs):
        return original("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    strategy_module.init_device_mesh = init_device_mesh


def _patch_replay_buffer(cpu) -> None:
    from openrlhf.trainer.ppo_utils import replay_buffer

    original = replay_buffer.NaiveReplayBuffer.__init__
    if getattr(original, "_lze_cpu", False):
        return

    def __init__(self, *args, **kwargs):
        import torch

        saved = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # the f-string wants an index
        try:
            original(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = saved
        self.target_device = cpu

    __init__._lze_cpu = True
    replay_buffer.NaiveReplayBuffer.__init__ = __init__
