"""The selector interface shared by every backend (selectors.md §0).

A selector is a small object whose state is dense NumPy arrays indexed by
prompt id (length `num_prompts`, known at construction) plus a few scalars.
Every decision is a vectorized function of that state and of the batch; all
randomness comes from the `rng` the harness passes in (`step_rng`), so a
selector never owns an RNG and is deterministic for a seed.

Backends call selectors; selectors import only NumPy (and this package's
errors/registry), never a backend or torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np

from lze_bench.errors import LzeBenchError, damaged_file
from lze_bench.selectors.stats import binary_ones, group_stats, reward_stats, varied_rows  # noqa: F401  (re-exported)
from lze_bench.selectors.topk import gumbel_top_k, gumbel_where, top_k_mask  # noqa: F401  (re-exported)

# rng call tags (selectors.md §0): rng = default_rng([seed, step, TAG(, round)])
TAG_SELECT_ROLLOUT = 0
TAG_SELECT_UPDATE = 1
TAG_BEGIN_EPOCH = 2
TAG_PROBE = 3

EXTRA_FIELDS = ("response_entropy", "prompt_entropy", "prompt_embedding")

# per-step diagnostics a selector may report (`step_metrics`); backends write every one, NaN when absent
STEP_METRICS = ("astral_pred_mae", "astral_pred_spearman", "astral_pred_pearson",
                "astral_kernel_mae", "astral_kernel_spearman", "astral_kernel_pearson")

# FeatureFn(name, ids) -> array: lazily computes an extra ("prompt_entropy" ->
# float[m], "prompt_embedding" -> float[m, d]) for candidate ids; the backend
# charges its FLOPs to the ledger as flops_select. It may return None for an
# extra it cannot provide at all (a replayed log without that column); the
# selector then uses the fallback selectors.md §8 names.
FeatureFn = Callable[[str, np.ndarray], "np.ndarray | None"]


class SelectorExhausted(LzeBenchError):
    """DAPO with on_exhaust="error": the generation cap was hit before the batch filled."""


def step_rng(seed: int, step: int, tag: int, round_index: int = 0) -> np.random.Generator:
    """The harness's rng for one selector call; rounds >= 1 append the round index."""
    key = [int(seed), int(step), int(tag)]
    if round_index >= 1:
        key.append(int(round_index))
    return np.random.default_rng(key)


def top_k(key: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest keys; ties by ascending position (stable).

    `-inf` keys sort last but are returned if k asks for them; callers that
    must never choose them cap k at the number of finite keys.
    """
    key = np.asarray(key, dtype=np.float64).reshape(-1)
    k = min(max(0, int(k)), key.size)
    chosen = np.flatnonzero(top_k_mask(key, k))  # O(m) partition, then sort only the k chosen
    return chosen[np.lexsort((chosen, -key[chosen]))]


def _has_duplicates(ids: np.ndarray) -> bool:
    """Whether int ids repeat; O(G + max id) for dataset indices (np.unique sorts: slow at 10^6)."""
    low, high = int(ids.min()), int(ids.max())
    if low >= 0 and high < 4 * ids.size + 1024:
        return bool(np.bincount(ids).max() > 1)
    return np.unique(ids).size != ids.size


@dataclass
class RolloutBatch:
    """Rolled-out groups, one row per prompt (design.md "The rollout batch").

    prompt_ids        int64[G]
    rewards           float32[G, n]   the one grading function's verdicts (0/1)
    step              training step the groups were generated at
    response_tokens   int32[G, n]     generated tokens per response (optional)
    prompt_tokens     int32[G]        prompt length in tokens (optional)
    response_entropy  float32[G, n]   mean token entropy per response (optional)
    prompt_entropy    float32[G]      mean next-token entropy over the prompt (optional)
    prompt_embedding  float32[G, d]   (optional)
    valid             bool[G, n]      ragged groups (methods.md §4.1): which columns hold a rollout; the
                                      padding's rewards are 0 and never count (None = every column)
    rollout_step      int32[G, n]     the step each rollout was generated at, when a group was carried
                                      over from an earlier step (None = every rollout at `step`)
    """

    prompt_ids: np.ndarray
    rewards: np.ndarray
    step: int
    response_tokens: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    response_entropy: np.ndarray | None = None
    prompt_entropy: np.ndarray | None = None
    prompt_embedding: np.ndarray | None = None
    valid: np.ndarray | None = None
    rollout_step: np.ndarray | None = None

    def __post_init__(self):
        self.prompt_ids = np.asarray(self.prompt_ids, dtype=np.int64).reshape(-1)
        self.rewards = np.asarray(self.rewards, dtype=np.float32)
        groups = self.prompt_ids.size
        if self.rewards.ndim != 2 or self.rewards.shape[0] != groups:
            raise LzeBenchError(
                f"RolloutBatch.rewards must have shape [G, n] with G={groups} prompts; "
                f"got {self.rewards.shape}"
            )
        if groups and _has_duplicates(self.prompt_ids):
            raise LzeBenchError("RolloutBatch.prompt_ids has duplicate prompt ids; one group per prompt per batch")
        if not np.all(np.isfinite(self.rewards)):
            raise LzeBenchError("RolloutBatch.rewards contains NaN or inf; grade every response to a number")
        self._check_rows("response_tokens", 2)
        self._check_rows("prompt_tokens", 1)
        self._check_rows("response_entropy", 2)
        self._check_rows("prompt_entropy", 1)
        self._check_rows("prompt_embedding", 2)
        for name in ("valid", "rollout_step"):
            value = getattr(self, name)
            if value is not None and np.shape(value) != self.rewards.shape:
                raise LzeBenchError(f"RolloutBatch.{name} must have the rewards' shape {self.rewards.shape}; "
                                    f"got {np.shape(value)}")
        if self.valid is not None:
            self.valid = np.asarray(self.valid, dtype=bool)
        if self.rollout_step is not None:
            self.rollout_step = np.asarray(self.rollout_step, dtype=np.int32)

    def _check_rows(self, name: str, ndim: int) -> None:
        value = getattr(self, name)
        if value is None:
            return
        value = np.asarray(value)
        if value.ndim != ndim or value.shape[0] != self.prompt_ids.size:
            raise LzeBenchError(
                f"RolloutBatch.{name} must have {ndim} dims and one row per group "
                f"({self.prompt_ids.size}); got shape {value.shape}"
            )
        setattr(self, name, value)

    @property
    def num_groups(self) -> int:
        return int(self.prompt_ids.size)

    @property
    def group_size(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def counts(self) -> np.ndarray:
        """int64[G]: rollouts in each group (n for every row unless the batch is ragged)."""
        if self.valid is None:
            return np.full(self.num_groups, self.group_size, dtype=np.int64)
        return self.valid.sum(axis=1, dtype=np.int64)

    @property
    def pass_rate(self) -> np.ndarray:
        """float64[G]: mean reward of each group (over its rollouts only, when ragged)."""
        if self.valid is None:
            return self.rewards.mean(axis=1, dtype=np.float64)
        total = np.where(self.valid, self.rewards, 0).sum(axis=1, dtype=np.float64)
        return total / np.maximum(self.counts, 1)

    @property
    def zero_variance(self) -> np.ndarray:
        """bool[G]: groups whose rewards are all equal (zero GRPO advantage): not max > min over the rollouts
        (`stats.varied_rows`, fast at 10^6 groups)."""
        return ~varied_rows(self.rewards, self.valid)

    def subset(self, mask_or_index: np.ndarray) -> "RolloutBatch":
        """The same batch restricted to some groups (a bool mask or indices)."""
        pick = np.asarray(mask_or_index)
        values = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            values[f.name] = value if (f.name == "step" or value is None) else value[pick]
        return RolloutBatch(**values)


@dataclass
class UpdateDecision:
    """What `select_update` returns (selectors.md §0).

    keep     bool[G]      which groups of this batch reach the actor update
    more     int >= 0     how many more prompts to roll out before updating (DAPO)
    replay   int64[R, 2]  (prompt_id, gen_step) keys of stored groups to add (ASTRAL)
    partial  bool         the selector wanted more but its generation cap was hit
    keep_rollouts   bool[G, n] or None   which rollouts of each kept group are trained (PODS);
                    None = all n (every selector that decides per group). A rollout trains iff its
                    group is kept and its flag is set; the ledger books log-prob, reference and
                    training passes for those only, generation for every rollout.
    advantage_stats "kept" | "generated"   where the group's advantage mean and std come from when
                    `keep_rollouts` is set: the kept rollouts (PODS) or every rollout generated for
                    the prompt (Reinforce-Ada's `global_stat_est`); without `keep_rollouts` both are all n.
    advantage_eps   float or None   the std's epsilon for this batch's groups (PODS: 1e-4, as TRL);
                    None = the trainer's own (grpo.py: 1e-6).
    hold     bool[G] or None   groups neither trained nor dropped now (methods.md §4.1, §4.3): they come back,
                    with every rollout they have, in the selector's next batch: the next round of this step,
                    or the first round of the next step when this step ends (SPEED's queues). Disjoint from keep.
    extend   int[G] or None    for held groups, how many more rollouts of the prompt to generate before they
                    come back (SPEED's continuation, Reinforce-Ada's rounds); 0 = come back as they are.
    defer    bool     the step ends now even though held groups ask for rollouts: they are generated at the
                    next step's first round (SPEED: the last screening's survivors continue there). Without it
                    a held group that asks for rollouts makes one more round of this step.
    """

    keep: np.ndarray
    more: int = 0
    replay: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    partial: bool = False
    keep_rollouts: np.ndarray | None = None
    advantage_stats: str = "kept"
    advantage_eps: float | None = None
    hold: np.ndarray | None = None
    extend: np.ndarray | None = None
    defer: bool = False

    def __post_init__(self):
        self.keep = np.asarray(self.keep, dtype=bool).reshape(-1)
        self.more = int(self.more)
        self.replay = np.asarray(self.replay, dtype=np.int64).reshape(-1, 2)
        if self.more < 0:
            raise ValueError(f"UpdateDecision.more must be >= 0, got {self.more}")
        if self.keep_rollouts is not None:
            self.keep_rollouts = np.asarray(self.keep_rollouts, dtype=bool)
            if self.keep_rollouts.ndim != 2 or self.keep_rollouts.shape[0] != self.keep.size:
                raise ValueError(f"UpdateDecision.keep_rollouts must be bool[G, n] with G={self.keep.size} "
                                 f"groups; got shape {self.keep_rollouts.shape}")
        self._check_hold()
        if self.advantage_stats not in ("kept", "generated"):
            raise ValueError(f"UpdateDecision.advantage_stats must be 'kept' or 'generated', "
                             f"got {self.advantage_stats!r}")

    def _check_hold(self) -> None:
        groups = self.keep.size
        if self.hold is not None:
            self.hold = np.asarray(self.hold, dtype=bool).reshape(-1)
            if self.hold.size != groups or (self.hold & self.keep).any():
                raise ValueError(f"UpdateDecision.hold must be bool[{groups}] and disjoint from keep")
        if self.extend is not None:
            extend = np.asarray(self.extend)  # any integer type (Reinforce-Ada's: one byte); others as int64
            self.extend = (extend if extend.dtype.kind in "iu" else extend.astype(np.int64)).reshape(-1)
            held = self.hold if self.hold is not None else np.zeros(groups, dtype=bool)
            if self.extend.size != groups or not (np.greater_equal(self.extend, 0).all() and
                                                   np.less_equal(self.extend > 0, held).all()):
                raise ValueError(f"UpdateDecision.extend must be int[{groups}] >= 0, > 0 only for held groups")

    @property
    def held(self) -> np.ndarray:
        """bool[G]: the groups that come back in the selector's next batch."""
        return np.zeros(self.keep.size, dtype=bool) if self.hold is None else self.hold

    @property
    def extension(self) -> np.ndarray:
        """int[G]: rollouts to generate for each held group before it comes back (0 for the others)."""
        return np.zeros(self.keep.size, dtype=np.int64) if self.extend is None else self.extend

    def rollout_mask(self, group_size: int, valid: np.ndarray | None = None) -> np.ndarray:
        """bool[G, n]: the rollouts that reach the update (a kept group's flagged rollouts; of a ragged
        batch, only the columns that hold a rollout)."""
        if valid is not None:
            return self.rollout_mask(group_size) & valid
        if self.keep_rollouts is None:
            return np.repeat(self.keep[:, None], int(group_size), axis=1)
        if self.keep_rollouts.shape[1] != int(group_size):
            raise ValueError(f"UpdateDecision.keep_rollouts has {self.keep_rollouts.shape[1]} rollouts per group; "
                             f"the batch has {group_size}")
        return self.keep[:, None] & self.keep_rollouts

    @classmethod
    def keep_all(cls, num_groups: int) -> "UpdateDecision":
        return cls(keep=np.ones(num_groups, dtype=bool))


class Selector:
    """Base class with the protocol's defaults (selectors.md §0).

    Subclasses set `Config` (a dataclass whose defaults carry their source),
    `requires` and `candidate_mode`, and implement `select_rollout`,
    `observe` and `select_update`. State is whatever `state_dict` returns:
    NumPy arrays and Python scalars that `np.savez` round-trips exactly.

    Construction: `Cls(config, num_prompts=N, batch_size=B)`; `batch_size` is
    the harness's prompts per actor update (DAPO's train_batch_size default).
    """

    Config: ClassVar[type]
    name: ClassVar[str] = "base"
    requires: ClassVar[tuple[str, ...]] = ()
    candidate_mode: ClassVar[str] = "stream"  # "stream" | "full"
    # True for selectors whose rounds may roll out nothing yet must go on (greso, hive):
    # the backend then calls observe / select_update on the empty batch instead of ending the step
    samples_in_rounds: ClassVar[bool] = False
    # True for selectors whose decisions keep a subset of a group's rollouts (`UpdateDecision.keep_rollouts`):
    # both backends train only those rollouts (local: grpo.py train_mask; openrlhf: update.py / trim.py)
    keeps_rollouts: ClassVar[bool] = False
    # True for selectors that hold groups and ask for more rollouts of them (`UpdateDecision.hold/extend`:
    # SPEED, Reinforce-Ada): groups become ragged and may wait for a later step (both backends checkpoint
    # them); replay serves a log's rollouts in order and names what a log lacks (lze_bench.replay.extending)
    extends_groups: ClassVar[bool] = False

    # trainer.n_samples, which the harness sets before each step (run_selection, replay): the group size of
    # fixed groups, the kept rollouts per prompt of a selector that extends groups (Reinforce-Ada's n)
    group_size: int | None = None

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        if int(num_prompts) <= 0:
            raise LzeBenchError(f"num_prompts must be > 0, got {num_prompts}")
        self.config = config if config is not None else self.Config()
        self.num_prompts = int(num_prompts)
        self.batch_size = None if batch_size is None else int(batch_size)

    # --- protocol defaults -------------------------------------------------
    def begin_epoch(self, epoch: int, rng: np.random.Generator) -> None:
        return None

    def probe(self, step: int, rng: np.random.Generator) -> np.ndarray | None:
        return None

    def observe_probe(self, batch: RolloutBatch) -> None:
        return None

    def select_rollout(self, candidate_ids, budget, step, rng, features: FeatureFn | None = None):
        raise NotImplementedError

    def observe(self, batch: RolloutBatch) -> None:
        return None

    def select_update(self, batch: RolloutBatch, step: int, rng) -> UpdateDecision:
        raise NotImplementedError

    def first_rollouts(self, group_size: int) -> int:
        """Rollouts per prompt the first time a prompt is rolled out in a step (`trainer.n_samples` = n for
        every selector but those that extend groups: SPEED's n_init, Reinforce-Ada's round_repeat)."""
        return int(group_size)

    def candidates_per_step(self, budget: int) -> int:
        """How many candidates the backend offers `select_rollout` per step for `budget` = B prompts per update.

        HIVE: ceil(pool_factor * R); DAPO: gen_batch_size (one generation round); GRESO: S.
        """
        return int(budget)

    def takes_candidates(self, step: int) -> bool:
        """Whether the step's first round takes fresh candidates from the data order at all. A selector that can
        start a step with enough work carried over (SPEED's complete groups) says no then: candidates taken for a
        call that is not made would leave the pass without ever being offered. Always, by default."""
        return True

    def round_candidates(self, more: int) -> int:
        """How many candidates the backend offers in a round r >= 1 whose budget is `more`.

        `more` for every selector but HIVE, which offers ceil(pool_factor * more)
        (selectors.md §4: each round passes `pool_factor x budget` candidates).
        """
        return int(more)

    def round_chunk(self) -> int:
        """0, or the chunk size of a selector whose rounds examine the stream chunk by chunk (GRESO, §6).

        A chunked round calls `select_rollout(chunk, len(chunk))` per chunk (one
        rng per round) until `budget` survivors wait (round 0: `rollout_budget(B)`,
        later: `more`), then rolls them all out (lze_bench.step_rounds).
        """
        return 0

    def rollout_budget(self, budget: int) -> int:
        """The `budget` to pass to `select_rollout` on a step's first round, for B prompts per update.

        B for every selector but those that sample in rounds: DAPO's
        gen_batch_size (selectors.md §2), HIVE's R (§4), GRESO's S (§6).
        Later rounds pass `more`.
        """
        return int(budget)

    def step_metrics(self) -> dict:
        """Diagnostics of the last step, keys from STEP_METRICS (ASTRAL: its predictor's accuracy)."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None

    @classmethod
    def check_run(cls, config, *, max_gen_rounds: int) -> None:
        """Refuse, in one line naming the key, a run setting this selector cannot honour; both backends call it
        before any work. `max_gen_rounds`: the backend's cap on generation rounds in one step
        (`backend.max_gen_rounds`). Nothing to refuse by default."""
        return None

    @classmethod
    def metadata_columns(cls, config) -> tuple[str, ...]:
        """The fixed per-prompt columns (lze_bench.metadata) this selector reads at construction; () for none.

        `build_selector` passes them as `metadata={name: array[N]}` to selectors that name any."""
        return ()

    def require_features(self, features: FeatureFn | None) -> FeatureFn:
        """The backend's FeatureFn, or a clear error when this selector needs one and got none."""
        if features is None and self.requires:
            raise LzeBenchError(
                f"selector {self.name!r} needs {', '.join(self.requires)} from the backend, which provided none"
            )
        return features


class StatelessSelector(Selector):
    """A selector without per-prompt state (uniform)."""


def save_state(path, state: dict) -> None:
    """Write a selector state dict with np.savez (exact round trip of arrays and scalars)."""
    arrays = {key: np.asarray(value) for key, value in state.items()}
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def load_state(path) -> dict:
    """Read a state written by `save_state`; 0-d arrays come back as Python scalars.

    A file that cannot be read (truncated, not an npz) is one LzeBenchError line naming it; an
    object array, which only pickle could read, stays numpy's ValueError (refused, not damaged).
    """
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: (data[key].item() if data[key].ndim == 0 else data[key].copy()) for key in data.files}
    except (OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise damaged_file(path, exc, "delete that step's checkpoint to resume from the checkpoint before it, or start "
                                      "the run over in another run_dir=PATH") from exc
