"""`make_policy_actor`: OpenRLHF's policy actor with a per-step batch size and the selector's feature passes.

The update of a shrinking or filling selector has a different number of
samples each step (trim.py makes it whole micro-batches, the same count per
data-parallel rank). DeepSpeed closes its accumulation window after a fixed
`gradient_accumulation_steps`, so before OpenRLHF's `fit` we set it to this
step's micro-batch count (`engine.set_train_batch_size`, and OpenRLHF's
`strategy.accumulated_gradient`, which its loss normaliser reads) and restore
both afterwards: one optimizer step per training step, on exactly what was
sent. The LR schedule counts optimizer steps, so it is unchanged.

`lze_entropy` / `lze_mean_hidden` (actor_features.py) are the no-grad
forwards the controller asks for (hive's entropies, astral's embeddings).

`PolicyModelActor` is a Ray `ActorClass` (not subclassable), so we subclass
its undecorated class and decorate again, as trainer.py does for PPOTrainer;
entry.py installs the result before OpenRLHF's CLI module runs.
"""

from __future__ import annotations

from lze_bench.backends.openrlhf.actor_features import FeatureActorMixin
from lze_bench.errors import LzeBenchError


class StepBatchMixin:
    """`fit` on whatever this rank received: whole micro-batches, one optimizer step."""

    def fit(self, kl_ctl: float = 0):
        buffer = self.trainer.replay_buffer if hasattr(self, "trainer") else None
        engine = getattr(getattr(self, "actor", None), "model", None)
        if buffer is None or not hasattr(engine, "set_train_batch_size"):
            return super().fit(kl_ctl)  # no DeepSpeed engine (the CPU stand-in trains its buffer as given)
        micro = int(buffer.sample_batch_size)
        samples = len(buffer)
        if samples == 0 or samples % micro:
            raise LzeBenchError(f"policy rank got {samples} samples, not whole micro-batches of {micro}")
        saved_batch, saved_accumulation = engine.train_batch_size(), self.strategy.accumulated_gradient
        steps = samples // micro
        engine.set_train_batch_size(steps * micro * engine.dp_world_size)
        self.strategy.accumulated_gradient = steps
        try:
            return super().fit(kl_ctl)
        finally:
            engine.set_train_batch_size(saved_batch)
            self.strategy.accumulated_gradient = saved_accumulation


def make_policy_actor(installed):
    """Our policy actor on top of the installed one (OpenRLHF's, or a test stand-in); a Ray ActorClass."""
    import ray

    base = getattr(installed, "__ray_actor_class__", installed)
    cls = type("LzePolicyActor", (StepBatchMixin, FeatureActorMixin, base), {"__module__": __name__})
    return ray.remote(num_gpus=1)(cls)
