"""The prompts file OpenRLHF reads: JSONL rows {input, label} (openrlhf.md §9 "Prompt identity").

OpenRLHF's `PromptDataset` carries no id, so the label is a JSON string
`{"id": 123, "answer": "..."}`: the selector reads ids from
`Experience.labels`, the reward function reads the gold answer. Row `i` holds
prompt id `i`, so the generator can also fetch prompt `i` by position.

`input` follows `backend.prompt` (lze_bench.benchmarks PROMPTS). "default":
the problem, then Qwen2.5-Math's chain-of-thought sentence ("Please reason
step by step, and put your final answer within \\boxed{}."), as one string
that OpenRLHF (`backend.apply_chat_template=true`) wraps in the tokenizer's
chat template as the user turn: the sentence is Qwen2.5-Math's, the layout
(instruction in the user turn, no system turn) is not Qwen2.5-Math's own but
the one `lze-bench eval` uses by default, so training and evaluation prompts
agree. "qwen25_math": Qwen2.5-Math's own convention, the sentence as the
system turn and the bare problem as the user turn, written as a list of chat
turns, which OpenRLHF's `preprocess_data` renders with the chat template.
"""

from __future__ import annotations

import json
from pathlib import Path

from lze_bench.benchmarks import DEFAULT_PROMPT, chat_messages
from lze_bench.errors import LzeBenchError
from lze_bench.rundir import atomic_write_text

# the instruction `lze-bench eval` uses, so training and evaluation prompts agree
PROMPT_TEMPLATE = DEFAULT_PROMPT


def make_label(prompt_id: int, answer: str) -> str:
    return json.dumps({"id": int(prompt_id), "answer": str(answer)}, ensure_ascii=False)


def parse_label(label: str) -> tuple[int | None, str]:
    """(prompt id, gold answer) from a label; a label that is not our JSON is the answer itself."""
    try:
        data = json.loads(label)
    except (TypeError, ValueError):
        return None, str(label)
    if not isinstance(data, dict):
        return None, str(label)
    prompt_id = data.get("id")
    return (int(prompt_id) if prompt_id is not None else None), str(data.get("answer", ""))


def prompt_input(problem: str, prompt: str = "default") -> str | list[dict]:
    """A row's `input`: one string (OpenRLHF makes it the user turn), or chat turns for a system-turn convention."""
    if prompt == "default":
        return PROMPT_TEMPLATE.format(problem=problem)
    return chat_messages(problem, prompt=prompt)


def write_prompts(rows: list[dict], path: str | Path, prompt: str = "default") -> int:
    """Write rows {id, problem, answer} (ids 0..N-1 in order) as OpenRLHF's prompt JSONL; returns N."""
    lines = []
    for position, row in enumerate(rows):
        if int(row["id"]) != position:
            raise LzeBenchError(f"prompt rows must have ids 0..N-1 in order; row {position} has id {row['id']}")
        record = {"input": prompt_input(row["problem"], prompt), "label": make_label(row["id"], row["answer"])}
        lines.append(json.dumps(record, ensure_ascii=False))
    atomic_write_text(path, "\n".join(lines) + "\n")
    return len(lines)


def check_dataset_ids(labels: list[str]) -> None:
    """OpenRLHF's dataset must keep our row order: label i carries id i (checked once at start-up)."""
    for position, label in enumerate(labels):
        prompt_id, _ = parse_label(label)
        if prompt_id != position:
            raise LzeBenchError(
                f"OpenRLHF's prompt dataset row {position} has label id {prompt_id}; the prompts file must be "
                "read unshuffled and uncut (do not pass --data.max_samples or --data.prompt_probs)"
            )
