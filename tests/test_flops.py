"""FLOP accounting (design.md "FLOP accounting"): hand-computed cases and the model's own weights."""

from __future__ import annotations

import numpy as np
import pytest

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


@pytest.mark.parametrize("kl_coef, ppo_epochs", [(0.0, 1), (0.05, 2)])
def test_local_update_books_what_openrlhf_accounting_books_for_the_same_sequences(kl_coef, ppo_epochs):
    """One FLOP model for both backends (design.md "FLOP accounting"): the local GRPO update, run for
    real with its default old-log-prob pass, books the same flops_logprob / flops_train as the OpenRLHF
    accounting does for the same trained sequences and the same trainer knobs."""
    import torch

    from lze_bench.backends.local.grpo import Group, grpo_update
    from lze_bench.backends.openrlhf import accounting
    from lze_bench.backends.openrlhf.selection import Group as ScaleGroup, StepRecord
    from lze_bench.config.schema import TrainerConfig

    torch.manual_seed(0)
    model, vocab = _tiny_model(hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32)
    trainer = TrainerConfig(kl_coef=kl_coef, ppo_epochs=ppo_epochs, micro_batch_size=3)
    assert trainer.old_logprob_pass  # the default is the scale path's behaviour
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, vocab, size=p).tolist() for p in (5, 9)]
    responses = [[rng.integers(3, vocab, size=r) for r in lens] for lens in ((2, 7, 4), (3, 3, 11))]
    rewards = [np.array([1, 0, 1], dtype=np.float32), np.array([0, 0, 1], dtype=np.float32)]
    groups = [Group(i, 0, p, rs, [np.zeros(len(r), dtype=np.float32) for r in rs], w)
              for i, (p, rs, w) in enumerate(zip(prompts, responses, rewards))]
    flops = FlopModel.from_torch_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ref = _tiny_model(hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32)[0]
    local = grpo_update(model, optimizer, groups, trainer, flops, pad_id=0, ref_model=ref if kl_coef else None)

    scale = [ScaleGroup(g.prompt_id, g.rewards, np.array([len(r) for r in g.responses]),
                        np.array([len(g.prompt) + len(r) for r in g.responses])) for g in groups]
    record = StepRecord(step=0, rolled=scale, kept_flags=[True, True])
    row = accounting.ledger_row(record, {}, FlopModel.from_hf_config(model.config), ppo_epochs=ppo_epochs,
                                reference_pass=kl_coef > 0)
    lengths = np.array([len(g.prompt) + len(r) for g in groups for r in g.responses])
    assert local.flops_logprob == row["flops_logprob"] == (2 if kl_coef else 1) * flops.forward(lengths) > 0
    assert local.flops_train == row["flops_train"] == ppo_epochs * 3 * flops.forward(lengths)


def test_old_logprob_pass_off_runs_and_books_no_pass():
    import torch

    from lze_bench.backends.local.grpo import Group, grpo_update
    from lze_bench.config.schema import TrainerConfig

    model, vocab = _tiny_model(hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=32)
    group = Group(0, 0, [5, 6, 7], [np.array([8, 9]), np.array([10])], [np.zeros(2, np.float32), np.zeros(1, np.float32)],
                  np.array([1, 0], dtype=np.float32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    stats = grpo_update(model, optimizer, [group], TrainerConfig(old_logprob_pass=False), FlopModel.from_torch_model(model),
                        pad_id=0)
    assert stats.flops_logprob == 0 and stats.flops_train > 0
