"""OpenRLHF's custom reward hook: math-verify grading through `lze_bench.grading` (openrlhf.md §5).

OpenRLHF (`--reward.remote_url <this file>`) imports this file by path in every
vLLM actor and calls `reward_func(queries, prompts, labels)` once per sample
(lists of length 1) in a worker thread. Rules it imposes, and our answers:

* `queries[0]` is prompt + response decoded with special tokens; the response
  is `query[len(prompt):]` when the prompt is a prefix, else the text after the
  last assistant tag, else the whole query (the grader reads the last `\\boxed{}`).
* `labels[0]` is our JSON `{"id", "answer"}` (data.py); a plain string is taken
  as the answer itself.
* An exception would leave the reward `None` and crash the step in
  `make_experience`, so this function never raises: any failure is reward 0
  with `grade_error=1` in `extra_logs` (averaged into OpenRLHF's status).
* math-verify times out with `signal.alarm`, which works only in a main
  thread, so grading goes through `lze_bench.grading.Grader` (its public API):
  the fast path in this thread, math-verify in its forkserver/spawn worker pool
  (never `fork` a process that holds CUDA) with a per-answer timeout; a timeout
  or parser error counts wrong and is reported in `extra_logs`. One Grader per
  vLLM actor process, created on first use; its calls are serialised by the
  Grader's own lock (one answer per call here).

* `rewards` (what OpenRLHF's advantages use) is `trainer.reward_shape` of the
  verdict (lze_bench/reward_shape.py); `scores` (OpenRLHF: dynamic filtering
  only) is the verdict itself, 1 or 0, which generator.py hands the selectors.

Settings come from env vars that entry.py gives every Ray actor:
`LZE_GRADE_TIMEOUT_S` (default 5), `LZE_GRADE_WORKERS` (default 2) and
`LZE_REWARD_SHAPE` (default binary).
"""

from __future__ import annotations

import logging
import threading
import time

from lze_bench import env
from lze_bench.backends.openrlhf.data import parse_label
from lze_bench.grading import Grader
from lze_bench.reward_shape import grade_reward

log = logging.getLogger("lze_bench.reward_func")

ASSISTANT_TAGS = ("<|im_start|>assistant", "<|start_header_id|>assistant<|end_header_id|>", "Assistant:")

_lock = threading.Lock()
_grader: Grader | None = None


def _get_grader() -> Grader:
    global _grader
    with _lock:
        if _grader is None:
            timeout, workers = env.grading_settings()
            _grader = Grader(timeout_s=max(timeout, 0.1), workers=max(workers, 1))
        return _grader


def shutdown_grader() -> None:
    """Stop the grading processes (tests; actors exit with their process)."""
    global _grader
    with _lock:
        grader, _grader = _grader, None
    if grader is not None:
        grader.close()


def response_text(query: str, prompt: str) -> str:
    """The response part of OpenRLHF's query (prompt + response)."""
    if prompt and query.startswith(prompt):
        return query[len(prompt):]
    for tag in ASSISTANT_TAGS:
        index = query.rfind(tag)
        if index >= 0:
            return query[index + len(tag):]
    return query


def grade(response: str, gold: str):
    """The one grading function's verdict (lze_bench.grading.Grade) for one response."""
    return _get_grader().grade([response], [gold])[0]


def reward_func(queries, prompts, labels) -> dict:
    """OpenRLHF's hook: {"rewards", "scores", "extra_logs"} for one sample; never raises."""
    started = time.perf_counter()
    try:
        _, gold = parse_label(labels[0])
        verdict = grade(response_text(str(queries[0]), str(prompts[0])), gold)
        score = 1.0 if verdict.correct else 0.0
        reward = grade_reward(verdict, env.value(env.REWARD_SHAPE))
        status = verdict.status
    except Exception as exc:  # never let OpenRLHF see an exception (openrlhf.md §5)
        log.warning("grading failed, reward 0: %s: %s", type(exc).__name__, exc)
        reward, score, status = 0.0, 0.0, "error"
    return {
        "rewards": reward,
        "scores": score,
        "extra_logs": {
            "grade_timeout": float(status == "timeout"),
            "grade_error": float(status == "error"),
            "grade_time_s": time.perf_counter() - started,
        },
    }
