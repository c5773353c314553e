"""Benchmark loading ("Data"): real files from shared/data, malformed rows, the hub fallback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lze_bench.data import get_spec, load_benchmark
from lze_bench.errors import LzeBenchError

SHARED = Path(os.environ.get("LZE_BENCH_SHARED_DATA", Path(__file__).parents[2] / "shared" / "data"))
needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason=f"benchmark files not found at {SHARED}")

# Row counts and first / particular golds from each SOURCE.md.
EXPECTED = {
    "gsm8k": (1319, "18"),
    "math500": (500, "\\left( 3, \\frac{\\pi}{2} \\right)"),
    "aime25": (30, "70"),
    "amc23": (40, "27"),
    "aime24": (30, "204"),
}


@needs_data
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_benchmarks_load_normalized(name):
    rows = load_benchmark(name, root=str(SHARED))
    count, first_gold = EXPECTED[name]
    assert len(rows) == count
    assert rows[0]["answer"] == first_gold
    assert all(set(r) == {"id", "problem", "answer"} and r["problem"].strip() and r["answer"] for r in rows)
    assert len({r["id"] for r in rows}) == count  # ids are unique


@needs_data
def test_gold_normalization_on_real_rows():
    gsm8k = load_benchmark("gsm8k", root=str(SHARED))
    assert gsm8k[201]["answer"] == "114200"  # line 202: "#### 114,200"
    assert load_benchmark("aime24", root=str(SHARED))[7]["answer"] == "25"  # "025"
    amc = load_benchmark("amc23", root=str(SHARED))
    assert amc[3]["answer"] == "3159" and amc[0]["id"] == "0"  # 3159.0; ids from the file


@needs_data
def test_env_root_and_limit(monkeypatch):
    monkeypatch.setenv("LZE_BENCH_DATA", str(SHARED))
    rows = load_benchmark("aime25", limit=3)
    assert [r["answer"] for r in rows] == ["70", "588", "16"]


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "test.jsonl"


GOOD_GSM8K = json.dumps({"question": "1+1?", "answer": "1+1=2\n#### 2"})


@pytest.mark.parametrize(
    "bad_line,field_named",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"question": "1+1?"}), "field 'answer' is missing"),
        (json.dumps({"question": "", "answer": "#### 2"}), "field 'question' (the problem) must be a non-empty string"),
        (json.dumps({"question": "1+1?", "answer": "two"}), "field 'answer' (the gold answer): no '#### <answer>' line"),
        (json.dumps({"question": "1+1?", "answer": None}), "field 'answer' (the gold answer)"),
        (json.dumps(["question", "answer"]), "expected a JSON object"),
    ],
)
def test_malformed_row_names_file_line_and_field(tmp_path, bad_line, field_named):
    path = _write(tmp_path, "gsm8k", [GOOD_GSM8K, "", bad_line])
    with pytest.raises(LzeBenchError) as info:
        load_benchmark("gsm8k", root=str(tmp_path))
    message = str(info.value)
    assert message.startswith(f"{path}:3: ") and field_named in message


def test_integer_gold_rejects_non_integer(tmp_path):
    _write(tmp_path, "aime25", [json.dumps({"question": "q", "answer": "12.5"})])
    with pytest.raises(LzeBenchError, match=r"test\.jsonl:1: field 'answer' \(the gold answer\): expected an integer"):
        load_benchmark("aime25", root=str(tmp_path))


def test_parquet_with_dotted_fields(tmp_path):
    import pandas as pd

    from lze_bench.data import read_file
    from lze_bench.benchmarks import BenchmarkSpec

    frame = pd.DataFrame({
        "prompt": [[{"content": "What is 2+3?", "role": "user"}]],
        "reward_model": [{"ground_truth": "5", "style": "rule"}],
    })
    path = tmp_path / "train.parquet"
    frame.to_parquet(path)
    spec = BenchmarkSpec(name="dapo_like", problem_field="prompt.0.content", answer_field="reward_model.ground_truth")
    assert read_file(path, spec) == [{"id": "0", "problem": "What is 2+3?", "answer": "5"}]


def test_missing_local_file_falls_back_to_hub_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("LZE_BENCH_DATA", raising=False)
    # offline: CI has no route to the hub, and a blocked connection only fails after its timeouts
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(LzeBenchError) as info:
        load_benchmark("math500", root=str(tmp_path))  # empty root: not there, so the hub is tried
    message = str(info.value)
    # Without `datasets`: how to install it; with it but offline: where to put the file.
    assert "datasets" in message or "HuggingFaceH4/MATH-500" in message
    assert "math500/test.jsonl" in message


def test_unknown_benchmark_suggests_a_name():
    with pytest.raises(LzeBenchError, match="did you mean 'gsm8k'"):
        get_spec("gsm8")


def test_synthetic_benchmark_loads_from_the_task():
    rows = load_benchmark("synthetic", limit=5)
    assert len(rows) == 5 and all(r["problem"] and r["answer"] for r in rows)
