"""Batched sampling with a KV cache, counting every prompt and response token exactly.

One function serves rollouts (temperature sampling), held-out evaluation
(greedy) and the warm start's accuracy check. Per sampled sequence it returns
the response token ids (with the EOS token when one was emitted), the
log-probability of each sampled token under the temperature-scaled full
distribution (the behaviour policy mu: ASTRAL's replay loss needs it, and it
is never used as the PPO "old" policy of fresh groups, see grpo.py), and the
mean token entropy (`response_entropy` of a RolloutBatch).

Choices where the spec is silent:
- prompts are left-padded into chunks of at most `chunk_size` sequences,
  sorted by prompt length so padding is small; results return in input order;
- a sequence stops at EOS or at `max_new_tokens`; rows that have stopped are
  dropped from the batch and the cache (`Cache.batch_select_indices`) once a
  quarter of the chunk has stopped, so long answers do not make short ones pay;
- FLOPs count the tokens of each sequence (design.md: F(prompt + response)
  per sample), not padding, so a count does not depend on how we batch;
- randomness: one `torch.Generator` per call, seeded by the caller from
  (seed, step, round), so a resumed run samples exactly what an unbroken one would;
- the KV cache is a `DynamicCache` we make and pass in, updated in place by the
  model, so the loop never reads it back from the output: transformers renamed the
  forward argument and output field from `past_key_values` to `cache` (5.2x; the old
  name warns and goes in 5.40), and `cache_kwarg` finds which name the installed
  version takes, so every version we allow runs without a deprecated call.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np


@dataclass
class Generation:
    """Per sampled sequence, in input order."""

    prompt_tokens: np.ndarray  # int32[S]
    response_ids: list  # S x int64[R_s] (EOS included when emitted)
    logprobs: list  # S x float32[R_s]  log mu(token)
    entropy: np.ndarray  # float32[S]  mean token entropy of the response
    texts: list  # S x str, special tokens removed

    @property
    def response_tokens(self) -> np.ndarray:
        return np.array([len(r) for r in self.response_ids], dtype=np.int32)


def _sample(logits, temperature: float, top_p: float, greedy: bool, generator):
    """(token[B], logprob[B], entropy[B]) from last-position logits[B, V]."""
    import torch

    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    probs = logp.exp()
    entropy = -(probs * logp).sum(-1)
    if greedy:
        token = probs.argmax(-1)
    else:
        sample_probs = probs
        if top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = (sorted_p.cumsum(-1) - sorted_p) > top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            sample_probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        token = torch.multinomial(sample_probs, 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1), entropy


def cache_kwarg(model) -> str:
    """The name under which the installed transformers' `forward` takes a KV cache: `cache` or `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _generate_chunk(model, prompts, *, pad_id, eos_id, max_new_tokens, temperature, top_p, greedy, generator):
    import torch

    device = next(model.parameters()).device
    batch, width = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    from transformers import DynamicCache

    cache, cache_arg = DynamicCache(config=model.config), cache_kwarg(model)
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                   **{cache_arg: cache}).logits[:, -1]
    next_pos = positions[:, -1] + 1
    alive = torch.arange(batch, device=device)  # original row of each batch row
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((batch, max_new_tokens), device=device)
    ent_sum = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    for t in range(max_new_tokens):
        token, logp, entropy = _sample(logits, temperature, top_p, greedy, generator)
        active = ~done[alive]  # in the batch and not finished: a row is active from t=0 to its EOS
        rows = alive[active]
        tokens[rows, t], logps[rows, t] = token[active], logp[active]
        ent_sum[rows] += entropy[active]
        lengths[rows] += 1
        done[rows[token[active] == eos_id]] = True
        if t == max_new_tokens - 1 or bool(done.all()):
            break
        stopped = done[alive]
        if int(stopped.sum()) * 4 >= alive.numel():  # compact: drop finished rows from batch and cache
            index = (~stopped).nonzero().squeeze(-1)
            cache.batch_select_indices(index)
            alive, token, mask, next_pos = alive[index], token[index], mask[index], next_pos[index]
        mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=device)], dim=1)
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                       use_cache=True, **{cache_arg: cache}).logits[:, -1]
        next_pos = next_pos + 1
    lengths = lengths.cpu().numpy()
    tokens, logps = tokens.cpu().numpy(), logps.float().cpu().numpy()
    ent_mean = (ent_sum.cpu().numpy() / np.maximum(lengths, 1)).astype(np.float32)
    return [tokens[i, : lengths[i]] for i in range(batch)], [logps[i, : lengths[i]] for i in range(batch)], ent_mean


def generate(model, tokenizer, prompts: list, *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, generator=None, chunk_size: int = 256) -> Generation:
    """Sample one response per prompt (lists of token ids); see the module docstring."""
    import torch

    order = np.argsort([len(p) for p in prompts], kind="stable")
    response_ids, logprobs = [None] * len(prompts), [None] * len(prompts)
    entropy = np.zeros(len(prompts), dtype=np.float32)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(prompts), chunk_size):
            index = order[start:start + chunk_size]
            ids, lps, ents = _generate_chunk(
                model, [prompts[i] for i in index], pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id,
                max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy,
                generator=generator)
            for slot, i in enumerate(index):
                response_ids[i], logprobs[i], entropy[i] = ids[slot], lps[slot], ents[slot]
    model.train(was_training)
    texts = tokenizer.batch_decode([r.tolist() for r in response_ids], skip_special_tokens=True)
    prompt_tokens = np.array([len(p) for p in prompts], dtype=np.int32)
    return Generation(prompt_tokens, response_ids, logprobs, entropy, texts)
