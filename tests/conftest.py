"""Shared fixtures: the benchmark slices shipped in tests/data, and the optional full files.

Every test that reads benchmark rows reads the slices in `tests/data/<name>/`
(a few real rows per benchmark, byte for byte, with their source and licence in
each SOURCE.md; `tests/data/slices.json` says which lines of the full file they
are). So a clone tests itself with nothing beside it.

The full files are optional: tests marked `full_data` (deselected by default)
check them and the slices against them; run them with
`LZE_BENCH_SHARED_DATA=DIR python3 -m pytest -q -m full_data`, DIR laid out as
`DIR/<name>/test.jsonl`. No test looks beside the checkout on its own.

Default selection (`pytest_collection_modifyitems`): without `-m`, tests marked
`slow`, `gpu` or `full_data` are deselected, so `python3 -m pytest -q` stays
fast, except that the `slow` tests of a test file named on the command line
run (`python3 -m pytest -q tests/test_openrlhf_deepspeed.py` runs that file,
not nothing). An explicit `-m EXPR` always decides alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"  # data.root for the slices: DATA/<name>/test.jsonl
FULL_DATA_ENV = "LZE_BENCH_SHARED_DATA"


def slices() -> dict[str, dict]:
    """`<name>/<file>` -> {"lines": 1-based lines of the full file, in slice order, "full_rows", "full_sha256"}."""
    return json.loads((DATA / "slices.json").read_text(encoding="utf-8"))


def full_data_dir() -> Path | None:
    """The full benchmark files, only where LZE_BENCH_SHARED_DATA names them."""
    value = os.environ.get(FULL_DATA_ENV)
    return Path(value) if value else None


DESELECTED_BY_DEFAULT = ("slow", "gpu", "full_data")


def pytest_collection_modifyitems(config, items):
    if config.option.markexpr:  # -m given: it decides
        return
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args if arg.split("::")[0].endswith(".py")}
    keep, drop = [], []
    for item in items:
        marks = {mark.name for mark in item.iter_markers()} & set(DESELECTED_BY_DEFAULT)
        runs_by_name = marks == {"slow"} and Path(str(item.fspath)).resolve() in named
        (drop if marks and not runs_by_name else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def openrlhf_importable() -> None:
    """Skips (or, with LZE_BENCH_REQUIRE_OPENRLHF=1, fails) the tests of files whose `pytestmark` is
    `harness.slow_openrlhf_marks()` when OpenRLHF's job does not import; probed once a session (its outcome,
    a skip included, is kept for every later test)."""
    standins = str(REPO / "tests" / "openrlhf_cpu")
    sys.path.insert(0, standins)
    try:
        from lze_cpu_standins import harness
    finally:
        sys.path.remove(standins)
    harness.require_openrlhf()


@pytest.fixture
def benchmark_data() -> Path:
    """The slices' root (`data.root`)."""
    return DATA


@pytest.fixture
def benchmark_line():
    """`line(file, n)`: line `n` (1-based) of the full benchmark file `file` (e.g. "gsm8k/test.jsonl"),
    read from its slice; a line the slice does not hold is an error naming slices.json."""
    table = slices()

    def line(file: str, number: int) -> str:
        kept = table[file]["lines"]
        if number not in kept:
            raise KeyError(f"line {number} of {file} is not in its slice: add it to tests/data/slices.json "
                           "and run tests/data/slice_benchmarks.py")
        return (DATA / file).read_text(encoding="utf-8").splitlines()[kept.index(number)]

    return line


@pytest.fixture
def full_data() -> Path:
    path = full_data_dir()
    if path is None or not path.is_dir():
        pytest.skip(f"needs the full benchmark files: set {FULL_DATA_ENV}=DIR (DIR/<name>/test.jsonl; sources in "
                    f"tests/data/<name>/SOURCE.md); now {path or 'unset'}")
    return path


CHAT = "{% for m in messages %}User: {{ m['content'] }}\nAssistant:{% endfor %}"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A random-weight 2-layer Llama with a character tokenizer, a chat template and a 96-token context."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "checkpoint", hidden_size=32)


@pytest.fixture(scope="session")
def tiny_checkpoint_hd32(tmp_path_factory) -> Path:
    """tiny_checkpoint with head_dim 32 (hidden 64, 2 heads): vLLM's CPU attention needs head_dim >= 32, the
    16 of tiny_checkpoint is refused at engine start."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny_hd32") / "checkpoint", hidden_size=64)


def save_tiny_checkpoint(path: Path, hidden_size: int) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + ["\n"] + [chr(c) for c in range(32, 127)])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>")
    tokenizer.chat_template = CHAT
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden_size, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=96,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def hold_lock():
    """Hold a run directory's lock (runlock.py) from another process, as a running command does."""
    holders = []

    def start(run_dir, role: str) -> subprocess.Popen:
        code = ("import sys\nfrom lze_bench.runlock import hold_run_dir\n"
                "with hold_run_dir(sys.argv[1], sys.argv[2]):\n    print('held', flush=True)\n    sys.stdin.read()\n")
        holder = subprocess.Popen([sys.executable, "-c", code, str(run_dir), role], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        holders.append(holder)
        assert holder.stdout.readline().strip() == "held"
        return holder

    yield start
    for holder in holders:
        holder.kill()
        holder.wait()
