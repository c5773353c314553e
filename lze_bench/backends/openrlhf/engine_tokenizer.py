"""The tokenizer of OpenRLHF's rollout requests, sent to each rollout engine once instead of with every request.

OpenRLHF 0.11.2's `_dispatch_prompts_to_vllm` passes `hf_tokenizer=self.tokenizer` in every
`generate_responses` call (its executor tokenizes the prompt and decodes the response with it), and Ray pickles a
call's arguments anew for every call: the trainer actor pickles the tokenizer once per request, the engine actor
unpickles it once per request. OpenRLHF sends one request per prompt; lze-bench's seeded rollouts send one per
sample (generator.py), n times as many. A Hugging Face fast tokenizer pickles as its whole JSON definition: one
the size of Qwen2.5's (a byte-level BPE of 151,643 tokens and 151,387 merges, 7.0 MB pickled) took 172 ms to
pickle and 489 ms to unpickle on 2 shared cores (docs/harness-overhead.md), so 1,024 requests a step (128 prompts
x 8 samples) would spend minutes a step on it.

Here each engine actor receives the tokenizer once, through Ray's `__ray_call__` (every actor has it: it runs a
function on the actor instance), and keeps it in this module's table, in the engine's process. Requests carry a
`TokenizerKey` instead, which pickles as its key and unpickles, in the engine, to the tokenizer object in that
table: the same object for every request, as OpenRLHF's executor uses it (tokenize, decode), so requests and
their seeds are unchanged.
"""

from __future__ import annotations

import uuid

from lze_bench.errors import LzeBenchError

_TOKENIZERS: dict[str, object] = {}  # in an engine actor's process: key -> tokenizer


def _keep(actor, key: str, tokenizer) -> str:
    """Runs inside an engine actor (`__ray_call__` passes the actor instance first)."""
    _TOKENIZERS[key] = tokenizer
    return key


def held_tokenizer(key: str):
    """The tokenizer this process holds under `key` (what a TokenizerKey unpickles to)."""
    try:
        return _TOKENIZERS[key]
    except KeyError:
        raise LzeBenchError(f"this rollout engine holds no tokenizer {key!r} (it was restarted after the trainer "
                            "sent it); rerun the same command to resume") from None


class TokenizerKey:
    """Stands for the tokenizer in a request's arguments; unpickles to the engine's copy."""

    def __init__(self, key: str):
        self.key = key

    def __reduce__(self):
        return held_tokenizer, (self.key,)


class EngineTokenizers:
    """The trainer's side: sends the tokenizer to an engine the first time a request goes there."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.key = uuid.uuid4().hex  # new per trainer: an engine never answers with another run's tokenizer
        self._sent: set[str] = set()

    def key_for(self, engine) -> TokenizerKey:
        """`engine` (a rollout engine's actor handle) holds the tokenizer after this call."""
        import ray

        actor = engine._actor_id.hex()
        if actor not in self._sent:
            ray.get(engine.__ray_call__.remote(_keep, self.key, self.tokenizer))
            self._sent.add(actor)
        return TokenizerKey(self.key)
