"""Benchmark loading ("Data"): real rows (tests/data slices; the full files with -m full_data),
malformed rows, the hub fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lze_bench.data import get_spec, load_benchmark
from lze_bench.errors import LzeBenchError

DATA = Path(__file__).parent / "data"  # the slices (tests/data/<name>/SOURCE.md)
SLICES = json.loads((DATA / "slices.json").read_text())

# Row counts of the full files and first golds, from each SOURCE.md.
EXPECTED = {
    "gsm8k": (1319, "18"),
    "math500": (500, "\\left( 3, \\frac{\\pi}{2} \\right)"),
    "aime25": (30, "70"),
    "amc23": (40, "27"),
    "aime24": (30, "204"),
}


def _check_normalized(rows: list[dict], count: int, first_gold: str) -> None:
    assert len(rows) == count
    assert rows[0]["answer"] == first_gold
    # {id, problem, answer}, plus the fixed per-prompt columns a dataset carries (MATH-500: level, subject)
    assert all({"id", "problem", "answer"} <= set(r) <= {"id", "problem", "answer", "level", "subject"}
               and r["problem"].strip() and r["answer"] for r in rows)
    assert len({r["id"] for r in rows}) == count  # ids are unique


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_benchmark_rows_load_normalized(name):
    rows = load_benchmark(name, root=str(DATA))
    _check_normalized(rows, len(SLICES[f"{name}/test.jsonl"]["lines"]), EXPECTED[name][1])


def test_math500_rows_carry_level_and_subject():
    rows = load_benchmark("math500", root=str(DATA))
    assert all(isinstance(r["level"], int) and 1 <= r["level"] <= 5 and r["subject"] for r in rows)
    assert not any("level" in r for r in load_benchmark("gsm8k", root=str(DATA)))  # GSM8K has none


def test_gold_normalization_on_real_rows():
    gsm8k = load_benchmark("gsm8k", root=str(DATA))
    assert gsm8k[SLICES["gsm8k/test.jsonl"]["lines"].index(202)]["answer"] == "114200"  # line 202: "#### 114,200"
    assert load_benchmark("aime24", root=str(DATA))[SLICES["aime24/test.jsonl"]["lines"].index(8)]["answer"] == "25"
    amc = load_benchmark("amc23", root=str(DATA))
    line4 = amc[SLICES["amc23/test.jsonl"]["lines"].index(4)]
    assert line4["answer"] == "3159" and line4["id"] == "3" and amc[0]["id"] == "0"  # 3159.0; ids from the file


def test_env_root_and_limit(monkeypatch):
    monkeypatch.setenv("LZE_BENCH_DATA", str(DATA))
    rows = load_benchmark("aime25", limit=3)
    assert [r["answer"] for r in rows] == ["70", "588", "16"]


@pytest.mark.full_data
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_full_benchmarks_load_normalized(name, full_data):
    _check_normalized(load_benchmark(name, root=str(full_data)), *EXPECTED[name])


@pytest.mark.full_data
@pytest.mark.parametrize("file", sorted(SLICES))
def test_slices_are_the_full_files_rows(file, full_data):
    """Each slice holds exactly the listed lines (rows) of the recorded full file."""
    import hashlib

    entry, full = SLICES[file], full_data / file
    assert hashlib.sha256(full.read_bytes()).hexdigest() == entry["full_sha256"]
    if file.endswith(".jsonl"):
        lines = full.read_text(encoding="utf-8").splitlines()
        assert len(lines) == entry["full_rows"]
        assert (DATA / file).read_text(encoding="utf-8").splitlines() == [lines[i - 1] for i in entry["lines"]]
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(full)
        assert table.num_rows == entry["full_rows"]
        assert pq.read_table(DATA / file).equals(table.take([i - 1 for i in entry["lines"]]))


def test_every_slice_has_its_source_and_the_listed_rows():
    """A slice without SOURCE.md (origin, licence) or out of step with slices.json fails here."""
    import pyarrow.parquet as pq

    for file, entry in SLICES.items():
        path = DATA / file
        source = (path.parent / "SOURCE.md").read_text(encoding="utf-8")
        assert "Origin" in source and "Licence" in source and entry["full_sha256"] in source, file
        rows = pq.read_metadata(path).num_rows if file.endswith(".parquet") else len(path.read_text().splitlines())
        assert rows == len(entry["lines"]) == len(set(entry["lines"])), file
        assert all(1 <= i <= entry["full_rows"] for i in entry["lines"]), file


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
    # the libraries read those variables once, at import: where an earlier test imported them, the module
    # constants decide (else the hub is tried for real, ~20 s of timeouts)
    import importlib

    for module, names in (("huggingface_hub.constants", ["HF_HUB_OFFLINE"]),
                          ("datasets.config", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])):
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            continue
        for name in names:
            if hasattr(loaded, name):
                monkeypatch.setattr(loaded, name, True)
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


def test_a_line_that_is_not_utf8_names_file_and_line(tmp_path):
    """What `lze-bench eval` reads a benchmark's JSONL through (lze_bench.jsonl): one line, not a traceback."""
    path = _write(tmp_path, "gsm8k", [GOOD_GSM8K])
    path.write_bytes(path.read_bytes() + b'{"question": "\xc3(", "answer": "#### 2"}\n')
    with pytest.raises(LzeBenchError) as info:
        load_benchmark("gsm8k", root=str(tmp_path))
    assert str(info.value).startswith(f"{path}:2: not UTF-8 (byte 0xc3 at column 15)")
