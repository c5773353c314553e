"""Selector features on backend=openrlhf: the controller side of the policy actors' feature passes.

The same quantities as the local backend (lze_bench/backends/local/features.py,
rollout.py), computed by `actor_features.FeatureActorMixin` on every policy
actor rank and booked as `flops_select`:

- `prompt_entropy` (HIVE §4): mean next-token entropy of the *current* policy
  at the rollout temperature over all of the prompt's positions (the last one
  included), full vocabulary. One no-grad forward per asked prompt: F(prompt).
- `prompt_embedding` (ASTRAL §3): mean over the prompt's tokens of the last
  hidden state of the *initial* policy, for all N prompts, at the first ask.
  ASTRAL asks at step 0, before any update, so the current actor *is* the
  initial policy then; asking first at a later step is an error (the initial
  weights are no longer on the actors). Cached in
  `<run_dir>/prompt_embeddings.npy` (atomic write), N·F(prompt) booked at that
  step, and the paying step written beside it in `prompt_embeddings.json`
  (`{"charged_at_step": s}`, written after the array). On resume the array is
  read back; its cost is booked again (at the step that reads it, and the json
  updated) iff the paying step was rolled back, i.e. `s >= resume_step`, or the
  json is missing. So the kept ledger rows hold the charge exactly once, as
  the local backend's `embeddings_charged` ensures there.
- `response_entropy` (HIVE, float[G, n]): per response, the mean over the
  positions that predict its tokens of the same entropy (local `_sample`: the
  full distribution at the rollout temperature, before top-p; EOS included when
  emitted). OpenRLHF has no pass that gives it in time, so this is one extra
  no-grad forward of the policy actor over the rolled-out samples, F(L) per
  sample: vLLM returns only the top-k log-probs of each position (an entropy
  from them is a truncated approximation, not the spec's quantity), and the
  actor's own old-log-prob forward (`make_experience`) runs after selection,
  too late for `observe`.

Dispatch (`call_actors(method_name, **lists)`, supplied by the trainer: it
wraps `actor_model_group.async_run_method_batch`, `ray.get` and flattens the
per-rank lists, dropping ring/TP duplicates, into one result per list item, in
order). OpenRLHF gives rank r the items `[r·c, (r+1)·c)`, `c = ceil(len / ranks)`,
and calls the method once per item. One item here is one micro-batch of at
most `micro_batch_size` sequences (the trainer passes `rollout.micro_batch_size`,
the size the actors split by, so one item is one forward), built in order of
sequence length (less padding; results are put back in input order). The item
list is padded to a multiple of `dp_size` by repeating its last item, and the
padded outputs are dropped: every rank runs the same number of forwards, which
ZeRO-3 needs. The micro-batches are dealt round-robin (rank r gets the r-th,
(r + dp)-th, ... shortest), so the longest ones do not all land on the last
rank, which every other rank would then wait for. Those repeats are not booked, like padding tokens (FLOPs count
the asked sequences' tokens, so a count does not depend on how we batch and
equals the local backend's for the same request).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.rundir import atomic_write_bytes, atomic_write_json

EMBEDDINGS_FILE = "prompt_embeddings.npy"  # the local backend's name (local/features.py)
CHARGE_FILE = "prompt_embeddings.json"
PROVIDED = ("prompt_entropy", "prompt_embedding")


class ActorFeatures:
    """The FeatureFn handed to `select_rollout` on backend=openrlhf; costs accumulate until `take_costs()`.

    `call_actors(method_name, **lists) -> list` (one result per item), `prompt_tokens(ids) -> token lists`,
    `flop_model` a `lze_bench.flops.FlopModel`, `temperature` the rollout temperature, `num_prompts` N,
    `dp_size` the number of effective actor ranks (actors / (ring_attn_size · tensor_parallel_size)),
    `resume_step` the step a resumed run starts at (steps < resume_step kept their ledger rows; 0 fresh).
    """

    def __init__(self, call_actors: Callable, prompt_tokens: Callable[[np.ndarray], list[list[int]]], flop_model,
                 temperature: float, run_dir, num_prompts: int, dp_size: int, micro_batch_size: int = 8,
                 resume_step: int = 0):
        if int(dp_size) < 1 or int(micro_batch_size) < 1:
            raise LzeBenchError(f"dp_size ({dp_size}) and micro_batch_size ({micro_batch_size}) must be >= 1")
        self.call_actors = call_actors
        self.prompt_tokens = prompt_tokens
        self.flop_model = flop_model
        self.temperature = float(temperature)
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / EMBEDDINGS_FILE
        self.charge_path = self.run_dir / CHARGE_FILE
        self.num_prompts = int(num_prompts)
        self.dp_size = int(dp_size)
        self.micro_batch_size = int(micro_batch_size)
        self.resume_step = int(resume_step)
        self.step = self.resume_step
        self.embeddings: np.ndarray | None = None
        self.embeddings_charged = False
        self.flops = 0
        self.seconds = 0.0

    def begin_step(self, step: int) -> None:
        """The step now running (0-based ledger step = updates done before it); costs booked now belong to it."""
        self.step = int(step)

    def __call__(self, name: str, ids) -> np.ndarray:
        start = time.perf_counter()
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if name == "prompt_entropy":
            seqs = self._prompts(ids)
            values = self._run("lze_entropy", seqs, [0] * len(seqs), [len(s) for s in seqs],
                               temperature=self.temperature)
            self.flops += self.flop_model.forward([len(s) for s in seqs])
            out = np.asarray(values, dtype=np.float32).reshape(len(ids))
        elif name == "prompt_embedding":
            out = self._all_embeddings()[ids]
        else:
            raise LzeBenchError(f"the openrlhf backend has no feature {name!r}; it provides {', '.join(PROVIDED)} "
                                "(and response_entropy with each rollout batch)")
        self.seconds += time.perf_counter() - start
        return out

    def response_entropy(self, sequences: list[list[int]], starts: list[int], ends: list[int]) -> np.ndarray:
        """float32[S]: per sample, mean entropy over logit positions [start, end) (see `response_spans`).

        The caller reshapes to [G, n]; F(len(sequence)) per sample is booked.
        """
        begin = time.perf_counter()
        values = self._run("lze_entropy", sequences, starts, ends, temperature=self.temperature)
        self.flops += self.flop_model.forward([len(s) for s in sequences])
        self.seconds += time.perf_counter() - begin
        return np.asarray(values, dtype=np.float32).reshape(len(sequences))

    def take_costs(self) -> tuple[int, float]:
        """(flops, seconds) spent since the last call."""
        costs = (self.flops, self.seconds)
        self.flops, self.seconds = 0, 0.0
        return costs

    # -- internals --

    def _prompts(self, ids: np.ndarray) -> list[list[int]]:
        seqs = [[int(t) for t in s] for s in self.prompt_tokens(ids)]
        if len(seqs) != len(ids):
            raise LzeBenchError(f"prompt_tokens gave {len(seqs)} prompts for {len(ids)} ids")
        return seqs

    def _run(self, method: str, sequences, starts, ends, **scalars) -> list:
        """Per-sequence results of `method` on the actors, in input order (see the module docstring)."""
        sequences = [[int(t) for t in s] for s in sequences]
        starts, ends = [int(s) for s in starts], [int(e) for e in ends]
        if not len(sequences) == len(starts) == len(ends):
            raise LzeBenchError(f"{len(sequences)} sequences, {len(starts)} starts, {len(ends)} ends")
        for seq, start, end in zip(sequences, starts, ends):
            if not 0 <= start <= end <= len(seq):
                raise LzeBenchError(f"span [{start}, {end}) outside a sequence of {len(seq)} tokens")
        if not sequences:
            return []
        batches, real = self._deal(np.argsort([len(s) for s in sequences], kind="stable"))
        lists = {"sequences": [[sequences[i] for i in b] for b in batches],
                 "starts": [[starts[i] for i in b] for b in batches],
                 "ends": [[ends[i] for i in b] for b in batches]}
        for key, value in scalars.items():
            lists[key] = [value] * len(batches)
        results = list(self.call_actors(method, **lists))
        if len(results) != len(batches):
            raise LzeBenchError(f"{method}: the actors returned {len(results)} results for {len(batches)} "
                                "micro-batches (call_actors must give one result per item, in order)")
        out: list = [None] * len(sequences)
        for batch, result in ((b, r) for b, r, keep in zip(batches, results, real) if keep):
            result = list(result)
            if len(result) != len(batch):
                raise LzeBenchError(f"{method}: {len(result)} values for a micro-batch of {len(batch)}")
            for i, value in zip(batch, result):
                out[i] = value
        return out

    def _deal(self, order: np.ndarray) -> tuple[list[np.ndarray], list[bool]]:
        """Micro-batches of `order` (ascending length) as the item list OpenRLHF cuts into consecutive rank
        chunks, dealt round-robin so every rank gets short and long ones; (items, False for padding)."""
        batches = [order[i:i + self.micro_batch_size] for i in range(0, len(order), self.micro_batch_size)]
        real = [True] * len(batches)
        pad = -len(batches) % self.dp_size  # every rank the same number of forwards (ZeRO-3)
        batches += [batches[-1]] * pad
        real += [False] * pad
        per_rank = len(batches) // self.dp_size
        dealt = [r + j * self.dp_size for r in range(self.dp_size) for j in range(per_rank)]
        return [batches[i] for i in dealt], [real[i] for i in dealt]

    def _read_charge(self) -> int | None:
        try:
            return int(json.loads(self.charge_path.read_text())["charged_at_step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _book_embeddings(self, lengths) -> None:
        self.flops += self.flop_model.forward(lengths)
        self.embeddings_charged = True
        atomic_write_json(self.charge_path, {"charged_at_step": self.step})

    def _all_embeddings(self) -> np.ndarray:
        if self.embeddings is None and self.path.exists():
            embeddings = np.load(self.path, allow_pickle=False)
            if embeddings.ndim != 2 or embeddings.shape[0] != self.num_prompts:
                raise LzeBenchError(f"{self.path} holds an array of shape {embeddings.shape}, not one row per "
                                    f"prompt of the {self.num_prompts} train prompts; delete it to recompute")
            self.embeddings = embeddings.astype(np.float32, copy=False)
            charged = self._read_charge()
            if charged is not None and charged < self.resume_step:
                self.embeddings_charged = True  # the paying step's ledger row was kept
        if self.embeddings is not None:
            if not self.embeddings_charged:  # paid by a rolled-back step (or never recorded): book again
                self._book_embeddings([len(p) for p in self._prompts(np.arange(self.num_prompts))])
            return self.embeddings
        if self.step != 0:
            raise LzeBenchError(f"prompt_embedding first asked at step {self.step} and {self.path} is missing: "
                                "the embeddings are those of the initial policy, which the actors hold only "
                                "at step 0; restart the run from scratch (or restore the file)")
        prompts = self._prompts(np.arange(self.num_prompts))
        rows = self._run("lze_mean_hidden", prompts, [0] * len(prompts), [len(p) for p in prompts])
        self.embeddings = np.asarray(rows, dtype=np.float32).reshape(self.num_prompts, -1)
        buffer = io.BytesIO()
        np.save(buffer, self.embeddings)
        atomic_write_bytes(self.path, buffer.getvalue())
        self._book_embeddings([len(p) for p in prompts])
        return self.embeddings


def response_spans(experiences) -> tuple[list[list[int]], list[int], list[int]]:
    """(sequences, starts, ends) for single-sample OpenRLHF `Experience`s, for `ActorFeatures.response_entropy`.

    As `SamplesGenerator._process_response_into_experience` (0.11.2) builds them:
    `sequences[1, L]` = prompt + response tokens (truncated to max_len),
    `attention_mask[1, L]` all ones, `action_mask[1, L-1]` = the action mask
    shifted by one: `action_mask[j] = 1` means token `j+1` is a response token,
    predicted by the logits at position `j`. So the span is
    `[first j with action_mask[j] = 1, last such j + 1)`; for a prompt of P
    tokens and R response tokens that is `[P-1, P-1+R)`. A sample without
    response tokens gets an empty span (entropy 0.0). Multi-turn samples (gaps
    in the action mask) are refused: one span per sample is all we need here.
    """
    sequences, starts, ends = [], [], []
    for e in experiences:
        if e.sequences.shape[0] != 1:
            raise LzeBenchError(f"response_spans takes single-sample experiences, got {e.sequences.shape[0]} rows")
        attention = e.attention_mask[0].bool()
        length = int(attention.sum())
        if not bool(attention[:length].all()):
            raise LzeBenchError("response_spans expects no padding before a sample's last token")
        tokens = [int(t) for t in e.sequences[0, :length].tolist()]
        actions = e.action_mask[0, : max(length - 1, 0)].bool().nonzero().flatten().tolist()
        if not actions:
            start = end = max(length - 1, 0)
        else:
            start, end = int(actions[0]), int(actions[-1]) + 1
            if end - start != len(actions):
                raise LzeBenchError("response_spans: the action mask has gaps (a multi-turn sample)")
        sequences.append(tokens)
        starts.append(start)
        ends.append(end)
    return sequences, starts, ends
