"""HIVE: a probabilistic history screen, prompt-entropy verification, then dynamic sampling (selectors.md §4).

Sources: HIVE arXiv 2603.25184 (v1/v2 abstract and introduction; no code was
found) and three second-hand accounts of the method (spec §4 (a)-(c)): the
history shortlist is broad and random (a selection probability, "not an extra
Stage-1 top-k gate"), stage 2 keeps the upper half of the shortlist by the
current policy's prompt entropy (median over the shortlist), and the update
is filled by dynamic sampling (train batch `B` from rollout batches `R`).
The setup matches GRESO's launch scripts, so HIVE is built on GRESO's state
and rules (`greso_state.py`) — our inference.

Per round, for candidate i (stage 1):
    k_i = GRESO's keep probability      e_i = edge_floor + (1 - edge_floor) * 4 p(1-p) * u
    u_i = min(1, h_hist_i / mean known h_hist)     q_i = 1 if unseen else k_i * e_i
    v = rng.random(m); shortlist = candidates with not (v_i < 1 - q_i)
Stage 2: `V` = prompt entropy of the shortlist only; keep `V >= median(V)`,
at most `budget` (top by V, ties by candidate order), in candidate order.
Backward: dapo's rule with `train_batch_size = B`, `gen_batch_size = R`;
when the update is decided, GRESO's exploration adaptation, then reset.

Choices where the spec is silent (ours, spec §4 table): the product form of
`q`, `edge_floor`, `u`, `beta`, `pool_factor` (each round offers
`ceil(pool_factor * budget)` candidates), the round cap; `u = 1` when the
prompt's entropy is unknown, none is known, the mean is <= 0 or
`use_response_entropy=false`; without prompt entropy at all (a replayed log,
spec §8) stage 2 applies the median rule and the cap to `e` (unseen: +inf).

Speed (issue 29, `lze-bench bench selectors`, 10^6 prompts, batch ~0.42 N): the decisions, the rng
stream and the state are those of the plain per-candidate code bit for bit; two shortcuts apply when
a call covers >= 1/4 of the prompts. Stage 1 (`_shortlist`): each prompt's threshold t = 1 - q is
computed in prompt order (sequential blocks) and kept as a 1-byte cell floor(256 t); a candidate's
cell, gathered from that 1 MB array, decides its draw unless the draw falls in the same cell (about
1 in 256), which compares with t itself (proof in `_shortlist`). This replaces a 16-byte record gather
from 16 MB (~6 ms inside a step). Observe (`SkipHistory.observe_counts`, 0/1 rewards): each group's
correct count is scattered as one byte and the records are updated block by block in prompt order,
instead of a random 16-byte gather and scatter. Measured on this project's 2-core Xeon at load 1.5-3:
step ~40 -> ~33 ms (6.6 -> 5.5 np.sorts); see docs/selectors.md ("HIVE, third pass") for the runs.
Fourth pass (`greso_state.screen`, shared with GRESO): the draws are made, screened against the cells
and the listed candidates compacted block by block (64K candidates; one `rng.random(m)` stream: each
double is one step of the bit generator whatever the block sizes), which measures the same as the
one-shot draws and compress; the update skips the running count when every informative group fits
(~1.2 -> ~0.1 ms). Step ~33 -> ~32 ms (5.3 -> 5.0 np.sorts, medians at load 1.5); see docs/selectors.md
("HIVE and GRESO, fourth pass") for the runs and what was tried.
Fifth pass: `screen` gathers the candidates' cells in one pass before its blocks (gathered block by
block, between the draws' and the output's streams, the 1 MB of cells left the 2 MiB L2: ~2.9 -> ~1.3 ms
inside a step, for GRESO too); `observe_counts` marks the prompts outside the batch with 255, so the
counts are scattered as they are; `_cells` keeps the table index in its pass-rate buffer (one block
buffer fewer). Step ~27.5 -> ~25.5 ms best, ~29 -> ~27 median (in-process A/B, load 1.7; 4.5-4.8 ->
4.2-4.4 np.sorts); see docs/selectors.md ("HIVE, fifth pass").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.selectors.base import Selector, UpdateDecision, top_k_mask
from lze_bench.selectors.topk import median
from lze_bench.selectors.greso_state import BLOCK, CACHE_BLOCK, SkipHistory, check_history_config, covers, screen


@dataclass
class HiveConfig:
    name: str = "hive"
    train_batch_size: Optional[int] = None  # B; null = harness batch size (paper: 256 or 128, account (c))
    rollout_batch_size: Optional[int] = None  # R; null = ceil(1.5 B) (paper: 384 or 192, account (c))
    use_response_entropy: bool = True  # accounts (a), (c); (b) "requires high uncertainty"
    edge_floor: float = 0.5  # ours ((b): the shortlist is broad)
    beta: float = 0.5  # ours: EMA weight of the newest pass rate / response entropy
    pool_factor: float = 2.0  # ours: the median halves the shortlist, so 2R candidates give <= R rollouts
    p_easy: float = 0.5  # GRESO S15:19; its use in HIVE is ours
    p_hard: float = 0.5  # GRESO S15:20
    target_zero_variance: float = 0.25  # GRESO S15:21
    delta: float = 0.01  # GRESO RT:1212-1219
    p_min: float = 0.05  # GRESO RT:1203
    p_max: float = 0.95  # GRESO RT:1204
    keep_floor: float = 0.01  # GRESO PS:117, 142
    max_gen_batches: int = 10  # as dapo (section 2); no HIVE evidence
    on_exhaust: str = "partial"  # as dapo

    def __post_init__(self):
        for key in ("train_batch_size", "rollout_batch_size"):
            value = getattr(self, key)
            require(value is None or value > 0, f"selector.{key}", f"must be > 0 or null, got {value}")
        require(0 <= self.edge_floor <= 1, "selector.edge_floor", f"must be in [0, 1], got {self.edge_floor}")
        require(0 < self.beta <= 1, "selector.beta", f"must be in (0, 1], got {self.beta}")
        require(self.pool_factor >= 1, "selector.pool_factor", f"must be >= 1, got {self.pool_factor}")
        check_history_config(self)


@SELECTORS.add("hive")
class HiveSelector(Selector):
    """HIVE: random screen towards the learning edge, keep high prompt entropy, fill by dynamic sampling."""

    Config = HiveConfig
    name = "hive"
    samples_in_rounds = True  # an empty shortlist still asks for the next round
    requires = ("prompt_entropy", "response_entropy")

    def __init__(self, config=None, *, num_prompts: int, batch_size: int | None = None):
        super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
        if not self.config.use_response_entropy:
            self.requires = ("prompt_entropy",)
        # p_hist (float64[N] EMA pass rate, NaN = unseen) lives in the history's records: one access per prompt
        self.history = SkipHistory(self.num_prompts, self.config, extra=(("p_hist", np.float64, np.nan),))
        self.h_hist = np.full(self.num_prompts, np.nan)  # float64[N] EMA mean response entropy, NaN = unknown
        self.h_bar = None  # mean of the known h_hist (None: none known); derived, not state
        train = self.config.train_batch_size or self.batch_size
        if train is None:
            raise LzeBenchError("selector.train_batch_size: hive needs a batch size; set it or pass the harness's")
        self.begin_update(int(train))

    @property
    def p_hist(self) -> np.ndarray:
        """float64[N] view: EMA of each prompt's pass rate, NaN = unseen."""
        return self.history.rows["p_hist"]

    @p_hist.setter
    def p_hist(self, value) -> None:
        self.history.rows["p_hist"] = value

    def begin_update(self, train_batch_size: int | None = None) -> None:
        """Set this step's B (and R from it); replay calls it before each logged step."""
        if train_batch_size is not None:
            self.train_batch_size = int(train_batch_size)
            self.rollout_batch_size = int(self.config.rollout_batch_size or math.ceil(1.5 * self.train_batch_size))

    def finish_update(self) -> None:
        """End the step now (adaptation, counters reset) even if more was asked for (replay, spec §8)."""
        self.history.finish_step()

    def begin_epoch(self, epoch, rng):
        self.history.epoch = int(epoch)

    def candidates_per_step(self, budget: int) -> int:
        return self.round_candidates(self.rollout_batch_size)

    def rollout_budget(self, budget: int) -> int:
        return self.rollout_batch_size

    def round_candidates(self, more: int) -> int:
        return int(math.ceil(self.config.pool_factor * int(more)))

    # --- stage 1 -------------------------------------------------------------
    def edge(self, candidates: np.ndarray) -> np.ndarray:
        """float64[m]: the learning-edge term e in [edge_floor, 1] (NaN for unseen prompts)."""
        return self._edge(self.p_hist.take(candidates), candidates)

    def _edge(self, p: np.ndarray, candidates) -> np.ndarray:
        """e = edge_floor + (1 - edge_floor) * (4 p (1 - p)) * u for the candidates' EMA pass rates `p`
        (`candidates`: their ids, or a slice of the prompts in order).

        The operations run in place, in the order of the formula as written
        (so the same float64 values); `u = 1` is not multiplied in (x * 1.0 is x).
        """
        cfg = self.config
        e = 4.0 * p
        e *= 1.0 - p
        e *= 1.0 - cfg.edge_floor
        if cfg.use_response_entropy and self.h_bar is not None and self.h_bar > 0:
            h = self.h_hist[candidates] if isinstance(candidates, slice) else self.h_hist.take(candidates)
            e *= np.where(np.isnan(h), 1.0, np.minimum(1.0, h / self.h_bar))
        e += cfg.edge_floor
        return e

    def select_probability(self, candidates: np.ndarray) -> np.ndarray:
        """float64[m]: q = k * e, 1 for unseen prompts."""
        records = self.history.rows.take(candidates)
        q = self.history.keep_of(records["run"])
        q *= self._edge(records["p_hist"], candidates)
        q[np.isnan(records["p_hist"])] = 1.0
        return q

    def _listed_exact(self, candidates: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """bool[m]: not (v < 1 - q), the stage-1 screen, in place over one float64 buffer.

        An unseen prompt's q is left NaN here instead of 1: `v < NaN` is false
        just as `v < 1 - 1 = 0` is, so the mask is the same without a pass to
        replace the NaNs (`select_probability` returns the 1s).
        """
        records = self.history.rows.take(candidates)  # run and p_hist: one gather
        listed = np.empty(candidates.size, dtype=bool)
        if not candidates.size:
            return listed
        run, lowest, highest = self.history.run_bounds(records["run"])
        table, lowest = self.history.keep_table(lowest, highest)  # keep_of's table, once
        for start in range(0, candidates.size, BLOCK):  # blocks: the float64 temporaries stay in cache
            part = slice(start, start + BLOCK)
            q = table.take(np.subtract(run[part], lowest, dtype=np.intp))  # keep_of(run) of the block
            q *= self._edge(records["p_hist"][part], candidates[part])  # NaN where unseen
            np.subtract(1.0, q, out=q)
            np.less(draws[part], q, out=listed[part])
        return np.logical_not(listed, out=listed)

    def _cells(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(uint8[N] cells, the keep table, its lowest run): each prompt's threshold cell c = floor(256 t)
        clipped to [0, 255] (0 where t is NaN).

        t = 1 - q as `_listed_exact` computes it, in prompt order over cache-sized blocks, with two
        exact rewrites: 256 t is computed as 256 - (256 k) e (a power of two scales every rounding
        exactly; where k e underflows, both are 256), and the keep table spans the runs of all
        prompts (each entry is the same elementwise pow as over any sub-range). The cast truncates,
        i.e. floors, values in [0, 255].
        """
        cfg, rows = self.config, self.history.rows
        cells = self.history._scratch("_hive_cells", np.uint8)
        q, e, p = np.empty(CACHE_BLOCK), np.empty(CACHE_BLOCK), np.empty(CACHE_BLOCK)
        index = p.view(np.intp)  # the table index, dead once gathered: `p` then holds the pass rates
        h_bar = self.h_bar if cfg.use_response_entropy and self.h_bar is not None and self.h_bar > 0 else None
        keep = lowest = None  # no prompts: no table
        for part, r, table, lowest in self.history.run_blocks():  # blocks: the temporaries stay in cache
            width = r.size
            i, k, x, y = index[:width], q[:width], e[:width], p[:width]
            if table is not keep:
                keep, scaled = table, table * 256.0
            scaled.take(np.subtract(r, lowest, out=i), out=k, mode="clip")  # 256 k; in range: clip skips bounds checks
            np.copyto(y, rows["p_hist"][part])
            np.multiply(4.0, y, out=x)  # e as `_edge` computes it
            np.subtract(1.0, y, out=y)
            x *= y
            x *= 1.0 - cfg.edge_floor
            if h_bar is not None:
                h = self.h_hist[part]
                x *= np.where(np.isnan(h), 1.0, np.minimum(1.0, h / h_bar))
            x += cfg.edge_floor
            k *= x  # 256 q, NaN where unseen
            np.subtract(256.0, k, out=k)
            np.fmax(k, 0.0, out=k)  # NaN -> 0
            np.fmin(k, 255.0, out=cells[part], casting="unsafe")
        return cells, keep, lowest

    def _shortlist(self, candidates: np.ndarray, draws) -> np.ndarray:
        """The candidates with not (v < 1 - q), the stage-1 screen, in candidate order; `draws`: the
        uniforms v (float64[m]) or the Generator to draw them from (one `random(m)`, candidate order).

        Fewer than N/4 candidates: `_listed_exact`, O(m). More: each candidate's 1-byte threshold cell
        (`_cells`) decides almost every draw. With c the cell and d = floor(256 v) (v in [0, 1): 256 v
        is exact, the cast floors it): c <= 256 t unless t < 0 and 256 t <= c + 1 unless t > 1 or NaN
        (the clipping). So d > c gives v >= d / 256 >= (c + 1) / 256 >= t: listed (a NaN t too: `v <
        NaN` is false); d < c gives v < (d + 1) / 256 <= c / 256 <= t: not listed (c > 0 here, so t
        is neither NaN nor < 0). Only d == c (about one draw in 256, whatever the t) compares v with t
        itself, computed from the records as `_listed_exact` computes it. A 1-byte gather from a 1 MB
        array replaces the 16-byte record gather from 16 MB; `greso_state.screen` draws, screens and
        compresses block by block.
        """
        if not covers(candidates.size, self.num_prompts):
            if not isinstance(draws, np.ndarray):
                draws = draws.random(candidates.size)
            return np.compress(self._listed_exact(candidates, draws), candidates)
        cells, table, lowest = self._cells()
        rows = self.history.rows

        def exact(which, v):  # t itself, as `_listed_exact` computes it
            records = rows.take(which)
            q = table.take(np.subtract(records["run"], lowest, dtype=np.intp))
            q *= self._edge(records["p_hist"], which)
            np.subtract(1.0, q, out=q)
            return ~np.less(v, q)

        return screen(candidates, cells, draws, exact, np.empty(candidates.size, dtype=candidates.dtype))

    # --- forward -------------------------------------------------------------
    def select_rollout(self, candidate_ids, budget, step, rng, features=None):
        candidates = np.asarray(candidate_ids, dtype=np.int64).reshape(-1)
        budget = max(0, int(budget))
        features = self.require_features(features)
        self.history.cand_step += int(candidates.size)
        shortlist = self._shortlist(candidates, rng)  # one draw per candidate, candidate order
        if shortlist.size == 0 or budget == 0:
            return shortlist[:0]
        entropy = features("prompt_entropy", shortlist)
        if entropy is None:  # a replayed log without prompt entropy (spec §8): the edge term stands in
            value = np.nan_to_num(self.edge(shortlist), nan=np.inf)
        else:
            value = np.asarray(entropy).reshape(-1)
            if value.dtype != np.float32:  # float32 stays: its values compare exactly against a float64 median
                value = value.astype(np.float64)
            if value.size != shortlist.size or not np.all(np.isfinite(value)):
                raise LzeBenchError(
                    f"hive: prompt_entropy must be {shortlist.size} finite numbers, got shape {value.shape}")
        # V >= the float64 median of the values (np.float64 on the right: float32 V is compared in float64)
        passed = np.greater_equal(value, np.float64(median(value)))
        if np.count_nonzero(passed) > budget:
            passed = top_k_mask(np.where(passed, value.astype(np.float64), -np.inf), budget)
        return np.compress(passed, shortlist)

    # --- backward ------------------------------------------------------------
    def observe(self, batch):
        ids = batch.prompt_ids
        solved, failed, _ = self.history.classes(batch.rewards, self.name)
        ones, n = self.history.correct_counts(), batch.rewards.shape[1]
        if ones is not None and n < np.iinfo(np.uint8).max and covers(ids.size, self.num_prompts):
            def update(records, count):  # the pass rate as `pass_rates` computes it from the same count
                records["p_hist"] = self._ema(records["p_hist"], np.divide(count, n, dtype=np.float64))

            self.history.observe_counts(ids, ones, n, solved, failed, update)
        else:
            rates = self.history.pass_rates(batch.rewards)
            weighted = rates * self.config.beta  # the `new * beta` term of `_ema`, for the whole batch at once

            def update(block, part):  # p_hist goes back with the runs: one gather and one scatter per prompt
                block["p_hist"] = self._ema(block["p_hist"], rates[part], weighted[part])

            self.history.observe(ids, solved, failed, update)
        if batch.response_entropy is not None:
            h = np.asarray(batch.response_entropy, dtype=np.float64).mean(axis=1)
            self.h_hist[ids] = self._ema(self.h_hist.take(ids), h)
            self._mean_entropy()

    def _mean_entropy(self) -> None:
        """h_bar: the mean h_hist over every prompt where known (None: none known), kept current by observe
        and load_state_dict, the only places h_hist changes (select_rollout used to recompute it over N)."""
        known = ~np.isnan(self.h_hist)
        self.h_bar = float(self.h_hist[known].mean()) if known.any() else None

    def _ema(self, old: np.ndarray, new: np.ndarray, weighted: np.ndarray | None = None) -> np.ndarray:
        """(1 - beta) old + beta new; the new value itself where old is NaN (first sight).
        `weighted`: `new * beta` if the caller has it already."""
        beta = self.config.beta
        out = old * (1.0 - beta)  # (1 - beta) * old + beta * new, term by term as written
        out += new * beta if weighted is None else weighted
        np.copyto(out, new, where=np.isnan(old))
        return out

    def select_update(self, batch, step, rng):
        hist, target = self.history, self.train_batch_size
        _, _, informative = self.history.classes(batch.rewards, self.name)
        keep = hist.keep_informative(informative, target)
        more = 0 if hist.kept_so_far >= target else self.rollout_batch_size
        more, partial = hist.exhausted(more, self.name, target)
        if more == 0:
            hist.finish_step()
        return UpdateDecision(keep=keep, more=more, partial=partial)

    # --- state ---------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**self.history.to_dict(), "p_hist": self.p_hist.copy(), "h_hist": self.h_hist.copy(),
                "train_batch_size": int(self.train_batch_size)}

    def load_state_dict(self, state: dict) -> None:
        self.history.load(state, self.name)
        for key in ("p_hist", "h_hist"):
            value = np.asarray(state[key], dtype=np.float64)
            if value.shape != (self.num_prompts,):
                raise LzeBenchError(f"hive state {key!r} has shape {value.shape}, expected ({self.num_prompts},)")
            setattr(self, key, value.copy())
        self._mean_entropy()
        self.begin_update(int(state["train_batch_size"]))
