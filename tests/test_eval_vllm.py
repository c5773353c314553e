"""`generation.backend=vllm` without a GPU: a fake `vllm` package (written here, put on sys.path) records
what lze-bench asks of `vllm.LLM`: the engine sizing it is built with, the order in which engines start and
are shut down across checkpoints, and that no engine starts before the benchmark data is checked.

The fake mirrors the vLLM 0.29 surface VLLMGenerator uses: `LLM(model=..., **engine)`, `get_tokenizer()`,
`llm_engine.model_config.max_model_len`, `llm_engine.engine_core.shutdown()`, `generate(token prompts,
SamplingParams)` returning outputs with `.text`, `.token_ids`, `.finish_reason`. Its tokenizer is the
checkpoint's own (transformers), and every response is `\\boxed{42}`.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import pytest

from lze_bench.config import compose
from lze_bench.errors import LzeBenchError

FAKE_VLLM = '''
"""A fake vllm for lze-bench tests: records calls in EVENTS; generates `\\\\boxed{42}`."""
from types import SimpleNamespace

__version__ = "0.29.0-fake"
EVENTS = []
WITH_LLM_SHUTDOWN = False  # True: the LLM class also has shutdown() (newer vLLM)


class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class _EngineCore:
    def __init__(self, model):
        self.model = model

    def shutdown(self):
        _log(("engine_core.shutdown", self.model))


def _log(event):
    """In this process's EVENTS and, for spawned replica processes, a JSON line in $LZE_FAKE_VLLM_LOG."""
    import json, os

    EVENTS.append(event)
    path = os.environ.get("LZE_FAKE_VLLM_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps([event[0], event[1], os.environ.get("CUDA_VISIBLE_DEVICES")]) + "\\n")


class LLM:
    def __init__(self, model, **kwargs):
        from transformers import AutoTokenizer

        _log(("init", model, kwargs))
        self.model = model
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        window = kwargs.get("max_model_len") or 96
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(max_model_len=window),
                                          engine_core=_EngineCore(model))
        if WITH_LLM_SHUTDOWN:
            self.shutdown = lambda: EVENTS.append(("LLM.shutdown", model))

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=True):
        _log(("generate", self.model, len(prompts), params.n, params.max_tokens))
        sample = SimpleNamespace(text="\\\\boxed{42}", token_ids=[5, 6, 7], finish_reason="stop")
        return [SimpleNamespace(outputs=[sample] * params.n) for _ in prompts]
'''


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    folder = tmp_path / "fake_site"
    (folder / "vllm").mkdir(parents=True)
    (folder / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    monkeypatch.syspath_prepend(str(folder))
    saved = sys.modules.pop("vllm", None)
    module = importlib.import_module("vllm")
    assert module.__version__ == "0.29.0-fake"
    yield module
    sys.modules.pop("vllm", None)
    if saved is not None:
        sys.modules["vllm"] = saved


def _data_root(tmp_path: Path) -> Path:
    """Two gsm8k-format and two math500-format problems whose answer is 42 or 7."""
    root = tmp_path / "data"
    (root / "gsm8k").mkdir(parents=True)
    (root / "gsm8k" / "test.jsonl").write_text('{"question": "6*7?", "answer": "6*7=42\\n#### 42"}\n'
                                               '{"question": "3+4?", "answer": "#### 7"}\n')
    (root / "math500").mkdir()
    (root / "math500" / "test.jsonl").write_text('{"problem": "40+2?", "answer": "42", "unique_id": "a"}\n'
                                                 '{"problem": "5+2?", "answer": "7", "unique_id": "b"}\n')
    return root


def _run_with_checkpoints(tmp_path: Path, checkpoint: Path) -> Path:
    from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete

    run = tmp_path / "run"
    for step in (0, 2):
        target = checkpoint_dir(run, step)
        shutil.copytree(checkpoint, target)
        mark_checkpoint_complete(target)
    return run


def _eval(overrides):
    from lze_bench.evaluation.runner import run_eval

    return run_eval(compose("eval", overrides), show=False)


VLLM = ["generation.backend=vllm", "device=cuda", "eval.benchmarks=[gsm8k,math500]", "eval.max_new_tokens=8",
        "grading.workers=1"]


def test_vllm_engine_is_sized_by_config_and_shut_down_before_the_next_checkpoint(fake_vllm, tiny_checkpoint, tmp_path):
    run = _run_with_checkpoints(tmp_path, tiny_checkpoint)
    entries = _eval([f"run={run}", f"data.root={_data_root(tmp_path)}", *VLLM, "generation.tensor_parallel_size=2",
                     "generation.max_model_len=64", "generation.gpu_memory_utilization=0.55",
                     "generation.enforce_eager=true"])
    assert [(e["checkpoint"], e["benchmark"]) for e in entries] == [
        ("step_000000", "gsm8k"), ("step_000000", "math500"), ("step_000002", "gsm8k"), ("step_000002", "math500")]
    assert all(e["accuracy"] == 0.5 and e["generation_backend"] == "vllm" for e in entries)  # 42 right, 7 wrong
    kinds = [(event[0], Path(event[1]).name) for event in fake_vllm.EVENTS]
    assert kinds == [("init", "step_000000"), ("generate", "step_000000"), ("generate", "step_000000"),
                     ("engine_core.shutdown", "step_000000"),
                     ("init", "step_000002"), ("generate", "step_000002"), ("generate", "step_000002"),
                     ("engine_core.shutdown", "step_000002")]
    engine = fake_vllm.EVENTS[0][2]
    assert engine == {"dtype": "auto", "seed": 0, "tensor_parallel_size": 2, "max_model_len": 64,
                      "gpu_memory_utilization": 0.55, "enforce_eager": True}


def test_vllm_close_shuts_the_engine_down_once(fake_vllm, tiny_checkpoint):
    from lze_bench.evaluation.generation import Sampling, load_generator

    generator = load_generator(str(tiny_checkpoint), backend="vllm", device="cuda")
    generator.close()
    generator.close()  # idempotent: the engine is gone
    assert [e[0] for e in fake_vllm.EVENTS] == ["init", "engine_core.shutdown"]
    assert generator.llm is None
    with pytest.raises(LzeBenchError, match="closed"):
        generator.generate(["1+1?"], Sampling())
    fake_vllm.WITH_LLM_SHUTDOWN = True  # a vLLM whose LLM has shutdown(): that public call is used
    load_generator(str(tiny_checkpoint), backend="vllm", device="cuda").close()
    assert [e[0] for e in fake_vllm.EVENTS][2:] == ["init", "LLM.shutdown"]


def test_benchmark_data_is_checked_before_any_engine_starts(fake_vllm, tiny_checkpoint, tmp_path):
    run = _run_with_checkpoints(tmp_path, tiny_checkpoint)
    root = _data_root(tmp_path)
    (root / "math500" / "test.jsonl").write_text('{"problem": "40+2?", "unique_id": "a"}\n')  # no answer
    with pytest.raises(LzeBenchError, match=r"math500/test.jsonl:1: field 'answer' is missing"):
        _eval([f"run={run}", f"data.root={root}", *VLLM])
    assert fake_vllm.EVENTS == []  # no model was loaded


@pytest.mark.parametrize("overrides,message", [
    (["generation.tensor_parallel_size=2"], "generation.tensor_parallel_size: 2 needs generation.backend=vllm"),
    (["generation.gpu_memory_utilization=1.5"], "generation.gpu_memory_utilization: must be in (0, 1]"),
    (["generation.data_parallel_size=0"], "generation.data_parallel_size: must be >= 1"),
    (["generation.backend=vllm", "generation.max_model_len=8"], "generation.max_model_len: must be >= 16"),
])
def test_bad_engine_settings_are_one_line(overrides, message):
    with pytest.raises(LzeBenchError) as info:
        compose("eval", ["model=/x", *overrides])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_data_parallel_replicas_split_checkpoints_over_gpus(fake_vllm, tiny_checkpoint, tmp_path, monkeypatch):
    """data_parallel_size=2, tensor_parallel_size=2 on GPUs 3,5,6,7: replica 0 gets 3,5 and replica 1 gets 6,7,
    each evaluates its own checkpoints (round-robin) with its engine shut down after each."""
    import json

    from lze_bench.ledger import read_evals

    run = _run_with_checkpoints(tmp_path, tiny_checkpoint)
    shutil.copytree(run / "checkpoints" / "step_000002", run / "checkpoints" / "step_000004")
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("LZE_FAKE_VLLM_LOG", str(log))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    entries = _eval([f"run={run}", f"data.root={_data_root(tmp_path)}", *VLLM, "generation.data_parallel_size=2",
                     "generation.tensor_parallel_size=2"])
    assert [(e["checkpoint"], e["benchmark"]) for e in entries] == [
        (c, b) for c in ("step_000000", "step_000002", "step_000004") for b in ("gsm8k", "math500")]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    gpus = {Path(model).name: devices for kind, model, devices in events if kind == "init"}
    assert gpus == {"step_000000": "3,5", "step_000002": "6,7", "step_000004": "3,5"}
    for checkpoint in gpus:  # each engine is shut down once, after its generations
        kinds = [kind for kind, model, _ in events if Path(model).name == checkpoint]
        assert kinds == ["init", "generate", "generate", "engine_core.shutdown"]
    assert len(read_evals(run)) == 6  # rows of both replicas, appended under the lock
    assert fake_vllm.EVENTS == []  # nothing ran in this process


def test_seeds_share_each_checkpoints_engine_across_replicas(fake_vllm, tiny_checkpoint, tmp_path, monkeypatch):
    """eval.seeds=[0,1] with two replicas: each checkpoint's engine starts once for both seeds (four generate
    calls: 2 benchmarks x 2 seeds), every seed is its own evals.parquet row, and each checkpoint has its seed
    aggregate (the fake answers 42: one of two problems right, on every seed)."""
    import json

    from lze_bench.ledger import read_evals

    run = _run_with_checkpoints(tmp_path, tiny_checkpoint)
    log = tmp_path / "events.jsonl"
    monkeypatch.setenv("LZE_FAKE_VLLM_LOG", str(log))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    entries = _eval([f"run={run}", f"data.root={_data_root(tmp_path)}", *VLLM, "generation.data_parallel_size=2",
                     "eval.seeds=[0,1]", "eval.temperature=1.0", "eval.n_samples=2", "eval.ks=[1,2]"])
    assert [(e["checkpoint"], e["settings"]["seed"], e["benchmark"]) for e in entries] == [
        (c, s, b) for c in ("step_000000", "step_000002") for s in (0, 1) for b in ("gsm8k", "math500")]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for checkpoint in ("step_000000", "step_000002"):
        kinds = [kind for kind, model, _ in events if Path(model).name == checkpoint]
        assert kinds == ["init", "generate", "generate", "generate", "generate", "engine_core.shutdown"]
        [aggregate] = list((run / "evals" / checkpoint).glob("seeds-*/summary.json"))
        gsm8k = json.loads(aggregate.read_text())["gsm8k"]
        assert gsm8k["accuracy_per_seed"] == [0.5, 0.5] and gsm8k["accuracy_std"] == 0.0
        assert gsm8k["ci_low"] < 0.5 < gsm8k["ci_high"] and gsm8k["maj@2"] == 0.5
    evals = read_evals(run)
    assert len(evals) == 8 and sorted(set(evals["seed"])) == [0, 1] and evals["settings_key"].nunique() == 2
