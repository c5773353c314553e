"""Ledger and rollout rows for one OpenRLHF training step (design.md "Ledger", "FLOP accounting").

Passes OpenRLHF 0.11.2 runs per step, and what we charge (lze_bench.flops):

* generation (vLLM), every rolled-out and probed sample:  F(prompt + response)
* actor old-log-prob forward in `make_experience`, every sample of the update
  groups (kept + replayed; it runs before the trim, trim.py), on steps that
  train at all:                                              F(L)
* reference forward, the same samples, only when `trainer.kl_coef > 0`
  (OpenRLHF builds no reference model otherwise):           F(L)
* PPO update, `trainer.ppo_epochs` passes over the trained samples (after the
  trim): 3 F(L) each; `trained_tokens` counts those passes too
* selector feature passes (hive's entropies, astral's embeddings; features.py):
  `flops_select`, as the policy actor ran them

`L` is the sequence as OpenRLHF trains it (`Experience.total_length`, after its
truncation to `data.max_len`). Padding and packing overheads are not work on
real tokens and are not counted, as for every backend.

Times: `time_rollout_s` is the wall time of dispatch -> gathered experiences
(generation and grading overlap inside the vLLM actors); `time_grade_s` is the
sum of per-sample grading times reported by reward_func.py (CPU time in the
actors, overlapping the rollout); `time_update_s` is OpenRLHF's
`timing/make_experience + timing/ppo_train + timing/broadcast`.

Update diagnostics (ledger extras, as the local backend writes them), from
the status OpenRLHF's actor returns for the step (`PolicyModelActor.fit`:
token-weighted means over micro-batches; the grad norm of the last optimizer
step): `loss` = `policy_loss`, `kl` = `kl` (k3 to the reference, only with
`trainer.kl_coef > 0`: without a reference model `make_experience` still
reports a `kl` of zeros, which is no measurement), `clip_frac` =
`ppo_clip_ratio` (share of tokens where the clip binds), `grad_norm` =
`actor_grad_norm`; NaN when the step reports none (no update) or, for `kl`,
when there is no reference.
"""

from __future__ import annotations

import numpy as np

from lze_bench.flops import FlopModel
from lze_bench.ledger import zero_variance_fraction

UPDATE_TIMINGS = ("timing/make_experience", "timing/ppo_train", "timing/broadcast")
DIAGNOSTICS = {"loss": "policy_loss", "kl": "kl", "clip_frac": "ppo_clip_ratio", "grad_norm": "actor_grad_norm"}


def _concat(groups, attribute: str) -> np.ndarray:
    parts = [np.asarray(getattr(g, attribute), dtype=np.int64).reshape(-1) for g in groups]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def ledger_row(record, status: dict, flops: FlopModel, *, ppo_epochs: int, reference_pass: bool) -> dict:
    """One ledger row (all LEDGER_COLUMNS but the cumulative ones, which Ledger.append fills).

    Generation is booked for every rollout the backend generated this step (`record.generated`: a group held
    for a later step is booked when its rollouts are generated); the log-prob passes for the rollouts handed to
    the experience maker (the selector's chosen ones of the update groups); training for those the trim left."""
    from lze_bench.selectors.base import STEP_METRICS

    generated = record.generated_groups + list(record.probes)
    groups, choices = record.train_groups, record.train_choices
    masks = record.train_masks if record.train_masks is not None else choices
    updated = any(m.any() for m in masks)  # make_experience ran (on every chosen sample of the update groups)
    forwarded = (np.concatenate([np.asarray(g.seq_lengths, dtype=np.int64)[c] for g, c in zip(groups, choices)])
                 if updated else np.zeros(0, dtype=np.int64))
    trained = np.concatenate([np.asarray(g.seq_lengths, dtype=np.int64)[m] for g, m in zip(groups, masks)]) \
        if groups else np.zeros(0, dtype=np.int64)
    logprob_passes = 2 if reference_pass else 1
    reward_mean, zero_variance_frac = reward_summary([g.verdict_rewards for g in record.rolled])
    time_update = float(sum(float(status.get(key, 0.0)) for key in UPDATE_TIMINGS))
    kept_choices = [c for c, k in zip(record.rollout_choices(), record.kept_flags) if k]
    advantage = record.train_advantage
    return {
        "step": record.step,
        "epoch": record.epoch,
        "prompts_considered": record.prompts_considered,
        "prompts_rolled_out": record.prompts_rolled_out,
        "prompts_probed": record.prompts_probed,
        "prompts_dropped": record.prompts_dropped,
        "groups_kept": len(record.kept),
        "groups_replayed": len(record.replayed),
        "gen_rounds": record.gen_rounds,
        "samples": int(sum(len(g.rewards) for g in generated)),
        "prompt_tokens": int(_concat(generated, "prompt_tokens").sum()),
        "generated_tokens": int(_concat(generated, "response_tokens").sum()),
        "trained_tokens": int(ppo_epochs) * int(trained.sum()),  # every PPO epoch, as the local backend
        "flops_rollout": flops.generation(_concat(generated, "prompt_tokens"), _concat(generated, "response_tokens")),
        "flops_logprob": logprob_passes * flops.logprob(forwarded),
        "flops_train": int(ppo_epochs) * flops.train(trained),
        "flops_select": int(record.flops_select),
        "time_rollout_s": record.time_rollout_s,
        "time_grade_s": float(sum(g.grade_time_s for g in generated)),
        "time_select_s": record.time_select_s,
        "time_update_s": time_update,
        "time_eval_s": 0.0,
        "time_step_s": record.time_step_s + time_update,
        "reward_mean": reward_mean,
        "zero_variance_frac": zero_variance_frac,
        # zero advantage: the rewards the group's advantage statistics are taken over are all equal
        "kept_zero_variance": int(sum(bool(np.ptp(g.rewards if s is None else np.asarray(g.rewards)[s]) == 0)
                                      for g, (s, _) in zip(groups, advantage))),
        "partial": bool(record.partial),
        **{name: float("nan") for name in STEP_METRICS}, **dict(record.metrics), "kl": float("nan"),
        "responses_kept": int(sum(int(c.sum()) for c in kept_choices)),
        "responses_trained": int(sum(int(m.sum()) for m in masks[:record.train_kept])),  # of the kept groups, as local
        **{column: float(status.get(key, float("nan"))) for column, key in DIAGNOSTICS.items()
           if column != "kl" or reference_pass},
    }


def reward_summary(rows: list) -> tuple[float, float]:
    """(reward_mean, zero_variance_frac) over the rollouts of the groups decided this step.

    Groups of one size take the matrix path every fixed-group selector always took (so their ledgers keep
    their values bit for bit); ragged groups are averaged rollout by rollout, as the local backend does."""
    if not rows:
        return float("nan"), zero_variance_fraction(np.zeros((0, 1)))
    if len({len(r) for r in rows}) == 1:
        rewards = np.stack(rows)
        return (float(rewards.mean()) if rewards.size else float("nan")), zero_variance_fraction(rewards)
    flat = [np.asarray(r, dtype=np.float32) for r in rows]
    total = sum(float(r.sum(dtype=np.float64)) for r in flat)
    return total / sum(r.size for r in flat), float(np.mean([np.ptp(r) == 0 for r in flat]))


def rollout_rows(record) -> list[dict]:
    """One row per rolled-out group of the step, every round (probes excluded: they are not training rollouts).

    A prompt can be rolled out twice in one step (rounds crossing an epoch
    boundary); `round` keeps both rows, so the rows always match the ledger's
    `prompts_rolled_out`. `kept_rollouts` flags the rollouts that reached the update (as the local
    backend's log); a selector that extends groups also gets `rollout_steps`, the step each rollout was generated at (methods.md §4.3).
    """
    rounds = list(record.rounds) or [0] * len(record.rolled)
    rows = []
    for group, kept, round_index, choice in zip(record.rolled, record.kept_flags, rounds, record.rollout_choices()):
        row = {
            "step": record.step,
            "prompt_id": int(group.prompt_id),
            "rewards": [float(r) for r in group.verdict_rewards],
            "response_tokens": [int(t) for t in group.response_tokens],
            "kept": bool(kept),
            "round": int(round_index),
            "kept_rollouts": [bool(c) for c in choice],
        }
        if record.extends_groups:
            row["rollout_steps"] = [int(s) for s in group.steps()]
        rows.append(row)
    return rows
