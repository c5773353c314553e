"""LZE (Learning-Zone Energy): keep the groups nearest the learning zone; optionally prune solved prompts.

Source (selectors.md §5): github Stellaris167/LZE at a508a2f,
`verl/trainer/ppo/sample_attention/backward_scorer.py` (energy, top-k),
`prune_replay.py` (forward pruner), `ray_trainer.py` (fit-loop rules) and the
launch scripts; paper arXiv 2605.17003, abstract only.

Rule, per observed group with pass rate `p` (`observe`, in this order):
1. first sight (`d_init < 0`): `d_init = max(1 - p, d_init_min)`, `ema = p`;
2. energy `E = 4 p (1 - p) * d_init * (1 + momentum_weight * m)`, momentum
   `m = min(2 |p - ema|, 1)` against the EMA before this step;
3. `ema = ema_decay * ema + (1 - ema_decay) * p`, `n_obs += 1`, `last_p = p`;
4. pruner (`prune_enabled`): a prompt solved (`p >= 1 - 1e-8`) on `prune_after`
   consecutive observations is pruned; one in this epoch's replay pool stays
   pruned only while solved.
`select_update`: `keep_ratio >= 1` keeps all (the baseline launcher); epoch 0
(and warm-up) keeps every group with a non-zero advantage; later epochs keep
the top `k` groups by `E` plus Gumbel noise of scale
`max(exploration_noise * max(max E - min E>0, 0.01), 1e-8)`, with `E == 0`
never kept. `begin_epoch` draws the replay pool, a `replay_ratio` share of the
pruned prompts; `select_rollout` skips pruned prompts not in it.

Departures and choices where the spec is open (ours):
* Energies are computed in `observe` from the pre-update state and kept for
  `select_update` (spec §0 call order); `select_update` on a batch `observe`
  has not seen is an error.
* The Gumbel noise is one `rng.gumbel(0, scale, G)` draw with its logarithms
  taken by `np.log` (`topk.gumbel_noise`: the same uniforms, values that can
  differ from NumPy's generator in the last bit).
* `anchor="init_probe"`: `probe()` asks once (before the first step) for all
  N prompts; `observe_probe` applies step 1 to them without counting an
  observation.
* `variant="card"` (never the default): key `-|ema - 0.5| / tau` with the EMA
  after this step's update, sampled without replacement by Gumbel-top-k
  (`rng.gumbel(size=G)`), same `k` schedule, dead groups never kept.
* `align_minibatch` (default off, spec §5 "Authors' trainer alignment"):
  the mini-batch is the key `align_mini_batch_prompts`, default `floor(B / 4)`
  (both public launchers: 256 of 1024, 64 of 256), because the local
  backend has no PPO mini-batches (one optimizer step per update);
  `align_mask` says which kept responses train; `keep` is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, Selector, UpdateDecision, group_stats, gumbel_noise, require, top_k_mask
from lze_bench.selectors.lze_state import LzeState

SOLVED = 1.0 - 1e-8  # prune_replay.py: a group counts as all-correct at p >= 1 - 1e-8


def energy(p: np.ndarray, d_init: np.ndarray, ema: np.ndarray, momentum_weight: float) -> np.ndarray:
    """float64 `E = 4 p (1 - p) d_init (1 + w m)`, `m = min(2 |p - ema|, 1)` (spec §5 steps 2-3).

    `p` float64; `d_init`, `ema` the float32 state before this step's update.
    The operations run in this order (each float64 rounding fixed), as in
    every earlier version, so stored energies and decisions reproduce.
    """
    momentum = np.minimum(np.abs(p - ema) * 2.0, 1.0)
    return (1.0 - p) * p * 4.0 * d_init * (1.0 + momentum_weight * momentum)


def check_unit_interval(rewards: np.ndarray) -> None:
    """Rewards must lie in [0, 1], else 4p(1-p) can be negative (spec §5 select_update)."""
    if rewards.size and (float(rewards.min()) < 0 or float(rewards.max()) > 1):
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


class LzeSelector(Selector):
    """LZE: keep the top groups by learning-zone energy (backward selection)."""

    Config = LzeConfig
    name = "lze"

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.state = LzeState.empty(self.num_prompts)

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
        self.first_sight(batch.prompt_ids, p)
        self.state.anchored = True

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        if self.config.prune_enabled:
            st = self.state
            candidates = candidates[~st.pruned[candidates] | st.replay[candidates]]
        return candidates[: max(0, int(budget))]  # no refill past the budget (original: the batch shrinks)

    # --- backward ------------------------------------------------------------
    def first_sight(self, ids: np.ndarray, p: np.ndarray) -> None:
        """Step 1: anchor the prompts among `ids` never seen before (d_init, ema = p, first_epoch)."""
        st = self.state
        fresh = st.d_init[ids] < 0
        new_ids, new_p = ids[fresh], p[fresh]
        st.d_init[new_ids] = np.maximum(1.0 - new_p, self.config.d_init_min)
        st.ema[new_ids] = new_p
        st.first_epoch[new_ids] = st.epoch

    def observe(self, batch):
        """Steps 1-4 of the rule (module docstring) for every group; the energies are kept for select_update."""
        cfg, st, ids = self.config, self.state, batch.prompt_ids
        p, alive = group_stats(batch.rewards)
        check_unit_interval(batch.rewards)
        self.first_sight(ids, p)
        ema = st.ema[ids]
        st.cache_energy = energy(p, st.d_init[ids], ema, cfg.momentum_weight)  # with the EMA before the update
        st.ema[ids] = ema * cfg.ema_decay + (1.0 - cfg.ema_decay) * p  # float32 * decay, float64 sum, float32
        st.n_obs[ids] += 1
        st.last_p[ids] = p
        if cfg.prune_enabled:
            self.update_pruner(ids, p >= SOLVED)
        st.cache_ids, st.cache_alive = ids, alive
        st.cache_card = -np.abs(st.ema[ids] - 0.5) if cfg.variant == "card" else np.zeros(0)

    def update_pruner(self, ids: np.ndarray, solved: np.ndarray) -> None:
        """Step 4: a replayed prompt stays pruned only while solved; others prune after a solved streak."""
        st = self.state
        streak = np.where(solved, st.streak[ids] + 1, 0)
        st.streak[ids] = streak
        st.pruned[ids] = np.where(st.replay[ids], solved, streak >= self.config.prune_after)

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
        cfg, st, groups = self.config, self.state, batch.num_groups
        if not np.array_equal(batch.prompt_ids, st.cache_ids):
            raise LzeBenchError("lze: select_update got a batch that observe() has not seen; call observe(batch) first")
        alive = st.cache_alive
        if cfg.keep_ratio >= 1:
            return UpdateDecision.keep_all(groups)  # baseline launcher: nothing dropped, dead groups included
        if st.epoch == 0 or st.epoch < cfg.warmup_epochs:
            return UpdateDecision(keep=alive)  # epoch 0 records only; zero-advantage groups still dropped
        k = self.keep_count(groups)
        if k >= groups:
            return UpdateDecision(keep=alive)
        if cfg.variant == "card":
            key = st.cache_card / cfg.tau + rng.gumbel(size=groups)
            key[~alive] = -np.inf
            return UpdateDecision(keep=alive & top_k_mask(key, min(k, int(np.count_nonzero(alive)))))
        e = st.cache_energy
        positive = e > 0
        live = int(np.count_nonzero(positive))
        if live == 0:
            return UpdateDecision(keep=np.zeros(groups, dtype=bool))
        spread = max(float(e.max()) - float(e[positive].min()), 0.01)
        key = np.where(positive, e, -np.inf) + gumbel_noise(rng, max(cfg.exploration_noise * spread, 1e-8), groups)
        return UpdateDecision(keep=alive & top_k_mask(key, min(k, live)))

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


class LzeFullSelector(LzeSelector):
    """LZE with the forward pruner and replay enabled (the method as the abstract describes it)."""

    Config = LzeFullConfig
    name = "lze_full"
