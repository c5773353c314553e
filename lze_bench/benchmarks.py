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

Prompt conventions (PROMPTS; `eval.prompt`, and `backend.prompt` on the OpenRLHF path):
- `default`: one user turn, the problem, then "Please reason step by step, and
  put your final answer within \\boxed{}." (the benchmark's prompt_template).
  The sentence is Qwen2.5-Math's chain-of-thought instruction, placed in the
  user turn as DeepSeek-R1's usage recommendations put it (no system prompt;
  Qwen2.5-Math's evaluation prompt "qwen-boxed" has the same user turn after a
  generic system turn). It comes last, so that truncating a long prompt from
  the left (lze_bench/evaluation/generator_base.py) keeps it;
- `qwen25_math`: Qwen2.5-Math's own convention (QwenLM/Qwen2.5-Math README,
  `evaluation/utils.py` prompt type "qwen25-math-cot"): that sentence as the
  system turn, the bare problem as the user turn. It needs a chat template;
  a prompt longer than the context window loses this turn first (generator_base.py
  truncates from the left), so it is for models with room for their prompts.

Sources and licences where ours differ from lighteval's copies (lighteval
`src/lighteval/tasks/tasks/`: gsm8k openai/gsm8k "main", math_500
HuggingFaceH4/MATH-500, aime24 HuggingFaceH4/aime_2024, aime25
yentinglin/aime_2025 split "train"; no AMC task):
- aime25: the hub id here is MathArena/aime_2025, licensed CC BY-NC-SA 4.0
  (non-commercial, share-alike); lighteval reads yentinglin/aime_2025, another
  copy of the same 30 problems. The local file (microsoft/G-KV) has no
  licence file; its answers agree with MathArena's (SOURCE.md);
- amc23: math-ai/amc23 on the hub; locally Qwen2.5-Math's evaluation file (MIT);
- aime24: locally Qwen2.5-Math's evaluation file (MIT); the hub id is lighteval's;
- gsm8k (MIT) and math500 (MIT, PRM800K's test split): the same data as lighteval's.
AIME and AMC problems are (c) MAA. Local files' origins and licences are in
each SOURCE.md; hub licences are as their dataset cards state them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lze_bench.registry import BENCHMARKS

COT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
DEFAULT_PROMPT = "{problem}\n" + COT_INSTRUCTION.replace("{}", "{{}}")
PROMPTS = ("default", "qwen25_math")  # prompt conventions; see the module docstring


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

    def messages(self, problem: str, template: str | None = None, prompt: str | None = None) -> list[dict]:
        """Chat turns for `problem` under prompt convention `prompt` (PROMPTS; None = "default").

        default: one user turn, `template` (else the benchmark's prompt_template) filled in;
        qwen25_math: COT_INSTRUCTION as the system turn, the bare problem (or `template`) as the user turn.
        """
        return chat_messages(problem, template or self.prompt_template, prompt)


def chat_messages(problem: str, template: str = DEFAULT_PROMPT, prompt: str | None = None) -> list[dict]:
    """Chat turns of one problem (BenchmarkSpec.messages); `template` fills the user turn under "default"."""
    if prompt in (None, "default"):
        return [{"role": "user", "content": template.format(problem=problem)}]
    if prompt == "qwen25_math":
        user = problem if template in (DEFAULT_PROMPT, "{problem}") else template.format(problem=problem)
        return [{"role": "system", "content": COT_INSTRUCTION}, {"role": "user", "content": user}]
    raise ValueError(f"unknown prompt {prompt!r} (choices: {', '.join(PROMPTS)})")


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
