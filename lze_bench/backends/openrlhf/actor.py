"""`make_policy_actor`: OpenRLHF's policy actor with a per-step batch size and the selector's feature passes.

The update of a shrinking or filling selector has a different number of
samples each step (trim.py makes it whole micro-batches, the same count per
data-parallel rank), so each `fit` is one accumulation window of `k` micro-batches
with `k` changing from step to step. Two things must follow `k`:

* the loss normaliser and DeepSpeed's `1 / gradient_accumulation_steps` loss
  scale: before OpenRLHF's `fit` we set DeepSpeed's accumulation to `k`
  (`engine.set_train_batch_size`) and OpenRLHF's `strategy.accumulated_gradient`
  (the window `iter_grad_accum_global_norm` normalises over), restoring both after;
* where the optimizer steps. DeepSpeed places it with a lifetime counter
  (`(engine.micro_steps + 1) % gradient_accumulation_steps == 0`, never reset),
  so once `k` has changed the boundary lands mid-step: measured on a real
  engine with 2, 3, 1, 1 micro-batches per step, the step of 3 stepped after
  its first micro-batch and carried two micro-batches' gradients into the next
  step. So we place the boundary ourselves with DeepSpeed's documented override
  (`engine.set_gradient_accumulation_boundary`, set before each micro-batch's
  forward): true on the last micro-batch of each PPO epoch only, on every rank.

Result: one optimizer step per PPO epoch of a training step, on exactly that
step's samples, one clip and one normaliser; nothing carried over. The LR
schedule counts optimizer steps, so it is unchanged.

The order in which a rank trains its micro-batches is OpenRLHF's shuffle
(`ppo_train`'s DataLoader), drawn from the process-wide torch RNG, which no
checkpoint saves: a resumed run would shuffle differently from an unbroken one
and end with other weights (summation order). So `fit` draws it from a
generator seeded with (`train.seed`, optimizer steps done), the engine's
`global_steps`, which DeepSpeed checkpoints, and restores the global RNG after.

`lze_entropy` / `lze_mean_hidden` (actor_features.py) are the no-grad
forwards the controller asks for (hive's entropies, astral's embeddings).

`PolicyModelActor` is a Ray `ActorClass` (not subclassable), so we subclass
its undecorated class and decorate again, as trainer.py does for PPOTrainer;
entry.py installs the result before OpenRLHF's CLI module runs.
"""

from __future__ import annotations

import contextlib

from lze_bench.backends.openrlhf.actor_features import FeatureActorMixin
from lze_bench.errors import LzeBenchError


class StepBatchMixin:
    """`fit` on whatever this rank received: whole micro-batches, one optimizer step per PPO epoch."""

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
        self.trainer.training_step = _boundary_on_last(self.trainer.training_step, engine, steps)
        try:
            with _seeded_shuffle(int(self.strategy.args.train.seed), int(engine.global_steps)):
                return super().fit(kl_ctl)
        finally:
            del self.trainer.training_step  # back to the class's method
            engine.set_gradient_accumulation_boundary(None)  # DeepSpeed's own counter again
            engine.set_train_batch_size(saved_batch)
            self.strategy.accumulated_gradient = saved_accumulation


@contextlib.contextmanager
def _seeded_shuffle(seed: int, optimizer_steps: int):
    """The global CPU torch RNG (the replay buffer's shuffle) seeded by (seed, optimizer steps), restored after."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed * 1_000_003 + optimizer_steps)  # CPU only: the sampler's
        yield


def _boundary_on_last(training_step, engine, window: int):
    """`training_step` that first tells DeepSpeed whether this micro-batch closes the window of `window`."""
    calls = 0

    def step_with_boundary(*args, **kwargs):
        nonlocal calls
        calls += 1
        engine.set_gradient_accumulation_boundary(calls % window == 0)
        return training_step(*args, **kwargs)

    return step_with_boundary


def make_policy_actor(installed):
    """Our policy actor on top of the installed one (OpenRLHF's, or a test stand-in); a Ray ActorClass."""
    import ray

    base = getattr(installed, "__ray_actor_class__", installed)
    cls = type("LzePolicyActor", (StepBatchMixin, FeatureActorMixin, base), {"__module__": __name__})
    return ray.remote(num_gpus=1)(cls)
