"""Frozen encoder embeddings for ASTRAL's head: mean of the last hidden state over the raw question.

Source: ASTRAL-Group/data-efficient-llm-rl at 59df918, `adaptive_difficulty_prediction/save_embedding.py`
(`AutoModel`, `output_hidden_states`, the last hidden state averaged over the attention mask; the question
text as is, no chat template; Qwen2.5-Math-1.5B-Instruct in the paper). Ours: a causal LM's
`hidden_states[-1]` is the same tensor as the base model's `last_hidden_state` (after the final norm);
sequences are right-padded and masked, so padding never enters the mean. Cost: one forward per
question, F(question tokens) (lze_bench.flops), booked by the caller as offline compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Encoder:
    """A frozen encoder: `name` is what a head records (config `model_name`) and is checked against."""

    name: str
    model: object
    tokenizer: object
    flop_model: object

    @classmethod
    def load(cls, name: str, path: str, device="cpu") -> "Encoder":
        import torch

        from lze_bench.backends.local.model import load_policy
        from lze_bench.flops import FlopModel

        model, tokenizer = load_policy(path, torch.device(device) if isinstance(device, str) else device)
        return cls(name, model.eval(), tokenizer, FlopModel.from_torch_model(model))

    @property
    def width(self) -> int:
        return int(self.model.config.hidden_size)

    def embed(self, questions: list[str], chunk: int = 128) -> tuple[np.ndarray, int]:
        """(float32[m, d] embeddings, FLOPs spent) of raw question texts."""
        import torch

        from lze_bench.backends.local.model import right_padded

        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id
        tokens = [self.tokenizer(q, add_special_tokens=False)["input_ids"] or [pad] for q in questions]
        out, flops = [], 0
        with torch.no_grad():
            for start in range(0, len(tokens), chunk):
                seqs = tokens[start:start + chunk]
                hidden = self.model(input_ids=right_padded(seqs, pad, device), output_hidden_states=True)
                last = hidden.hidden_states[-1].float()
                lengths = torch.as_tensor([len(s) for s in seqs], device=device)
                mask = (torch.arange(last.shape[1], device=device)[None, :] < lengths[:, None]).float()
                out.append(((last * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)).cpu().numpy())
                flops += self.flop_model.forward([len(s) for s in seqs])
        width = self.width
        return (np.concatenate(out).astype(np.float32) if out else np.zeros((0, width), np.float32)), int(flops)
