"""`DeepSpeedCpuPolicyActor`: OpenRLHF 0.11.2's real `PolicyModelActor` on a real DeepSpeed engine on CPU (tests only).

Everything that trains is OpenRLHF's and DeepSpeed's own: `DeepspeedStrategy`,
`deepspeed.initialize` (ZeRO-2 or ZeRO-3, bf16, gloo), `ActorPPOTrainer.ppo_train`,
`PolicyLoss`, `offload_states`/`reload_states`, `save_ckpt`/`load_ckpt`,
`save_model`. This subclass adds only what a CPU test needs:

* `__init__` installs cuda_on_cpu (the few CUDA calls OpenRLHF makes);
* with the transformers stand-in engine (engine.py), `broadcast_to_vllm`
  sends it a full state dict, gathered from the ZeRO-3 partitions on every
  rank; with OpenRLHF's real engines on vLLM's CPU build
  (`DeepSpeedVllmPolicyActor`) the sync is OpenRLHF's own `broadcast_to_vllm`
  (`--vllm.sync_backend gloo`: no CUDA IPC), with only its sync group made
  on gloo (vllm_cpu.gloo_sync_group: OpenRLHF builds a NCCL communicator
  whatever the backend says);
* probes the test reads: `strategy.optimizer_step` is wrapped to record, for
  each micro-batch of a `fit`, DeepSpeed's `global_steps` after the call (an
  optimizer step happened where it grew); `lze_test_state()` returns the full
  weights (float32) and `lze_test_probe()` the records. After each `fit`, every
  rank appends a line to `policy_log.rank<r>.jsonl` beside `ckpt.path` (rank 0
  also to `policy_log.jsonl`, as the stand-in policy writes it): samples,
  micro-batch sizes, tokens, epochs, re-centred, the optimizer-step positions
  and a fingerprint of the full weights after the step;
* crash injection as the stand-in's: a file `crash_at_update` holding K beside
  `ckpt.path` makes `fit` raise before update K+1.

`make_policy_actor` (lze_bench) is applied on top of this class exactly as on
a GPU, so `StepBatchMixin.fit` and the feature passes run against this engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import ray
from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

from lze_cpu_standins.cuda_on_cpu import install
from lze_cpu_standins.weights import fingerprint

CRASH_FILE = "crash_at_update"
POLICY_LOG = "policy_log.jsonl"
ENGINE_SYNC_LOG = "engine_sync.jsonl"  # DeepSpeedVllmPolicyActor: one line per OpenRLHF broadcast


class _DeepSpeedCpuPolicyActor(PolicyModelActor.__ray_actor_class__):
    def __init__(self, *args, **kwargs):
        install()
        import torch

        torch.set_num_threads(1)  # two ranks share two cores
        super().__init__(*args, **kwargs)
        self.lze_updates = 0
        self.lze_records: list[dict] = []

    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        super().init_model_from_pretrained(strategy, pretrain, max_steps, vllm_engines)
        self.lze_updates = int((self.checkpoint_states or {}).get("global_step", 0) or 0)
        step = self.strategy.optimizer_step

        def recorded_step(*args, **kwargs):
            step(*args, **kwargs)
            self._lze_micro.append(int(self.actor.model.global_steps))

        self.strategy.optimizer_step = recorded_step
        self._lze_micro: list[int] = []

    def fit(self, kl_ctl: float = 0):
        work = Path(self.strategy.args.ckpt.path).parent
        crash = work / CRASH_FILE
        if crash.is_file() and self.lze_updates == int(crash.read_text()):
            raise RuntimeError(f"injected crash before update {self.lze_updates + 1} ({crash})")
        buffer = self.trainer.replay_buffer
        samples, micro = len(buffer), int(buffer.sample_batch_size)
        tokens = int(sum(int(item.attention_mask.sum()) for item in buffer.items))
        recentred = bool(samples) and buffer.items[0].rollout_log_probs is not None
        before = int(self.actor.model.global_steps)
        self._lze_micro = []
        status = super().fit(kl_ctl)
        self.lze_updates += 1
        epochs = int(self.strategy.args.train.max_epochs)
        rank = self.strategy.get_rank()
        record = {"update": self.lze_updates, "rank": rank, "samples": samples,
                  "micro_batches": [micro] * (len(self._lze_micro)), "tokens": tokens * epochs, "epochs": epochs,
                  "recentred": recentred, "global_steps_before": before, "global_steps": list(self._lze_micro),
                  "weights": fingerprint(self.lze_test_state())}
        self.lze_records.append(record)
        work.mkdir(parents=True, exist_ok=True)
        names = [f"policy_log.rank{rank}.jsonl"] + ([POLICY_LOG] if rank == 0 else [])
        for name in names:
            with open(work / name, "a") as handle:
                handle.write(json.dumps(record) + "\n")
        return status

    def broadcast_to_vllm(self):
        state = self.lze_test_state()
        if self.strategy.is_rank_0() and self.vllm_engines:
            ray.get([engine.load_weights.remote(state) for engine in self.vllm_engines])

    def lze_test_state(self) -> dict:
        """The full float32 weights (a collective under ZeRO-3: every rank must call it)."""
        import deepspeed

        model = self.actor.model.module
        params = dict(model.named_parameters())
        out = {}
        for name, param in params.items():
            with deepspeed.zero.GatheredParameters([param], enabled=hasattr(param, "ds_id")):
                out[name] = param.detach().float().clone().cpu()
        return out

    def lze_test_probe(self) -> list[dict]:
        return list(self.lze_records)


class _DeepSpeedVllmPolicyActor(_DeepSpeedCpuPolicyActor):
    """The same actor syncing OpenRLHF's real vLLM engines through OpenRLHF's own `broadcast_to_vllm`."""

    def __init__(self, *args, **kwargs):
        import openrlhf.trainer.ray.ppo_actor as ppo_actor

        from lze_cpu_standins.vllm_cpu import gloo_sync_group

        # `_init_vllm_sync_group` calls this module global (a PyNccl communicator) for any --vllm.sync_backend
        ppo_actor.stateless_init_process_group = gloo_sync_group
        super().__init__(*args, **kwargs)

    def broadcast_to_vllm(self):
        """OpenRLHF's own sync, then (rank 0) what each engine received and holds, appended to `engine_sync.jsonl`
        beside `ckpt.path`: the received weights' fingerprint (the test compares it with this update's entry in
        the policy log) and whether the engine's readable tensors equal them after the reload."""
        PolicyModelActor.__ray_actor_class__.broadcast_to_vllm(self)
        if self.strategy.is_rank_0():
            syncs = ray.get([engine.last_sync.remote() for engine in self.vllm_engines])
            work = Path(self.strategy.args.ckpt.path).parent
            work.mkdir(parents=True, exist_ok=True)
            with open(work / ENGINE_SYNC_LOG, "a") as handle:
                handle.write(json.dumps({"update": self.lze_updates, "engines": syncs}) + "\n")


DeepSpeedCpuPolicyActor = ray.remote(num_gpus=1)(_DeepSpeedCpuPolicyActor)
DeepSpeedVllmPolicyActor = ray.remote(num_gpus=1)(_DeepSpeedVllmPolicyActor)
