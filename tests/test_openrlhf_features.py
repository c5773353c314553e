"""backend=openrlhf: hive's entropies and astral's embeddings from the policy ranks equal the local backend's.

The policy-rank side (actor_features.FeatureActorMixin) runs a tiny HF model;
the dealing of lists over ranks and OpenRLHF's `execute_batch` (one call per
list item) are reproduced in `deal`, so padding and order are exercised.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lze_bench.backends.local.features import Features
from lze_bench.backends.openrlhf.actor_features import FeatureActorMixin
from lze_bench.backends.openrlhf.features import ActorFeatures, response_spans
from lze_bench.flops import FlopModel

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [6, 6, 9, 9, 3]]
FLOPS = FlopModel(matmul_params=100, n_layer=2, d_attn=8)


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


class Rank(FeatureActorMixin):
    def __init__(self, hf_model, micro=2):
        self.actor = SimpleNamespace(model=hf_model)
        self.args = SimpleNamespace(rollout=SimpleNamespace(micro_batch_size=micro))


def deal(ranks, calls):
    """OpenRLHF's async_run_method_batch + execute_batch: ceil-sized chunks in order, one call per item."""

    def call_actors(method, **lists):
        total = len(next(iter(lists.values())))
        assert total % len(ranks) == 0  # every rank the same number of forwards
        size = math.ceil(total / len(ranks))
        out = []
        for r, rank in enumerate(ranks):
            for i in range(r * size, min((r + 1) * size, total)):
                calls.append(r)
                out.append(getattr(rank, method)(**{k: v[i] for k, v in lists.items()}))
        return out

    return call_actors


def features(model, tmp_path, ranks=3, micro=2, temperature=0.7):
    calls = []
    fn = ActorFeatures(deal([Rank(model)] * ranks, calls), lambda ids: [PROMPTS[i] for i in ids], FLOPS,
                       temperature, tmp_path, len(PROMPTS), ranks, micro_batch_size=micro)
    return fn, calls


def local(model, tmp_path, temperature=0.7):
    return Features(model, PROMPTS, FLOPS, pad_id=0, temperature=temperature, run_dir=tmp_path,
                    initial_model_loader=lambda: model)


def test_prompt_entropy_equals_the_local_backends(model, tmp_path):
    ours, calls = features(model, tmp_path / "a")
    ids = np.array([4, 0, 2])
    theirs = local(model, tmp_path / "b")
    np.testing.assert_allclose(ours("prompt_entropy", ids), theirs("prompt_entropy", ids), rtol=1e-5)
    assert sorted(set(calls)) == [0, 1, 2] and len(calls) == 3  # 2 micro-batches padded to one per rank
    assert ours.take_costs()[0] == theirs.take_costs()[0] == FLOPS.forward([5, 3, 4])
    hotter, _ = features(model, tmp_path / "c", temperature=1.3)
    assert not np.allclose(hotter("prompt_entropy", ids), theirs("prompt_entropy", ids))


def test_embeddings_are_the_initial_policys_cached_and_booked_once(model, tmp_path):
    ours, _ = features(model, tmp_path / "a", ranks=2)
    theirs = local(model, tmp_path / "b")
    np.testing.assert_allclose(ours("prompt_embedding", np.array([3, 1])),
                               theirs("prompt_embedding", np.array([3, 1])), rtol=1e-5, atol=1e-6)
    paid = FLOPS.forward([len(p) for p in PROMPTS])
    assert ours.take_costs()[0] == paid
    ours("prompt_embedding", np.array([0]))
    assert ours.take_costs()[0] == 0  # computed once
    kept, _ = features(model, tmp_path / "a", ranks=2)  # resume after the paying step 0 was kept
    kept.resume_at(3)
    kept.step = 4
    np.testing.assert_array_equal(kept("prompt_embedding", np.arange(5)), ours("prompt_embedding", np.arange(5)))
    assert kept.take_costs()[0] == 0
    redone, _ = features(model, tmp_path / "a", ranks=2)  # resume at step 0: the paying row was rolled back
    redone.resume_at(0)
    redone("prompt_embedding", np.arange(5))
    assert redone.take_costs()[0] == paid


def test_response_entropy_is_the_full_vocabulary_entropy_of_the_generated_positions(model, tmp_path):
    from openrlhf.trainer.ppo_utils.experience import Experience

    rows = [([5, 6, 7], [9, 4]), ([8, 9], [3, 3, 2])]
    experiences = []
    for prompt, response in rows:
        seq = torch.tensor(prompt + response)
        action = torch.zeros(len(seq) - 1, dtype=torch.bool)
        action[len(prompt) - 1:] = True
        experiences.append(Experience(sequences=seq[None], attention_mask=torch.ones(1, len(seq), dtype=torch.long),
                                      action_mask=action[None]))
    ours, _ = features(model, tmp_path, ranks=2, micro=1, temperature=0.7)
    values = ours.response_entropy(*response_spans(experiences))
    for (prompt, response), value in zip(rows, values):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float() / 0.7
        logp = torch.log_softmax(logits, -1)
        entropy = -(logp.exp() * logp).sum(-1)
        expected = entropy[len(prompt) - 1:len(prompt) + len(response) - 1].mean()  # positions predicting the response
        assert value == pytest.approx(float(expected), rel=1e-5)
    assert ours.take_costs()[0] == FLOPS.forward([5, 5])
