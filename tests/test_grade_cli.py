"""`lze-bench grade FILE.jsonl --out OUT.jsonl`: re-grade another harness's predictions."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from lze_bench.cli import app

ROWS = [
    {"id": "a", "response": "So the answer is $\\boxed{10,000}$.", "gold": "#### 10,000", "model": "m1"},
    {"id": "b", "response": "Thus \\boxed{\\dfrac{14}{3}}", "gold": "\\frac{14}{3}", "model": "m1"},
    {"id": "c", "response": "I think it is 27.", "gold": 27.0, "model": "m1"},
    {"id": "d", "response": "\\boxed{025}", "gold": 25, "model": "m1"},
    {"id": "e", "response": "\\boxed{(3, 4)}", "gold": "(3,4]", "model": "m1"},
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_grade_prints_accuracy_and_keeps_fields(tmp_path):
    predictions, out = tmp_path / "preds.jsonl", tmp_path / "graded.jsonl"
    _write(predictions, ROWS)
    result = CliRunner().invoke(app, ["grade", str(predictions), "--out", str(out), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "accuracy: 0.6000 (3/5)" in result.output
    assert "no boxed answer 1" in result.output
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["correct"] for g in graded] == [True, True, False, True, False]
    assert [g["grade_status"] for g in graded] == ["ok", "ok", "no_answer", "ok", "ok"]
    assert graded[0]["extracted"] == "10,000" and graded[0]["model"] == "m1" and graded[0]["id"] == "a"


def test_grade_math_verify_reads_answers_without_a_box(tmp_path):
    predictions, out = tmp_path / "preds.jsonl", tmp_path / "graded.jsonl"
    _write(predictions, ROWS + [{"id": "f", "response": "9 * 2 = 18\n#### 18", "gold": "18", "model": "m1"}])
    args = ["grade", str(predictions), "--out", str(out), "--workers", "1", "--grading", "math_verify"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "accuracy: 0.8333 (5/6)" in result.output and "no answer 0 (grading math_verify)" in result.output
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["correct"] for g in graded] == [True, True, True, True, False, True]
    assert graded[2]["extracted"] == "27" and graded[5]["extracted"] == "18"
    bad = CliRunner().invoke(app, ["grade", str(predictions), "--grading", "lighteval"])
    assert bad.exit_code == 2 and "--grading: unknown grading mode 'lighteval'" in bad.output


def test_grade_without_out_only_prints(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    _write(predictions, ROWS[:2])
    result = CliRunner().invoke(app, ["grade", str(predictions)])
    assert result.exit_code == 0 and "accuracy: 1.0000 (2/2)" in result.output
    assert list(tmp_path.iterdir()) == [predictions]


def test_malformed_row_is_one_line_naming_file_line_and_field(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"response": "\\boxed{1}"}) + "\n")
    result = CliRunner().invoke(app, ["grade", str(predictions)])
    assert result.exit_code == 2
    assert f"{predictions}:2: field 'gold' is missing" in result.output


def test_bad_gold_and_bad_json_are_reported(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"response": "x", "gold": {"a": 1}}) + "\n")
    result = CliRunner().invoke(app, ["grade", str(predictions)])
    assert result.exit_code == 2 and ":1: field 'gold' must be a string or a number" in result.output
    predictions.write_text("{oops\n")
    result = CliRunner().invoke(app, ["grade", str(predictions)])
    assert result.exit_code == 2 and ":1: not valid JSON" in result.output


def test_missing_file(tmp_path):
    result = CliRunner().invoke(app, ["grade", str(tmp_path / "nope.jsonl")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_line_that_is_not_utf8_is_one_line_naming_file_and_line(tmp_path):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_bytes(json.dumps(ROWS[0]).encode() + b'\n{"response": "caf\xe9", "gold": 1}\n')
    result = CliRunner().invoke(app, ["grade", str(predictions)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"{predictions}:2: not UTF-8 (byte 0xe9 at column 18); save the file as UTF-8" in lines[0]


def test_a_directory_is_refused_saying_it_is_one_and_what_is_expected(tmp_path):
    result = CliRunner().invoke(app, ["grade", str(tmp_path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "is a directory" in lines[0] and "JSONL file" in lines[0] and "does not exist" not in lines[0]


def test_a_negative_worker_count_is_refused_in_one_line(tmp_path):
    _write(tmp_path / "p.jsonl", ROWS)
    result = CliRunner().invoke(app, ["grade", str(tmp_path / "p.jsonl"), "--workers", "-3"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "--workers -3" in lines[0] and ">= 0" in lines[0]
    assert CliRunner().invoke(app, ["grade", str(tmp_path / "p.jsonl"), "--workers", "1"]).exit_code == 0
