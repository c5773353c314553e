"""The update batch as OpenRLHF's policy actors receive it (inside the trainer actor; openrlhf.md §4, §9).

`shape_update(experiences, record, ...)` runs on what
`RemoteExperienceMaker.make_experience_batch` returned (advantages already
computed on whole groups) and, in this order:

1. re-centres replay (selectors.md §3, replay_loss.py): sets every sample's
   `rollout_log_probs` to its behaviour log-probs mu. For a fresh sample mu is
   the actor's own old log-prob just computed (`action_log_probs`, so
   r_old = 1 exactly: plain GRPO) and it is kept on the group for later replay;
   for a replayed sample mu is what was kept when it was generated. Only when
   the run replays (astral); otherwise the field is left as OpenRLHF set it;
2. drops the responses the trim (trim.py) left out;
3. deals what remains into one batched Experience per data-parallel rank, the
   same number of samples each (whole micro-batches), so that
   `async_run_method_batch` gives every rank exactly one.

Sample order: generator.py hands the samples over as the record's train
groups (kept, then replayed), each group's chosen rollouts consecutively
(`StepRecord.update_samples`: all n of a group, but for a selector that keeps a
subset, PODS, or grows groups, Reinforce-Ada); OpenRLHF numbers them 0.. in
that order (`Experience.index`, set in `split_rollout_samples`).

Per-rollout advantages (`per_rollout_advantages`). OpenRLHF's
`compute_advantages_and_returns` takes each group as `n_samples_per_prompt`
consecutive samples, which holds for whole groups of n only. When the record is
`per_rollout` (a subset trains, the groups are ragged, or the selector chose
the statistics or epsilon), the group-normalised rewards are computed here, as
the local backend computes them (lze_bench.advantages.group_advantages under
the estimator OpenRLHF was given: statistics over the kept rollouts or every
generated one, `advantage_stats`, with the selector's `advantage_eps`, else
OpenRLHF's 1e-9 for group_norm; `dr_grpo` the mean only; `rloo` leave-one-out),
and OpenRLHF's own function then turns them into per-token returns and
advantages with its group step switched off. Every other step (the six
selectors' whole groups) goes through OpenRLHF's function untouched.
"""

from __future__ import annotations

import numpy as np

from lze_bench.advantages import OPENRLHF_NAMES, group_advantages
from lze_bench.errors import LzeBenchError


def _items_in_order(experiences: list) -> list:
    """The single-sample Experiences, indexed by their position in the rollout samples."""
    from openrlhf.trainer.ppo_utils.experience import remove_padding_in_sequences, split_experience_batch

    by_index = {}
    for batched in experiences:
        indices = list(batched.index)  # split_experience_batch clears it
        # each sample at its own length (as the actors' replay buffer keeps it), so stored log-probs fit it later
        for index, item in zip(indices, remove_padding_in_sequences(split_experience_batch(batched))):
            by_index[int(index)] = item
    return [by_index[i] for i in range(len(by_index))]


def shape_update(experiences: list, record, *, n: int, dp_ranks: int, replay: bool) -> list:
    """The trained Experiences, one batched Experience per DP rank (empty list: nothing trains)."""
    groups, choices = record.train_groups, record.train_choices
    items = _items_in_order(experiences)
    expected = int(sum(int(c.sum()) for c in choices))
    if len(items) != expected:
        raise LzeBenchError(f"step {record.step}: OpenRLHF made {len(items)} experiences for the {expected} chosen "
                            f"rollouts of {len(groups)} groups")
    if replay:
        if record.per_rollout:
            raise LzeBenchError(f"step {record.step}: replay with per-rollout choices is not supported; "
                                "a replaying selector trains whole groups")
        _recentre(items, groups, record.train_kept, n)
    masks = record.train_masks if record.train_masks is not None else choices
    trained, position = [], 0
    for choice, mask in zip(choices, masks):  # the items are the chosen rollouts, group by group
        for j in np.flatnonzero(choice):
            if mask[j]:
                trained.append(items[position])
            position += 1
    if not trained:
        return []
    if len(trained) % dp_ranks:
        raise LzeBenchError(f"step {record.step}: {len(trained)} trained samples do not split over {dp_ranks} ranks")
    share = len(trained) // dp_ranks
    return [_batch(trained[r * share:(r + 1) * share]) for r in range(dp_ranks)]


def _batch(items: list):
    """OpenRLHF's `make_experience_batch`, with per-sample info tensors stacked as the experience maker has them
    (its own merge leaves 0-d tensors in a list, which `_compute_rollout_stats` cannot concatenate)."""
    import torch
    from openrlhf.trainer.ppo_utils.experience import make_experience_batch

    batched = make_experience_batch(items)
    for key, values in batched.info.items():
        if isinstance(values, list) and values and all(isinstance(v, torch.Tensor) for v in values):
            batched.info[key] = torch.stack([v.reshape(()) for v in values])
    return batched


def _recentre(items: list, groups: list, fresh_groups: int, n: int) -> None:
    """rollout_log_probs := log mu per sample (replay_loss.recentre_rollout_logprobs): pi_old for fresh samples,
    whose pi_old is kept on the group for a later replay, the stored log mu for replayed ones."""
    from lze_bench.backends.openrlhf.replay_loss import recentre_rollout_logprobs

    for g, group in enumerate(groups):
        samples = items[g * n:(g + 1) * n]
        replayed = g >= fresh_groups
        if not replayed:
            group.behaviour_logprobs = [item.action_log_probs.detach().clone() for item in samples]
        elif getattr(group, "behaviour_logprobs", None) is None:
            raise LzeBenchError(f"replayed group (prompt {group.prompt_id}, step {group.gen_step}) has no stored "
                                "behaviour log-probs")
        for item, mu in zip(samples, group.behaviour_logprobs):
            if mu.shape != item.action_log_probs.shape:
                raise LzeBenchError(f"prompt {group.prompt_id}: stored log-probs {tuple(mu.shape)} do not match the "
                                    f"sample's actions {tuple(item.action_log_probs.shape)}")
            item.rollout_log_probs = recentre_rollout_logprobs(item.action_log_probs[None], mu[None], [replayed],
                                                               item.action_mask[None])[0]


OPENRLHF_EPS = 1e-9  # OpenRLHF 0.11.2's group_norm: (r - mean) / (std + 1e-9)
# OpenRLHF's estimator name -> ours (the estimators command.py passes: trainer.advantage_estimator)
ESTIMATOR_OF = {theirs: ours for ours, theirs in OPENRLHF_NAMES.items()}


def sample_advantages(record, estimator: str) -> np.ndarray:
    """float32[S]: the advantage (our `estimator`) of each sample handed to the experience maker, in order."""
    parts = []
    for group, choice, (stats, eps) in zip(record.train_groups, record.train_choices, record.train_advantage):
        adv = group_advantages(group.rewards, estimator, stats, OPENRLHF_EPS if eps is None else eps)
        parts.append(adv[np.asarray(choice, dtype=bool)])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def per_rollout_advantages(experiences: list, record, original, args) -> list:
    """OpenRLHF's `compute_advantages_and_returns` on group-normalised rewards computed per rollout (above)."""
    import torch

    estimator = args.algo.advantage.estimator
    if estimator not in ESTIMATOR_OF:
        raise LzeBenchError(f"--algo.advantage.estimator {estimator}: per-rollout selectors need "
                            f"{', '.join(ESTIMATOR_OF)} (trainer.advantage_estimator); leave the estimator to "
                            "lze-bench")
    penalties = (getattr(args.reward, "overlong_buffer_len", None), getattr(args.reward, "stop_properly_penalty_coef",
                                                                            None))
    if any(p is not None for p in penalties):  # they would apply to the normalised rewards, not the raw ones
        raise LzeBenchError("length penalties (--reward.overlong_buffer_len, --reward.stop_properly_penalty_coef) "
                            "are not supported with per-rollout selectors; remove them from backend.extra_args")
    shaped = sample_advantages(record, ESTIMATOR_OF[estimator])
    for experience in experiences:
        index = torch.as_tensor(list(experience.index), dtype=torch.long)
        experience.rewards = torch.as_tensor(shaped, dtype=torch.float32)[index].to(experience.rewards.device)
    saved = (args.rollout.n_samples_per_prompt, estimator)
    # one "group" per sample and no estimator branch: OpenRLHF leaves the normalised rewards as they are and
    # only makes the per-token returns (its per-token step reads the maker's own advantage_estimator)
    args.rollout.n_samples_per_prompt, args.algo.advantage.estimator = 1, "lze_per_rollout"
    try:
        return original(experiences)
    finally:
        args.rollout.n_samples_per_prompt, args.algo.advantage.estimator = saved
