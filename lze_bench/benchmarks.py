"""The benchmark registry: one entry per evaluation dataset (BENCHMARKS).

Adding a benchmark is one `register(BenchmarkSpec(...))` call: where its rows
live (a local file under the data root and/or a Hugging Face hub id), which
fields hold the problem, the gold answer and the id, how the gold is
normalized (lze_bench.grading.normalize_gold styles) and the prompt template.
It imports only the registry, so data loading, tasks, evaluation and the
backends all read it from below (tests/test_layout.py).

Sources: local files and gold formats from tests/data/<name>/SOURCE.md (the
slices there name the full files' origin; design.md "Data"); hub ids are the usual public copies:
- gsm8k: openai/gsm8k (config "main"), same fields as the local file;
- math500: HuggingFaceH4/MATH-500, same fields;
- aime25: MathArena/aime_2025 (split "train", fields problem/answer); the local
  file (microsoft/G-KV) names the problem `question`;
- amc23: math-ai/amc23 (split "test", fields question/answer); the local file
  (Qwen2.5-Math) has `problem`, `answer` (a float such as 27.0) and `id`.
Hub field names were taken from public loaders, not checked against the hub
here (no network): a mismatch fails at load with the field named.

The default prompt is the Qwen2.5-Math / DeepSeek-R1 convention: the problem,
then "Please reason step by step, and put your final answer within \\boxed{}."
The instruction comes last so that truncating a long prompt from the left
(lze_bench/evaluation/generation.py) keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lze_bench.registry import BENCHMARKS

DEFAULT_PROMPT = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    split: str = "test"  # local file <root>/<name>/<split>.jsonl (or .parquet)
    problem_field: str = "problem"
    answer_field: str = "answer"
    id_field: str | None = None  # None: the row's position in the file
    gold_style: str = "latex"  # lze_bench.grading.normalize_gold style
    prompt_template: str = DEFAULT_PROMPT  # str.format with {problem}
    hub_id: str | None = None
    hub_configs: tuple[str | None, ...] = (None,)  # several configs are concatenated (in order)
    hub_split: str = "test"
    hub_fields: dict[str, str | None] = field(default_factory=dict)  # role (problem|answer|id) -> hub column, None = absent
    loader: str | None = None  # "module:function(split, cfg)" for generated data (no file)
    expected_rows: int | None = None  # full size, for the log (a different count is only logged)

    def prompt(self, problem: str, template: str | None = None) -> str:
        return (template or self.prompt_template).format(problem=problem)


def register(spec: BenchmarkSpec) -> BenchmarkSpec:
    return BENCHMARKS.add(spec.name)(spec)


register(BenchmarkSpec(
    name="gsm8k", problem_field="question", answer_field="answer", gold_style="gsm8k",
    hub_id="openai/gsm8k", hub_configs=("main",), expected_rows=1319,
))
register(BenchmarkSpec(
    name="math500", problem_field="problem", answer_field="answer", id_field="unique_id", gold_style="latex",
    hub_id="HuggingFaceH4/MATH-500", expected_rows=500,
))
register(BenchmarkSpec(
    name="aime25", problem_field="question", answer_field="answer", gold_style="integer",
    hub_id="MathArena/aime_2025", hub_split="train", hub_fields={"problem": "problem"}, expected_rows=30,
))
register(BenchmarkSpec(
    name="amc23", problem_field="problem", answer_field="answer", id_field="id", gold_style="integer",
    hub_id="math-ai/amc23", hub_fields={"problem": "question", "id": None}, expected_rows=40,
))
register(BenchmarkSpec(
    name="aime24", problem_field="problem", answer_field="answer", id_field="id", gold_style="integer",
    hub_id="HuggingFaceH4/aime_2024", hub_split="train", expected_rows=30,
))
# The local backend's synthetic arithmetic task (lze_bench.tasks.synthetic), held-out split.
# Prompt: the bare problem; the tiny policy's chat template adds the format it was trained on.
register(BenchmarkSpec(
    name="synthetic", split="test", gold_style="auto", prompt_template="{problem}",
    loader="lze_bench.tasks.synthetic:load_split",
))

# Training sets of the scale path (lze_bench.tasks.datasets), loaded by the same code.
# MATH train (Hendrycks et al., 7,500 rows; the LZE launcher's set): the PRM800K copy is only
# a Git LFS pointer (tests/data/math500/SOURCE.md), so the hub copy DigitalLearningGmbH/MATH-lighteval;
# its gold is the last \\boxed{} of `solution`.
register(BenchmarkSpec(
    name="math", split="train", problem_field="problem", answer_field="solution", gold_style="boxed",
    hub_id="DigitalLearningGmbH/MATH-lighteval", hub_split="train", expected_rows=7500,
))
# DAPO-Math-17k, deduplicated local copy (tests/data/dapo_math_17k/SOURCE.md); the hub original repeats each prompt, so no hub id.
register(BenchmarkSpec(
    name="dapo_math_17k", split="train", problem_field="prompt.0.content",
    answer_field="reward_model.ground_truth", gold_style="integer", expected_rows=17917,
))
