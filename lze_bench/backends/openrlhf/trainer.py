"""`LzePPOTrainer`: OpenRLHF's single-controller trainer with lze-bench's run state (openrlhf.md §9).

`PPOTrainer` in 0.11.2 is a Ray `ActorClass`, which cannot be subclassed; we
subclass the undecorated class `PPOTrainer.__ray_actor_class__` and wrap it
with `ray.remote` (entry.py installs it). Overrides, each calling OpenRLHF's own:

* `__init__`: build the run context (selector, data order, ledger) from
  LZE_CONFIG and swap in `LzeSamplesGenerator`;
* `get_max_steps`: the LR schedule spans `trainer.steps x trainer.ppo_epochs`
  optimizer steps (one per PPO epoch, since train.batch_size = all samples);
* `init_checkpoint_states`: after OpenRLHF restores its checkpoint, restore the
  data order, step and selector state (resume, requeue); an empty state (the
  actors found nothing loadable) is a fresh start, not OpenRLHF's KeyError;
* `save_logs_and_checkpoints`: once per step, write the ledger and rollout rows
  (lze_bench.ledger, FLOPs from lze_bench.flops), put our position into
  `client_states`, save the selector state, force a checkpoint at the last step,
  then adopt OpenRLHF's `global_step{N}_hf` as `checkpoints/step_N` + COMPLETE.
"""

from __future__ import annotations

import logging
from pathlib import Path

from openrlhf.trainer.ppo_trainer import PPOTrainer

from lze_bench.backends.openrlhf.checkpoints import fresh_states
from lze_bench.backends.openrlhf.context import CLIENT_STATE_KEY, RunContext
from lze_bench.backends.openrlhf.generator import LzeSamplesGenerator

log = logging.getLogger(__name__)

BasePPOTrainer = PPOTrainer.__ray_actor_class__


class LzePPOTrainer(BasePPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lze = RunContext.from_env(num_prompts=len(self.prompts_dataloader.dataset))
        self.samples_generator = LzeSamplesGenerator(
            strategy=self.strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=self.tokenizer,
            vllm_engines=self.vllm_engines,
            context=self.lze,
        )

    def get_max_steps(self):
        return self.lze.total_steps * int(self.args.train.max_epochs)

    def init_checkpoint_states(self):
        states = super().init_checkpoint_states() or fresh_states()  # {}: the actors loaded nothing
        self.lze.restore(states)
        return states

    def save_logs_and_checkpoints(self, global_step: int, logs_dict=None, client_states=None) -> None:
        logs_dict = logs_dict or {}
        record = self.samples_generator.take_record()
        row = self.lze.write_step(record, logs_dict)
        log.info("step %d: %d/%d groups kept, %.3g FLOPs", row["step"], row["groups_kept"],
                 row["prompts_rolled_out"], row["flops_total"])
        client_states = dict(client_states or {})
        client_states[CLIENT_STATE_KEY] = self.lze.client_state()
        save_now = self.lze.is_checkpoint_step(global_step)
        if save_now:
            self.lze.save_selector_state(global_step)
        saved_every = self.args.ckpt.save_steps
        if save_now:  # OpenRLHF saves when global_step % save_steps == 0; make that true now
            self.args.ckpt.save_steps = global_step
        try:
            super().save_logs_and_checkpoints(global_step, logs_dict, client_states)
        finally:
            self.args.ckpt.save_steps = saved_every
        if save_now:
            self.lze.adopt_checkpoint(global_step, Path(self.args.ckpt.path) / f"global_step{global_step}_hf")
