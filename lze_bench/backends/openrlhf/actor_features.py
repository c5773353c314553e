"""Selector features computed inside OpenRLHF's policy actors (one mixin; every DP rank runs it).

`FeatureActorMixin` is a base of our policy actor classes (the real
`PolicyModelActor` subclass on a GPU, `_CpuPolicyActor` in the CPU tests).
The controller (`features.ActorFeatures`) reaches it through OpenRLHF's
`RayActorGroup.async_run_method_batch(method, **lists)`: OpenRLHF 0.11.2 cuts
each list into `ceil(len / ranks)` consecutive chunks, one per rank, and
`BaseModelActor.execute_batch` calls the method **once per list item** (as it
calls `forward` once per micro-batch in `make_experience`). So one call here is
one controller-built micro-batch: `sequences` is a list of token lists and
`starts`, `ends`, `temperature` belong to that micro-batch.

The quantities are the local backend's (lze_bench/backends/local/features.py
and rollout.py `_sample`), computed the same way:
- `lze_entropy`: per sequence, the mean over logit positions `p` in
  `[start, end)` of the full-vocabulary entropy of `softmax(logits[p] / T)`,
  float32 softmax; logits at position `p` predict token `p + 1`. Prompt
  entropy asks `[0, len(prompt))` (the last prompt position included: it
  predicts the first response token); response entropy asks the positions that
  predict the response tokens. An empty span gives 0.0 (local: sum / max(n, 1)).
- `lze_mean_hidden`: per sequence, the mean over token positions `[start, end)`
  of the last hidden state (`output_hidden_states[-1]`, as HF returns it, after
  the final norm), float32.
- `lze_encode`: ASTRAL's learned head reads embeddings of another, frozen model
  (selector.predictor_encoder): it is loaded on the rank for the call, runs the
  local backend's `Encoder.embed` on raw question texts, and is dropped
  (head.py on the controller side).

Mechanics: right-padded micro-batches of `args.rollout.micro_batch_size`
(fallback 8) rows with an attention mask (right padding leaves every real
position of a causal LM unchanged), `torch.no_grad`, eval mode for the call
(restored after), on the device of the model's parameters.

Memory: the model's own forward would materialise the logits of the whole
micro-batch, `B x W x V` (16 x 4,096 x 151,936 bf16 logits are 18.5 GiB, next
to an awake vLLM). So the backbone (`base_model`) gives the last hidden
states, and the logits are made from them through the output head
(`get_output_embeddings()`: `hidden @ W^T (+ b)`) one position slice at a
time, at most `_LOGITS_ELEMENTS` logits live at once; the float32 softmax runs
on that slice. The values do not depend on the slicing. Models that change
their logits after the head (Gemma's `final_logit_softcapping`, Cohere's
`logit_scale`, Granite's `logits_scaling`) are refused: `head(hidden)` is not
their distribution. The mean hidden state is the backbone's last hidden state
(HF's `hidden_states[-1]`: after the final norm) and makes no logits at all.

ZeRO-3 note: every rank must run the same collectives in the same order (each
module forward gathers its partitioned weights). The controller sends every
rank the same number of micro-batches; within one, the backbone runs once and
the head's weights are gathered once (`deepspeed.zero.GatheredParameters`) and
then applied slice by slice without further collectives, so ranks whose
micro-batches have different widths stay in step. The controller does not
reload the actor's offloaded states for these forwards (dispatch.py).
"""

from __future__ import annotations

_LOGITS_ELEMENTS = 1 << 27  # logits per head slice (512 MiB as float32); memory only, never the values
_DEFAULT_MICRO_BATCH = 8
# config attributes of models whose logits are not `head(hidden)` (see the module docstring)
_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling")


class FeatureActorMixin:
    """Feature passes for a policy actor; needs `self.actor.model` (or an overridden `_lze_model`)."""

    def _lze_model(self):
        """The causal LM to call: `self.actor.model` (on a GPU the DeepSpeed engine around the HF model)."""
        return self.actor.model

    def _lze_micro_batch_size(self) -> int:
        args = getattr(self, "args", None)
        if args is None:  # OpenRLHF's PolicyModelActor keeps them on its strategy only
            args = getattr(getattr(self, "strategy", None), "args", None)
        size = getattr(getattr(args, "rollout", None), "micro_batch_size", None)
        return int(size) if size else _DEFAULT_MICRO_BATCH

    def _lze_pad_id(self) -> int:
        pad = getattr(getattr(self, "tokenizer", None), "pad_token_id", None)
        return int(pad) if pad is not None else 0  # any id: right padding never reaches a real position

    def lze_entropy(self, sequences: list[list[int]], starts: list[int], ends: list[int],
                    temperature: float) -> list[float]:
        """Mean full-vocabulary entropy of softmax(logits / temperature) over logit positions [start, end)."""
        import torch

        temperature = float(temperature)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        values: list[float] = []
        for hidden, mask, head in self._lze_forwards(sequences, starts, ends):
            hidden = hidden[:, : mask.shape[1]]
            entropy = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
            width = max(1, _LOGITS_ELEMENTS // max(1, hidden.shape[0] * head.vocab_size))
            with head.gathered():
                for a in range(0, mask.shape[1], width):
                    logp = torch.log_softmax(head.logits(hidden[:, a:a + width]).float() / temperature, dim=-1)
                    entropy[:, a:a + width] = -(logp.exp() * logp).sum(-1)
            mean = (entropy * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            values.extend(float(v) for v in mean.cpu().tolist())
        return values

    def lze_mean_hidden(self, sequences: list[list[int]], starts: list[int], ends: list[int]) -> list[list[float]]:
        """Mean of the last hidden state over token positions [start, end) (an empty span is an error)."""
        for start, end in zip(starts, ends):
            if int(end) <= int(start):
                raise ValueError(f"empty span [{start}, {end}) has no mean hidden state")
        rows: list[list[float]] = []
        for hidden, mask, _ in self._lze_forwards(sequences, starts, ends):
            last = hidden[:, : mask.shape[1]].float()
            mean = (last * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            rows.extend(mean.cpu().tolist())
        return rows

    def lze_encode(self, encoder: str, questions: list[str], chunk: int):
        """(float32[m, d] embeddings, FLOPs) of raw question texts by ASTRAL's frozen encoder, `chunk` questions
        per forward (lze_bench.predictor.encoder: the local backend's code, so the same chunks give the same
        numbers). The encoder is loaded on this rank's device for the call and dropped after: it is not the
        policy, never trained (eval mode, no grad), and its memory is needed back next to vLLM. A rank given no
        questions loads nothing."""
        import numpy as np

        questions = [str(q) for q in questions]
        if not questions:
            return np.zeros((0, 0), dtype=np.float32), 0
        import torch

        from lze_bench.predictor.encoder import Encoder

        model = self._lze_model()
        device = next(getattr(model, "module", model).parameters()).device
        frozen = Encoder.load(str(encoder), str(encoder), device)
        try:
            return frozen.embed(questions, chunk=int(chunk))
        finally:
            del frozen
            if device.type == "cuda":
                torch.cuda.empty_cache()

    def _lze_forwards(self, sequences, starts, ends):
        """Per micro-batch: (last hidden states[B, W', d], float32 mask[B, W] of the asked positions, the head),
        W = the widest span end (<= W')."""
        import torch

        sequences = [[int(t) for t in s] for s in sequences]
        starts, ends = [int(s) for s in starts], [int(e) for e in ends]
        if not len(sequences) == len(starts) == len(ends):
            raise ValueError(f"{len(sequences)} sequences, {len(starts)} starts, {len(ends)} ends")
        for seq, start, end in zip(sequences, starts, ends):
            if not 0 <= start <= end <= len(seq):
                raise ValueError(f"span [{start}, {end}) outside a sequence of {len(seq)} tokens")
        model = self._lze_model()
        causal_lm = getattr(model, "module", model)  # a DeepSpeed engine wraps the HF model
        head = _Head(causal_lm)
        body = causal_lm.base_model
        device = next(causal_lm.parameters()).device
        size, pad = self._lze_micro_batch_size(), self._lze_pad_id()
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                for first in range(0, len(sequences), size):
                    seqs, lo, hi = (sequences[first:first + size], starts[first:first + size],
                                    ends[first:first + size])
                    width = max(len(s) for s in seqs)
                    input_ids = torch.full((len(seqs), width), pad, dtype=torch.long)
                    attention = torch.zeros((len(seqs), width), dtype=torch.long)
                    for row, seq in enumerate(seqs):
                        input_ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
                        attention[row, : len(seq)] = 1
                    hidden = body(input_ids=input_ids.to(device), attention_mask=attention.to(device)).last_hidden_state
                    positions = torch.arange(max(max(hi), 1), device=device)[None, :]
                    mask = ((positions >= torch.as_tensor(lo, device=device)[:, None])
                            & (positions < torch.as_tensor(hi, device=device)[:, None])).float()
                    yield hidden, mask, head
        finally:
            model.train(was_training)


class _Head:
    """The causal LM's output head as logits = hidden @ W^T (+ b), its weights gathered once under ZeRO-3."""

    def __init__(self, causal_lm):
        config = getattr(causal_lm, "config", None)
        for key in _LOGIT_POSTPROCESSING:
            value = getattr(config, key, None)
            if value not in (None, 1, 1.0):
                raise ValueError(f"{type(causal_lm).__name__} sets {key}={value}: its logits are not the output "
                                 "head's, so the feature passes cannot slice them")
        self.module = causal_lm.get_output_embeddings()
        self.params = [p for p in (self.module.weight, getattr(self.module, "bias", None)) if p is not None]
        self.vocab_size = int(getattr(self.module.weight, "ds_shape", self.module.weight.shape)[0])

    def gathered(self):
        """A context in which the head's weights are whole on this rank (a collective under ZeRO-3)."""
        import contextlib

        partitioned = [p for p in self.params if hasattr(p, "ds_id")]
        if not partitioned:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(partitioned)

    def logits(self, hidden):
        import torch

        return torch.nn.functional.linear(hidden, self.module.weight, getattr(self.module, "bias", None))
