"""The tiny policy: a Hugging Face causal LM built from `ModelConfig`, and device/thread setup.

A standard architecture (Llama by default, Qwen2 also accepted) at ~1 M
parameters over the character tokenizer, saved and loaded as an ordinary HF
checkpoint directory (`save_pretrained`), so
`lze-bench eval model=PATH` treats it like any model. `model.path` instead
loads any HF causal LM (with its own tokenizer).

Choices where the sources are silent: untied input/output embeddings (the Llama
default); attention implementation `sdpa`; weights initialised by
`torch.manual_seed(init_seed)` before construction, so the same config gives
the same initial weights on every machine of the same torch version.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path

import numpy as np

from lze_bench import env
from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

ARCHS = ("llama", "qwen2")


def setup_torch(threads: int) -> None:
    """Threads for CPU math. OMP_WAIT_POLICY=PASSIVE (unless set) before torch loads:
    measured on a shared 2-core machine, spinning OpenMP threads lost up to 4x
    throughput to a competing process, passive ones about 10% when alone."""
    env.default_here(env.OMP_WAIT_POLICY)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own bars only; stdout stays for the CLI's final line
    if threads > 0:
        torch.set_num_threads(threads)


def resolve_device(name: str):
    """`cpu`, `cuda`, `cuda:N` or `auto` -> torch.device; CUDA asked for but absent fails in one line."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise LzeBenchError(f"device={name}: CUDA is not available on this machine; use device=cpu")
    return torch.device(name)


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def build_model(model_cfg, tokenizer, init_seed: int = 0):
    """A freshly initialised tiny causal LM for `tokenizer` from `ModelConfig`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if model_cfg.arch not in ARCHS:
        raise LzeBenchError(f"model.arch: unknown architecture {model_cfg.arch!r}; use one of {', '.join(ARCHS)}")
    hf_config = AutoConfig.for_model(
        model_cfg.arch,
        vocab_size=len(tokenizer),
        hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size,
        num_hidden_layers=model_cfg.num_layers,
        num_attention_heads=model_cfg.num_heads,
        num_key_value_heads=model_cfg.num_kv_heads,
        max_position_embeddings=model_cfg.max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(init_seed)
    model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa")
    return model.to(torch_dtype(model_cfg.dtype))


def save_policy(model, tokenizer, directory: str | Path) -> None:
    """An HF checkpoint directory: config.json, model.safetensors, tokenizer files, generation config."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    with _no_deepspeed_probe():
        model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))


@contextlib.contextmanager
def _no_deepspeed_probe():
    """Keep `save_pretrained` from importing DeepSpeed, which this backend never uses.

    transformers' `unwrap_model` calls accelerate's `extract_model_from_parallel`
    (accelerate/utils/other.py), which imports deepspeed whenever it is installed
    (OpenRLHF brings it) only to test `isinstance(model, DeepSpeedEngine)`. That
    import costs seconds and prints DeepSpeed's "Setting accelerator to CPU"
    warning to stdout on every CPU run. Our model is a plain module, never an
    engine, so the probe is answered "not installed" for the duration of the
    call; when deepspeed is already imported (something else in the process uses
    it) nothing is changed.
    """
    other = sys.modules.get("accelerate.utils.other")
    if other is None:
        try:
            import accelerate.utils.other as other
        except ImportError:  # no accelerate: transformers unwraps by hand, no deepspeed import
            other = None
    if other is None or "deepspeed" in sys.modules or not hasattr(other, "is_deepspeed_available"):
        yield
        return
    probe = other.is_deepspeed_available
    other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        other.is_deepspeed_available = probe


def load_policy(directory: str | Path, device, dtype: str = "float32"):
    """(model, tokenizer) from an HF directory or hub id; the tokenizer pads on the left."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lze_bench.hub import hub_model_path

    from safetensors import SafetensorError

    source = hub_model_path(str(directory))  # an unreachable hub id fails here, not after 22 retry lines
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype(dtype))
    except (OSError, ValueError, SafetensorError) as exc:  # missing/truncated files, an unknown config
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise LzeBenchError(f"model.path={directory}: cannot load a Hugging Face model there ({first})") from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device), tokenizer


def count_parameters(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def right_padded(sequences: list, pad_id: int, device):
    """int64[B, W] with each sequence left-aligned; a causal LM needs no mask for right padding."""
    import torch

    width = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        batch[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return batch.to(device)


def sequence_logprobs(model, sequences: list, prompt_lens, pad_id: int, temperature: float = 1.0):
    """Log-probs of every response token: (logp float32[B, W-1], mask float32[B, W-1]).

    Column j holds log p(token j+1 | tokens <= j), with logits divided by
    `temperature` (the rollout temperature, so the trained policy is the
    sampled one). `mask` is 1 on the response tokens of each sequence: targets
    at positions prompt_len .. len-1.
    """
    import torch

    device = next(model.parameters()).device
    inputs = right_padded(sequences, pad_id, device)
    logits = model(input_ids=inputs).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, inputs[:, 1:, None]).squeeze(-1)
    columns = torch.arange(inputs.shape[1] - 1, device=device)[None, :]
    starts = torch.as_tensor(np.asarray(prompt_lens) - 1, device=device)[:, None]
    ends = torch.as_tensor(np.array([len(s) for s in sequences]) - 1, device=device)[:, None]
    mask = ((columns >= starts) & (columns < ends)).float()
    return logp, mask
