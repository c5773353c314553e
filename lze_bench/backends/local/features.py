"""Extras a selector may ask for (selectors.md §0 FeatureFn), with their cost booked as flops_select.

- `prompt_entropy` (HIVE §4): mean next-token predictive entropy of the
  *current* policy (at the rollout temperature) over the prompt's positions,
  the last one included (it predicts the first response token); one forward
  pass per asked prompt, F(prompt).
- `prompt_embedding` (ASTRAL §3, lze-bench default): mean over the prompt's
  tokens of the last hidden state (as HF returns it, after the final norm) of
  the *initial* policy, frozen at step 0. Computed once for all N prompts the
  first time it is asked for (N·F(prompt) booked at that step), kept in
  `<run_dir>/prompt_embeddings.npy`. On resume the array is read back; if the
  step that paid for it was rolled back, its cost is booked again
  (`embeddings_charged` in the trainer state), so the ledger never misses it.

`response_entropy` needs no extra pass: the sampler returns it (rollout.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from lze_bench.backends.local.model import right_padded
from lze_bench.errors import LzeBenchError
from lze_bench.rundir import atomic_write_bytes

EMBEDDINGS_FILE = "prompt_embeddings.npy"
PROVIDED = ("prompt_entropy", "prompt_embedding", "response_entropy")


class Features:
    """The FeatureFn handed to `select_rollout`; accumulates FLOPs and seconds until `take_costs()`."""

    def __init__(self, model, prompts: list, flop_model, pad_id: int, temperature: float, run_dir: Path,
                 initial_model_loader, chunk_size: int = 256):
        self.model = model
        self.prompts = prompts  # token ids of every train prompt, by prompt id
        self.flop_model = flop_model
        self.pad_id = pad_id
        self.temperature = temperature
        self.path = Path(run_dir) / EMBEDDINGS_FILE
        self.initial_model_loader = initial_model_loader
        self.chunk_size = chunk_size
        self.embeddings = None
        self.embeddings_charged = False
        self.flops = 0
        self.seconds = 0.0

    def __call__(self, name: str, ids) -> np.ndarray:
        start = time.perf_counter()
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if name == "prompt_entropy":
            out = self._prompt_entropy(ids)
        elif name == "prompt_embedding":
            out = self._all_embeddings()[ids]
        else:
            raise LzeBenchError(f"the local backend has no feature {name!r}; it provides {', '.join(PROVIDED)}")
        self.seconds += time.perf_counter() - start
        return out

    def take_costs(self) -> tuple[int, float]:
        """(flops, seconds) spent since the last call."""
        costs = (self.flops, self.seconds)
        self.flops, self.seconds = 0, 0.0
        return costs

    def _forward_chunks(self, model, ids: np.ndarray, hidden: bool):
        import torch

        device = next(model.parameters()).device
        with torch.no_grad():
            for start in range(0, len(ids), self.chunk_size):
                chunk = ids[start:start + self.chunk_size]
                seqs = [self.prompts[i] for i in chunk]
                out = model(input_ids=right_padded(seqs, self.pad_id, device), output_hidden_states=hidden)
                lengths = torch.as_tensor([len(s) for s in seqs], device=device)
                mask = (torch.arange(out.logits.shape[1], device=device)[None, :] < lengths[:, None]).float()
                self.flops += self.flop_model.forward([len(s) for s in seqs])
                yield out, mask

    def _prompt_entropy(self, ids: np.ndarray) -> np.ndarray:
        import torch

        values = []
        for out, mask in self._forward_chunks(self.model, ids, hidden=False):
            logp = torch.log_softmax(out.logits.float() / self.temperature, dim=-1)
            entropy = -(logp.exp() * logp).sum(-1)
            values.append(((entropy * mask).sum(1) / mask.sum(1)).cpu().numpy())
        return np.concatenate(values).astype(np.float32) if values else np.zeros(0, dtype=np.float32)

    def _all_embeddings(self) -> np.ndarray:
        if self.embeddings is None and self.path.exists():
            self.embeddings = np.load(self.path, allow_pickle=False)
        if self.embeddings is not None and not self.embeddings_charged:
            self.flops += self.flop_model.forward([len(p) for p in self.prompts])  # rolled-back step: book again
            self.embeddings_charged = True
        if self.embeddings is None:
            model = self.initial_model_loader()
            pooled = []
            for out, mask in self._forward_chunks(model, np.arange(len(self.prompts)), hidden=True):
                last = out.hidden_states[-1].float()
                pooled.append(((last * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)).cpu().numpy())
            self.embeddings = np.concatenate(pooled).astype(np.float32)
            self.embeddings_charged = True
            import io

            buffer = io.BytesIO()
            np.save(buffer, self.embeddings)
            atomic_write_bytes(self.path, buffer.getvalue())
        return self.embeddings
