"""`LzePPOTrainer`: OpenRLHF's single-controller trainer with lze-bench's run state (openrlhf.md §9).

`PPOTrainer` in 0.11.2 is a Ray `ActorClass`, which cannot be subclassed; we
subclass the undecorated class `PPOTrainer.__ray_actor_class__` and wrap it
with `ray.remote` (entry.py installs it). Overrides, each calling OpenRLHF's own:

* `__init__`: build the run context (selector, data order, ledger, replay
  store, feature passes on the policy actors) from LZE_CONFIG, swap in
  `LzeSamplesGenerator`, and route the experience maker's output through
  update.shape_update (replay re-centring, trim, one batch per DP rank), and
  its advantages through update.per_rollout_advantages when the selector
  chose rollouts or grew groups (OpenRLHF's own group step needs groups of n);
* `get_max_steps`: the LR schedule spans `trainer.steps x trainer.ppo_epochs`
  optimizer steps (one per PPO epoch, since train.batch_size = all samples);
* `init_checkpoint_states`: after OpenRLHF restores its checkpoint, restore the
  data order, step and selector state (resume, requeue); an empty state (the
  actors found nothing loadable) is a fresh start, not OpenRLHF's KeyError;
  then, for astral's learned head, embed the prompts with the frozen encoder
  (head.py): the models are loaded by then and no step has started;
* `save_logs_and_checkpoints`: once per trained step, write the ledger and
  rollout rows (lze_bench.ledger, FLOPs from lze_bench.flops) and let OpenRLHF
  log; the checkpoint is ours (OpenRLHF runs with `--ckpt.save_steps -1`):
  after every step it is due (lze_bench.budget: every `trainer.checkpoint_every`
  steps, each `trainer.checkpoint_every_flops` crossing, the last step, which is
  the step cap or the first step at `trainer.flop_budget`), the selector state (and replay store), OpenRLHF's actor
  `save_checkpoint` under tag `lze_stepSSSSSS` with our position in
  `client_states`, then its HF directory adopted as `checkpoints/step_S`
  (S = training steps done) + COMPLETE;
* a step that trains nothing (every response trimmed, generator.py) gets its
  ledger row and, when one is due, its checkpoint the same way: every planned
  checkpoint exists, the last step's included.
"""

from __future__ import annotations

import logging
from pathlib import Path

import ray
from openrlhf.trainer.ppo_trainer import PPOTrainer

from lze_bench.backends.openrlhf.checkpoints import fresh_states
from lze_bench.backends.openrlhf.context import CLIENT_STATE_KEY, RunContext
from lze_bench.backends.openrlhf.generator import LzeSamplesGenerator
from lze_bench.errors import LzeBenchError

log = logging.getLogger(__name__)

BasePPOTrainer = PPOTrainer.__ray_actor_class__


def dp_ranks(args) -> int:
    """Data-parallel ranks of the policy actor group as OpenRLHF parsed its flags (ring attention and TP ranks
    share a shard)."""
    world = int(args.actor.num_nodes) * int(args.actor.num_gpus_per_node)
    return max(1, world // int(args.ds.ring_attn_size) // int(args.ds.tensor_parallel_size))


def check_plan(plan, args) -> None:
    """The recorded launch plan (plan.py) is what OpenRLHF runs: its ranks are the ones the trim deals to."""
    ran = (dp_ranks(args), int(args.ds.ring_attn_size), int(args.ds.tensor_parallel_size))
    planned = (plan.dp_ranks, plan.ring_attn_size, plan.ds_tensor_parallel_size)
    if ran != planned:
        raise LzeBenchError(f"OpenRLHF runs (dp ranks, ring attention, DeepSpeed TP) = {ran}, but the run's launch "
                            f"plan (openrlhf/command.json) says {planned}; prepare the run again with "
                            "`lze-bench train backend=openrlhf`")


class LzePPOTrainer(BasePPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lze = RunContext.from_env(num_prompts=len(self.prompts_dataloader.dataset),
                                       features_factory=self._features)
        check_plan(self.lze.plan, self.args)
        maker = self.experience_maker
        make_batch = maker.make_experience_batch
        maker.make_experience_batch = lambda samples: self._shape(make_batch(samples))
        maker.split_rollout_samples = self._split
        advantages = maker.compute_advantages_and_returns
        maker.compute_advantages_and_returns = lambda experiences: self._advantages(experiences, advantages)
        self._global_step = 0  # OpenRLHF's optimizer-step count, for the checkpoints of untrained steps
        self.samples_generator = LzeSamplesGenerator(
            strategy=self.strategy,
            prompts_dataloader=self.prompts_dataloader,
            eval_dataloader=self.eval_dataloader,
            tokenizer=self.tokenizer,
            vllm_engines=self.vllm_engines,
            context=self.lze,
            on_untrained=self._untrained_step,
        )

    def _features(self, cfg, flops, plan):
        """The selector's feature passes on the policy actors, or None when it asks for none."""
        from lze_bench.plugins import selector_class

        if not getattr(selector_class(cfg.selector), "requires", ()):
            return None
        from lze_bench.backends.openrlhf.features import ActorFeatures

        dataset = self.prompts_dataloader.dataset
        tokenizer = self.tokenizer

        def prompt_tokens(ids):
            return [tokenizer(dataset.prompts[int(i)], add_special_tokens=False)["input_ids"] for i in ids]

        features = ActorFeatures(self._call_actors, prompt_tokens, flops, float(cfg.trainer.temperature),
                                 Path(cfg.run_dir), len(dataset), plan.dp_ranks,
                                 micro_batch_size=int(self.args.rollout.micro_batch_size))
        from lze_bench.backends.openrlhf.head import head_features, uses_head

        if uses_head(cfg):  # astral's learned head: served at the start of fit (init_checkpoint_states)
            return head_features(cfg, features, self._call_actors, plan.dp_ranks, len(dataset))
        return features

    def _call_actors(self, method_name: str, **lists):
        """Run `method_name` on the policy ranks, once per list item, items dealt in order; the per-item
        results, in order (dispatch.call_ranks: no state reload, fails at the first failing rank)."""
        from lze_bench.backends.openrlhf.dispatch import call_ranks

        plan = self.lze.plan
        duplicate = plan.ring_attn_size * plan.ds_tensor_parallel_size  # actors per data shard
        return call_ranks(self.actor_model_group, method_name, duplicate, **lists)

    def _split(self, rollout_samples):
        """OpenRLHF's split into forward micro-batches, dealt evenly over the DP ranks (trim.balanced_chunks):
        an update batch of any size must not leave a rank without a forward."""
        from openrlhf.trainer.ppo_utils.experience import Experience

        from lze_bench.backends.openrlhf.trim import balanced_chunks

        for index, sample in enumerate(rollout_samples):
            sample.index = [index]
        pad = self.tokenizer.pad_token_id
        bounds = balanced_chunks(len(rollout_samples), self.lze.dp_ranks, int(self.args.rollout.micro_batch_size))
        return [Experience.concat_experiences(rollout_samples[a:b], pad) for a, b in bounds]

    def _advantages(self, experiences, original):
        """OpenRLHF's advantages on whole groups of n; per rollout (update.py) when the selector chose rollouts
        or grew groups (pods, speed, reinforce_ada)."""
        record = self.samples_generator.pending_record()
        if not record.per_rollout:
            return original(experiences)
        from lze_bench.backends.openrlhf.update import per_rollout_advantages

        return per_rollout_advantages(experiences, record, original, self.args)

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
        serve = getattr(self.lze.features, "serve", None)
        if serve is not None:  # the models are loaded now and no step has started: embed with the frozen encoder
            serve()
        self._global_step = int(states.get("global_step", 0) or 0)
        return states

    def save_logs_and_checkpoints(self, global_step: int, logs_dict=None, client_states=None) -> None:
        """Once per trained step (OpenRLHF's hook): our ledger row, OpenRLHF's logging, our checkpoint."""
        logs_dict = logs_dict or {}
        row = self.lze.write_step(self.samples_generator.take_record(), logs_dict)
        log.info("step %d: %d/%d groups kept, %.3g FLOPs", row["step"], row["groups_kept"],
                 row["prompts_rolled_out"], row["flops_total"])
        self._global_step = int(global_step)
        super().save_logs_and_checkpoints(global_step, logs_dict, client_states)  # logs (--ckpt.save_steps -1)
        self._checkpoint_if_due(dict(client_states or {}))

    def _untrained_step(self, record) -> None:
        """A step whose update trains nothing (generator.py): its ledger row, and its checkpoint when one is due
        (the weights are the previous step's; a planned checkpoint exists either way)."""
        self.lze.write_step(record, {})
        self._checkpoint_if_due({**fresh_states(), "global_step": self._global_step})

    def _checkpoint_if_due(self, client_states: dict) -> None:
        """At a checkpoint step (context.is_checkpoint_step, our step count): selector state, replay store,
        OpenRLHF's actor checkpoint (DeepSpeed states + HF weights) under tag `lze_stepSSSSSS`, then the HF
        directory adopted as checkpoints/step_S (+ COMPLETE). Our tags never repeat, so a save never overwrites
        the checkpoint a resume would load."""
        steps_done = self.lze.steps_done
        if not self.lze.checkpoint_due():
            return
        client_states[CLIENT_STATE_KEY] = self.lze.client_state()
        self.lze.save_selector_state(steps_done)
        tag = f"lze_step{steps_done:06d}"
        ray.get(self.actor_model_group.async_run_method(method_name="save_checkpoint", tag=tag,
                                                        client_states=client_states))
        self.lze.adopt_checkpoint(steps_done, Path(self.args.ckpt.path) / f"{tag}_hf")
