"""The character tokenizer of the tiny policy, a normal Hugging Face fast tokenizer.

Built with the `tokenizers` library (a tokenizer the
project builds"): one token per character of printable ASCII (0x20-0x7E) plus
newline and tab, and four specials. Any other character (real benchmark text
has Unicode) maps to `<unk>`, so every text tokenizes; nothing is dropped.

Choices where the sources are silent:
- model: BPE with an empty merge list = exactly one token per character, with
  `<unk>` for characters outside the vocabulary; no normalizer and no
  pre-tokenizer, so spaces are ordinary tokens and decoding is lossless
  (`decoders.Fuse` joins tokens without separators);
- no BOS is added: prompts start at their first character, which keeps the
  FLOP count equal to the characters a reader sees;
- a chat template renders a user message as the task's prompt format
  (`PROMPT_TEMPLATE`), so `lze-bench eval` can prompt this model like any chat
  model and get the format it was trained on.
"""

from __future__ import annotations

import string
from pathlib import Path

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
CHARACTERS = "\n\t" + "".join(chr(code) for code in range(0x20, 0x7F))

# The prompt the tiny policy sees for a problem; the response follows it.
PROMPT_TEMPLATE = "Q: {problem}\nA: "
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "Q: {{ message['content'] }}\nA: "
    "{% elif message['role'] == 'assistant' %}{{ message['content'] }}</s>{% endif %}{% endfor %}"
)

assert len(set(CHARACTERS)) == len(CHARACTERS) and set(string.digits) <= set(CHARACTERS)


def format_prompt(problem: str) -> str:
    return PROMPT_TEMPLATE.format(problem=problem)


def build_tokenizer():
    """A `PreTrainedTokenizerFast` over CHARACTERS + SPECIALS (ids: specials first)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SPECIALS)}
    for char in CHARACTERS:
        vocab[char] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",  # generation: prompts are left-padded so responses line up
        model_max_length=4096,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tokenizer(tokenizer, directory: str | Path) -> None:
    tokenizer.save_pretrained(str(directory))


def load_tokenizer(directory: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))
