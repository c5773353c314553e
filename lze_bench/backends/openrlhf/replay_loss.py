"""ASTRAL's replay loss (selectors.md §3) through OpenRLHF 0.11.2's importance-sampling correction.

ASTRAL, per response token, with `r = pi/mu` and `r_old = pi_old/mu` (mu: the policy
that generated the group; for fresh groups mu := pi_old, so r_old = 1):

    max(-A·r, -A·clip(r, r_old(1 - eps_low), r_old(1 + eps_high)))

OpenRLHF's `PolicyLoss` with `is_correction_level=token, mode=clip, gating=ratio`
computes, per token, with `rho = pi/pi_old` and `w = pi_old/pi_rollout`:

    clamp(w, low, high) · max(-A·rho, -A·clip(rho, 1 - eps_low, 1 + eps_high))

Put `pi_rollout := mu` and a band `[0, inf]` that never binds: then `w = r_old > 0`,
`r = r_old·rho`, and a positive factor passes through max and clip, so both are
the same number (the local backend's `grpo.replay_clip_loss`, checked on the
same tensors in tests/test_openrlhf_replay_loss.py). `w` is detached in OpenRLHF
and built from no-grad tensors in ours, so the gradients agree too.

Where the two differ:
- OpenRLHF clamps `log pi - log pi_old` to [-20, 20] before the exp; beyond it
  (a ratio past 5e8) its ratio and gradient stop moving, ours do not;
- rounding: `exp(a - c)·exp(c - b)` vs `exp(a - b)`; fresh tokens (w = 1 exactly)
  are bitwise equal, replayed ones agree to rounding;
- a stored log mu of padding must be finite: NaN·0 is NaN in `loss * mask`
  (`recentre_rollout_logprobs` puts pi_old there);
- the KL loss term is outside the IS factor in both.
Everything else about the step must match too: `--actor.policy_loss_type ppo`
and no `--actor.dual_clip` (OpenRLHF's defaults), `--actor.loss_agg_mode
token-mean` (OpenRLHF normalises by the optimizer step's global token count
over micro-batches and DP ranks, as our trainer does over the whole update).
"""

from __future__ import annotations

# The IS band [0, inf] never binds: w = exp(.) >= 0 always (0 only on underflow, where
# ours is 0 as well), and no finite upper bound is safe for every stored mu.
IS_THRESHOLD = ("0", "inf")


def replay_is_flags() -> list[str]:
    """OpenRLHF 0.11.2 flags that make its IS correction ASTRAL's re-centred clip.

    They only take effect with `rollout_log_probs` set by `recentre_rollout_logprobs`
    on every experience: with the correction on, OpenRLHF reads that field in every
    loss, and vLLM's own log-probs there would make it TIS, not ASTRAL.
    """
    return ["--algo.advantage.is_correction_level", "token",
            "--algo.advantage.is_correction_mode", "clip",
            "--algo.advantage.is_correction_gating", "ratio",
            "--algo.advantage.is_correction_threshold", *IS_THRESHOLD]


def recentre_rollout_logprobs(action_log_probs, behaviour_log_probs, replayed, action_mask=None):
    """`Experience.rollout_log_probs` (B, A) for ASTRAL: log mu per token.

    `action_log_probs`: the actor's no-grad log pi_old of this step (OpenRLHF's
    `make_experience`, the `old_log_probs` of its loss). `behaviour_log_probs`: the
    log mu stored when each group was generated (that step's `action_log_probs`;
    may be None when nothing is replayed). `replayed`: bool per row (B,) or per token.

    Fresh rows get pi_old itself, so `w = exp(0) = 1` exactly and the loss is
    plain PPO-clip (GRPO), as selectors.md §3 sets mu := pi_old for fresh groups;
    replayed rows get their stored log mu, so `w = r_old`. Tokens outside
    `action_mask` get pi_old too, so a padded or NaN stored value can't leak
    through `loss * mask`.
    """
    import torch

    rows = torch.as_tensor(replayed, dtype=torch.bool, device=action_log_probs.device)
    if rows.dim() == 1:
        rows = rows[:, None]
    if behaviour_log_probs is None:
        if rows.any():
            raise ValueError("replayed rows need their stored behaviour log-probs")
        return action_log_probs.detach().clone()
    if action_mask is not None:
        rows = rows & action_mask.to(torch.bool)
    mu = behaviour_log_probs.to(device=action_log_probs.device, dtype=action_log_probs.dtype)
    return torch.where(rows, mu, action_log_probs).detach()
