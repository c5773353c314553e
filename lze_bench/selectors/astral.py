"""ASTRAL: difficulty-targeted online selection (DOTS) plus rollout replay (RR) (selectors.md §3).

Source: github ASTRAL-Group/data-efficient-llm-rl at 59df918
(`rl_training/verl/verl/trainer/ppo/ray_trainer.py`, the trainer `main_ppo.py`
imports: `select_buffer` L55-132, fit loop L988-1015; `teacher_utils.py`;
`final_ds_teacher_replay.sh`); paper arXiv 2506.05316 (Alg. 1, App. A.1).

Every `mu` steps (a round) the selector probes `ref_size` random prompts, predicts
every prompt's pass rate `p_hat` from that reference set (`predictor=kernel`:
`astral_predict.kernel_predict`; `trained` / `checkpoint`: the authors' learned head,
`astral_predict.head_predict`, over arrays the backend computed with torch,
lze_bench/predictor), draws `mu * B_fresh` prompts without
replacement from `softmax(-|p_hat - alpha| / tau)`, shuffles them and rolls
out one slice of `B_fresh` per step (returned in that shuffled order, not
candidate order). Every fresh group is kept; from round 1 on each step also
replays `floor((1 - sigma) * budget)` groups drawn uniformly from a small
buffer of earlier groups (`UpdateDecision.replay` keys). The buffer, each
step (`select_buffer`, spec §3 "Replay buffer"): keep each prompt's newest
group, drop every group whose mean reward is exactly 0 or 1 (L87-95; paper
Alg. 1 l.18: never replay a question all answers solve or all fail), draw the
replay from what is left, keep the newest `buffer_size - floor(sigma * B)` of
it, append this step's fresh groups (with their mean reward).

Choices where the spec is open (ours):
* rounds are `step // mu`; the round's draw happens on its first
  `select_rollout` call, so a run that starts or resumes mid-round still draws;
* restricted candidates (fewer than all N ids, e.g. the replay of a log):
  each step draws its own `B_fresh` prompts from its candidates with the
  current round's reference set, returned in candidate order;
* no reference set yet, or a FeatureFn that has no embeddings (a replayed log
  without them, spec §8): `p_hat` = the prompt's last observed pass rate, else
  the mean observed pass rate so far, else `alpha` (`last_p` is kept for this);
* the replay draw is always `rng.permutation(len(pool))[:R]` (a pool smaller
  than R is replayed whole, in that drawn order);
* the predictor is measured: `observe` compares each rolled-out prompt's
  `p_hat` (from its round's draw) with its measured pass rate (mean absolute
  error, Spearman's rho, Pearson's r; `step_metrics`, ledger columns
  `astral_pred_*`). With the learned head, the cosine kernel over the same
  encoder embeddings is also computed each round, never used, and measured the
  same way (`astral_kernel_*`): the two predictors side by side on the same
  prompts and steps;
* `trained` / `checkpoint` read the FeatureFn names `head_query` (phi of each
  prompt's encoder embedding, float32[m, h]), `head_key` (psi), `head_embedding`
  (the encoder embedding, for the kernel beside it) and `head_calibration`
  (float[52], the calibration MLP); the head's attention temperature is the
  authors' 1.0 (`t_att` is the kernel's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.api import LzeBenchError, Selector, UpdateDecision, group_stats, require
from lze_bench.selectors.astral_predict import dots_draw, head_predict, kernel_predict, prediction_metrics

_ARRAYS = ("ref_ids", "y_ref", "round_ids", "buf_pid", "buf_step", "buf_mean", "pool_pid", "pool_step", "last_p",
           "p_hat", "p_kernel")
_METRICS = ("pred_mae", "pred_spearman", "pred_pearson", "kernel_mae", "kernel_spearman", "kernel_pearson")
_SCALARS = ("drawn_round", "round_fresh", "budget", "revealed_sum", "revealed_count", "buf_split") + _METRICS
PREDICTORS = ("kernel", "trained", "checkpoint")
HEAD_FEATURES = ("head_query", "head_key", "head_embedding", "head_calibration")


@dataclass
class AstralConfig:
    name: str = "astral"
    alpha: float = 0.5  # target pass rate; final_ds_teacher_replay.sh ALPHA=0.5
    tau: float = 1e-3  # softmax temperature; same script TAU=1e-3
    mu: int = 2  # steps per selection round; same script MU=2
    sigma: float = 0.5  # fresh fraction after round 0; same script SIGMA=0.5
    ref_size: int = 256  # reference prompts probed per round; same script +data.ref_size=256
    buffer_size: int = 512  # replay buffer (groups); same script BUFFER_SIZE=512
    replay_strategy: str = "random"  # same script + select_buffer ("teacher" is unimplemented in the original)
    predictor: str = "kernel"  # ours; "trained": the authors' head trained here; "checkpoint": a head file
    t_att: float = 0.1  # the kernel's softmax temperature (ours; the learned head uses the authors' 1.0)
    predictor_path: Optional[str] = None  # predictor=checkpoint: adaptive_difficulty_prediction_model_*.pt
    predictor_encoder: Optional[str] = None  # predictor=checkpoint: the encoder it was trained with (id or path)

    def __post_init__(self):
        require(0 <= self.alpha <= 1, "selector.alpha", f"must be in [0, 1], got {self.alpha}")
        require(self.tau > 0, "selector.tau", f"must be > 0, got {self.tau}")
        require(self.mu >= 1, "selector.mu", f"must be >= 1, got {self.mu}")
        require(0 <= self.sigma <= 1, "selector.sigma", f"must be in [0, 1], got {self.sigma}")
        require(self.ref_size >= 1, "selector.ref_size", f"must be >= 1, got {self.ref_size}")
        require(self.buffer_size >= 0, "selector.buffer_size", f"must be >= 0, got {self.buffer_size}")
        require(self.replay_strategy == "random", "selector.replay_strategy",
                "only 'random' exists (the original's 'teacher' is unimplemented)")
        require(self.predictor in PREDICTORS, "selector.predictor",
                f"unknown predictor {self.predictor!r}; use one of {', '.join(PREDICTORS)}")
        if self.predictor == "checkpoint":
            require(bool(self.predictor_path) and bool(self.predictor_encoder), "selector.predictor_path",
                    "predictor=checkpoint needs selector.predictor_path=HEAD.pt and "
                    "selector.predictor_encoder=ENCODER (the model its embeddings came from)")
        require(self.t_att > 0, "selector.t_att", f"must be > 0, got {self.t_att}")


def newest_per_prompt(pid: np.ndarray, step: np.ndarray, num_prompts: int, *others: np.ndarray) -> tuple:
    """The buffer with only each prompt's most recent entry, order preserved (O(len + N)); `others` are
    arrays aligned with `pid`, cut the same way."""
    if pid.size == 0:
        return (pid, step, *others)
    last = np.full(num_prompts, -1, dtype=np.int64)
    np.maximum.at(last, pid, np.arange(pid.size))
    keep = last[pid] == np.arange(pid.size)
    return (pid[keep], step[keep], *(other[keep] for other in others))


def replayable(mean_reward: np.ndarray) -> np.ndarray:
    """bool[m]: groups ASTRAL may replay: mean reward neither exactly 0 nor exactly 1 (ray_trainer.py L87-95)."""
    return (mean_reward != 0.0) & (mean_reward != 1.0)


class AstralSelector(Selector):
    """ASTRAL: draw prompts predicted near pass rate alpha each round; replay recent groups."""

    Config = AstralConfig
    name = "astral"
    requires = ("prompt_embedding",)
    candidate_mode = "full"

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        self.head = self.config.predictor != "kernel"
        if self.head:
            self.requires = HEAD_FEATURES
        empty = np.zeros(0, dtype=np.int64)
        self.ref_ids, self.y_ref, self.round_ids = empty, np.zeros(0), empty
        self.buf_pid, self.buf_step, self.pool_pid, self.pool_step = empty, empty, empty, empty
        self.buf_mean = np.zeros(0)  # float64[len(buf_pid)]: each buffered group's mean reward
        # buf[:buf_split] is the pool kept by the last observe (deduplicated, mixed, trimmed) and buf[buf_split:]
        # the groups it appended (distinct prompts); -1: not known (then the general deduplication runs)
        self.buf_split = 0
        self._pending = None  # (p_hat, p_kernel, measured) of the last observed batch: metrics when read
        self.last_p = np.full(self.num_prompts, np.nan)  # float64[N], NaN = never observed
        self.p_hat = np.full(self.num_prompts, np.nan)  # float64[N], the last draw's prediction, NaN = none
        self.p_kernel = np.full(self.num_prompts, np.nan)  # float64[N], the kernel beside the head (diagnostic)
        for key in _METRICS:  # of the last observed batch
            setattr(self, key, float("nan"))
        self.drawn_round, self.round_fresh = -1, 0
        self.budget = -1 if batch_size is None else int(batch_size)  # -1: not known yet
        if self.budget >= 0:
            self._cap()  # a negative cap' is refused as soon as the batch is known
        self.revealed_sum, self.revealed_count = 0.0, 0

    # --- forward -------------------------------------------------------------
    def fresh_count(self, round_index: int, budget: int) -> int:
        return int(budget) if round_index == 0 else int(np.floor(self.config.sigma * budget))

    def probe(self, step, rng):
        if int(step) % self.config.mu != 0:
            return None
        return rng.choice(self.num_prompts, min(self.config.ref_size, self.num_prompts), replace=False).astype(np.int64)

    def observe_probe(self, batch):
        self.ref_ids = batch.prompt_ids.copy()
        self.y_ref = batch.pass_rate

    def predict(self, ids: np.ndarray, features) -> np.ndarray:
        """p_hat float64[m] for prompt ids (the predictor over the reference set, else observed history).

        With the learned head, the kernel's prediction over the same encoder embeddings goes to
        `p_kernel` (measured in `observe`, never used to select).
        """
        if self.ref_ids.size:
            if self.head:
                query = features("head_query", ids)
                if query is not None:
                    emb = features("head_embedding", ids)
                    self.p_kernel[ids] = kernel_predict(emb, features("head_embedding", self.ref_ids), self.y_ref,
                                                        self.config.t_att)[1]
                    return head_predict(query, features("head_key", self.ref_ids), self.y_ref,
                                        features("head_calibration", self.ref_ids[:0]),
                                        features("head_query", self.ref_ids))[1]
            else:
                emb = features("prompt_embedding", ids)
                if emb is not None:
                    return kernel_predict(emb, features("prompt_embedding", self.ref_ids), self.y_ref,
                                          self.config.t_att)[1]
        prior = self.revealed_sum / self.revealed_count if self.revealed_count else self.config.alpha
        last = self.last_p[ids]
        return np.where(np.isnan(last), prior, last)

    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        features = self.require_features(features)
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        self.budget = max(0, int(budget))
        self._cap()
        round_index, slot = divmod(int(step), self.config.mu)
        fresh = self.fresh_count(round_index, self.budget)
        cfg = self.config
        if candidates.size != self.num_prompts:  # restricted candidates: one draw per step
            self.p_hat[candidates] = self.predict(candidates, features)
            chosen = dots_draw(self.p_hat[candidates], min(fresh, candidates.size), cfg.alpha, cfg.tau, rng)
            return candidates[np.sort(chosen)]
        if self.drawn_round != round_index:
            count = min(cfg.mu * fresh, candidates.size)
            self.p_hat[candidates] = self.predict(candidates, features)
            drawn = candidates[dots_draw(self.p_hat[candidates], count, cfg.alpha, cfg.tau, rng)]
            self.round_ids = drawn[rng.permutation(drawn.size)]
            self.drawn_round, self.round_fresh = round_index, fresh
        return self.round_ids[slot * self.round_fresh : (slot + 1) * self.round_fresh].copy()

    # --- backward ------------------------------------------------------------
    def observe(self, batch):
        ids = batch.prompt_ids
        p, _ = group_stats(batch.rewards)
        self._pending = (self.p_hat[ids], self.p_kernel[ids], p)  # diagnostics: computed when read
        self.last_p[ids] = p
        self.revealed_sum += float(p.sum())
        self.revealed_count += int(ids.size)
        pid, stp, mean = self._pool()
        self.pool_pid, self.pool_step = pid, stp  # what select_update replays from
        cap = self._cap()
        if pid.size > cap:
            pid, stp, mean = pid[pid.size - cap:], stp[pid.size - cap:], mean[pid.size - cap:]
        self.buf_pid = np.concatenate([pid, ids])
        self.buf_step = np.concatenate([stp, np.full(ids.size, int(batch.step), dtype=np.int64)])
        self.buf_mean = np.concatenate([mean, p])
        self.buf_split = int(pid.size)

    def _pool(self) -> tuple:
        """The buffer deduplicated (each prompt's newest group), then its all-0 / all-1 groups dropped.

        The filter runs after the dedup: a prompt whose newest group is all-0 or all-1 does not fall back
        to an older mixed one. When the buffer is the last pool plus the groups appended after it
        (`buf_split`), only those can repeat a prompt or be all-0 / all-1: the pool loses the prompts the
        appended groups repeat, and only the appended groups are filtered (the same result in O(len + N)).
        """
        split = self.buf_split
        if split < 0:
            pid, stp, mean = newest_per_prompt(self.buf_pid, self.buf_step, self.num_prompts, self.buf_mean)
            mixed = replayable(mean)
            return pid[mixed], stp[mixed], mean[mixed]
        newest = np.zeros(self.num_prompts, dtype=bool)
        newest[self.buf_pid[split:]] = True
        older = ~newest[self.buf_pid[:split]]
        appended = replayable(self.buf_mean[split:])
        keep = np.concatenate([older, appended])
        return self.buf_pid[keep], self.buf_step[keep], self.buf_mean[keep]

    def select_update(self, batch, step, rng):
        replay = np.zeros((0, 2), dtype=np.int64)
        if int(step) // self.config.mu >= 1:
            count = int(np.floor((1.0 - self.config.sigma) * self._budget()))
            pick = rng.permutation(self.pool_pid.size)[:count]
            replay = np.stack([self.pool_pid[pick], self.pool_step[pick]], axis=1)
        return UpdateDecision(keep=np.ones(batch.num_groups, dtype=bool), replay=replay)

    def step_metrics(self) -> dict:
        """The predictor's accuracy on this step's rolled-out prompts: p_hat of the round's draw vs measured p.

        Computed here, when the backend reads them, not in `observe`: they decide nothing, and their
        ranking (Spearman) would dominate a step at 10^5 groups and more.
        """
        self._settle_metrics()
        return {f"astral_{key}": getattr(self, key) for key in _METRICS}

    def _settle_metrics(self) -> None:
        if self._pending is None:
            return
        predicted, kernel, measured = self._pending
        self._pending = None
        for prefix, values in (("pred", predicted), ("kernel", kernel)):
            for name, value in prediction_metrics(values, measured).items():
                setattr(self, f"{prefix}_{name}", value)

    def _cap(self) -> int:
        """cap' = buffer_size - floor(sigma * B): older groups kept after a step (ray_trainer.py L118-124)."""
        cap = self.config.buffer_size - int(np.floor(self.config.sigma * self._budget()))
        if cap < 0:  # the original would then keep the *oldest* groups (a negative slice): refused instead
            raise LzeBenchError(f"selector.buffer_size={self.config.buffer_size}: must be >= floor(sigma * batch) = "
                                f"{self.config.buffer_size - cap} (the buffer keeps buffer_size - floor(sigma * B) "
                                "older groups); raise it")
        return cap

    def _budget(self) -> int:
        if self.budget < 0:
            raise LzeBenchError("astral: budget unknown; pass batch_size at construction or call select_rollout first")
        return self.budget

    # --- state ---------------------------------------------------------------
    def state_dict(self) -> dict:
        self._settle_metrics()
        state = {key: getattr(self, key).copy() for key in _ARRAYS}
        state.update({key: getattr(self, key) for key in _SCALARS})
        return state

    def load_state_dict(self, state: dict) -> None:
        for key in _ARRAYS:
            setattr(self, key, np.array(state[key], dtype=getattr(self, key).dtype))
        if self.last_p.shape != (self.num_prompts,):
            raise LzeBenchError(f"astral state 'last_p' has shape {self.last_p.shape}, expected ({self.num_prompts},)")
        for key in _SCALARS:
            setattr(self, key, type(getattr(self, key))(state[key]))
        self._pending = None
