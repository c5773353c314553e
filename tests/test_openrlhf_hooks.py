"""backend=openrlhf against the real OpenRLHF 0.11.2: signatures we override, its argparse, the selection hook.

Runs where `openrlhf==0.11.2`, `ray` and `deepspeed` import (CI installs them on
CPU, see .ci/run). `vllm` and `flash_attn` cannot be installed on CPU: the
stubs in tests/stubs stand in for them only when the real packages are missing,
and are removed from `sys.path`/`sys.modules` right after OpenRLHF is imported
so no other test sees them. vLLM generation itself is replaced by responses
built the way `RolloutRayActor.generate_responses` returns them.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lze_bench.errors import LzeBenchError

STUBS = Path(__file__).resolve().parent / "stubs"
STUB_PACKAGES = ("vllm", "flash_attn")
OPENRLHF_MODULES = ("openrlhf.trainer.ppo_trainer", "openrlhf.trainer.ppo_utils.samples_generator",
                    "openrlhf.trainer.ppo_utils.experience_maker", "openrlhf.trainer.ray.vllm_engine")


def _import_openrlhf() -> str | None:
    """Import the OpenRLHF modules we subclass; the failing import's message, or None."""
    missing = [name for name in STUB_PACKAGES if importlib.util.find_spec(name) is None]
    stubs = None
    if missing:
        # only the missing packages' stubs: with vLLM's CPU build installed, a stub `vllm` first on sys.path would
        # shadow the real one (and stay in sys.modules for every later test, the real-engine ones included)
        standins = str(Path(__file__).resolve().parent / "openrlhf_cpu")
        sys.path.insert(0, standins)
        try:
            from lze_cpu_standins.harness import stub_path
        finally:
            sys.path.remove(standins)
        stubs = stub_path()
        sys.path.insert(0, stubs)
    try:
        for module in OPENRLHF_MODULES:
            importlib.import_module(module)
        importlib.import_module("lze_bench.backends.openrlhf.trainer")
    except Exception as exc:  # ImportError, or an import-time error of a heavy dependency
        return f"{type(exc).__name__}: {exc}"
    finally:
        if missing:
            sys.path.remove(stubs)
            for name in list(sys.modules):
                if name.split(".")[0] in missing:
                    del sys.modules[name]
    return None


# Every skip for a missing OpenRLHF names the command that installs it.
INSTALL_HINT = "install it: bash .ci/openrlhf.sh (CPU, these tests) or pip install 'lze-bench[openrlhf]' (GPU nodes)"

IMPORT_ERROR = _import_openrlhf()
pytestmark = pytest.mark.skipif(IMPORT_ERROR is not None,
                                reason=f"OpenRLHF 0.11.2 does not import ({IMPORT_ERROR}); {INSTALL_HINT}")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def names(fn) -> list[str]:
    # `@ray.remote` adds `_ray_trace_ctx` to the actor class's methods (Ray's tracing hook), not OpenRLHF
    return [p.name for p in inspect.signature(fn).parameters.values() if p.name != "_ray_trace_ctx"]


def test_pinned_version_and_private_signatures():
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer, PPOTrainer
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    from lze_bench.backends.openrlhf import require_openrlhf

    assert require_openrlhf() == "0.11.2"
    assert names(SamplesGenerator.__init__) == ["self", "strategy", "prompts_dataloader", "eval_dataloader",
                                                 "tokenizer", "vllm_engines"]
    assert names(SamplesGenerator._generate_vllm) == ["self", "dataloader_iter", "num_prompts", "dynamic_filtering",
                                                      "generate_kwargs"]
    dispatch = inspect.signature(SamplesGenerator._dispatch_prompts_to_vllm).parameters
    assert list(dispatch) == ["self", "prompts", "labels", "images", "generate_kwargs"]
    assert dispatch["images"].kind is inspect.Parameter.KEYWORD_ONLY
    assert names(SamplesGenerator._process_response_into_experience) == ["self", "response", "generate_kwargs"]
    assert names(SamplesGenerator.generate_samples) == ["self", "generate_kwargs"]
    assert names(BasePPOTrainer.save_logs_and_checkpoints) == ["self", "global_step", "logs_dict", "client_states"]
    assert names(BasePPOTrainer.init_checkpoint_states) == ["self"]
    base = PPOTrainer.__ray_actor_class__
    assert names(base.__init__) == ["self", "pretrain", "strategy", "actor_model_group", "critic_model_group",
                                    "reward_model_group", "reference_model_group", "vllm_engines", "generate_kwargs"]
    assert names(base.get_max_steps) == ["self"] and names(base.fit) == ["self", "global_step"]


def test_install_trainer_swaps_openrlhf_trainer_class(monkeypatch):
    import openrlhf.trainer.ppo_trainer as module

    from lze_bench.backends.openrlhf.entry import install_trainer
    from lze_bench.backends.openrlhf.trainer import LzePPOTrainer

    monkeypatch.setattr(module, "PPOTrainer", module.PPOTrainer)  # restored after the test
    actor_class = install_trainer()
    assert module.PPOTrainer is actor_class and hasattr(actor_class, "remote")
    assert actor_class.__ray_actor_class__ is LzePPOTrainer
    assert issubclass(LzePPOTrainer, module.BasePPOTrainer)


class Captured(Exception):
    def __init__(self, parsed):
        super().__init__("parsed")
        self.parsed = parsed


def openrlhf_parse(flags: list[str], monkeypatch):
    """OpenRLHF's own parser and validation on `flags` (its `train()` stops at get_strategy)."""
    import openrlhf.utils

    def capture(args):
        raise Captured(args)

    monkeypatch.setattr(openrlhf.utils, "get_strategy", capture)
    monkeypatch.setattr(sys, "argv", ["train_ppo_ray", *flags])
    with pytest.raises(Captured) as info:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    return info.value.parsed


def recipe_cfg(extra=()):
    import yaml

    from lze_bench.config import compose

    spec = yaml.safe_load((REPO / "sweeps" / "qwen25_math_1p5b.yaml").read_text())
    return compose("train", [*spec["overrides"], "selector=uniform", "seed=0", *extra])


def test_openrlhf_parses_and_validates_the_recipe_flags(ray_local, monkeypatch, tmp_path):
    from lze_bench.backends.openrlhf.command import REWARD_FUNC, RunPaths, openrlhf_flags

    cfg = recipe_cfg([f"run_dir={tmp_path}", "trainer.kl_coef=0.001"])
    args = openrlhf_parse(openrlhf_flags(cfg, RunPaths(tmp_path)), monkeypatch)
    assert (args.rollout.batch_size, args.rollout.n_samples_per_prompt, args.train.batch_size) == (128, 8, 1024)
    assert args.rollout.vllm_generate_batch_size == 128  # OpenRLHF's default: our batch, no over-sampling
    assert args.reward.remote_url == [str(REWARD_FUNC)]
    assert list(args.actor.eps_clip_low_high) == [0.2, 0.28] and args.actor.adam.lr == 1e-6
    assert args.algo.advantage.estimator == "group_norm" and args.critic.model_name_or_path is None
    assert args.algo.kl.init_coef == 0.001 and args.algo.kl.use_loss and args.algo.kl.estimator == "k3"
    assert args.ckpt.save_hf and args.ckpt.load_enable and args.ckpt.save_steps == -1  # our trainer saves
    assert args.ckpt.path == str(tmp_path / "openrlhf" / "ckpt")
    assert args.train.colocate_all and args.vllm.enable_sleep and args.ds.enable_sleep
    assert not args.algo.dynamic_filtering_enable and not args.train.async_enable
    assert (args.data.input_key, args.data.label_key, args.data.apply_chat_template) == ("input", "label", True)


# --- the selection hook on OpenRLHF's own generator and Experience objects ----------------

N, B, STEPS, PROMPT_TOKENS, RESPONSE_TOKENS = 4, 4, 2, 6, 3


def fake_responses(prompt: str, label: str, n: int) -> list[dict]:
    """What `RolloutRayActor.generate_responses` returns for one prompt: n single-turn responses."""
    prompt_id = json.loads(label)["id"]
    correct = 2 if prompt_id % 2 else 0  # odd prompts: 2 of 4 correct; even: none (dead groups)
    out = []
    for j in range(n):
        reward = 1.0 if j < correct else 0.0
        out.append({"prompt": prompt, "label": label, "images": None, "mm_train_inputs": None,
                    "observation_tokens": list(range(PROMPT_TOKENS + RESPONSE_TOKENS)),
                    "action_ranges": [(PROMPT_TOKENS, PROMPT_TOKENS + RESPONSE_TOKENS)], "rollout_log_probs": None,
                    "truncated": False, "reward": reward, "scores": reward, "extra_logs": {"grade_time_s": 0.01}})
    return out


def build_generator(ray_local, tmp_path, monkeypatch, selector: str, extra: tuple = ()):
    import torch
    from openrlhf.datasets import PromptDataset

    from lze_bench.backends.openrlhf.command import RunPaths, openrlhf_flags
    from lze_bench.backends.openrlhf.context import RunContext
    from lze_bench.backends.openrlhf.data import write_prompts
    from lze_bench.backends.openrlhf.generator import LzeSamplesGenerator
    from lze_bench.flops import FlopModel

    cfg = recipe_cfg([f"run_dir={tmp_path}", f"selector={selector}", f"trainer.batch_size={B}",
                      f"trainer.n_samples={N}", f"trainer.steps={STEPS}", "backend.gpus_per_node=1",
                      "backend.train_micro_batch_size=4", "backend.rollout_micro_batch_size=4",
                      "backend.apply_chat_template=false", *extra])
    paths = RunPaths(tmp_path)
    args = openrlhf_parse(openrlhf_flags(cfg, paths), monkeypatch)
    rows = [{"id": i, "problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(24)]
    write_prompts(rows, paths.prompts)
    data = [json.loads(line) for line in paths.prompts.read_text().splitlines()]
    strategy = SimpleNamespace(args=args, is_rank_0=lambda: True, print=lambda *a, **k: None)
    dataset = PromptDataset(data, None, strategy)
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=True, collate_fn=dataset.collate_fn)

    context = RunContext(cfg, num_prompts=len(dataset), flops=FlopModel(100, 2, 8))
    generator = LzeSamplesGenerator(strategy=strategy, prompts_dataloader=loader, eval_dataloader=None,
                                    tokenizer=None, vllm_engines=[FakeEngine(ray_local), FakeEngine(ray_local)],
                                    context=context, on_untrained=lambda r: context.write_step(r, {}))
    return generator, context


class FakeEngine:
    """A rollout engine handle (the one thing replaced): OpenRLHF's own dispatch calls it. It answers
    `generate_responses` as `RolloutRayActor` does (fake_responses; sample j of a prompt is its j-th request
    since the prompt's last full group) and records each request's (prompt id, num_samples, seed)."""

    def __init__(self, ray):
        from collections import Counter

        self.ray, self.requests, self.asked = ray, [], Counter()
        self.get_num_unfinished_requests = SimpleNamespace(remote=lambda: ray.put(0))
        self.generate_responses = SimpleNamespace(remote=self._generate)
        for name in ("wake_up", "sleep"):  # vLLM sleep mode around generation (the recipe's vllm_enable_sleep)
            setattr(self, name, SimpleNamespace(remote=lambda *args, **kwargs: ray.put(None)))
        # Ray's `__ray_call__` (engine_tokenizer.py sends the tokenizer with it) and the handle's actor id
        self._actor_id = SimpleNamespace(hex=lambda: f"fake-{id(self)}")
        self.__ray_call__ = SimpleNamespace(remote=self._call)
        self.calls, self.tokenizers = 0, []

    def _call(self, fn, *args):
        self.calls += 1
        return self.ray.put(fn(self, *args))

    def _generate(self, *, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images=None):
        self.tokenizers.append(hf_tokenizer)
        prompt_id = json.loads(label)["id"]
        self.requests.append((prompt_id, num_samples, getattr(sampling_params, "seed", None)))
        j = self.asked[prompt_id] % N
        self.asked[prompt_id] += 1
        return self.ray.put(fake_responses(prompt, label, N)[j : j + num_samples])


GENERATE_KWARGS = {"do_sample": True, "max_len": 64, "max_new_tokens": RESPONSE_TOKENS, "temperature": 1.0,
                   "top_p": 1.0}


def test_generate_samples_returns_exact_groups_in_our_data_order(ray_local, tmp_path, monkeypatch):
    from lze_bench.data_order import DataOrder

    generator, context = build_generator(ray_local, tmp_path, monkeypatch, "uniform")
    samples, pass_rate, consumed, exhausted = generator.generate_samples(**GENERATE_KWARGS)
    assert len(samples) == B * N and consumed == B and not exhausted and pass_rate is None
    ids = [json.loads(s.labels[0])["id"] for s in samples]
    assert ids[::N] == DataOrder(24, 0).permutation(0)[:B].tolist()  # ours, not the loader's shuffle
    assert all(ids[k:k + N] == [ids[k]] * N for k in range(0, len(ids), N))  # groups contiguous
    assert all(s.rewards.shape == (1,) for s in samples)
    record = generator.take_record()
    row = context.write_step(record, {"timing/ppo_train": 1.0})
    seq = PROMPT_TOKENS + RESPONSE_TOKENS
    assert row["prompt_tokens"] == B * N * PROMPT_TOKENS and row["generated_tokens"] == B * N * RESPONSE_TOKENS
    assert row["flops_train"] == 3 * B * N * (200 * seq + 32 * seq * (seq + 1))


def test_generate_samples_shrinks_for_lze_and_stops_after_trainer_steps(ray_local, tmp_path, monkeypatch):
    generator, context = build_generator(ray_local, tmp_path, monkeypatch, "lze")
    for _ in range(STEPS):
        samples, _, consumed, exhausted = generator.generate_samples(**GENERATE_KWARGS)
        ids = [json.loads(s.labels[0])["id"] for s in samples]
        assert 0 < len(samples) < B * N and all(i % 2 == 1 for i in ids)  # epoch 0: only alive groups, no refill
        record = generator.take_record()
        assert record.gen_rounds == 1 and consumed == record.prompts_considered == B
        assert len(samples) == N * len(record.kept) and record.train_masks is not None
        context.write_step(record, {})
    samples, _, consumed, exhausted = generator.generate_samples(**GENERATE_KWARGS)
    assert samples == [] and consumed == 0 and exhausted
    assert len(list((tmp_path / "rollouts").glob("part-step_*.parquet"))) == STEPS


def test_every_rollout_request_carries_its_own_seed(ray_local, tmp_path, monkeypatch):
    """OpenRLHF sends a prompt's n samples as one unseeded request; ours sends n requests (num_samples=1), each
    seeded with rollout_seed(seed, step, prompt id, sample, round): all distinct, and a second generator at the
    same step (a resumed run) asks with exactly the same seeds."""
    from lze_bench.backends.openrlhf.generator import rollout_seed

    def requests():
        generator, context = build_generator(ray_local, tmp_path / f"run{len(seen)}", monkeypatch, "uniform")
        generator.generate_samples(**GENERATE_KWARGS)
        step = context.driver.step - 1
        return sorted(r for engine in generator.vllm_engines for r in engine.requests), step

    seen = []
    first, step = requests()
    seen.append(first)
    assert len(first) == B * N and all(num_samples == 1 for _, num_samples, _ in first)
    assert len({seed for _, _, seed in first}) == B * N  # no two samples share a seed
    ids = sorted({prompt_id for prompt_id, _, _ in first})
    assert sorted(seed for _, _, seed in first) == sorted(rollout_seed(0, step, i, j, 0) for i in ids for j in range(N))
    assert requests()[0] == first  # the same step of another run: the same seeds
    assert rollout_seed(0, 0, 1, 0, 1) != rollout_seed(0, 0, 1, 0, 0) != rollout_seed(1, 0, 1, 0, 0)


def test_the_tokenizer_goes_to_each_engine_once_and_requests_carry_its_key(ray_local, tmp_path, monkeypatch):
    """OpenRLHF passes its tokenizer with every request, which Ray pickles per call; lze-bench sends one request
    per sample, so each engine gets the tokenizer once (engine_tokenizer.py) and every request a key to it."""
    import pickle

    from lze_bench.backends.openrlhf.engine_tokenizer import TokenizerKey

    generator, _ = build_generator(ray_local, tmp_path, monkeypatch, "uniform")
    tokenizer = generator._engine_tokenizers.tokenizer = {"stands for": "the tokenizer"}
    for _ in range(2):
        generator.generate_samples(**GENERATE_KWARGS)
        generator.take_record()
    engines = [engine for engine in generator.vllm_engines if engine.requests]
    assert engines and all(engine.calls == 1 for engine in engines)
    keys = [key for engine in engines for key in engine.tokenizers]
    assert len(keys) == 2 * B * N and all(isinstance(key, TokenizerKey) for key in keys)
    assert len({key.key for key in keys}) == 1 and pickle.loads(pickle.dumps(keys[0])) is tokenizer


def test_per_prompt_counts_reach_vllm_and_only_chosen_rollouts_are_handed_over(ray_local, tmp_path, monkeypatch):
    """Reinforce-Ada asks for `round_repeat` rollouts per prompt per round: vLLM gets exactly that many seeded
    requests per prompt and round, and OpenRLHF's experience maker gets only the rollouts the selector keeps."""
    from collections import Counter

    from lze_bench.backends.openrlhf.generator import rollout_seed

    generator, context = build_generator(ray_local, tmp_path, monkeypatch, "reinforce_ada",
                                         extra=("selector.round_repeat=6", "selector.max_rounds=2"))
    samples, _, consumed, _ = generator.generate_samples(**GENERATE_KWARGS)
    record = generator.take_record()
    requests = [r for engine in generator.vllm_engines for r in engine.requests]
    assert all(num_samples == 1 for _, num_samples, _ in requests)
    asked = Counter(prompt_id for prompt_id, _, _ in requests)
    generated = Counter()
    for group in record.generated:
        generated[group.prompt_id] += group.size
    assert asked == generated and set(asked.values()) <= {6, 12}  # 6 per round, one or two rounds
    assert record.gen_rounds == 2 and any(v == 12 for v in asked.values())  # a prompt was extended
    seeds = [seed for _, _, seed in requests]
    assert len(set(seeds)) == len(seeds)
    first = record.generated[0].prompt_id  # round 0 asked for samples 0..5 of it, each with its own seed
    assert {rollout_seed(0, 0, first, j, 0) for j in range(6)} <= set(seeds)
    assert rollout_seed(0, 0, first, 6, 0) not in seeds
    chosen = sum(int(c.sum()) for c in record.train_choices)
    assert len(samples) == chosen < sum(g.size for g in record.train_groups)  # a balanced subset, not all
    ids = Counter(json.loads(s.labels[0])["id"] for s in samples)
    assert ids == Counter({g.prompt_id: int(c.sum()) for g, c in zip(record.train_groups, record.train_choices)})


def test_a_step_of_larger_groups_is_handed_over_whole(ray_local, tmp_path, monkeypatch):
    """SPEED trains groups of n_init + n_continue = 6 > n = 4: OpenRLHF serves at most batch x n samples per call
    and would keep the rest for the next step; the step's update gets all of its samples. (Screening with 3:
    an odd prompt's first 3 fake responses are 2 right, 1 wrong, so it passes SPEED's screen.)"""
    generator, context = build_generator(ray_local, tmp_path, monkeypatch, "speed",
                                         extra=("selector.n_init=3", "selector.n_continue=3"))
    handed = 0
    for _ in range(STEPS):
        samples, _, _, exhausted = generator.generate_samples(**GENERATE_KWARGS)
        record = generator.take_record()
        assert len(samples) == len(record.update_samples()) and not exhausted
        assert {g.size for g in record.train_groups} <= {6} and record.per_rollout
        handed = max(handed, len(samples))
    assert handed > B * N  # more than OpenRLHF's chunk of one step


# -- the controller's feature calls on the policy ranks (dispatch.py) --

def _group(ray, handles):
    """OpenRLHF's own RayActorGroup dispatch over the given actor handles; `calls` records async_run_method."""
    from types import MethodType

    from openrlhf.trainer.ray.launcher import RayActorGroup

    group = SimpleNamespace(_actor_handlers=handles, duplicate_actors=1, calls=[])
    group.async_run_method_batch = MethodType(RayActorGroup.async_run_method_batch, group)

    def async_run_method(method_name, *args, **kwargs):
        group.calls.append(method_name)
        return RayActorGroup.async_run_method(group, method_name, *args, **kwargs)

    group.async_run_method = async_run_method
    return group


def _trainer(group):
    from lze_bench.backends.openrlhf.trainer import LzePPOTrainer

    trainer = object.__new__(LzePPOTrainer)
    trainer.args = SimpleNamespace(ds=SimpleNamespace(enable_sleep=True, ring_attn_size=1, tensor_parallel_size=1))
    trainer.actor_model_group = group
    trainer.lze = SimpleNamespace(plan=SimpleNamespace(ring_attn_size=1, ds_tensor_parallel_size=1))  # RunContext
    return trainer


def test_feature_calls_reload_no_offloaded_state(ray_local):
    """A feature pass is a no-grad forward: it reads only the bf16 weights, which OpenRLHF's sleep mode never
    offloads, so the controller reloads nothing (no optimizer states next to an awake vLLM)."""
    @ray_local.remote(num_cpus=0)
    class Rank:
        def execute_batch(self, method_name, data, start, end):
            return [f"{method_name}:{s}" for s in data["sequences"][start:end]]

    trainer = _trainer(_group(ray_local, [Rank.remote(), Rank.remote()]))
    got = trainer._call_actors("lze_entropy", sequences=["a", "b", "c", "d"], temperature=[1.0] * 4)
    assert got == ["lze_entropy:a", "lze_entropy:b", "lze_entropy:c", "lze_entropy:d"]
    assert trainer.actor_model_group.calls == []  # no reload_states / offload_states around it


def test_a_failing_rank_fails_the_feature_call_at_once(ray_local, tmp_path):
    """Rank 0 fails (say, out of memory) while rank 1 waits in a ZeRO-3 collective for the process-group timeout
    (an hour in OpenRLHF): the call raises with rank 0's error at once. It must not then ask the ranks for
    anything that synchronises them (`offload_states` ends in a barrier that rank 1, still stuck, never reaches)."""
    import threading

    release = tmp_path / "release"

    @ray_local.remote(num_cpus=0)
    class Rank:
        def __init__(self, rank):
            self.rank = rank

        def _barrier(self, name):
            import time

            (tmp_path / f"{name}{self.rank}").write_text("")
            while not all((tmp_path / f"{name}{r}").exists() for r in (0, 1)) and not release.exists():
                time.sleep(0.2)

        def reload_states(self):
            self._barrier("reload")

        def offload_states(self):
            self._barrier("offload")

        def execute_batch(self, method_name, data, start, end):
            if self.rank == 0:
                raise RuntimeError("CUDA out of memory. Tried to allocate 18.50 GiB")
            self._barrier("collective")  # rank 0 never joins: stuck until the test releases it
            return [0.0] * (end - start)

    trainer = _trainer(_group(ray_local, [Rank.remote(0), Rank.remote(1)]))
    outcome = {}

    def call():
        try:
            trainer._call_actors("lze_entropy", sequences=[[1], [2]])
        except Exception as exc:  # noqa: BLE001 (the test inspects it)
            outcome["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=120)  # liveness, not speed: a hang lasts until `release` exists
    release.write_text("")
    assert not thread.is_alive(), "the feature call hung after rank 0 failed"
    assert isinstance(outcome.get("error"), LzeBenchError)
    assert "rank 0" in str(outcome["error"]) and "out of memory" in str(outcome["error"])
