"""backend=openrlhf: the reward hook on real benchmark answers, and the training tasks' loaders.

Answers come from real benchmark rows (the slices in tests/data: math500, gsm8k train,
dapo_math_17k); queries are
built the way OpenRLHF builds them (templated prompt + response + end token).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import lze_bench.tasks  # noqa: F401  (registers the training tasks)
from lze_bench.backends.openrlhf import reward_func as rf
from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE, make_label, parse_label, write_prompts
from lze_bench.errors import LzeBenchError
from lze_bench.registry import TASKS

DATA = Path(__file__).parent / "data"  # benchmark slices (tests/data/<name>/SOURCE.md)


def chat_prompt(problem: str) -> str:  # Qwen2.5 chat template, as OpenRLHF's --data.apply_chat_template renders it
    return ("<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
            f"<|im_start|>user\n{PROMPT_TEMPLATE.format(problem=problem)}<|im_end|>\n<|im_start|>assistant\n")


def reward(prompt: str, response: str, label: str) -> dict:
    return rf.reward_func([prompt + response + "<|im_end|>"], [prompt], [label])


@pytest.fixture(scope="module", autouse=True)
def grader_lifetime():
    yield
    rf.shutdown_grader()


def math500_rows(count: int) -> list[dict]:
    with (DATA / "math500" / "test.jsonl").open() as handle:
        return [json.loads(next(handle)) for _ in range(count)]


def test_math500_answers_right_and_wrong():
    rows = math500_rows(12)
    for i, row in enumerate(rows):
        prompt = chat_prompt(row["problem"])
        label = make_label(i, row["answer"])
        right = reward(prompt, f"Working it out... so the answer is $\\boxed{{{row['answer']}}}$.", label)
        assert right["rewards"] == 1.0 and right["scores"] == 1.0, row["answer"]
        other = rows[(i + 1) % len(rows)]["answer"]
        wrong = reward(prompt, f"The answer is \\boxed{{{other}}}.", label)
        assert wrong["rewards"] == 0.0, (row["answer"], other)
        assert set(right["extra_logs"]) == {"grade_timeout", "grade_error", "grade_time_s"}
        assert right["extra_logs"]["grade_error"] == 0.0


def test_training_tasks_load_real_rows_and_rewards_match():
    gsm = TASKS["gsm8k"].load(TASKS["gsm8k"].Config(limit=5), str(DATA))
    assert gsm[0] == {"id": 0, "problem": gsm[0]["problem"], "answer": "72"}  # train row 0: Natalia's clips
    dapo = TASKS["dapo_math_17k"].load(TASKS["dapo_math_17k"].Config(limit=3), str(DATA))
    assert dapo[0]["answer"] == "34" and dapo[0]["problem"].startswith("In triangle $ABC$")
    for row in gsm + dapo:
        label = make_label(row["id"], row["answer"])
        assert reward(chat_prompt(row["problem"]), f"Thus \\boxed{{{row['answer']}}}", label)["rewards"] == 1.0


def test_prompt_not_a_prefix_falls_back_to_assistant_tag():
    prompt = chat_prompt("What is 2+3?")
    retokenized = prompt.replace("\n", " \n", 1)  # decode(encode(prompt)) may differ from the prompt string
    query = retokenized + "It is \\boxed{5}<|im_end|>"
    assert rf.response_text(query, prompt) == "\nIt is \\boxed{5}<|im_end|>"
    assert rf.reward_func([query], [prompt], [make_label(0, "5")])["rewards"] == 1.0


def test_no_answer_plain_label_and_bad_label_never_raise():
    prompt = chat_prompt("What is 2+3?")
    assert reward(prompt, "I do not know.", make_label(0, "5"))["rewards"] == 0.0  # the prompt's \boxed{} is not read
    assert reward(prompt, "\\boxed{5}", "5")["rewards"] == 1.0  # a label that is not our JSON is the answer
    broken = rf.reward_func([None], [None], [None])
    assert broken["rewards"] == 0.0
    empty_gold = reward(prompt, "\\boxed{5}", make_label(0, ""))
    assert empty_gold["rewards"] == 0.0 and empty_gold["extra_logs"]["grade_error"] == 1.0


def test_reward_func_from_threads_like_openrlhf():
    # OpenRLHF calls the hook from asyncio.to_thread workers: math-verify must not need the main thread
    prompt = chat_prompt("Simplify 6/8.")
    results = [None] * 6

    def call(k):
        answer = "\\frac{3}{4}" if k % 2 == 0 else "\\frac{6}{7}"
        results[k] = reward(prompt, f"\\boxed{{{answer}}}", make_label(0, "\\dfrac{3}{4}"))["rewards"]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [1.0, 0.0] * 3


def test_prompts_file_round_trip(tmp_path):
    rows = [{"id": 0, "problem": "1+1?", "answer": "2"}, {"id": 1, "problem": "2+2?", "answer": "4"}]
    path = tmp_path / "prompts.jsonl"
    assert write_prompts(rows, path) == 2
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[1]["input"] == "2+2?\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert parse_label(records[1]["label"]) == (1, "4")
    with pytest.raises(LzeBenchError, match="ids 0..N-1"):
        write_prompts(list(reversed(rows)), path)
    write_prompts(rows, path, prompt="qwen25_math")  # Qwen2.5-Math's own: the instruction as the system turn
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[1]["input"] == [
        {"role": "system", "content": "Please reason step by step, and put your final answer within \\boxed{}."},
        {"role": "user", "content": "2+2?"},
    ]


def test_task_without_local_copy_says_what_to_do(tmp_path):
    # dapo_math_17k has no hub copy: without a local file the error names data.root
    cfg = TASKS["dapo_math_17k"].Config()
    with pytest.raises(LzeBenchError, match=r"dapo_math_17k.*set data.root"):
        TASKS["dapo_math_17k"].load(cfg, str(tmp_path))
    (tmp_path / "math").mkdir()
    (tmp_path / "math" / "train.jsonl").write_text(
        json.dumps({"problem": "Compute $1+1$.", "solution": "Clearly $1+1=\\boxed{2}$."}) + "\n")
    assert TASKS["math"].load(TASKS["math"].Config(), str(tmp_path)) == [
        {"id": 0, "problem": "Compute $1+1$.", "answer": "2"}]
