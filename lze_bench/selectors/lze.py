"""LZE (Learning-Zone Energy): keep the groups nearest the learning zone; optionally prune solved prompts.

Source (selectors.md §5): github Stellaris167/LZE at a508a2f,
`verl/trainer/ppo/sample_attention/backward_scorer.py` (energy, top-k),
`prune_replay.py` (forward pruner), `ray_trainer.py` (fit-loop rules) and the
launch scripts; paper arXiv 2605.17003, abstract only.

Backward: a group's energy `E = d_init * 4p(1-p) * (1 + momentum_weight * m)`
(difficulty anchored at first sight, learnability, momentum
`m = min(2|p - ema|, 1)` against the EMA before this step). From epoch 1 on,
the top `k` groups by `E` plus Gumbel exploration noise reach the update;
epoch 0 keeps every group with a non-zero advantage; `keep_ratio >= 1` keeps
all (the baseline launcher). Energies are computed in `observe` from the
pre-update state and cached for `select_update` (spec §0 call order).

Forward (`prune_enabled`, the `lze_full` preset): a prompt solved on
`prune_after` consecutive observations is pruned from the rollout; each
epoch a `replay_ratio` share of pruned prompts is re-checked and un-pruned if
no longer solved.

Choices where the spec is open (ours):
* `anchor="init_probe"`: `probe()` asks once (before the first step) for all
  N prompts; `observe_probe` applies first-sight initialisation (`d_init`,
  `ema`, `first_epoch`) to them without counting an observation.
* `variant="card"` (never the default): key `-|ema - 0.5| / tau` with the EMA
  after this step's update, sampled without replacement by Gumbel-top-k
  (`rng.gumbel(size=G)`), same `k` schedule, dead groups never kept.
* `select_update` on a batch `observe` has not seen is an error.
* `align_minibatch` (default off, spec §5 "Authors' trainer alignment"):
  the mini-batch is the key `align_mini_batch_prompts`, default `floor(B / 4)`
  (both public launchers: 256 of 1024, 64 of 256), because the local
  backend has no PPO mini-batches (one optimizer step per update);
  `align_mask` says which kept responses train; `keep` is unchanged.

Speed (issue 29: a step at 10^6 prompts within 5 np.sort(10^6); every
decision, the rng stream and the state bit-identical to the straightforward
formulas): 0/1 rewards take `reward_stats`' popcount path (which also
proves them in [0, 1]). A batch covering >= 1/4 of the prompts is observed
in prompt order (`lze_dense`: one byte per group scattered, then
sequential blocks over the prompts instead of four random 4-byte accesses
per group) and ranked from one-byte energy codes by
`gumbel_top_k_codes` (a sampled cut, per-code uniform thresholds in
cache-sized blocks, exact float64 keys only near the cut); its `last_p`
and `n_obs` updates are kept as bytes and written when the state is read
(`lze_dense.Deferred`: no decision reads them). Smaller batches: `LzeState.observe`
batches its random accesses and blocks its arithmetic; `select_update`
ranks every group with the E == 0 keys set to -inf in place by
`gumbel_top_k_dense`, whose float32 pre-filter only rules out keys provably
far from the k-th largest float64 key (our choice; the float64 energies
and keys still decide every group near the threshold).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.selectors.base import Selector, UpdateDecision
from lze_bench.selectors.lze_dense import Work, observe_dense
from lze_bench.selectors.lze_state import LzeState
from lze_bench.selectors.stats import group_stats, reward_stats
from lze_bench.selectors.topk import gumbel_top_k_codes, gumbel_top_k_dense, top_k_mask


def check_unit_interval(rewards: np.ndarray) -> None:
    """Rewards must lie in [0, 1] (else 4p(1-p) can be negative): one pass in the common case.

    Non-negative float32 values order like their bit patterns, and 1.0 is
    0x3F800000, so `max(bits) <= 0x3F800000` proves the range; only if it
    fails (a negative zero, or a real violation) the exact check runs.
    """
    rewards = np.ascontiguousarray(rewards, dtype=np.float32)
    if rewards.size == 0 or int(rewards.view(np.uint32).max()) <= 0x3F800000:
        return
    if float(rewards.min()) < 0 or float(rewards.max()) > 1:
        raise LzeBenchError("lze: rewards must lie in [0, 1] (4p(1-p) would be negative); rescale the task reward")


@dataclass
class LzeConfig:
    name: str = "lze"
    keep_ratio: float = 0.4  # run_qwen2.5_math_selection.sh SELECTION_RATIO=0.4; code default 0.7
    min_keep_ratio: float = 0.3  # script + code
    warmup_epochs: int = 0  # script + code
    transition_epochs: int = 0  # script sets 0 (orig. warmup_transition_epochs); code default 3
    ema_decay: float = 0.9  # script + code (newest weight 0.1)
    d_init_min: float = 0.05  # script + code
    momentum_weight: float = 0.3  # code (ray_trainer.py); the script does not set it
    exploration_noise: float = 0.05  # code
    prune_enabled: bool = False  # code default; the public scripts do not enable it
    prune_after: int = 2  # code (consecutive_full_correct_epochs)
    use_replay: bool = True  # code
    replay_ratio: float = 0.1  # code
    anchor: str = "first_seen"  # code: d_init frozen at first observation; "init_probe" = one pass at init (ours)
    variant: str = "code"  # "card": third-party summary card's softmax variant (ours, never the default)
    tau: float = 0.2  # card variant only: softmax temperature (card: tau in [0.1, 0.3])
    align_minibatch: bool = False  # authors' trainer trims kept responses to whole PPO mini-batches (ray_trainer.py)
    align_mini_batch_prompts: Optional[int] = None  # null = floor(B / 4) (launchers: 256 of 1024, 64 of 256)

    def __post_init__(self):
        require(0 < self.keep_ratio <= 1, "selector.keep_ratio", f"must be in (0, 1], got {self.keep_ratio}")
        require(0 < self.min_keep_ratio <= 1, "selector.min_keep_ratio",
                f"must be in (0, 1], got {self.min_keep_ratio}")
        require(self.warmup_epochs >= 0, "selector.warmup_epochs", f"must be >= 0, got {self.warmup_epochs}")
        require(self.transition_epochs >= 0, "selector.transition_epochs", "must be >= 0 (0 = no transition)")
        require(0 <= self.ema_decay < 1, "selector.ema_decay", f"must be in [0, 1), got {self.ema_decay}")
        require(0 <= self.d_init_min <= 1, "selector.d_init_min", f"must be in [0, 1], got {self.d_init_min}")
        require(self.momentum_weight >= 0, "selector.momentum_weight", f"must be >= 0, got {self.momentum_weight}")
        require(self.exploration_noise >= 0, "selector.exploration_noise", "must be >= 0")
        require(self.prune_after >= 1, "selector.prune_after", f"must be >= 1, got {self.prune_after}")
        require(0 <= self.replay_ratio <= 1, "selector.replay_ratio", f"must be in [0, 1], got {self.replay_ratio}")
        require(self.anchor in ("first_seen", "init_probe"), "selector.anchor", "use 'first_seen' or 'init_probe'")
        require(self.variant in ("code", "card"), "selector.variant", "use 'code' or 'card'")
        require(self.tau > 0, "selector.tau", f"must be > 0, got {self.tau}")
        require(self.align_mini_batch_prompts is None or self.align_mini_batch_prompts > 0,
                "selector.align_mini_batch_prompts", f"must be > 0 or null, got {self.align_mini_batch_prompts}")


@dataclass
class LzeFullConfig(LzeConfig):
    """The method as the abstract describes it: backward selector plus forward pruner (spec §5 "Presets")."""

    name: str = "lze_full"
    prune_enabled: bool = True  # abstract: forward pruning with replay
    prune_after: int = 2  # code
    replay_ratio: float = 0.1  # code


@SELECTORS.add("lze")
class LzeSelector(Selector):
    """LZE: keep the top groups by learning-zone energy (backward selection)."""

    Config = LzeConfig
    name = "lze"

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.state = LzeState.empty(self.num_prompts)
        self.work = Work()  # buffers of the prompt-order observe, reused across steps (not state)

    # --- forward -------------------------------------------------------------
    def begin_epoch(self, epoch, rng):
        """Record the epoch; draw this epoch's replay pool from the sorted pruned ids."""
        cfg, st = self.config, self.state
        st.epoch = int(epoch)
        st.replay[:] = False
        if not (cfg.prune_enabled and cfg.use_replay and cfg.replay_ratio > 0):
            return
        pruned_ids = np.flatnonzero(st.pruned)
        if pruned_ids.size:
            count = min(pruned_ids.size, max(1, int(np.floor(pruned_ids.size * cfg.replay_ratio))))
            st.replay[rng.choice(pruned_ids, count, replace=False)] = True

    def probe(self, step, rng):
        if self.config.anchor == "init_probe" and not self.state.anchored:
            return np.arange(self.num_prompts, dtype=np.int64)
        return None

    def observe_probe(self, batch):
        if self.config.anchor != "init_probe":
            return
        p, _ = group_stats(batch.rewards)
        self.state.first_sight(batch.prompt_ids, p, self.config.d_init_min)
        self.state.anchored = True

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        if self.config.prune_enabled:
            candidates = np.compress(self.state.rollout_mask(candidates), candidates)  # 2.5x faster than a bool index
        return candidates[: max(0, int(budget))]  # no refill past the budget (original: the batch shrinks)

    # --- backward ------------------------------------------------------------
    def observe(self, batch):
        dense = observe_dense(self.state, batch.prompt_ids, batch.rewards, self.config, self.work)
        if dense is not None:  # a large batch of 0/1 rewards: the same state and energies, in prompt order
            self.state.cache_dense(dense)
            return
        p, alive, binary = reward_stats(batch.rewards)
        if not binary:  # 0/1 rewards are in [0, 1] by construction
            check_unit_interval(batch.rewards)
        cfg = self.config
        energy = self.state.observe(batch.prompt_ids, p, cfg)
        card = -np.abs(self.state.ema[batch.prompt_ids] - 0.5) if cfg.variant == "card" else None
        self.state.cache(batch.prompt_ids, energy, alive, card)

    def keep_count(self, groups: int) -> int:
        """k of the spec's schedule for `groups` groups in the current epoch (epoch >= warmup)."""
        cfg = self.config
        prog = 1.0
        if cfg.transition_epochs > 0:
            prog = min((self.state.epoch - cfg.warmup_epochs) / cfg.transition_epochs, 1.0)
        ratio = 1.0 - prog * (1.0 - cfg.keep_ratio)
        ratio_min = 1.0 - prog * (1.0 - cfg.min_keep_ratio)
        k = max(max(1, int(np.floor(groups * ratio))), max(1, int(np.floor(groups * ratio_min))))
        return min(groups, k)

    def select_update(self, batch, step, rng):
        dense = self.state.dense(batch.prompt_ids)  # a prompt-order observe (lze_dense), or None
        coded = dense is not None and dense.codes is not None
        energy, alive, card = (None, dense.alive, None) if coded else self.state.cached(batch.prompt_ids)
        cfg, groups = self.config, batch.num_groups
        if cfg.keep_ratio >= 1:
            return UpdateDecision.keep_all(groups)  # baseline launcher: nothing dropped, dead groups included
        epoch = self.state.epoch
        if epoch == 0 or epoch < cfg.warmup_epochs:
            return UpdateDecision(keep=alive)  # epoch 0 records only; zero-advantage groups still dropped
        k = self.keep_count(groups)
        if k >= groups:
            return UpdateDecision(keep=alive)
        if cfg.variant == "card":
            key = card / cfg.tau + rng.gumbel(size=groups)
            key[~alive] = -np.inf
            return UpdateDecision(keep=alive & top_k_mask(key, min(k, int(np.count_nonzero(alive)))))
        if coded:  # the same live count, largest and smallest positive energy, kept by the observe
            base, live, top, low = None, dense.live, dense.top, dense.low
        else:
            positive = energy > 0
            live = int(np.count_nonzero(positive))
            top = float(energy.max())  # energies are >= 0: the max over E > 0 is the max over all (NaN propagates)
            base = np.where(positive, energy, -np.inf)  # the spec's key without noise: -inf for E == 0
            low = float(np.abs(base, out=np.empty_like(base)).min())  # |-inf| = inf: the smallest E > 0
        if live == 0:
            return UpdateDecision(keep=np.zeros(groups, dtype=bool))
        scale = max(cfg.exploration_noise * max(top - low, 0.01), 1e-8)
        # the spec's one rng.gumbel(0, scale, G) vector; keys with E == 0 are -inf, never among the top min(k, #E>0)
        if coded:  # ranked from the one-byte energy codes, exact energies read near the cut
            keep = gumbel_top_k_codes(rng, scale, dense.codes, dense.unit, dense.exact, min(k, live))
        else:
            keep = gumbel_top_k_dense(rng, scale, base, min(k, live), base_absmax=top)
        return UpdateDecision(keep=np.logical_and(keep, alive, out=keep))

    # --- authors' trainer alignment ---------------------------------------------
    def align_mask(self, kept_groups: int, n: int, total_responses: int, rng) -> np.ndarray | None:
        """bool[kept_groups, n]: the kept responses the authors' trainer would train, or None (nothing cut).

        Spec §5 "Authors' trainer alignment": with `keep_ratio < 1` and `K_raw =
        kept_groups * n` neither 0 nor `total_responses`, `unit = mini-batch
        prompts * n`, `K = floor(K_raw / unit) * unit` (or `min(unit, K_raw)` if
        that is 0); if `K < K_raw`, a uniform random `K` of the kept responses
        (`rng.permutation(K_raw)[:K]`), in original order. The backend passes
        `rng = default_rng([seed, step, 1, 99])` and trains only these.
        """
        cfg = self.config
        raw = int(kept_groups) * int(n)
        if not cfg.align_minibatch or cfg.keep_ratio >= 1 or raw == 0 or raw == int(total_responses):
            return None
        prompts = cfg.align_mini_batch_prompts or max(1, (self.batch_size or 0) // 4)
        unit = int(prompts) * int(n)
        count = (raw // unit) * unit or min(unit, raw)
        if count >= raw:
            return None
        mask = np.zeros(raw, dtype=bool)
        mask[np.sort(rng.permutation(raw)[:count])] = True
        return mask.reshape(int(kept_groups), int(n))

    # --- state ---------------------------------------------------------------
    def state_dict(self) -> dict:
        return self.state.to_dict()

    def load_state_dict(self, state: dict) -> None:
        self.state = LzeState.from_dict(state, self.num_prompts)


@SELECTORS.add("lze_full")
class LzeFullSelector(LzeSelector):
    """LZE with the forward pruner and replay enabled (the method as the abstract describes it)."""

    Config = LzeFullConfig
    name = "lze_full"
