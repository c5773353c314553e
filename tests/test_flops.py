"""FLOP accounting (design.md "FLOP accounting"): hand-computed cases and the model's own weights."""

from __future__ import annotations

import numpy as np

from lze_bench.config.schema import ModelConfig
from lze_bench.flops import FlopModel


def test_forward_matches_a_hand_computed_case():
    # N = 10 matmul weights, 2 layers, d_attn = 4, L = 3:
    # 2·10·3 = 60 (weights) + 2·2·4·3·4 = 192 (causal QK and AV) = 252
    flops = FlopModel(matmul_params=10, n_layer=2, d_attn=4)
    assert flops.forward(3) == 252
    assert flops.forward([3, 3]) == 504
    assert flops.forward(0) == 0
    assert flops.generation([2], [1]) == 252  # KV-cached generation costs F(prompt + response)
    assert flops.logprob([3]) == 252
    assert flops.train([3]) == 3 * 252  # forward + backward


def test_counts_are_exact_python_integers_beyond_int64():
    big = FlopModel(matmul_params=7_000_000_000, n_layer=28, d_attn=3584)
    total = big.train(np.full(1_000_000, 4096))
    assert isinstance(total, int) and total > 2**63
    assert total == 3 * (2 * 7_000_000_000 * 4096 * 10**6 + 2 * 28 * 3584 * 4096 * 4097 * 10**6)


def _tiny_model(**sizes):
    from lze_bench.backends.local.model import build_model
    from lze_bench.backends.local.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    return build_model(ModelConfig(**sizes), tokenizer), len(tokenizer)


def test_hand_count_of_a_grouped_query_llama_equals_its_linear_weights():
    model, vocab = _tiny_model(hidden_size=8, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=16)
    # per layer: q 8x8 + o 8x8 + k 8x4 + v 8x4 (one KV head of dim 4) + MLP 3x8x16 = 576; LM head 8 x vocab
    expected = 2 * (64 + 64 + 32 + 32 + 384) + 8 * vocab
    from_weights = FlopModel.from_torch_model(model)
    assert from_weights.matmul_params == expected
    assert from_weights == FlopModel.from_hf_config(model.config)
    assert from_weights.d_attn == 8 and from_weights.n_layer == 2


def test_default_tiny_policy_config_and_weights_agree():
    model, _ = _tiny_model()
    from_weights = FlopModel.from_torch_model(model)
    assert from_weights == FlopModel.from_hf_config(model.config)
    embeddings = model.get_input_embeddings().weight.numel()
    norms = sum(p.numel() for name, p in model.named_parameters() if "norm" in name)
    # every parameter is a matmul weight except the input embedding (a lookup) and the norms
    assert from_weights.matmul_params == sum(p.numel() for p in model.parameters()) - embeddings - norms
