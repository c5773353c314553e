"""backend=openrlhf selector features (features.ActorFeatures + actor_features.FeatureActorMixin) on CPU, no Ray.

A tiny seeded Llama stands in for the policy; "ranks" are plain objects
carrying the mixin (`self.actor.model` = the HF model, `self.args`), reached
through a dispatcher that does what OpenRLHF 0.11.2 does
(`RayActorGroup.async_run_method_batch`: ceil(len / ranks) consecutive items
per rank; `BaseModelActor.execute_batch`: one method call per item; the
trainer's flatten). Where OpenRLHF imports (with tests/stubs standing in for
vllm/flash_attn, as in test_openrlhf_hooks.py) its own dispatch code and
`_process_response_into_experience` are run too.

Every quantity is checked against the local backend's code on the same model:
`Features._prompt_entropy`, `Features._all_embeddings` and the costs it books,
and the rollout sampler's entropy (`generate`, whose `_sample` gives the
full-vocabulary entropy before top-p).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest

from lze_bench.backends.openrlhf.actor_features import FeatureActorMixin
from lze_bench.backends.openrlhf.features import CHARGE_FILE, EMBEDDINGS_FILE, ActorFeatures, response_spans
from lze_bench.errors import LzeBenchError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TESTS = Path(__file__).resolve().parent
STUBS = TESTS / "stubs"
VOCAB = 48
EOS = 2
T = 0.7
# Every skip for a missing OpenRLHF names the command that installs it.
INSTALL_HINT = "install it: bash .ci/openrlhf.sh (CPU, these tests) or pip install 'lze-bench[openrlhf]' (GPU nodes)"
# 7 prompts of different lengths (right padding inside micro-batches is exercised)
FORWARDS = [0]  # forwards of the test model's backbone so far (a hook counts them)
PROMPTS = [[(7 * i + 3 * j) % (VOCAB - 3) + 3 for j in range(3 + (5 * i) % 9)] for i in range(7)]


def _import_openrlhf(modules) -> str | None:
    """Import OpenRLHF modules (stubs for vllm/flash_attn only when missing); the failing import's message."""
    missing = [name for name in ("vllm", "flash_attn") if importlib.util.find_spec(name) is None]
    if missing:
        sys.path.insert(0, str(STUBS))
    try:
        for module in modules:
            importlib.import_module(module)
    except Exception as exc:  # ImportError, or an import-time error of a heavy dependency
        return f"{type(exc).__name__}: {exc}"
    finally:
        if missing:
            sys.path.remove(str(STUBS))
            for name in list(sys.modules):
                if name.split(".")[0] in missing:
                    del sys.modules[name]
    return None


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    # a wide init so next-token distributions are far from uniform (entropy ~1-3 nats, not log V)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.3, pad_token_id=0, bos_token_id=1, eos_token_id=EOS)
    model = LlamaForCausalLM(config).eval()
    model.base_model.register_forward_pre_hook(lambda *_: FORWARDS.__setitem__(0, FORWARDS[0] + 1))
    return model


@pytest.fixture(scope="module")
def flop_model(model):
    from lze_bench.flops import FlopModel

    return FlopModel.from_torch_model(model)


class Rank(FeatureActorMixin):
    """A policy actor rank as the mixin sees it (the real one: PolicyModelActor / _CpuPolicyActor)."""

    def __init__(self, model, micro_batch_size=2):
        self.actor = SimpleNamespace(model=model)
        self.args = SimpleNamespace(rollout=SimpleNamespace(micro_batch_size=micro_batch_size))
        self.strategy = SimpleNamespace(is_rank_0=lambda: True, args=self.args)  # execute_batch's tqdm asks


class Dispatch:
    """`call_actors` as the trainer builds it, with OpenRLHF 0.11.2's splitting done in-process.

    Records per call the number of items and, per rank, the model forwards it ran.
    """

    def __init__(self, model, ranks: int, micro_batch_size: int = 2):
        self.ranks = [Rank(model, micro_batch_size) for _ in range(ranks)]
        self.calls: list[dict] = []

    def __call__(self, method_name, **lists):
        total = len(next(iter(lists.values())))
        assert all(len(v) == total for v in lists.values())
        effective = len(self.ranks)
        if total == 0 or total < effective:  # async_run_method_batch raises here too
            raise ValueError(f"Insufficient batch size: {total} < {effective}")
        chunk = -(-total // effective)
        results, forwards = [], []
        for index, rank in enumerate(self.ranks):
            part = {k: v[index * chunk:min((index + 1) * chunk, total)] for k, v in lists.items()}
            before = FORWARDS[0]
            for i in range(len(next(iter(part.values())))):  # execute_batch: one call per item
                results.append(getattr(rank, method_name)(**{k: v[i] for k, v in part.items()}))
            forwards.append(FORWARDS[0] - before)
        self.calls.append({"method": method_name, "items": total, "forwards": forwards})
        return results


def refuse(*_, **__):
    raise AssertionError("the actors were called")


def tokens_of(ids):
    return [PROMPTS[int(i)] for i in ids]


def actor_features(call, flop_model, run_dir, dp_size=2, micro_batch_size=2, resume_step=0, temperature=T):
    return ActorFeatures(call, tokens_of, flop_model, temperature, run_dir, len(PROMPTS), dp_size,
                         micro_batch_size=micro_batch_size, resume_step=resume_step)


def local_features(model, flop_model, run_dir, temperature=T):
    from lze_bench.backends.local.features import Features

    return Features(model, PROMPTS, flop_model, 0, temperature, run_dir, lambda: model, chunk_size=3)


def direct_entropy(model, seq, start, end, temperature):
    """Mean entropy of softmax(logits / T) over logit positions [start, end), one unbatched forward."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq])).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return float(entropy[start:end].mean()) if end > start else 0.0


# -- prompt entropy (HIVE) --

def test_prompt_entropy_equals_local_backend(model, flop_model, tmp_path):
    ids = np.array([4, 0, 6, 2, 5])  # 3 micro-batches of 2 -> padded to 4 items over 2 ranks
    local = local_features(model, flop_model, tmp_path / "local")
    expected = local("prompt_entropy", ids)
    local_flops, _ = local.take_costs()
    call = Dispatch(model, ranks=2)
    feats = actor_features(call, flop_model, tmp_path / "run")
    got = feats("prompt_entropy", ids)
    assert got.dtype == np.float32 and got.shape == (5,)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    flops, seconds = feats.take_costs()
    assert flops == local_flops == flop_model.forward([len(PROMPTS[i]) for i in ids]) and seconds > 0
    assert feats.take_costs() == (0, 0.0)
    assert call.calls == [{"method": "lze_entropy", "items": 4, "forwards": [2, 2]}]
    # the test can fail: another temperature, or the span without the last prompt position, differ
    wrong_t = local_features(model, flop_model, tmp_path / "t1", temperature=1.0)("prompt_entropy", ids)
    assert np.abs(wrong_t - expected).max() > 1e-2
    short = [direct_entropy(model, PROMPTS[i], 0, len(PROMPTS[i]) - 1, T) for i in ids]
    assert np.abs(np.array(short) - expected).max() > 1e-3
    full = [direct_entropy(model, PROMPTS[i], 0, len(PROMPTS[i]), T) for i in ids]
    np.testing.assert_allclose(got, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dp_size,micro_batch_size", [(1, 8), (2, 1), (3, 2), (4, 3)])
def test_padding_to_ranks_does_not_change_values(model, flop_model, tmp_path, dp_size, micro_batch_size):
    ids = np.array([6, 1, 3, 0, 5, 2, 4])
    reference = local_features(model, flop_model, tmp_path / "local")("prompt_entropy", ids)
    call = Dispatch(model, ranks=dp_size, micro_batch_size=micro_batch_size)
    feats = actor_features(call, flop_model, tmp_path / "run", dp_size=dp_size, micro_batch_size=micro_batch_size)
    np.testing.assert_allclose(feats("prompt_entropy", ids), reference, rtol=0, atol=1e-5)
    hidden = feats("prompt_embedding", ids)
    np.testing.assert_allclose(hidden, local_features(model, flop_model, tmp_path / "l2")._all_embeddings()[ids],
                               rtol=0, atol=1e-5)
    for record in call.calls:
        assert record["items"] % dp_size == 0
        assert len(set(record["forwards"])) == 1, record  # every rank the same number of forwards (ZeRO-3)
    items = -(-len(ids) // micro_batch_size)
    assert call.calls[0]["items"] == items + (-items % dp_size)
    # padded repeats are not booked: the flops are those of the asked prompts
    assert feats.take_costs()[0] == (flop_model.forward([len(PROMPTS[i]) for i in ids])
                                     + flop_model.forward([len(p) for p in PROMPTS]))


def test_unknown_feature_and_empty_ask(model, flop_model, tmp_path):
    feats = actor_features(refuse, flop_model, tmp_path)
    with pytest.raises(LzeBenchError, match="prompt_entropy, prompt_embedding"):
        feats("response_length", [0])
    out = feats("prompt_entropy", np.zeros(0, dtype=np.int64))
    assert out.shape == (0,) and feats.take_costs()[0] == 0


# -- prompt embeddings (ASTRAL): initial policy, cached, booked once per kept ledger --

def test_embeddings_equal_local_backend_and_are_cached(model, flop_model, tmp_path):
    local = local_features(model, flop_model, tmp_path / "local")
    expected = local._all_embeddings()
    local_flops, _ = local.take_costs()
    call = Dispatch(model, ranks=2)
    run = tmp_path / "run"
    feats = actor_features(call, flop_model, run)
    feats.begin_step(0)
    got = feats("prompt_embedding", [3, 1])
    assert got.dtype == np.float32 and got.shape == (2, 32)
    np.testing.assert_allclose(got, expected[[3, 1]], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.load(run / EMBEDDINGS_FILE), expected, rtol=0, atol=1e-5)
    assert json.loads((run / CHARGE_FILE).read_text()) == {"charged_at_step": 0}
    assert feats.take_costs()[0] == local_flops == flop_model.forward([len(p) for p in PROMPTS])
    assert [c["method"] for c in call.calls] == ["lze_mean_hidden"]
    # asked again (this step or later): no pass, no cost
    feats.begin_step(1)
    np.testing.assert_array_equal(feats("prompt_embedding", [0, 6]), feats.embeddings[[0, 6]])
    assert feats.take_costs()[0] == 0 and len(call.calls) == 1
    # a resumed run whose step 0 was kept reads the file: no actor call, no cost
    resumed = actor_features(refuse, flop_model, run, resume_step=2)
    resumed.begin_step(2)
    np.testing.assert_array_equal(resumed("prompt_embedding", [5]), np.load(run / EMBEDDINGS_FILE)[[5]])
    assert resumed.take_costs()[0] == 0
    # the test can fail: the mean over all but the last prompt token differs
    with torch.no_grad():
        last = model(input_ids=torch.tensor([PROMPTS[3]]), output_hidden_states=True).hidden_states[-1][0]
    assert np.abs(last[:-1].mean(0).numpy() - expected[3]).max() > 1e-3
    np.testing.assert_allclose(last.mean(0).numpy(), expected[3], rtol=0, atol=1e-5)


def test_embeddings_rebooked_after_rolled_back_resume(model, flop_model, tmp_path):
    run = tmp_path / "run"
    full = flop_model.forward([len(p) for p in PROMPTS])
    first = actor_features(Dispatch(model, ranks=2), flop_model, run)
    first("prompt_embedding", [0])
    assert first.take_costs()[0] == full
    # crash before step 0's ledger row: resume at 0 re-books once, at the step that reads the file
    again = actor_features(refuse, flop_model, run, resume_step=0)
    again.begin_step(0)
    again("prompt_embedding", [0])
    again("prompt_embedding", [1])
    assert again.take_costs()[0] == full
    assert json.loads((run / CHARGE_FILE).read_text()) == {"charged_at_step": 0}
    # the local backend books the same on a resume that lost the paying step
    local = local_features(model, flop_model, run)
    local.embeddings_charged = False
    local._all_embeddings()
    assert local.take_costs()[0] == full
    # a later resume that kept step 0: nothing
    kept = actor_features(refuse, flop_model, run, resume_step=1)
    kept("prompt_embedding", [2])
    assert kept.take_costs()[0] == 0
    # no record of the paying step (crash between the .npy and the .json): book, and record this step
    (run / CHARGE_FILE).unlink()
    lost = actor_features(refuse, flop_model, run, resume_step=5)
    lost.begin_step(5)
    lost("prompt_embedding", [2])
    assert lost.take_costs()[0] == full
    assert json.loads((run / CHARGE_FILE).read_text()) == {"charged_at_step": 5}
    later = actor_features(refuse, flop_model, run, resume_step=6)
    later("prompt_embedding", [0])
    assert later.take_costs()[0] == 0
    rolled = actor_features(refuse, flop_model, run, resume_step=5)
    rolled.begin_step(5)
    rolled("prompt_embedding", [0])
    assert rolled.take_costs()[0] == full


def test_embeddings_first_asked_after_step_0_is_refused(model, flop_model, tmp_path):
    feats = actor_features(refuse, flop_model, tmp_path, resume_step=3)
    with pytest.raises(LzeBenchError, match="initial policy"):
        feats("prompt_embedding", [0])
    feats = actor_features(refuse, flop_model, tmp_path)
    feats.begin_step(1)
    with pytest.raises(LzeBenchError, match="step 1"):
        feats("prompt_embedding", [0])
    np.save(tmp_path / EMBEDDINGS_FILE, np.zeros((3, 4), dtype=np.float32))  # another data set's file
    with pytest.raises(LzeBenchError, match="shape"):
        actor_features(refuse, flop_model, tmp_path, resume_step=3)("prompt_embedding", [0])


# -- response entropy (HIVE) --

def _samples():
    """(sequence, prompt length) pairs: prompt + response tokens, responses of 1..6 tokens."""
    rng = np.random.default_rng(1)
    out = []
    for i, prompt in enumerate(PROMPTS[:6]):
        response = [int(t) for t in rng.integers(3, VOCAB, size=1 + i)]
        out.append((prompt + response, len(prompt)))
    return out


def test_response_entropy_equals_direct_computation(model, flop_model, tmp_path):
    samples = _samples()
    seqs = [s for s, _ in samples]
    starts = [p - 1 for _, p in samples]  # logits at P-1 predict the first response token
    ends = [len(s) - 1 for s, _ in samples]
    call = Dispatch(model, ranks=2, micro_batch_size=4)
    feats = actor_features(call, flop_model, tmp_path, micro_batch_size=4)
    got = feats.response_entropy(seqs, starts, ends)
    expected = [direct_entropy(model, s, a, b, T) for s, a, b in zip(seqs, starts, ends)]
    assert got.dtype == np.float32 and got.shape == (6,)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert feats.take_costs()[0] == flop_model.forward([len(s) for s in seqs])
    assert call.calls[0]["forwards"] == [1, 1]
    # the test can fail: a span shifted by one, or T = 1, differ
    shifted = [direct_entropy(model, s, a + 1, b + 1, T) for s, a, b in zip(seqs, starts, ends)]
    assert np.abs(np.array(shifted) - expected).max() > 1e-3
    untempered = [direct_entropy(model, s, a, b, 1.0) for s, a, b in zip(seqs, starts, ends)]
    assert np.abs(np.array(untempered) - expected).max() > 1e-2
    # an empty span gives 0 (the local sampler's sum / max(n, 1))
    assert feats.response_entropy([seqs[0]], [3], [3]).tolist() == [0.0]


def _experience(sequence, prompt_len, max_len):
    """What SamplesGenerator._process_response_into_experience (0.11.2) builds for one vLLM response."""
    error = _import_openrlhf(["openrlhf.trainer.ppo_utils.samples_generator"])
    if error:
        pytest.skip(f"OpenRLHF 0.11.2 does not import ({error}); {INSTALL_HINT}")
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    response = {"observation_tokens": list(sequence), "action_ranges": [(prompt_len, len(sequence))],
                "reward": 0.0, "scores": 0.0, "rollout_log_probs": None, "prompt": "p", "label": "l",
                "extra_logs": {}, "truncated": False}
    return SamplesGenerator._process_response_into_experience(None, response, max_len=max_len)


def test_response_spans_follow_openrlhf_action_mask():
    prompt, response = [5, 6, 7, 8], [9, 10, EOS]
    exp = _experience(prompt + response, len(prompt), max_len=64)
    assert response_spans([exp]) == ([prompt + response], [3], [6])  # [P-1, P-1+R)
    assert int(exp.response_length[0]) == 6 - 3
    # truncated to max_len = 6 tokens: two response tokens left, predicted from positions 3 and 4
    exp = _experience(prompt + response, len(prompt), max_len=6)
    assert response_spans([exp]) == ([prompt + response[:2]], [3], [5])
    # the same layout built by hand, and the refusals
    layout = SimpleNamespace(sequences=torch.tensor([prompt + response]), attention_mask=torch.ones(1, 7),
                             action_mask=torch.tensor([[0, 0, 0, 1, 1, 1]]))
    assert response_spans([layout]) == ([prompt + response], [3], [6])
    layout.action_mask = torch.zeros(1, 6)
    assert response_spans([layout]) == ([prompt + response], [6], [6])
    layout.action_mask = torch.tensor([[0, 0, 0, 1, 0, 1]])
    with pytest.raises(LzeBenchError, match="gaps"):
        response_spans([layout])


def test_response_entropy_equals_local_rollout_entropy(model, flop_model, tmp_path):
    """The local sampler's per-response entropy (KV-cached generation, top_p < 1) for the same tokens."""
    from lze_bench.backends.local.rollout import generate

    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=EOS,
                                batch_decode=lambda ids, skip_special_tokens=True: [""] * len(ids))
    generator = torch.Generator().manual_seed(3)
    gen = generate(model, tokenizer, PROMPTS, max_new_tokens=6, temperature=T, top_p=0.9, generator=generator)
    experiences = [_experience(p + r.tolist(), len(p), max_len=128) for p, r in zip(PROMPTS, gen.response_ids)]
    seqs, starts, ends = response_spans(experiences)
    assert [b - a for a, b in zip(starts, ends)] == gen.response_tokens.tolist()
    feats = actor_features(Dispatch(model, ranks=2), flop_model, tmp_path)
    np.testing.assert_allclose(feats.response_entropy(seqs, starts, ends), gen.entropy, rtol=0, atol=1e-4)
    assert feats.take_costs()[0] == flop_model.forward([len(s) for s in seqs])


# -- the mixin on OpenRLHF's own objects --

def test_openrlhf_dispatch_code_gives_the_same_results(model, flop_model, tmp_path):
    """OpenRLHF's RayActorGroup.async_run_method_batch + BaseModelActor.execute_batch, Ray replaced in-process."""
    error = _import_openrlhf(["openrlhf.trainer.ray.launcher"])
    if error:
        pytest.skip(f"OpenRLHF 0.11.2 does not import ({error}); {INSTALL_HINT}")
    import itertools

    import ray
    from openrlhf.trainer.ray.launcher import BaseModelActor, RayActorGroup

    ranks = [Rank(model) for _ in range(3)]
    handles = [SimpleNamespace(execute_batch=SimpleNamespace(
        remote=lambda m, data, a, b, rank=rank: BaseModelActor.execute_batch(rank, m, data, a, b))) for rank in ranks]
    group = SimpleNamespace(_actor_handlers=handles, duplicate_actors=1)

    def call_actors(method_name, **lists):
        with mock.patch.object(ray, "put", lambda value: value):
            refs = RayActorGroup.async_run_method_batch(group, method_name, **lists)
        return list(itertools.chain.from_iterable(refs))  # ray.get + the trainer's flatten

    ids = np.array([6, 1, 3, 0, 5, 2, 4])
    feats = actor_features(call_actors, flop_model, tmp_path, dp_size=3)
    fake = actor_features(Dispatch(model, ranks=3), flop_model, tmp_path / "fake", dp_size=3)
    np.testing.assert_array_equal(feats("prompt_entropy", ids), fake("prompt_entropy", ids))
    np.testing.assert_array_equal(feats("prompt_embedding", ids), fake("prompt_embedding", ids))


def test_mixin_through_openrlhf_actor_wrapper_and_args(model):
    """`self.actor` = openrlhf.models.Actor (as in the CPU stand-in); args on the strategy (as in PolicyModelActor)."""
    error = _import_openrlhf(["openrlhf.models"])
    if error:
        pytest.skip(f"OpenRLHF 0.11.2 does not import ({error}); {INSTALL_HINT}")
    from openrlhf.models import Actor

    rank = FeatureActorMixin()
    rank.actor = Actor(model, packing_samples=False, temperature=T)
    rank.strategy = SimpleNamespace(args=SimpleNamespace(rollout=SimpleNamespace(micro_batch_size=3)))
    assert rank._lze_micro_batch_size() == 3
    got = rank.lze_entropy(PROMPTS[:4], [0] * 4, [len(p) for p in PROMPTS[:4]], T)
    np.testing.assert_allclose(got, [direct_entropy(model, p, 0, len(p), T) for p in PROMPTS[:4]], atol=1e-5)
    model.train()
    rank.lze_mean_hidden(PROMPTS[:1], [0], [2])
    assert model.training  # the caller's mode is restored
    model.eval()
    assert FeatureActorMixin()._lze_micro_batch_size() == 8
    with pytest.raises(ValueError, match="outside"):
        rank.lze_entropy([[3, 4]], [0], [3], T)


def test_installed_policy_actor_carries_the_feature_passes():
    """entry.py installs make_policy_actor(OpenRLHF's PolicyModelActor): our methods on top of its class."""
    error = _import_openrlhf(["openrlhf.trainer.ray.ppo_actor"])
    if error:
        pytest.skip(f"OpenRLHF does not import ({error}); {INSTALL_HINT}")
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    from lze_bench.backends.openrlhf.actor import StepBatchMixin, make_policy_actor

    installed = make_policy_actor(ppo_actor.PolicyModelActor).__ray_actor_class__
    assert issubclass(installed, FeatureActorMixin) and issubclass(installed, StepBatchMixin)
    assert issubclass(installed, ppo_actor.PolicyModelActor.__ray_actor_class__)
    assert callable(installed.lze_entropy) and callable(installed.lze_mean_hidden)


# -- memory and balance on a real model size --

def test_entropy_pass_never_holds_more_logits_than_its_bound(model, monkeypatch):
    """The full [B, W, V] logits of a micro-batch are never made (a 1.5B policy's would be 18.5 GiB): every
    logits tensor produced (recorded at torch's `linear`, which any output head goes through) fits the bound."""
    from lze_bench.backends.openrlhf import actor_features

    bound = 3 * VOCAB * 2  # 3 positions of a micro-batch of 2
    monkeypatch.setattr(actor_features, "_LOGITS_ELEMENTS", bound, raising=False)
    largest = [0]
    linear = torch.nn.functional.linear

    def recording_linear(*args, **kwargs):
        out = linear(*args, **kwargs)
        if out.shape[-1] == VOCAB:
            largest[0] = max(largest[0], out.numel())
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", recording_linear)
    rank = Rank(model, micro_batch_size=2)
    seqs = [PROMPTS[1], PROMPTS[5], PROMPTS[2]]  # widths up to 12 tokens: 2 x 12 x V logits unsliced
    got = rank.lze_entropy(seqs, [0, 2, 1], [len(s) for s in seqs], T)
    assert 0 < largest[0] <= bound
    monkeypatch.setattr(torch.nn.functional, "linear", linear)
    np.testing.assert_allclose(got, [direct_entropy(model, s, a, len(s), T) for s, a in zip(seqs, [0, 2, 1])],
                               atol=1e-5)


def test_long_and_short_micro_batches_are_dealt_over_the_ranks(model, flop_model, tmp_path):
    """OpenRLHF gives rank r a consecutive chunk of the items; the controller deals the length-sorted
    micro-batches round-robin, so no rank gets all the longest ones (the others would wait for it)."""
    tokens_per_rank: list[list[int]] = []

    def call_actors(method_name, **lists):
        ranks, total = 2, len(lists["sequences"])
        chunk = -(-total // ranks)
        tokens_per_rank.append([sum(len(s) for item in lists["sequences"][r * chunk:(r + 1) * chunk] for s in item)
                                for r in range(ranks)])
        rank = Rank(model, micro_batch_size=1)
        return [getattr(rank, method_name)(**{k: v[i] for k, v in lists.items()}) for i in range(total)]

    seqs = [[5] * length for length in (2, 3, 4, 5, 20, 21, 22, 23)]  # four short, four long
    feats = actor_features(call_actors, flop_model, tmp_path, dp_size=2, micro_batch_size=1)
    got = feats.response_entropy(seqs, [0] * len(seqs), [len(s) for s in seqs])
    short, long_ = tokens_per_rank[0]
    assert abs(short - long_) <= 23 + 3  # interleaved: within one long and one short micro-batch of each other
    np.testing.assert_allclose(got, [direct_entropy(model, s, 0, len(s), T) for s in seqs], atol=1e-5)


# -- ASTRAL's frozen encoder for the learned head (head.ClusterEncoder + FeatureActorMixin.lze_encode) --


@pytest.mark.parametrize("dp_size,chunk", [(1, 128), (2, 3), (3, 2), (4, 5)])
def test_encoder_on_the_ranks_equals_the_local_encoder(model, tmp_path, dp_size, chunk):
    """Chunk c of the questions runs on rank c mod dp, each rank loading the frozen encoder (not its policy) for
    the call: the embeddings and the FLOPs are exactly the local backend's Encoder.embed with the same chunks,
    whatever the number of ranks (ranks left without a chunk load nothing)."""
    sys.path.insert(0, str(TESTS / "openrlhf_cpu"))
    try:
        from lze_cpu_standins.fixtures import save_tiny_policy
    finally:
        sys.path.remove(str(TESTS / "openrlhf_cpu"))
    from lze_bench.backends.openrlhf.head import ClusterEncoder
    from lze_bench.predictor.encoder import Encoder

    encoder = str(save_tiny_policy(tmp_path / "encoder", ["Is 1 odd?"], steps=1, hidden_size=24))
    questions = [f"Is {i} odd? Reply 1 for yes, 0 for no." + " really" * (i % 4) for i in range(11)]
    loads = []
    real_load = Encoder.load

    def counted_load(name, path, device="cpu"):
        loads.append(str(path))
        return real_load(name, path, device)

    with mock.patch.object(Encoder, "load", counted_load):
        got, flops = ClusterEncoder(encoder, Dispatch(model, dp_size), dp_size, chunk=chunk).embed(questions)
    want, want_flops = Encoder.load(encoder, encoder).embed(questions, chunk=chunk)
    np.testing.assert_array_equal(got, want)
    assert flops == want_flops > 0 and got.shape == (11, 24)
    assert loads == [encoder] * min(dp_size, -(-len(questions) // chunk))  # once per rank that has questions
