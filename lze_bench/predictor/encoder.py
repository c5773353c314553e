"""Frozen encoder embeddings for ASTRAL's head: mean of the last hidden state over the raw question.

Source: ASTRAL-Group/data-efficient-llm-rl at 59df918, `adaptive_difficulty_prediction/save_embedding.py`
(`AutoModel`, the last hidden state averaged over the attention mask; the question text as is, no chat
template; Qwen2.5-Math-1.5B-Instruct in the paper). Ours: sequences are right-padded and masked, so
padding never enters the mean; a question with no token embeds the pad token alone. Cost: one forward per
question, F(question tokens) of the base model (no LM head; lze_bench.flops), booked by the caller as
offline compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHUNK = 128  # questions per forward; a backend that splits the questions keeps these chunks (same padding)


@dataclass
class Encoder:
    """A frozen encoder: `name` is what a head records (config `model_name`) and is checked against."""

    name: str
    model: object
    tokenizer: object
    flop_model: object

    @classmethod
    def load(cls, name: str, path: str, device="cpu") -> "Encoder":
        """The base model (`AutoModel`) and tokenizer of an HF directory or hub id, in eval mode."""
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from lze_bench.errors import LzeBenchError
        from lze_bench.flops import FlopModel

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # a causal LM's unused LM head is expected here, not worth a warning
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
            model = AutoModel.from_pretrained(str(path)).to(device).eval()
        except OSError as exc:
            raise LzeBenchError(f"encoder {path}: cannot load a Hugging Face model there ({exc})") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        return cls(name, model, tokenizer, FlopModel.from_torch_model(model))

    @property
    def width(self) -> int:
        return int(self.model.config.hidden_size)

    def embed(self, questions: list[str], chunk: int = CHUNK) -> tuple[np.ndarray, int]:
        """(float32[m, d] embeddings, FLOPs spent) of raw question texts."""
        import torch

        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id
        tokens = [self.tokenizer(q, add_special_tokens=False)["input_ids"] or [pad] for q in questions]
        out, flops = [], 0
        with torch.no_grad():
            for start in range(0, len(tokens), chunk):
                seqs = tokens[start:start + chunk]
                width = max(len(s) for s in seqs)
                ids = torch.full((len(seqs), width), pad, dtype=torch.long)
                mask = torch.zeros((len(seqs), width))
                for row, seq in enumerate(seqs):
                    ids[row, :len(seq)] = torch.as_tensor(seq)
                    mask[row, :len(seq)] = 1.0
                ids, mask = ids.to(device), mask.to(device)
                last = self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state.float()
                out.append(((last * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)).cpu().numpy())
                flops += self.flop_model.forward([len(s) for s in seqs])
        return (np.concatenate(out).astype(np.float32) if out else np.zeros((0, self.width), np.float32)), int(flops)
