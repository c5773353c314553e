"""`lze-bench bench grading` from a clone: it runs on the checkout's test slices by default,
and a data folder that lacks a benchmark fails with one line naming the files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from lze_bench.cli import app

DATA = Path(__file__).parent / "data"
SLICES = json.loads((DATA / "slices.json").read_text())


def test_bench_grading_runs_on_the_test_slices_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("LZE_BENCH_DATA", raising=False)
    out = tmp_path / "grading.json"
    result = CliRunner().invoke(app, ["bench", "grading", "workers=1", "timeout=0.5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    rows = {row["workload"]: row for row in figures["rows"]}
    integer_problems = sum(len(SLICES[f"{n}/test.jsonl"]["lines"]) for n in ("gsm8k", "aime25", "amc23"))
    assert rows["integer, 8 samples (typical)"]["answers"] == 8 * integer_problems
    assert rows["math500, 8 samples"]["answers"] == 8 * len(SLICES["math500/test.jsonl"]["lines"])
    assert any(note.startswith(f"data: {DATA.resolve()} (the repository's test slices") for note in figures["notes"])


def test_bench_grading_names_the_missing_files(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text((DATA / "gsm8k" / "test.jsonl").read_text())
    result = CliRunner().invoke(app, ["bench", "grading", f"data={tmp_path}"])
    assert result.exit_code == 2
    assert "lacks aime25/test.jsonl, amc23/test.jsonl, math500/test.jsonl; pass data=PATH" in result.output


def test_bench_generation_measures_transformers_tokens_per_s(tiny_checkpoint, tmp_path):
    """`lze-bench bench generation` with engines=hf (the vLLM engine is measured where it is installed:
    `engines=hf,vllm`; tests/test_eval_vllm.py tests that generator)."""
    out = tmp_path / "generation.json"
    result = CliRunner().invoke(app, ["bench", "generation", f"model={tiny_checkpoint}", "engines=hf", "prompts=8",
                                      "samples=2", "max_new_tokens=8", "--json", str(out)])
    assert result.exit_code == 0, result.output
    [row] = json.loads(out.read_text())["rows"]
    assert row["engine"] == "hf" and row["dtype"] == "float32" and row["prompts"] == 8
    assert 0 < row["generated_tokens"] <= 8 * 2 * 8 and row["tokens/s"] > 0


def test_bench_generation_needs_a_model():
    result = CliRunner().invoke(app, ["bench", "generation"])
    assert result.exit_code == 2 and "pass model=PATH_OR_HF_ID" in result.output


def test_bench_overhead_refuses_in_one_line_before_running_anything(tmp_path):
    """`lze-bench bench overhead` (tests/test_openrlhf_vllm.py runs it on a real CPU job): a missing overrides file,
    a run that is not backend=openrlhf, too few timed steps, no round and an existing out= are refused,
    each in one line naming the option, nothing written."""
    def bench(*args):
        return CliRunner().invoke(app, ["bench", "overhead", *args])

    result = bench()
    assert result.exit_code == 2 and "pass overrides=FILE" in result.output
    result = bench(f"overrides={tmp_path / 'none.yaml'}")
    assert result.exit_code == 2 and "none.yaml: no such file" in result.output
    (tmp_path / "local.yaml").write_text("- backend=local\n")
    result = bench(f"overrides={tmp_path / 'local.yaml'}", f"out={tmp_path / 'out'}")
    assert result.exit_code == 2 and "must select backend=openrlhf" in result.output
    result = bench(f"overrides={tmp_path / 'local.yaml'}", "steps=2", "skip=1")
    assert result.exit_code == 2 and "steps=2 leaves fewer than 2 timed steps" in result.output
    result = bench(f"overrides={tmp_path / 'local.yaml'}", "rounds=0")
    assert result.exit_code == 2 and "rounds=0 is below 1" in result.output and "pass rounds=1 or more" in result.output
    result = bench(f"overrides={tmp_path / 'local.yaml'}", "rounds=some")
    assert result.exit_code == 2 and "rounds=some is not an integer" in result.output
    (tmp_path / "out").mkdir()
    result = bench(f"overrides={tmp_path / 'local.yaml'}", f"out={tmp_path / 'out'}")
    assert result.exit_code == 2 and "exists; pass a new out=DIR" in result.output
    assert list((tmp_path / "out").iterdir()) == []
