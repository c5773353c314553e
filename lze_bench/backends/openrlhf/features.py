"""The selector's extra features on backend=openrlhf (selectors.md §0 FeatureFn), run by the policy actors.

The same quantities as the local backend (lze_bench/backends/local/features.py
and rollout.py), computed by no-grad forwards of the DeepSpeed policy ranks
(actor_features.py) that the trainer actor asks for:

- `prompt_entropy` (hive): mean next-token entropy of the *current* policy at
  the rollout temperature over the prompt's positions, the last one included;
  one forward per asked prompt, F(prompt) each.
- `prompt_embedding` (astral): mean last hidden state over the prompt's tokens
  of the *initial* policy: computed for all N prompts the first time it is
  asked for, which is at step 0 before any update (so the actor is still the
  initial policy), N·F(prompt) booked then; kept in
  `<run_dir>/prompt_embeddings.npy` with the step that paid in
  `prompt_embeddings.json`. On resume the array is read back; its cost is
  booked again only if the step that paid was rolled back.
- `response_entropy` (hive): per response, the mean full-vocabulary entropy
  over the positions that predict its tokens; one forward per rolled-out
  sample, F(L) each. An extra pass: vLLM returns only top-k log-probs (an
  approximation of this entropy), and the actor's old-log-prob forward in
  OpenRLHF's experience maker runs after selection, too late for `observe`.
All of it is booked as `flops_select` (take_costs). The sequences go to the
ranks in micro-batches (OpenRLHF's `execute_batch` calls the method once per
list item); the micro-batch list is padded to a multiple of the data-parallel
ranks by repeating the last one (its outputs dropped): OpenRLHF deals lists in
ceil-sized chunks, and every rank must run the same number of forwards.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.rundir import atomic_write_bytes

EMBEDDINGS_FILE = "prompt_embeddings.npy"
EMBEDDINGS_CHARGE = "prompt_embeddings.json"
PROVIDED = ("prompt_entropy", "prompt_embedding", "response_entropy")


def response_spans(experiences: list) -> tuple[list, list, list]:
    """(token lists, starts, ends) of single-sample OpenRLHF Experiences: the logit positions predicting
    the response (action_mask[j] = 1: token j + 1 is generated, predicted by the logits at j)."""
    sequences, starts, ends = [], [], []
    for e in experiences:
        length = int(e.attention_mask.reshape(-1).sum())
        actions = np.flatnonzero(e.action_mask.reshape(-1).cpu().numpy())
        if actions.size == 0:
            raise LzeBenchError("a rolled-out sample has no response tokens")
        sequences.append([int(t) for t in e.sequences.reshape(-1)[:length]])
        starts.append(int(actions[0]))
        ends.append(int(actions[-1]) + 1)
    return sequences, starts, ends


class ActorFeatures:
    """FeatureFn for `select_rollout`, plus the response entropies of rolled-out groups."""

    def __init__(self, call_actors: Callable, prompt_tokens: Callable, flop_model, temperature: float,
                 run_dir, num_prompts: int, dp_ranks: int, micro_batch_size: int = 8):
        self.call_actors = call_actors  # (method_name, **lists) -> per-item results, in order
        self.prompt_tokens = prompt_tokens  # ids -> token lists
        self.flop_model, self.temperature = flop_model, float(temperature)
        self.path = Path(run_dir) / EMBEDDINGS_FILE
        self.charge_path = Path(run_dir) / EMBEDDINGS_CHARGE
        self.num_prompts, self.dp_ranks = int(num_prompts), max(1, int(dp_ranks))
        self.micro_batch_size = max(1, int(micro_batch_size))
        self.embeddings = None
        self.step = 0  # the training step being run (context.begin_step)
        self.resume_step = 0
        self.flops, self.seconds = 0, 0.0

    def resume_at(self, steps_done: int) -> None:
        self.resume_step = self.step = int(steps_done)

    def __call__(self, name: str, ids) -> np.ndarray:
        start = time.perf_counter()
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        try:
            if name == "prompt_entropy":
                return self._prompt_entropy(ids)
            if name == "prompt_embedding":
                return self._all_embeddings()[ids]
            raise LzeBenchError(f"backend=openrlhf has no feature {name!r}; it provides {', '.join(PROVIDED)}")
        finally:
            self.seconds += time.perf_counter() - start

    def take_costs(self) -> tuple[int, float]:
        costs = (self.flops, self.seconds)
        self.flops, self.seconds = 0, 0.0
        return costs

    def response_entropy(self, sequences: list, starts: list, ends: list) -> np.ndarray:
        start = time.perf_counter()
        values = self._run("lze_entropy", sequences, starts, ends, temperature=self.temperature)
        self.flops += self.flop_model.forward([len(s) for s in sequences])
        self.seconds += time.perf_counter() - start
        return np.asarray(values, dtype=np.float32)

    # --- internals ---------------------------------------------------------------
    def _run(self, method: str, sequences: list, starts: list, ends: list, **scalars) -> list:
        """One value per sequence; each list item sent is one micro-batch."""
        if not sequences:
            return []
        size = self.micro_batch_size
        cuts = [(a, min(a + size, len(sequences))) for a in range(0, len(sequences), size)]
        cuts += [cuts[-1]] * ((-len(cuts)) % self.dp_ranks)
        lists = {"sequences": [sequences[a:b] for a, b in cuts], "starts": [starts[a:b] for a, b in cuts],
                 "ends": [ends[a:b] for a, b in cuts]}
        for key, value in scalars.items():
            lists[key] = [value] * len(cuts)
        per_batch = list(self.call_actors(method, **lists))
        real = -(-len(sequences) // size)
        return [value for batch in per_batch[:real] for value in batch]

    def _prompt_entropy(self, ids: np.ndarray) -> np.ndarray:
        tokens = self.prompt_tokens(ids)
        values = self._run("lze_entropy", tokens, [0] * len(tokens), [len(t) for t in tokens],
                           temperature=self.temperature)
        self.flops += self.flop_model.forward([len(t) for t in tokens])
        return np.asarray(values, dtype=np.float32)

    def _all_embeddings(self) -> np.ndarray:
        if self.embeddings is None and self.path.exists():
            self.embeddings = np.load(self.path)
            paid_at = json.loads(self.charge_path.read_text())["charged_at_step"] if self.charge_path.exists() else -1
            if paid_at < 0 or paid_at >= self.resume_step:  # the step that paid was rolled back: book it again
                self._charge(self.prompt_tokens(np.arange(self.num_prompts)))
        if self.embeddings is None:
            if self.step > 0:
                raise LzeBenchError(f"{self.path} is missing at step {self.step}: astral's embeddings come from the "
                                    "initial policy; use a new run_dir")
            tokens = self.prompt_tokens(np.arange(self.num_prompts))
            rows = self._run("lze_mean_hidden", tokens, [0] * len(tokens), [len(t) for t in tokens])
            self.embeddings = np.asarray(rows, dtype=np.float32)
            buffer = io.BytesIO()
            np.save(buffer, self.embeddings)
            atomic_write_bytes(self.path, buffer.getvalue())
            self._charge(tokens)
        return self.embeddings

    def _charge(self, tokens: list) -> None:
        self.flops += self.flop_model.forward([len(t) for t in tokens])
        atomic_write_bytes(self.charge_path, json.dumps({"charged_at_step": int(self.step)}).encode())
