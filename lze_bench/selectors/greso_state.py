"""GRESO's zero-variance history, skip rule and exploration adaptation (selectors.md §6), shared with HIVE (§4).

Kept apart from `greso.py` so HIVE reuses the same state and rules: the
per-prompt runs of all-solved / all-failed rollouts, the keep probability
`max(p ** run, keep_floor)`, the per-step counters and the once-per-step
adaptation of `p_easy` / `p_hard`. Everything is a vectorized gather or
scatter by prompt id (ids are unique within a batch).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.selectors.dapo import cap_rounds, keep_first_informative
from lze_bench.selectors.stats import binary_ones, pass_rates

PER_PROMPT = ("easy_run", "hard_run", "n_obs")
SCALARS = ("p_easy", "p_hard", "epoch")
TRANSIENT = ("kept_so_far", "gen_rounds", "last_round", "cand_step", "rolled_step", "solved_step", "failed_step")
BLOCK = 1 << 16  # records per block of `observe` / `survivors`: their temporaries stay in cache at 10^6 prompts
CACHE_BLOCK = 1 << 14  # prompts per block of `observe_counts` and HIVE's cells: the temporaries stay in L2


def check_history_config(cfg) -> None:
    """One-line errors for the GRESO keys (shared by greso and hive configs)."""
    for key in ("p_easy", "p_hard", "p_min", "p_max", "keep_floor"):
        value = getattr(cfg, key)
        require(0 <= value <= 1, f"selector.{key}", f"must be in [0, 1], got {value}")
    require(cfg.p_min <= cfg.p_max, "selector.p_min", f"must be <= selector.p_max, got {cfg.p_min} > {cfg.p_max}")
    require(cfg.target_zero_variance >= 0, "selector.target_zero_variance", "must be >= 0")
    require(cfg.delta >= 0, "selector.delta", f"must be >= 0, got {cfg.delta}")
    require(cfg.max_gen_batches >= 0, "selector.max_gen_batches", "must be >= 0 (0 = unlimited)")
    require(cfg.on_exhaust in ("partial", "error"), "selector.on_exhaust",
            f"use 'partial' or 'error', got {cfg.on_exhaust!r}")


def covers(part: int, whole: int) -> bool:
    """Whether a call over `part` of `whole` prompts takes a whole-array path (>= 1/4 of them): there
    the sequential passes over every prompt cost less than random accesses to `part` records."""
    return 4 * part >= whole


def screen(candidates: np.ndarray, cells: np.ndarray, draws, exact, out: np.ndarray) -> np.ndarray:
    """The candidates with not (v < t), in candidate order, written to the front of `out` (returned: that view).

    `v`: one uniform per candidate, `draws` itself (float64[m]) or drawn here from the Generator `draws`
    block by block (the stream of one `draws.random(m)`: each double is one step of the bit generator,
    whatever the block sizes). `cells` (uint8[N], by prompt id): floor(256 t) clipped to [0, 255], NaN
    t at 0 if NaN counts as listed, at 255 if not. With d = floor(256 v) (256 v is exact; the cast floors
    it), d > c means v >= t and d < c means v < t (the proof is in `HiveSelector._shortlist`); only d == c
    (about one draw in 256) asks `exact(ids, v)` (bool, listed) for those candidates. Each block is
    compressed into `out` while its ids are in cache, and the draws never reach memory. The candidates'
    cells are gathered in one pass before the blocks (1 byte per candidate): measured inside a step at
    10^6 candidates, ~1.3 ms against ~2.9 ms for the same gather block by block, whose draws, masks and
    output streams push the 1 MB of cells out of the core's 2 MiB L2 between a block's random reads.
    """
    m = candidates.size
    size = min(m, BLOCK)
    listed, near, drawn = np.empty(size, dtype=bool), np.empty(size, dtype=bool), np.empty(size, dtype=np.uint8)
    scratch = None if isinstance(draws, np.ndarray) else np.empty(size)
    count = 0
    cells = cells.take(candidates)  # the candidates' cells in one gather before the blocks (see the docstring)
    for start in range(0, m, BLOCK):  # blocks: ids, draws and masks stay in cache
        ids = candidates[start : start + BLOCK]
        width = ids.size
        v = draws[start : start + width] if scratch is None else draws.random(out=scratch[:width])
        cell = cells[start : start + width]
        d = np.multiply(v, 256.0, out=drawn[:width], casting="unsafe")  # floor(256 v)
        keep = np.greater(d, cell, out=listed[:width])
        close = np.flatnonzero(np.equal(d, cell, out=near[:width]))
        if close.size:
            keep[close] = exact(ids.take(close), v.take(close))
        kept = np.flatnonzero(keep)  # then a clip-mode take (in range): ~1.5x np.compress into a slice of `out`
        ids.take(kept, out=out[count : count + kept.size], mode="clip")
        count += kept.size
    return out[:count]


def next_runs(run: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """int32: each prompt's run after one observation, s (max(s run, 0) + 1) with s = +1 solved, -1 failed,
    0 informative: max(run, 0) + 1, -(max(-run, 0) + 1) = min(run, 0) - 1, and 0 (four passes instead of six)."""
    grown = np.multiply(run, sign)
    np.maximum(grown, 0, out=grown)
    grown += 1
    grown *= sign
    return grown


def group_classes(rewards: np.ndarray, who: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(solved, failed, informative) bool[G]: every / no response correct, rewards not all equal.

    Rewards must lie in [0, 1] and groups need n >= 2 (spec §6 "Classes").
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    n = rewards.shape[1]
    if n < 2:
        raise LzeBenchError(f"{who}: groups need n >= 2 responses (n = 1 is never informative); "
                            "raise trainer.n_samples")
    ones = binary_ones(rewards)  # 0/1 verdicts (in [0, 1] by construction): counts, no slow row reductions
    if ones is not None:
        return ones == n, ones == 0, np.less(ones - ones.dtype.type(1), n - 1)  # 0 < ones < n (unsigned wrap)
    low, high = rewards.min(axis=1), rewards.max(axis=1)
    if rewards.size and (float(low.min()) < 0 or float(high.max()) > 1):
        raise LzeBenchError(f"{who}: rewards must lie in [0, 1]; rescale the task reward")
    return low == 1, high == 0, high > low


def round_estimate(need: int, groups: int, zero: int, first_round: int, margin: float) -> tuple[int, bool]:
    """(T, last_round) of spec §6: prompts to roll out so the room fills with a margin (exact rationals).

    `zero == groups` (no informative group): T = first_round and not the last round (ours).
    """
    if zero == groups:
        return int(first_round), False
    estimate = math.floor(Fraction(margin) * need * groups / (groups - zero))
    return int(estimate), estimate <= first_round


class SkipHistory:
    """Per-prompt runs, the exploration probabilities and the per-step counters of GRESO.

    Per prompt, one record of `rows` (a structured array): `run` (int32: `easy_run`
    where > 0, `-hard_run` where < 0, 0 unseen or last rollout informative; at
    most one of the two is non-zero, observe resets the other), `n_obs` (int32),
    and any fields the owner adds (HIVE: its float64 `p_hist`). One record per
    prompt is one memory access per gather or scatter at 10^6 prompts where
    separate arrays cost one each; `easy_run` / `hard_run` and the state dict
    are derived from it. `run`, `n_obs` and the added fields are writable views.
    """

    def __init__(self, num_prompts: int, cfg, extra: tuple = ()):
        """`extra`: (name, dtype, initial value) fields to keep in the same records."""
        self.cfg = cfg
        fields = [("run", np.int32), ("n_obs", np.int32)] + [(name, dtype) for name, dtype, _ in extra]
        self.rows = np.zeros(num_prompts, dtype=fields)
        for name, _, initial in extra:
            self.rows[name] = initial
        self.p_easy, self.p_hard, self.epoch = float(cfg.p_easy), float(cfg.p_hard), 0
        self.reset_step()

    @property
    def run(self) -> np.ndarray:
        """int32[N] view: +c after c all-solved rollouts in a row, -c after c all-failed, else 0."""
        return self.rows["run"]

    @run.setter
    def run(self, value) -> None:
        self.rows["run"] = value

    @property
    def n_obs(self) -> np.ndarray:
        return self.rows["n_obs"]

    @property
    def easy_run(self) -> np.ndarray:
        """int32[N]: consecutive most recent all-solved rollouts (a copy; 0 unseen)."""
        return np.maximum(self.run, 0)

    @property
    def hard_run(self) -> np.ndarray:
        """int32[N]: consecutive most recent all-failed rollouts (a copy; 0 unseen)."""
        return np.maximum(-self.run, 0)

    def classes(self, rewards: np.ndarray, who: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(solved, failed, informative) of a batch, computed once per batch.

        A round's `observe` and `select_update` read the same rewards array: the second call gets the
        first one's result (keyed by the array object itself; any other array is computed afresh).
        """
        cached = getattr(self, "_classes", None)
        if cached is not None and cached[0] is rewards:
            return cached[1]
        rewards = np.asarray(rewards, dtype=np.float32)
        ones = binary_ones(rewards) if rewards.shape[1] >= 2 else None  # one popcount pass serves all four
        if ones is not None:
            n = rewards.shape[1]
            result = (ones == n, ones == 0, np.less(ones - ones.dtype.type(1), n - 1))
        else:
            result = group_classes(rewards, who)
        self._classes = (rewards, result, ones)
        return result

    def correct_counts(self) -> np.ndarray | None:
        """Unsigned ints[G]: correct responses per group of the batch `classes` has just seen, None unless
        its rewards are all 0/1."""
        return self._classes[2]

    def pass_rates(self, rewards: np.ndarray) -> np.ndarray:
        """float64[G] pass rates (RolloutBatch.pass_rate bit for bit) of the batch `classes` has just seen,
        from its correct counts when the rewards are 0/1 (only HIVE reads them: GRESO's step does not
        compute them). Call `classes(rewards, ...)` first."""
        ones = self._classes[2]
        return pass_rates(rewards) if ones is None else np.divide(ones, rewards.shape[1], dtype=np.float64)

    def reset_step(self) -> None:
        self.kept_so_far, self.gen_rounds, self.last_round = 0, 0, False
        self.cand_step, self.rolled_step, self.solved_step, self.failed_step = 0, 0, 0, 0

    def keep_probability(self, ids: np.ndarray) -> np.ndarray:
        """float64[m]: max(p_easy ** easy_run, floor) if easy_run > 0, the same for hard, else 1."""
        return self.keep_of(self.rows.take(ids)["run"])

    def keep_of(self, run: np.ndarray) -> np.ndarray:
        """float64[m] keep probabilities of signed runs (`run` of some prompts).

        Runs are small integers, so the values come from a table over the signed
        runs present, `table[run - lowest]` (see `keep_table`): one gather from a
        table that stays in cache instead of a power per candidate.
        """
        if run.size == 0:
            return np.zeros(run.shape)  # float64[0]
        table, lowest = self.keep_table(int(run.min()), int(run.max()))
        return table.take(np.subtract(run, lowest, dtype=np.intp))  # intp: take needs no cast pass

    def keep_table(self, lowest: int, highest: int) -> tuple[np.ndarray, int]:
        """(float64[highest - lowest + 1] keep probability of each signed run in [lowest, highest], lowest).

        Entries: 1 at run 0, `max(p_easy ** c, floor)` at +c, `max(p_hard ** c, floor)` at -c; each power
        computed as `scalar ** float64 array`, like the plain formula: the same pow on the same operands
        gives the same values bit for bit.
        """
        lowest, highest = min(lowest, 0), max(highest, 0)
        floor = self.cfg.keep_floor
        table = np.ones(highest - lowest + 1)
        table[1 - lowest:] = np.maximum(self.p_easy ** np.arange(1, highest + 1, dtype=np.float64), floor)
        table[:-lowest] = np.maximum(self.p_hard ** np.arange(-lowest, 0, -1, dtype=np.float64), floor)
        return table, lowest

    def survivors(self, ids: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """bool[m]: not (draw < 1 - keep probability), the skip rule (PS:119, 144), for candidates `ids`.

        The skip probabilities `1 - keep` are taken from the table too (the same subtraction on the same
        values), and `not (u < s)` is `u >= s` for the finite draws and probabilities here.
        """
        out = np.empty(ids.size, dtype=bool)
        if not ids.size:
            return out
        run, lowest, highest = self.run_bounds(self.rows.take(ids)["run"])
        table, lowest = self.keep_table(lowest, highest)
        skip = np.subtract(1.0, table)
        for start in range(0, run.size, BLOCK):  # blocks: the index and the probabilities stay in cache
            part = slice(start, start + BLOCK)
            np.greater_equal(draws[part], skip.take(np.subtract(run[part], lowest, dtype=np.intp)), out=out[part])
        return out

    def survivor_ids(self, ids: np.ndarray, draws) -> np.ndarray:
        """The candidates `ids` that `survivors` keeps, in candidate order; `draws`: the uniforms (float64[m])
        or the Generator to draw them from (one `random(m)`, candidate order).

        Candidates covering >= 1/4 of the prompts: each prompt's skip probability s as a 1-byte cell
        (`skip_cells`) and `screen` (a 1-byte gather from 1 MB instead of an 8-byte record gather from
        8 MB); the draws in s's cell compare with s itself, from the same table.
        """
        if not covers(ids.size, self.rows.size):
            if not isinstance(draws, np.ndarray):
                draws = draws.random(ids.size)
            return np.compress(self.survivors(ids, draws), ids)
        cells, skip, lowest = self.skip_cells()

        def exact(which, v):  # not (v < s), as `survivors` compares (take of the strided field would copy it)
            return np.greater_equal(v, skip.take(np.subtract(self.rows.take(which)["run"], lowest, dtype=np.intp)))

        return screen(ids, cells, draws, exact, np.empty(ids.size, dtype=ids.dtype))

    def skip_cells(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(uint8[N] cells, the skip table 1 - keep, its lowest run): each prompt's threshold cell floor(256 s)
        clipped to [0, 255], 255 where s is NaN (`v >= NaN` is false: not a survivor), for `screen`.

        Cells come from a 256-entry-or-smaller table of the runs present (`run_blocks`), one gather per
        prompt in prompt order; 256 s is exact (a power of two) and the table's s are `survivors`'.
        """
        cells = self._scratch("_skip_cells", np.uint8)
        code = skip = lowest = keep = None  # no prompts: no table
        for part, run, table, lowest in self.run_blocks():
            if code is None or table is not keep:  # the cells of the runs this table covers
                keep, skip = table, np.subtract(1.0, table)
                scaled = np.floor(skip * 256.0)
                code = np.where(np.isnan(scaled), 255.0, np.clip(scaled, 0.0, 255.0)).astype(np.uint8)
            code.take(np.subtract(run, lowest, dtype=np.intp), out=cells[part], mode="clip")  # in range
        return cells, skip, lowest

    def run_blocks(self):
        """Yields (slice, its runs as contiguous int32, keep table, its lowest run) for the prompts in
        order, CACHE_BLOCK at a time; the table covers every run of the blocks so far (rebuilt wider when a
        block leaves it, rarely after the first: `keep_table` gives a run the same entry over any range)."""
        runs = self.rows["run"]
        buffer = np.empty(min(runs.size, CACHE_BLOCK), dtype=np.int32)
        table, lowest, highest = None, 0, -1
        for start in range(0, runs.size, CACHE_BLOCK):
            part = slice(start, start + CACHE_BLOCK)
            run = buffer[: min(CACHE_BLOCK, runs.size - start)]
            np.copyto(run, runs[part])
            low, high = int(run.min()), int(run.max())
            if table is None or low < lowest or high > highest:
                table, lowest = self.keep_table(min(low, lowest), max(high, highest))
                highest = lowest + table.size - 1
            yield part, run, table, lowest

    def _scratch(self, name: str, dtype) -> np.ndarray:
        """A [N] buffer of `dtype` kept across calls under `name`: no fresh 1 MB per call (N is fixed)."""
        if getattr(self, name, None) is None:
            setattr(self, name, np.empty(self.rows.size, dtype=dtype))
        return getattr(self, name)

    @staticmethod
    def run_bounds(run: np.ndarray) -> tuple[np.ndarray, int, int]:
        """(contiguous copy of the gathered runs `run`, their min, their max) of a non-empty `run` (over the
        strided int32 field of 10^6 records, min and max are several times slower than over the copy)."""
        run = np.ascontiguousarray(run)
        return run, int(run.min()), int(run.max())

    def observe(self, ids: np.ndarray, solved: np.ndarray, failed: np.ndarray, update=None) -> None:
        """Runs: +1 on an all-solved rollout (from a positive run, else from 0), -1 on all-failed, else 0;
        n_obs + 1. `update(block, part)` (the owner's fields of the gathered records, block by block:
        `block = records[part]`) runs before they are written back, so a prompt's record is read once
        and written once.

        Without `update` (GRESO), a batch covering >= 1/4 of the prompts takes `_observe_dense`
        instead (the same runs and counts: ids are unique within a batch)."""
        self.rolled_step += int(ids.size)
        self.solved_step += int(np.count_nonzero(solved))
        self.failed_step += int(np.count_nonzero(failed))
        if update is None and 4 * ids.size >= self.n_obs.size:
            self._observe_dense(ids, solved, failed)
            return
        records = self.rows.take(ids)
        sign = np.subtract(solved, failed, dtype=np.int32)  # +1 solved, -1 failed, 0 informative (next_runs)
        for start in range(0, ids.size, BLOCK):  # blocks: temporaries stay in cache (same values as whole-batch)
            part = slice(start, start + BLOCK)
            block = records[part]
            block["run"] = next_runs(block["run"], sign[part])
            block["n_obs"] += 1
            if update is not None:
                update(block, part)
        self.rows[ids] = records

    def observe_counts(self, ids: np.ndarray, ones: np.ndarray, n: int, solved: np.ndarray, failed: np.ndarray,
                       update) -> None:
        """`observe` for a batch of 0/1 groups given its correct counts `ones` (n < 255 responses per group),
        walking the records in prompt order: each group's count is scattered into a uint8[N] array
        (1 byte per prompt, 255 = not in the batch), then each block of records gathers its marked
        records, updates them and puts them back while the block is in cache. The same runs, counts
        and `update(records, ones)` per prompt as `observe` (a prompt's update reads only its own record
        and group; ids are unique in a batch), with the classes `classes` gives: ones == n solved,
        ones == 0 failed. Measured at 10^6 prompts inside a step: ~3x cheaper than the random gather
        and scatter of 16-byte records when the batch covers >= 1/4 of the prompts.
        """
        self.rolled_step += int(ids.size)
        self.solved_step += int(np.count_nonzero(solved))
        self.failed_step += int(np.count_nonzero(failed))
        marks = self._scratch("_marks", np.uint8)
        marks.fill(255)  # not in the batch (a count is at most n < 255)
        marks[ids] = ones
        for start in range(0, marks.size, CACHE_BLOCK):  # blocks: the records are read and written in memory order
            part = slice(start, start + CACHE_BLOCK)
            where = np.flatnonzero(marks[part] != 255)  # a bool mask: ~6x faster than the uint8 marks
            if not where.size:
                continue
            block = self.rows[part]
            records = block.take(where)
            count = marks[part].take(where)
            sign = np.subtract(count == n, count == 0, dtype=np.int32)  # as in `observe`
            records["run"] = next_runs(records["run"], sign)
            records["n_obs"] += 1
            update(records, count)
            block[where] = records

    def _observe_dense(self, ids: np.ndarray, solved: np.ndarray, failed: np.ndarray) -> None:
        """`observe`'s runs and counts through one byte scatter and sequential passes over every record.

        Measured at 10^6 prompts: a random gather plus scatter of the records costs about twice a
        1-byte scatter of each prompt's class (1 informative, 2 solved, 3 failed; 0 = not in the batch)
        followed by block-wise passes over all N records, which update only the marked ones.
        """
        marks = np.zeros(self.rows.size, dtype=np.uint8)
        code = np.add(solved, 1, dtype=np.uint8)
        code += failed
        code += failed  # solved and failed exclude each other
        marks[ids] = code
        runs, counts = self.rows["run"], self.rows["n_obs"]
        for start in range(0, marks.size, BLOCK):  # blocks: temporaries stay in cache
            part = slice(start, start + BLOCK)
            mark = marks[part]
            run = np.ascontiguousarray(runs[part])
            seen = mark != 0
            grown = np.maximum(run, 0)
            grown += 1
            grown *= mark == 2  # solved: max(run, 0) + 1
            shrunk = np.minimum(run, 0)
            shrunk -= 1
            shrunk *= mark == 3  # failed: min(run, 0) - 1
            grown += shrunk  # informative or unseen: 0
            run *= ~seen
            grown += run  # not in the batch: the run as it was
            runs[part] = grown
            counts[part] += seen

    def keep_informative(self, informative: np.ndarray, target: int) -> np.ndarray:
        """Dynamic sampling: the first `target - kept_so_far` informative groups, in generation order."""
        keep = keep_first_informative(informative, target - self.kept_so_far)
        self.kept_so_far += int(np.count_nonzero(keep))
        self.gen_rounds += 1
        return keep

    def exhausted(self, more: int, who: str, target: int) -> tuple[int, bool]:
        """(more, partial) after the `max_gen_batches` cap (dapo's rule, spec §2)."""
        return cap_rounds(more, self.gen_rounds, self.cfg, who, self.kept_so_far, target)

    def finish_step(self) -> None:
        """The step's update is decided: adapt p_easy / p_hard (epoch > 0), then reset the counters."""
        cfg = self.cfg
        if self.epoch > 0 and self.rolled_step > 0:
            easy = self.solved_step / self.rolled_step
            hard = self.failed_step / self.rolled_step
            if hard >= cfg.target_zero_variance * 2 / 3:
                self.p_hard = max(self.p_hard - cfg.delta, cfg.p_min)
            else:
                self.p_hard = min(self.p_hard + cfg.delta, cfg.p_max)
            if easy >= cfg.target_zero_variance / 3:
                self.p_easy = max(self.p_easy - cfg.delta, cfg.p_min)
            else:
                self.p_easy = min(self.p_easy + cfg.delta, cfg.p_max)
        self.reset_step()

    def to_dict(self) -> dict:
        state = {"easy_run": self.easy_run, "hard_run": self.hard_run, "n_obs": self.n_obs.copy()}
        state.update({key: getattr(self, key) for key in SCALARS + TRANSIENT})
        return state

    def load(self, state: dict, who: str) -> None:
        arrays = {}
        for key in PER_PROMPT:
            value = np.asarray(state[key])
            if value.shape != self.rows.shape:
                raise LzeBenchError(f"{who} state {key!r} has shape {value.shape}, expected {self.rows.shape}")
            arrays[key] = value.astype(np.int32, copy=True)
        if np.any((arrays["easy_run"] > 0) & (arrays["hard_run"] > 0)):
            raise LzeBenchError(f"{who} state: a prompt has both an easy and a hard run; at most one can be > 0")
        self.rows["run"] = np.where(arrays["hard_run"] > 0, -arrays["hard_run"], arrays["easy_run"])
        self.rows["n_obs"] = arrays["n_obs"]
        self.p_easy, self.p_hard, self.epoch = float(state["p_easy"]), float(state["p_hard"]), int(state["epoch"])
        for key in TRANSIENT:
            setattr(self, key, bool(state[key]) if key == "last_round" else int(state[key]))
