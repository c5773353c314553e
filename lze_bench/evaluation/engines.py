"""One generator held across the checkpoints of an eval command: a vLLM engine reloads weights instead of restarting.

Starting a vLLM engine costs far more than generating a small benchmark with it (measured on a 2-core CPU: ~17 s
to start, ~4 s to shut down, 0.01 s to reload a tiny model's weights; on a GPU the start adds CUDA-graph capture).
A run's checkpoints share their architecture and tokenizer, so `EngineSlot.get(path)` keeps the engine it holds
when the next checkpoint has the same *engine signature* and loads the new weights into it in place (vLLM's own
`reload_weights` on every worker, then `reset_prefix_cache`: cached KV blocks were computed by the old weights).
Anything else (another architecture, tokenizer or generation config, a hub id, the hf backend, a vLLM without
`collective_rpc`) gets a fresh generator, with the old one closed first so its memory is free.

The signature is config.json without the fields that only say where or with what a checkpoint was written
(`_name_or_path`, `transformers_version`), plus the bytes of the tokenizer and generation-config files present.
Measured on vLLM 0.29.0's CPU build (tests/test_eval_vllm.py): greedy and seeded sampled answers after a reload
equal a fresh engine's on the same checkpoint, token for token.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

# files beside the weights that change what an engine does with them (tokenizer, chat template, stop tokens)
ENGINE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                "tokenizer.model", "chat_template.jinja", "chat_template.json", "generation_config.json")
WHERE_WRITTEN = ("_name_or_path", "transformers_version")


def engine_signature(path: str | Path) -> str | None:
    """What an engine built for `path` depends on besides the weights; None where `path` is not a local checkpoint
    (a hub id), which is then never reused."""
    folder = Path(path)
    config = folder / "config.json"
    if not config.is_file():
        return None
    digest = hashlib.sha256()
    fields = {k: v for k, v in json.loads(config.read_text()).items() if k not in WHERE_WRITTEN}
    digest.update(json.dumps(fields, sort_keys=True).encode())
    for name in ENGINE_FILES:
        file = folder / name
        digest.update(name.encode() + (file.read_bytes() if file.is_file() else b"\0absent"))
    return digest.hexdigest()


class EngineSlot:
    """Holds at most one generator; `get(path)` returns one serving `path` (reloaded or new), `close()` ends it."""

    def __init__(self, load):
        self._load = load  # path -> a new generator (runner: load_generator with the command's settings)
        self.generator = None
        self.signature: str | None = None
        self.starts = 0
        self.reloads = 0

    def get(self, path: str):
        signature = engine_signature(path)
        current = self.generator
        if current is not None and signature is not None and signature == self.signature and _can_reload(current):
            current.reload(path)
            self.reloads += 1
            return current
        self.close()
        self.generator = self._load(path)
        self.signature = signature
        self.starts += 1
        return self.generator

    def release(self) -> None:
        """A checkpoint is done: hold the generator for the next one only if it can reload weights (vLLM); a
        transformers model is cheap to load again, so its memory is freed now."""
        if self.generator is not None and not _can_reload(self.generator):
            self.close()

    def close(self) -> None:
        generator, self.generator, self.signature = self.generator, None, None
        if generator is not None:
            generator.close()  # the engine (and its GPU memory) is gone before another one loads


def _can_reload(generator) -> bool:
    return callable(getattr(generator, "reload", None)) and generator.can_reload()
