"""Counterfactual replay: run a selector over a recorded rollout log (selectors.md §8).

`lze-bench replay ROLLOUTS selector=NAME [overrides] --out FILE`. Each logged
step's prompt ids are the candidates, in log order; only the rows that
`select_rollout` returns are revealed to the selector (`observe`,
`select_update` as in training); the others get `rolled_out=False,
kept=False`. The output is the same rows plus `rolled_out`, `kept` and
`kept_rollouts` (one flag per logged reward: the rollouts that would reach
the update; a selector that decides per group flags all of a kept row's and
none of another's, PODS its max-variance subset) (Parquet when FILE ends in
.parquet, else JSONL), and a per-step summary is printed, with the rollouts
of the rolled-out rows and those trained. The same seed gives the same
output, byte for byte.

Per-method rules of the spec: budgets (uniform/dapo/lze/greso get every
candidate, hive `floor(m / pool_factor)`, astral `floor(m / 2)`, or
`ceil(f * m)` with `replay.budget_fraction=f`); DAPO, GRESO and HIVE make
one complete update per logged step (`train_batch_size = m`; GRESO's and
HIVE's exploration adaptation runs at its end) and the summary counts the
prompts they would have asked for (GRESO: the survivors `T` its next round would wait for); ASTRAL's
reference set is every prompt revealed in the previous round (when the log has embeddings) and its replay
keys are counted (its pool never holds a group whose rewards are all 0 or all 1, selectors.md §3).

Selectors that extend groups (`extends_groups`: speed, reinforce_ada) are
served each row's logged rollouts in generation order (lze_bench.replay.extending);
where one asks for more rollouts of a prompt than its row holds, the replay
stops with one line saying what is missing (those rewards were never
generated). Ragged groups (rows with different reward counts, as such a run
logs) are refused in one line for every other selector, since they take
groups of one size (`RolloutBatch.rewards[G, n]`), so padding them would
change their pass rates.

Choices (ours): a log's own `kept` and `kept_rollouts` columns are kept as `logged_kept` and
`logged_kept_rollouts`; the
selector's step is the logged step value (so rng keys match the run's);
`num_prompts` = max prompt id + 1; extras come from the log: prompt entropy
from the step's own rows, embeddings from each prompt's first row.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.errors import LzeBenchError
from lze_bench.replay.extending import replay_extending_step
from lze_bench.replay.log import RolloutLogData, fail, read_log
from lze_bench.selectors import build_selector
from lze_bench.selectors.astral import AstralSelector, newest_per_prompt
from lze_bench.selectors.base import (
    TAG_BEGIN_EPOCH,
    TAG_SELECT_ROLLOUT,
    TAG_SELECT_UPDATE,
    RolloutBatch,
    group_stats,
    step_rng,
)
from lze_bench.selectors.dapo import DapoSelector
from lze_bench.selectors.greso import GresoSelector
from lze_bench.selectors.hive import HiveSelector

SUMMARY_COLUMNS = ("step", "epoch", "candidates", "rolled_out", "kept", "zero_var_kept", "rollouts",
                   "rollouts_trained", "more_asked", "replayed")


@dataclass
class ReplayResult:
    rolled_out: np.ndarray  # bool[R], aligned with the log's rows
    kept: np.ndarray  # bool[R]
    kept_rollouts: np.ndarray  # bool[R, n]: the rollouts of each row that reach the update
    summary: list[dict] = field(default_factory=list)  # one dict per step (SUMMARY_COLUMNS)

    @classmethod
    def for_log(cls, log: RolloutLogData) -> "ReplayResult":
        """Nothing rolled out, kept or trained yet."""
        rows = log.step.size
        return cls(np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool), np.zeros(log.rewards.shape, dtype=bool))


def check_group_sizes(log: RolloutLogData, name: str) -> None:
    """One line naming the first row whose group size differs from the first row's (module docstring)."""
    if not log.ragged:
        return
    row = int(np.flatnonzero(log.lengths != log.lengths[0])[0])
    raise fail(log.path, log.row_names[row], "rewards",
               f"{log.lengths[row]} rewards where {log.row_names[0]} has {log.lengths[0]}: a log of ragged groups (as "
               f"a speed or reinforce_ada run writes), and selector={name} takes groups of one size, so padding them "
               "would change their pass rates; replay a log with the same number of rollouts per prompt")


def replay_budget(selector, candidates: int, fraction: float | None) -> int:
    """Prompts the selector may roll out from a logged step of `candidates` rows (spec §8)."""
    if fraction is not None:
        return int(math.ceil(fraction * candidates))
    if isinstance(selector, HiveSelector):
        return int(math.floor(candidates / selector.config.pool_factor))  # the logged rows are its coarse pool
    if isinstance(selector, AstralSelector) or selector.name in ("adarft", "sec"):
        return candidates // 2  # full-mode selectors choose among the logged rows: half of them
    if selector.name == "mopps":
        return max(1, int(math.floor(candidates / selector.config.ts_ratio)))  # the logged rows are its pool
    return candidates


def positions_of(ids: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Index into `candidates` of each id (all must be candidates), vectorized."""
    order = np.argsort(candidates, kind="stable")
    where = np.searchsorted(candidates, ids, sorter=order)
    where = order[np.minimum(where, candidates.size - 1)] if candidates.size else where
    if ids.size and (candidates.size == 0 or not np.array_equal(candidates[where], ids)):
        raise LzeBenchError("the selector returned prompt ids that are not this step's candidates")
    return where


class LogFeatures:
    """The FeatureFn of a replay: extras read from the log, None where the log has none."""

    def __init__(self, log: RolloutLogData):
        self.log, self.rows = log, np.zeros(0, dtype=np.int64)
        self.embedding = None
        if log.prompt_embedding is not None:
            first = pd.Series(np.arange(log.prompt_id.size)).groupby(log.prompt_id).first()
            self.embedding = np.full((log.num_prompts, log.prompt_embedding.shape[1]), np.nan, dtype=np.float32)
            self.embedding[first.index.to_numpy()] = log.prompt_embedding[first.to_numpy()]

    def __call__(self, name: str, ids: np.ndarray):
        ids = np.asarray(ids, dtype=np.int64)
        if name == "prompt_entropy":
            if self.log.prompt_entropy is None:
                return None
            return self.log.prompt_entropy[self.rows[positions_of(ids, self.log.prompt_id[self.rows])]]
        if name == "prompt_embedding":
            if self.embedding is None:
                return None
            values = self.embedding[ids]
            if np.isnan(values).any():
                raise LzeBenchError(f"{self.log.path}: no prompt_embedding logged for some requested prompt ids")
            return values
        if name.startswith("head_"):  # a log has no encoder embeddings: ASTRAL's head falls back (spec §8)
            return None
        raise LzeBenchError(f"replay: unknown feature {name!r}")


def step_epochs(log: RolloutLogData, steps: np.ndarray, first_rows: np.ndarray) -> np.ndarray:
    """Epoch of each step: the `epoch` column, else groups logged before / distinct prompts (spec §8)."""
    if log.epoch is not None:
        return log.epoch[first_rows]
    per_step = np.bincount(np.searchsorted(steps, log.step), minlength=steps.size)
    before = np.concatenate([[0], np.cumsum(per_step)[:-1]])
    return before // np.unique(log.prompt_id).size


def log_metadata(log: RolloutLogData) -> dict:
    """The per-prompt columns of the run that wrote the log (its `prompt_metadata.json`), {} without one."""
    from pathlib import Path

    from lze_bench.metadata import read_columns

    path = Path(str(getattr(log, "path", "") or "."))
    return read_columns(path.parent if path.suffix else path)


def replay_log(log: RolloutLogData, selector_cfg, seed: int = 0, budget_fraction: float | None = None,
               on_step=None, group_size: int | None = None) -> ReplayResult:
    """Run one selector over the log step by step; returns the per-row flags and the per-step summary.

    `on_step(done, total)` is called after each step (the CLI's progress bar); `group_size` is
    `replay.group_size` (n for selectors that extend groups, lze_bench.replay.extending; None = the
    log's first row).
    """
    from lze_bench.plugins import selector_class

    extending = bool(getattr(selector_class(selector_cfg), "extends_groups", False))
    if not extending:
        check_group_sizes(log, selector_cfg.name)
    order = np.argsort(log.step, kind="stable")  # rows of a step stay in log order
    steps, starts = np.unique(log.step[order], return_index=True)
    bounds = np.append(starts, order.size)
    epochs = step_epochs(log, steps, order[starts])
    # batch size at construction: the first step's rows (DAPO's target and ASTRAL's budget follow each step)
    selector = build_selector(selector_cfg, num_prompts=log.num_prompts, batch_size=int(bounds[1] - bounds[0]),
                              metadata=log_metadata(log))
    features = LogFeatures(log)
    reference = AstralReference(selector, log)
    result = ReplayResult.for_log(log)
    epoch_now, pending = None, []
    n = int(group_size if group_size is not None else log.lengths[0])
    for index, step in enumerate(steps.tolist()):
        rows = order[bounds[index] : bounds[index + 1]]
        if epochs[index] != epoch_now:
            epoch_now = int(epochs[index])
            selector.begin_epoch(epoch_now, step_rng(seed, step, TAG_BEGIN_EPOCH))
        if extending:
            summary, pending = replay_extending_step(selector, log, rows, step, epoch_now, seed, n, pending, result)
        else:
            summary = replay_step(selector, log, rows, step, epoch_now, seed, budget_fraction, features, reference,
                                  result)
        result.summary.append(summary)
        if on_step is not None:
            on_step(index + 1, steps.size)
    return result


def replay_step(selector, log, rows, step, epoch, seed, fraction, features, reference, result) -> dict:
    candidates = log.prompt_id[rows]
    budget = replay_budget(selector, candidates.size, fraction)
    if isinstance(selector, (DapoSelector, GresoSelector, HiveSelector)):
        selector.begin_update(train_batch_size=candidates.size)  # one logged step = one complete update
    reference.before_step(step)
    features.rows = rows
    chosen = np.asarray(selector.select_rollout(candidates, budget, step, step_rng(seed, step, TAG_SELECT_ROLLOUT),
                                                features), dtype=np.int64)
    picked = rows[positions_of(chosen, candidates)]
    batch = RolloutBatch(
        prompt_ids=chosen, rewards=log.rewards[picked], step=step,
        response_entropy=None if log.response_entropy is None else log.response_entropy[picked],
        prompt_entropy=None if log.prompt_entropy is None else log.prompt_entropy[picked],
        prompt_embedding=None if log.prompt_embedding is None else log.prompt_embedding[picked],
    )
    selector.observe(batch)
    decision = selector.select_update(batch, step, step_rng(seed, step, TAG_SELECT_UPDATE))
    if decision.more > 0 and isinstance(selector, (GresoSelector, HiveSelector)):
        selector.finish_update()  # the log has no further rows: adaptation runs, counters reset
    reference.after_step(batch)
    trained = decision.rollout_mask(batch.group_size)
    result.rolled_out[picked] = True
    result.kept[picked] = decision.keep
    result.kept_rollouts[picked] = trained
    _, varied = group_stats(batch.rewards) if batch.num_groups else (None, np.zeros(0, dtype=bool))
    return {
        "step": int(step), "epoch": int(epoch), "candidates": int(candidates.size),
        "rolled_out": int(chosen.size), "kept": int(decision.keep.sum()),
        "zero_var_kept": int((decision.keep & ~varied).sum()),
        "rollouts": int(batch.rewards.size), "rollouts_trained": int(trained.sum()),
        "more_asked": int(decision.more), "replayed": int(decision.replay.shape[0]),
    }


class AstralReference:
    """ASTRAL in replay: the reference set of a round = prompts revealed in the previous round (spec §8)."""

    def __init__(self, selector, log: RolloutLogData):
        self.active = isinstance(selector, AstralSelector) and log.prompt_embedding is not None
        self.selector, self.round = selector, None
        self.ids, self.rates = [], []

    def before_step(self, step: int) -> None:
        if not self.active:
            return
        round_index = step // self.selector.config.mu
        if round_index == self.round:
            return
        if self.ids:
            ids, steps = newest_per_prompt(np.concatenate(self.ids), np.arange(sum(map(len, self.ids))),
                                           self.selector.num_prompts)
            rates = np.concatenate(self.rates)[steps]
            self.selector.observe_probe(RolloutBatch(prompt_ids=ids, rewards=rates[:, None], step=step))
        self.round, self.ids, self.rates = round_index, [], []

    def after_step(self, batch: RolloutBatch) -> None:
        if self.active and batch.num_groups:
            self.ids.append(batch.prompt_ids)
            self.rates.append(batch.pass_rate)


# --- output ------------------------------------------------------------------


LOGGED = {"kept": "logged_kept", "kept_rollouts": "logged_kept_rollouts"}  # the run's own decisions, renamed


def kept_rollout_lists(log: RolloutLogData, result: ReplayResult) -> list[list[bool]]:
    """Per row, one flag per logged reward (a ragged row's padding left out)."""
    return [flags[:length] for flags, length in zip(result.kept_rollouts.tolist(), log.lengths.tolist())]


def output_rows(log: RolloutLogData, result: ReplayResult) -> pd.DataFrame:
    frame = log.frame.rename(columns=LOGGED).copy()
    frame["rolled_out"] = result.rolled_out
    frame["kept"] = result.kept
    frame["kept_rollouts"] = kept_rollout_lists(log, result)
    return frame


def _json_value(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_output(log: RolloutLogData, result: ReplayResult, out: Path) -> None:
    from lze_bench.rundir import atomic_write_bytes, atomic_write_text

    out = Path(out)
    if out.suffix == ".parquet":
        buffer = io.BytesIO()
        output_rows(log, result).to_parquet(buffer, index=False)
        atomic_write_bytes(out, buffer.getvalue())
        return
    records = log.records if log.records is not None else log.frame.to_dict("records")
    lines = []
    for row, rolled, kept, flags in zip(records, result.rolled_out.tolist(), result.kept.tolist(),
                                        kept_rollout_lists(log, result)):
        row = {LOGGED.get(key, key): value for key, value in row.items()}
        lines.append(json.dumps({**row, "rolled_out": rolled, "kept": kept, "kept_rollouts": flags},
                                default=_json_value))
    atomic_write_text(out, "\n".join(lines) + "\n")


def print_summary(result: ReplayResult, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = [c for c in SUMMARY_COLUMNS if c not in ("more_asked", "replayed")
               or any(row[c] for row in result.summary)]
    table = Table(title=title)
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    for row in result.summary:
        table.add_row(*[str(row[c]) for c in columns])
    totals = {c: sum(row[c] for row in result.summary) for c in columns if c not in ("step", "epoch")}
    table.add_row("total", "", *[str(totals[c]) for c in columns[2:]], style="bold")
    Console(width=max(100, Console().width)).print(table)


def run_replay(path, cfg, out) -> ReplayResult:
    """The `lze-bench replay` command: read, replay, print the summary, write `out` if given."""
    from rich.progress import Progress

    log = read_log(path)
    with Progress(transient=True) as progress:
        task = progress.add_task(f"replaying through {cfg.selector.name}", total=None)
        result = replay_log(log, cfg.selector, seed=int(cfg.seed), budget_fraction=cfg.replay.budget_fraction,
                            on_step=lambda done, total: progress.update(task, completed=done, total=total),
                            group_size=cfg.replay.group_size)
    print_summary(result, f"replay of {Path(path).name} through {cfg.selector.name} (seed {cfg.seed})")
    if out is not None:
        write_output(log, result, Path(out))
    return result
