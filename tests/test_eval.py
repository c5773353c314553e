"""`lze-bench eval` end to end on a tiny checkpoint, run=RUN_DIR, metrics and config.

The checkpoint is a random-weight 2-layer Llama with a character tokenizer
and a 96-token context, built in conftest.py (accuracy near zero is expected; the path
is the real one: data files, prompts, chat template, left-truncation,
batched generation, grading, metrics, outputs, ledger rows).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lze_bench.config import compose
from lze_bench.errors import LzeBenchError
from lze_bench.evaluation import metrics
from lze_bench.evaluation.generation import budget, load_generator

DATA = Path(__file__).parent / "data"  # benchmark slices: a few real rows each (tests/data/<name>/SOURCE.md)
FOUR = ["gsm8k", "math500", "aime25", "amc23"]


def _eval(overrides: list[str]):
    from lze_bench.evaluation.runner import run_eval

    return run_eval(compose("eval", overrides))


SMOKE = [f"data.root={DATA}", "eval=smoke", "limit=2", "eval.max_new_tokens=6", "grading.workers=1"]


def test_eval_one_checkpoint_on_all_four_benchmarks(tiny_checkpoint, tmp_path):
    entries = _eval([f"model={tiny_checkpoint}", f"out_dir={tmp_path / 'out'}", *SMOKE])
    assert [e["benchmark"] for e in entries] == FOUR
    out = tmp_path / "out" / entries[0]["settings_key"]  # results of other settings would sit beside it
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary) == sorted(FOUR)
    for name in FOUR:
        rows = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 * 2  # limit 2 problems x smoke's 2 samples
        assert {"prompt", "response", "extracted", "correct", "response_tokens", "gold"} <= set(rows[0])
        assert all(1 <= r["response_tokens"] <= 6 for r in rows)
        assert rows[0]["prompt"].startswith("User: ") and "\\boxed{}" in rows[0]["prompt"]
        entry = summary[name]
        assert entry["accuracy"] == pytest.approx(np.mean([r["correct"] for r in rows]))
        assert entry["num_problems"] == 2 and entry["samples_per_problem"] == 2
        assert entry["settings"]["temperature"] == 1.0 and entry["settings"]["limit"] == 2 and entry["suite"] == "smoke"
        assert entry["generated_tokens"] == sum(r["response_tokens"] for r in rows)
        assert {"pass@1", "pass@2", "maj@2", "ci_low", "ci_high"} <= set(entry)
    # GSM8K prompts (~300 characters) exceed the 96-token window: truncated from the left.
    gsm8k = [json.loads(line) for line in (out / "gsm8k.jsonl").read_text().splitlines()]
    assert all(r["prompt_truncated"] and r["prompt_tokens"] + 6 <= 96 for r in gsm8k)
    assert (out / "summary.csv").read_text().splitlines()[0].startswith("benchmark,checkpoint,step")


def test_eval_qwen25_math_prompt_and_math_verify_grading(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    overrides = [f"model={tiny_checkpoint}", f"out_dir={out}", *SMOKE, "eval.benchmarks=[gsm8k]", "limit=1",
                 "eval.max_new_tokens=96", "eval.prompt=qwen25_math", "eval.grading=math_verify"]
    entry = _eval(overrides)[0]
    assert entry["settings"]["grading"] == "math_verify" and entry["settings"]["prompt_template"] == "qwen25_math"
    row = json.loads((out / entry["settings_key"] / "gsm8k.jsonl").read_text().splitlines()[0])
    instruction = "User: Please reason step by step, and put your final answer within \\boxed{}.\nAssistant:"
    problem = json.loads((DATA / "gsm8k" / "test.jsonl").read_text().splitlines()[0])["question"]
    assert row["prompt"] == f"{instruction}User: {problem}\nAssistant:"  # system turn, then the bare problem
    assert row["grade_status"] in ("ok", "no_answer")
    # the same responses graded the default way: another result (settings key) beside the first
    boxed = _eval([o for o in overrides if o != "eval.grading=math_verify"])[0]
    assert boxed["settings"]["grading"] == "boxed" and boxed["settings_key"] != entry["settings_key"]
    assert (out / boxed["settings_key"] / "gsm8k.jsonl").exists() and (out / entry["settings_key"]).is_dir()


def test_system_turn_without_chat_template_is_refused(tiny_checkpoint):
    from lze_bench.benchmarks import chat_messages
    from lze_bench.evaluation.generation import Sampling

    generator = load_generator(str(tiny_checkpoint), use_chat_template=False)
    with pytest.raises(LzeBenchError, match="a system turn needs a chat template"):
        generator.generate([chat_messages("1+1?", prompt="qwen25_math")], Sampling(max_new_tokens=1))


def _make_run(tmp_path: Path, checkpoint: Path) -> Path:
    from lze_bench.ledger import LEDGER_COLUMNS, Ledger
    from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete

    run = tmp_path / "run"
    for step in (0, 2):
        target = checkpoint_dir(run, step)
        shutil.copytree(checkpoint, target)
        mark_checkpoint_complete(target)
    shutil.copytree(checkpoint, checkpoint_dir(run, 4))  # no COMPLETE marker: must be skipped
    ledger = Ledger(run)
    for step in (0, 1):  # ledger rows count from 0; checkpoint step_2 holds the policy after rows 0 and 1
        row = {column: 0 for column in LEDGER_COLUMNS if column not in ("cum_flops", "flops_total", "cum_time_s")}
        ledger.append({**row, "step": step, "flops_rollout": 1000 * (step + 1), "time_step_s": 1.0,
                       "partial": False, "heldout_accuracy": float("nan")})
    return run


def test_eval_run_appends_ledger_rows_and_resumes(tiny_checkpoint, tmp_path):
    from lze_bench.ledger import read_evals

    run = _make_run(tmp_path, tiny_checkpoint)
    overrides = [f"run={run}", *SMOKE, "eval.benchmarks=[aime25,amc23]"]
    _eval(overrides)
    evals = read_evals(run)
    assert len(evals) == 4
    assert sorted(set(evals["checkpoint"])) == ["step_000000", "step_000002"]
    assert sorted(set(evals["step"])) == [0, 2]
    assert {"accuracy", "ci_low", "pass_at_k", "maj_at_k", "k"} <= set(evals.columns)
    assert set(evals["k"]) == {2}
    assert set(evals["grading"]) == {"boxed"} and set(evals["prompt_template"]) == {"default"}
    flops = dict(zip(evals["step"], evals["cum_flops"]))
    assert flops[0] == 0.0 and flops[2] == 3000.0  # rows 0 and 1: 1000 + 2000
    jsonl = run / "evals" / "step_000002" / evals["settings_key"].iloc[0] / "aime25.jsonl"
    assert jsonl.exists()
    stamp = jsonl.stat().st_mtime_ns
    _eval(overrides)  # same settings: nothing is generated again
    assert jsonl.stat().st_mtime_ns == stamp
    assert len(read_evals(run)) == 4
    _eval([*overrides, "eval.max_new_tokens=4"])  # other settings: a second result beside the first
    assert jsonl.stat().st_mtime_ns == stamp
    evals = read_evals(run)
    assert len(evals) == 8 and evals["settings_key"].nunique() == 2
    assert sorted(set(evals["max_new_tokens"])) == [4, 6]


def _eval_cli(overrides: list[str]):
    from typer.testing import CliRunner

    from lze_bench.cli import app

    return CliRunner().invoke(app, ["eval", *overrides])


def _one_line(result) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_second_eval_of_the_same_results_is_refused_in_one_line(tiny_checkpoint, tmp_path, hold_lock):
    from lze_bench.config import to_objects
    from lze_bench.evaluation.outputs import results_dir
    from lze_bench.evaluation.runner import find_targets
    from lze_bench.evaluation.settings import eval_settings, settings_key

    run = _make_run(tmp_path, tiny_checkpoint)
    overrides = [f"run={run}", *SMOKE, "eval.benchmarks=[amc23]"]
    options = to_objects(compose("eval", overrides))
    first, key = find_targets(options)[0], settings_key(eval_settings(options))
    hold_lock(run, "train")  # a run may be evaluated while it trains: they write different files
    holder = hold_lock(results_dir(first.out_dir, key), "eval")  # as a running eval of the same settings does
    line = _one_line(_eval_cli(overrides))
    assert (f"the results of {first.checkpoint} under settings {key} is in use by another lze-bench eval "
            f"(pid {holder.pid} ") in line
    assert not (run / "evals.parquet").exists()


def test_a_damaged_evals_parquet_is_left_as_is_and_rebuilt_once_moved_away(tiny_checkpoint, tmp_path):
    import pandas as pd

    from lze_bench.ledger import read_evals

    run = _make_run(tmp_path, tiny_checkpoint)
    overrides = [f"run={run}", "eval=synthetic", "limit=2", "eval.max_new_tokens=4", "grading.workers=1"]
    _eval(overrides)
    evals = read_evals(run)
    path = run / "evals.parquet"
    path.write_bytes(path.read_bytes()[:-7])
    damaged = path.read_bytes()
    line = _one_line(_eval_cli(overrides))
    assert f"error: {path} is damaged and was left as is" in line and "move it away" in line
    assert path.read_bytes() == damaged
    path.rename(tmp_path / "evals.parquet.damaged")  # what the message says to do
    _eval(overrides)
    pd.testing.assert_frame_equal(read_evals(run), evals)


def test_synthetic_benchmark_end_to_end(tiny_checkpoint, tmp_path):
    entries = _eval([f"model={tiny_checkpoint}", f"out_dir={tmp_path}", "eval=synthetic", "limit=3",
                     "eval.max_new_tokens=4", "grading.workers=1"])
    assert entries[0]["benchmark"] == "synthetic" and entries[0]["num_problems"] == 3


def test_hf_generator_greedy_is_deterministic_and_counts_tokens(tiny_checkpoint):
    from lze_bench.evaluation.generation import Sampling

    generator = load_generator(str(tiny_checkpoint), batch_size=2)
    messages = ["1+1?", "What is 7 times 6?", "x" * 500]
    first = generator.generate(messages, Sampling(n=1, temperature=0.0, max_new_tokens=5))
    second = generator.generate(messages, Sampling(n=1, temperature=0.0, max_new_tokens=5))
    assert [r.completions[0].text for r in first] == [r.completions[0].text for r in second]
    assert [r.truncated for r in first] == [False, False, True]
    assert generator.generated_tokens == 2 * sum(r.completions[0].tokens for r in first)
    sampled = generator.generate(messages[:1], Sampling(n=3, temperature=1.0, top_p=0.9, max_new_tokens=5, seed=1))
    assert len(sampled[0].completions) == 3
    assert generator.render("2+2?") == "User: 2+2?\nAssistant:"  # the tokenizer's chat template
    plain = load_generator(str(tiny_checkpoint), use_chat_template=False)
    assert plain.render("2+2?") == "2+2?" and len(plain.encode("2+2?")) == 4  # plain prompt, no template


def test_budget_keeps_half_the_window_for_the_response():
    assert budget(256, 300, 1024) == (128, 128)  # long prompt: half each
    assert budget(256, 50, 1024) == (206, 50)  # short prompt: the rest of the window
    assert budget(256, 50, 16) == (16, 240)
    assert budget(None, 5000, 64) == (64, None)


def test_vllm_and_cuda_fail_with_one_line(tiny_checkpoint):
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(LzeBenchError, match="vllm is not installed"):
            load_generator(str(tiny_checkpoint), backend="vllm", device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(LzeBenchError, match="device=cuda but torch sees no CUDA device"):
            load_generator(str(tiny_checkpoint), device="cuda")


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model=/x", "eval.n_samples=4"], "eval.temperature: greedy decoding (0) with n_samples > 1"),
        (["model=/x", "eval.benchmarks=[gsm8kk]"], "did you mean 'gsm8k'"),
        (["model=/x", "limit=0"], "limit: must be >= 1"),
        (["model=/x", "eval=smoke", "eval.ks=[3]"], "eval.ks: each k must be in [1, n_samples=2]"),
        (["model=/x", "generation.backend=tgi"], "generation.backend: use one of hf, vllm"),
        (["model=/x", "eval=mathsuite"], "did you mean 'math_suite'"),
        (["model=/x", "eval.grading=lighteval"], "eval.grading: unknown grading mode 'lighteval'"),
        (["model=/x", "eval.prompt=qwen"], "eval.prompt: unknown prompt 'qwen'; use one of default, qwen25_math"),
        (["model=/x", "eval.prompt=qwen25_math", "eval.use_chat_template=false"], "needs eval.use_chat_template=true"),
        (["model=/x", "eval.prompt=qwen25_math", "eval.prompt_template='Q: {problem}'"], "set one of them"),
        (["model=/x", "eval=smoke", "eval.seeds=[0,1,0]"], "eval.seeds: a seed is listed twice in [0, 1, 0]"),
        (["model=/x", "eval.seeds=[0,1]"], "eval.seeds: greedy decoding (eval.temperature=0) gives the same responses"),
        (["model=/x", "eval=smoke", "eval.seeds=[]"], "eval.seeds: list at least one seed"),
        (["model=/x", "eval=smoke", "seed=3", "eval.seeds=[0,1]"], "seed=3 and eval.seeds=[0, 1] both set the sampling"),
    ],
)
def test_bad_eval_config_is_one_line(overrides, message):
    with pytest.raises(LzeBenchError) as info:
        compose("eval", overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_nothing_to_evaluate_is_explained():
    with pytest.raises(LzeBenchError, match="pass model=PATH_OR_HF_ID"):
        _eval([])


# --- metrics: hand-computed ---------------------------------------------------------


def test_pass_at_k_unbiased_estimator():
    assert metrics.pass_at_k_one(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert metrics.pass_at_k_one(4, 1, 1) == pytest.approx(0.25)
    assert metrics.pass_at_k_one(4, 3, 2) == 1.0  # fewer than k wrong samples
    assert metrics.pass_at_k_one(10, 0, 5) == 0.0
    correct = np.array([[1, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=bool)
    assert metrics.pass_at_k(correct, 2) == pytest.approx(0.35)


def test_avg_and_maj_at_k():
    correct = np.array([[1, 0, 1, 0], [0, 0, 0, 1]], dtype=bool)
    answers = [["5", "4", "5", "4"], ["1", "1", None, "2"]]
    assert metrics.avg_at_n(correct) == pytest.approx(0.375)
    assert metrics.maj_at_k(answers, correct, 4) == pytest.approx(0.5)  # tie 5/4: first seen (5) wins; "1" wins
    assert metrics.maj_at_k(answers, correct, 1) == pytest.approx(0.5)
    assert metrics.majority_correct([None, None], [False, False]) is False
    assert metrics.majority_correct(["1 / 2", "1/2", "3"], [True, True, False]) is True  # whitespace ignored


def test_confidence_intervals():
    low, high = metrics.wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)  # Wilson 1927, z = 1.96
    low, high = metrics.wilson_interval(5, 10)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    summary = metrics.summarize(np.array([[True], [False]]), [["1"], ["2"]], ks=[1])
    assert summary["ci_method"] == "wilson" and summary["accuracy"] == 0.5 and summary["pass@1"] == 0.5


def test_cut_answers_and_truncated_prompts_are_counted_everywhere_and_warned(tiny_checkpoint, tmp_path, caplog):
    """gsm8k's prompts overflow the 96-token window (all truncated); 6 new tokens cut most random answers.
    The shares, recomputed from the samples file, are in summary.json, evals.parquet and the console,
    with one warning line per benchmark over 5 %."""
    from lze_bench.ledger import read_evals

    run = _make_run(tmp_path, tiny_checkpoint)
    result = _eval_cli([f"run={run}", *SMOKE, "eval.benchmarks=[gsm8k]", "checkpoints=[step_000002]"])
    assert result.exit_code == 0, result.output
    folder = next((run / "evals" / "step_000002").iterdir())
    samples = [json.loads(line) for line in (folder / "gsm8k.jsonl").read_text().splitlines()]
    cut = sum(r["finish"] == "length" for r in samples) / len(samples)
    truncated = sum(r["prompt_truncated"] for r in samples) / len(samples)  # each prompt's samples share its flag
    assert truncated == 1.0 and cut > 0.05
    entry = json.loads((folder / "summary.json").read_text())["gsm8k"]
    assert (entry["cut_response_frac"], entry["cut_prompt_frac"]) == (pytest.approx(cut), 1.0)
    row = read_evals(run).iloc[0]
    assert (row["cut_response_frac"], row["cut_prompt_frac"]) == (pytest.approx(cut), 1.0)
    assert "cut_response_frac,cut_prompt_frac" in (folder / "summary.csv").read_text().splitlines()[0]
    assert f"{cut:.0%}/100% !" in result.output
    warnings = [r.getMessage() for r in caplog.records if "of responses stopped at max_new_tokens" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("step_000002 gsm8k: ")
    assert "% of prompts were truncated to fit the context; cut answers count as wrong" in warnings[0]


def test_a_prompt_without_room_for_the_answer_is_refused_before_generation(tiny_checkpoint, tmp_path):
    """eval.min_answer_tokens=6: gsm8k's prompts (~370 tokens) leave none of the 96-token window."""
    out = tmp_path / "out"
    result = _eval_cli([f"model={tiny_checkpoint}", f"out_dir={out}", *SMOKE, "eval.min_answer_tokens=6"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if "error" in line]  # after the weights' progress bar
    assert len(errors) == 1
    line = errors[0]
    assert line.startswith("error: eval.min_answer_tokens=6: 2 of 2 gsm8k prompts leave less for the answer in ")
    assert "96-token context (problem 0: " in line and "eval.min_answer_tokens=0 to truncate" in line
    assert not any(p.is_file() and not p.name.startswith(".") for p in out.rglob("*"))  # nothing generated
    # a window the prompts fit: accepted, and nothing is truncated
    entries = _eval([f"model={tiny_checkpoint}", f"out_dir={out}", "eval=synthetic", "limit=2",
                     "eval.max_new_tokens=6", "grading.workers=1", "eval.min_answer_tokens=6"])
    assert entries[0]["cut_prompt_frac"] == 0.0


def test_a_finished_result_is_not_reused_for_a_changed_benchmark_file(tiny_checkpoint, tmp_path):
    """The same settings on a gsm8k file whose first answer changed: the finished result is not passed off
    as this file's; one line names its summary.json, and nothing is written."""
    root, out = tmp_path / "data", tmp_path / "out"
    shutil.copytree(DATA / "gsm8k", root / "gsm8k")
    overrides = [f"model={tiny_checkpoint}", f"out_dir={out}", *SMOKE, f"data.root={root}", "eval.benchmarks=[gsm8k]"]
    key = _eval(overrides)[0]["settings_key"]
    summary = out / key / "summary.json"
    assert json.loads(summary.read_text())["gsm8k"]["data"]["rows"] == 2
    _eval(overrides)  # unchanged: reused
    test = root / "gsm8k" / "test.jsonl"
    rows = [json.loads(line) for line in test.read_text().splitlines()]
    rows[0]["answer"] = rows[0]["answer"] + "0"
    test.write_text("".join(json.dumps(row) + "\n" for row in rows))
    before = summary.read_bytes()
    line = _one_line(_eval_cli(overrides))
    assert line.startswith(f"error: {summary}: gsm8k was evaluated on 2 rows (sha256 ")
    assert f"its data now gives 2 (sha256 " in line and f"move {out / key} away to evaluate it again" in line
    assert summary.read_bytes() == before
