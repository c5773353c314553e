"""`CpuRolloutActor`: OpenRLHF's `RolloutRayActor` generating with transformers on CPU (tests only).

Subclasses the undecorated `RolloutRayActor` (a Ray ActorClass cannot be
subclassed) and replaces only what needs vLLM: `__init__` loads the HF model
instead of an `AsyncLLMEngine`, `generate` samples token by token, and the
weight sync is a state_dict copy (`load_weights`). `generate_responses`, and
with it OpenRLHF's `SingleTurnAgentExecutor` (tokenising, truncation, calling
our reward_func file, the response dict) is OpenRLHF's own.

Sampling follows vLLM's contract: a request whose `SamplingParams.seed` is set
draws from a generator seeded with it, an unseeded one from fresh entropy. So
whether a resumed run draws what the unbroken run drew is decided by the seeds
lze-bench puts on its requests (generator.rollout_seed), as with the real
engine, never by this stand-in (it used to seed itself from a hash of the
weights and the prompt, which made the promise true only here).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from types import SimpleNamespace

import ray
import torch
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
from openrlhf.utils.agent import SingleTurnAgentExecutor


class _CpuRolloutActor(RolloutRayActor.__ray_actor_class__):
    def __init__(self, *, model: str, seed: int, remote_rm_url=None, **_ignored):  # noqa: D401 (sync init)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.executor = SingleTurnAgentExecutor(remote_rm_url)
        self.model = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.eos_token_id = AutoTokenizer.from_pretrained(model).eos_token_id
        self.seed = int(seed)
        self._asked = Counter()
        self._fingerprint = self._weights_fingerprint()
        self.calls = Counter()  # method -> calls (the test reads it)

    def _weights_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, tensor in sorted(self.model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().numpy().tobytes())
        return digest.hexdigest()

    def load_weights(self, state_dict: dict) -> str:
        """The weight sync (OpenRLHF: NCCL broadcast or CUDA IPC from the policy rank 0)."""
        self.model.load_state_dict(state_dict)
        self._fingerprint = self._weights_fingerprint()
        self.calls["load_weights"] += 1
        return self._fingerprint

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        seed = getattr(sampling_params, "seed", None)
        generator = torch.Generator()
        if seed is None:
            generator.seed()  # as vLLM: an unseeded request is not reproducible
        else:
            generator.manual_seed(int(seed))
        temperature = float(getattr(sampling_params, "temperature", 1.0) or 1.0)
        max_tokens = int(sampling_params.max_tokens)
        min_tokens = int(getattr(sampling_params, "min_tokens", 1) or 0)
        tokens = list(prompt_token_ids)
        out, finish = [], "length"
        with torch.no_grad():
            for position in range(max_tokens):
                logits = self.model(torch.tensor([tokens])).logits[0, -1].float() / temperature
                if position < min_tokens and self.eos_token_id is not None:
                    logits[self.eos_token_id] = float("-inf")
                token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
                tokens.append(token)
                out.append(token)
                if token == self.eos_token_id:
                    finish = "stop"
                    break
        self.calls["generate"] += 1
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=out, finish_reason=finish, logprobs=None)])

    def get_num_unfinished_requests(self) -> int:
        return 0

    async def sleep(self, level=1):
        self.calls["sleep"] += 1

    async def wake_up(self, tags=None):
        self.calls["wake_up"] += 1

    def get_calls(self) -> dict:
        return dict(self.calls)


CpuRolloutActor = ray.remote(_CpuRolloutActor)


def create_cpu_engines(num_engines, tensor_parallel_size, pretrain, seed, *args, remote_rm_url=None,
                       agent_func_path=None, **kwargs):
    """`create_vllm_engines` with CPU actors (no GPU, no placement group: they hold no device)."""
    if agent_func_path:
        raise ValueError("the CPU stand-in runs OpenRLHF's single-turn executor only")
    return [
        CpuRolloutActor.options(num_cpus=0, num_gpus=0).remote(model=pretrain, seed=seed + i,
                                                               remote_rm_url=remote_rm_url)
        for i in range(num_engines)
    ]
