"""FLOP accounting: F(L) per forward pass, and nothing else (design.md "FLOP accounting").

With `N` = parameters used in a matmul per token (attention projections, MLP
and the LM head; the input embedding lookup is a gather and costs nothing),
`n_layer` layers and `d_attn` = heads x head_dim, one forward pass over a
sequence of `L` tokens costs

    F(L) = 2·N·L + 2·n_layer·d_attn·L·(L+1)

The first term is one multiply-add per weight per token. The second is causal
attention: token t attends to t keys, QK^T and AV each cost 2·d_attn per
(query, key) pair per layer, and sum_{t=1..L} t = L(L+1)/2.

Per pass (backends document which passes they run):
  generation with a KV cache   F(prompt + response)   per sampled sequence
  log-prob pass (old policy, reference, entropy probe)  F(L)
  training step (forward + backward)                    3·F(L)

Biases, norms, softmax and rotary embeddings are O(d) per token and are left
out, as in the usual 6·N·D estimate; the LM head is always counted, tied to
the input embedding or not, because it is a real matmul per token.
Counts are exact integers of the work done, computed from the sequence lengths
that were actually processed, never from config.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FlopModel:
    """The three numbers F(L) needs."""

    matmul_params: int  # N
    n_layer: int
    d_attn: int  # heads x head_dim (the query width)

    def forward(self, seq_len) -> int:
        """Sum of F(L) over one length or an array of lengths (exact Python int)."""
        lengths = np.asarray(seq_len, dtype=np.int64).reshape(-1)
        if lengths.size and lengths.min() < 0:
            raise ValueError("sequence lengths must be >= 0")
        linear = 2 * self.matmul_params * int(lengths.sum())
        quadratic = 2 * self.n_layer * self.d_attn * int((lengths * (lengths + 1)).sum())
        return linear + quadratic

    def generation(self, prompt_tokens, response_tokens) -> int:
        """Sampling with a KV cache: F(prompt + response) per sequence."""
        total = np.asarray(prompt_tokens, dtype=np.int64) + np.asarray(response_tokens, dtype=np.int64)
        return self.forward(total)

    def logprob(self, seq_len) -> int:
        """One extra forward pass (old policy, reference, entropy) per sequence."""
        return self.forward(seq_len)

    def train(self, seq_len) -> int:
        """Forward + backward: 3·F(L) per trained sequence."""
        return 3 * self.forward(seq_len)

    @classmethod
    def from_hf_config(cls, config) -> "FlopModel":
        """From a Llama/Qwen2/Mistral-style `transformers` config, without building the model.

        Per layer: q and o projections (hidden x heads·head_dim), k and v
        (hidden x kv_heads·head_dim), a gated MLP (3 x hidden x intermediate);
        plus the LM head (hidden x vocab).
        """
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        layers = int(config.num_hidden_layers)
        inter = int(config.intermediate_size)
        vocab = int(config.vocab_size)
        d_attn = heads * head_dim
        per_layer = 2 * hidden * d_attn + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
        return cls(matmul_params=layers * per_layer + hidden * vocab, n_layer=layers, d_attn=d_attn)

    @classmethod
    def from_torch_model(cls, model) -> "FlopModel":
        """Count the weights of every `nn.Linear` in a loaded model (tied LM head included)."""
        import torch

        matmul = sum(
            module.weight.numel() for module in model.modules() if isinstance(module, torch.nn.Linear)
        )
        config = model.config
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        return cls(matmul_params=int(matmul), n_layer=int(config.num_hidden_layers), d_attn=heads * head_dim)
