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
groups (kept, then replayed), n consecutive samples each; OpenRLHF numbers
them 0.. in that order (`Experience.index`, set in `split_rollout_samples`).
"""

from __future__ import annotations

import numpy as np

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
    groups = record.train_groups
    items = _items_in_order(experiences)
    if len(items) != len(groups) * n:
        raise LzeBenchError(f"step {record.step}: OpenRLHF made {len(items)} experiences for {len(groups)} groups "
                            f"of {n}")
    if replay:
        _recentre(items, groups, len(record.kept), n)
    masks = record.train_masks if record.train_masks is not None else [np.ones(n, dtype=bool)] * len(groups)
    trained = [item for g, mask in enumerate(masks) for j, item in enumerate(items[g * n:(g + 1) * n]) if mask[j]]
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
