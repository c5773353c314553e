"""`LzePPOTrainer`: OpenRLHF's single-controller trainer with lze-bench's run state (openrlhf.md §9).

`PPOTrainer` in 0.11.2 is a Ray `ActorClass`, which cannot be subclassed; we
subclass the undecorated class `PPOTrainer.__ray_actor_class__` and wrap it
with `ray.remote` (entry.py installs it). Overrides, each calling OpenRLHF's own:

* `__init__`: build the run context (selector, data order, ledger, replay
  store, feature passes on the policy actors) from LZE_CONFIG, swap in
  `LzeSamplesGenerator`, and route the experience maker's output through
  update.shape_update (replay re-centring, trim, one batch per DP rank);
* `get_max_steps`: the LR schedule spans `trainer.steps x trainer.ppo_epochs`
  optimizer steps (one per PPO epoch, since train.batch_size = all samples);
* `init_checkpoint_states`: after OpenRLHF restores its checkpoint, restore the
  data order, step and selector state (resume, requeue); an empty state (the
  actors found nothing loadable) is a fresh start, not OpenRLHF's KeyError;
* `save_logs_and_checkpoints`: once per trained step, write the ledger and
  rollout rows (lze_bench.ledger, FLOPs from lze_bench.flops), put our position
  into `client_states`, save the selector state (and replay store), force a
  checkpoint at the last step, then adopt OpenRLHF's `global_step{N}_hf` as
  `checkpoints/step_S` (S = training steps done) + COMPLETE. A step that
  trains nothing is written by the generator and has no checkpoint of its own.
"""

from __future__ import annotations

import logging
from pathlib import Path

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer

from lze_bench.backends.openrlhf.checkpoints import fresh_states
from lze_bench.backends.openrlhf.context import CLIENT_STATE_KEY, RunContext
from lze_bench.backends.openrlhf.generator import LzeSamplesGenerator

log = logging.getLogger(__name__)

BasePPOTrainer = PPOTrainer.__ray_actor_class__


def dp_ranks(args) -> int:
    """Data-parallel ranks of the policy actor group (ring attention and TP ranks share a shard)."""
    world = int(args.actor.num_nodes) * int(args.actor.num_gpus_per_node)
    return max(1, world // int(args.ds.ring_attn_size) // int(args.ds.tensor_parallel_size))


class LzePPOTrainer(BasePPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lze = RunContext.from_env(num_prompts=len(self.prompts_dataloader.dataset),
                                       dp_ranks=dp_ranks(self.args), features_factory=self._features)
        maker = self.experience_maker
        make_batch, self._openrlhf_split = maker.make_experience_batch, maker.split_rollout_samples
        maker.make_experience_batch = lambda samples: self._shape(make_batch(samples))
        maker.split_rollout_samples = self._split
        self.samples_generator = LzeSamplesGenerator(
            strategy=self.strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=self.tokenizer,
            vllm_engines=self.vllm_engines,
            context=self.lze,
        )

    def _features(self, cfg, flops):
        """The selector's feature passes on the policy actors, or None when it asks for none."""
        from lze_bench.registry import SELECTORS

        if not getattr(SELECTORS[cfg.selector.name], "requires", ()):
            return None
        from lze_bench.backends.openrlhf.features import ActorFeatures

        dataset = self.prompts_dataloader.dataset
        tokenizer = self.tokenizer

        def prompt_tokens(ids):
            return [tokenizer(dataset.prompts[int(i)], add_special_tokens=False)["input_ids"] for i in ids]

        return ActorFeatures(self._call_actors, prompt_tokens, flops, float(cfg.trainer.temperature),
                             Path(cfg.run_dir), len(dataset), dp_ranks(self.args),
                             micro_batch_size=int(self.args.rollout.micro_batch_size))

    def _call_actors(self, method_name: str, **lists):
        """Run `method_name` on the policy ranks, once per list item, items dealt in order; the per-item
        results, in order (dispatch.call_ranks: no state reload, fails at the first failing rank)."""
        from lze_bench.backends.openrlhf.dispatch import call_ranks

        duplicate = int(self.args.ds.ring_attn_size) * int(self.args.ds.tensor_parallel_size)
        return call_ranks(self.actor_model_group, method_name, duplicate, **lists)

    def _split(self, rollout_samples):
        """OpenRLHF's split into forward micro-batches, dealt evenly over the DP ranks (trim.balanced_chunks):
        an update batch of any size must not leave a rank without a forward."""
        if self.args.train.dynamic_batch_enable:  # OpenRLHF's own partition is already per rank
            return self._openrlhf_split(rollout_samples)
        from openrlhf.trainer.ppo_utils.experience import Experience

        from lze_bench.backends.openrlhf.trim import balanced_chunks

        for index, sample in enumerate(rollout_samples):
            sample.index = [index]
        pad = self.tokenizer.pad_token_id
        bounds = balanced_chunks(len(rollout_samples), self.lze.dp_ranks, int(self.args.rollout.micro_batch_size))
        return [Experience.concat_experiences(rollout_samples[a:b], pad) for a, b in bounds]

    def _shape(self, experiences):
        from lze_bench.backends.openrlhf.update import shape_update

        record = self.samples_generator.pending_record()
        return shape_update(experiences, record, n=self.lze.group_size, dp_ranks=self.lze.dp_ranks,
                            replay=self.lze.replays)

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
        steps_done = self.lze.steps_done
        save_now = self.lze.is_checkpoint_step(steps_done)
        if save_now:
            self.lze.save_selector_state(steps_done)
        saved_every = self.args.ckpt.save_steps
        # OpenRLHF saves when global_step % save_steps == 0; our steps decide (global_step lags them
        # when a step trains nothing), so make that true exactly when we save
        self.args.ckpt.save_steps = global_step if save_now else float("inf")
        try:
            super().save_logs_and_checkpoints(global_step, logs_dict, client_states)
        finally:
            self.args.ckpt.save_steps = saved_every
        if save_now:
            self.lze.adopt_checkpoint(steps_done, Path(self.args.ckpt.path) / f"global_step{global_step}_hf")
