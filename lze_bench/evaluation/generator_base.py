"""What every generation engine shares: the request (`Sampling`), the results, and prompt handling.

Prompts: a message is a string (one user turn) or a list of chat turns
({role, content}; lze_bench.benchmarks.chat_messages). The tokenizer's chat
template renders the turns (with the generation prompt) when it has one and
`use_chat_template` is set; otherwise a single user turn is the prompt as is
(BOS added by the tokenizer), and turns with a system message are refused:
there is no honest way to render them without a template.

Context window (choice; tiny checkpoints have max_position_embeddings ~256):
with C the model's context, L the longest prompt of a batch and M the
requested max_new_tokens, the batch generates m = min(M, max(C - L, C // 2))
tokens and each prompt keeps its last C - m tokens (truncated from the left:
the instruction and the chat template's assistant header are at the end).
So the response budget never drops below half the window; `truncated` and
the effective `max_new_tokens` are recorded per problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lze_bench.errors import LzeBenchError


@dataclass(frozen=True)
class Sampling:
    n: int = 1
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0


@dataclass
class Completion:
    text: str
    tokens: int  # generated tokens, EOS included when emitted
    finish: str  # stop | length


@dataclass
class PromptResult:
    prompt: str  # rendered prompt (chat template applied), before truncation
    prompt_tokens: int  # tokens actually fed to the model
    truncated: bool
    max_new_tokens: int  # effective budget after clamping to the context window
    completions: list[Completion] = field(default_factory=list)


def budget(context: int | None, longest_prompt: int, max_new_tokens: int) -> tuple[int, int | None]:
    """(new tokens, prompt cap) for a batch; see the module docstring."""
    if not context:
        return max_new_tokens, None
    new = max(1, min(max_new_tokens, max(context - longest_prompt, context // 2)))
    return new, context - new


class GeneratorBase:
    name = "base"

    def __init__(self, tokenizer, context: int | None, use_chat_template: bool):
        self.tokenizer = tokenizer
        self.context = context
        self.chat = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        self.generated_tokens = 0
        self.generate_s = 0.0

    def render(self, message: str | list[dict]) -> str:
        turns = [{"role": "user", "content": message}] if isinstance(message, str) else list(message)
        if self.chat:
            return self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        if len(turns) != 1 or turns[0]["role"] != "user":
            raise LzeBenchError("eval.prompt: a system turn needs a chat template, and this model's tokenizer has "
                                "none (or eval.use_chat_template=false); use eval.prompt=default")
        return turns[0]["content"]

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"])

    def _fit(self, ids_list: list[list[int]], max_new_tokens: int):
        new, cap = budget(self.context, max(len(ids) for ids in ids_list), max_new_tokens)
        fitted = [ids[-cap:] if cap is not None and len(ids) > cap else ids for ids in ids_list]
        return new, fitted, [len(f) < len(o) for f, o in zip(fitted, ids_list)]

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.generate_s if self.generate_s > 0 else float("nan")

    def close(self) -> None:
        return None
