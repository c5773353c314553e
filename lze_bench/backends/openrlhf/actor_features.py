"""No-grad feature passes on an OpenRLHF policy actor rank (run inside the Ray actor; features.py asks).

Both take token sequences with one span each and run the rank's HF causal LM
in right-padded micro-batches (`rollout.micro_batch_size`):
* `lze_entropy`: mean over logit positions p in [start, end) of the
  full-vocabulary entropy of softmax(logits_p / T) (logits at p predict token
  p + 1), float32 math, as the local backend's sampler and features.py;
* `lze_mean_hidden`: mean over token positions [start, end) of the last
  hidden state (HF `hidden_states[-1]`, after the final norm).
Every rank gets the same number of sequences (features.py pads the lists), so
ZeRO-3's collective parameter gathers line up.
"""

from __future__ import annotations


class FeatureActorMixin:
    def _lze_model(self):
        """The HF causal LM to run (on OpenRLHF's actor: the DeepSpeed engine wrapping it)."""
        return self.actor.model

    def _lze_batches(self, sequences):
        import torch

        model = self._lze_model()
        device = next(model.parameters()).device
        micro = int(getattr(getattr(getattr(self, "args", None), "rollout", None), "micro_batch_size", 8) or 8)
        for start in range(0, len(sequences), micro):
            chunk = [list(map(int, s)) for s in sequences[start:start + micro]]
            width = max(len(s) for s in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, seq in enumerate(chunk):
                ids[row, :len(seq)] = torch.as_tensor(seq)
                mask[row, :len(seq)] = 1
            yield start, model, ids.to(device), mask.to(device)

    @staticmethod
    def _span_mean(values, starts, ends, offset: int):
        """Mean of values[row, start:end] (any trailing dims) for each row of the micro-batch."""
        out = []
        for row in range(values.shape[0]):
            a, b = int(starts[offset + row]), int(ends[offset + row])
            out.append(values[row, a:b].mean(0))
        return out

    def lze_entropy(self, sequences, starts, ends, temperature: float = 1.0):
        import torch

        result = []
        was_training = self._lze_model().training
        self._lze_model().eval()
        try:
            with torch.no_grad():
                for offset, model, ids, mask in self._lze_batches(sequences):
                    logits = model(input_ids=ids, attention_mask=mask).logits.float() / float(temperature)
                    logp = torch.log_softmax(logits, dim=-1)
                    entropy = -(logp.exp() * logp).sum(-1)
                    result += [float(v) for v in self._span_mean(entropy, starts, ends, offset)]
        finally:
            self._lze_model().train(was_training)
        return result

    def lze_mean_hidden(self, sequences, starts, ends):
        import torch

        result = []
        was_training = self._lze_model().training
        self._lze_model().eval()
        try:
            with torch.no_grad():
                for offset, model, ids, mask in self._lze_batches(sequences):
                    hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
                    result += [v.float().cpu().tolist() for v in self._span_mean(hidden.float(), starts, ends, offset)]
        finally:
            self._lze_model().train(was_training)
        return result
