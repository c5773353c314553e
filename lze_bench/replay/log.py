"""Read and check a recorded rollout log for `lze-bench replay` (selectors.md §8).

Accepted inputs: a run's `rollouts.parquet` (design.md "The run directory":
`step, prompt_id, rewards (list), response_tokens (list), kept`), a run
directory (its compacted file plus part files, via `ledger.read_rollouts`),
or JSONL rows `{step, prompt_id, rewards}` with optional `epoch`,
`response_entropy` (list, one per response), `prompt_entropy` (number) and
`prompt_embedding` (list). Every malformed value fails with one line naming
the file, the row (`line N` for JSONL, `row N` counted from 1 for Parquet)
and the field.

Choices (ours): rows may hold different numbers of rewards (ragged groups:
a run of a selector that rolls prompts out unevenly, such as speed or
reinforce_ada); `rewards` is then padded with NaN to the longest row and
`lengths` says how many of each row are real (`valid` the mask), so reading
never fails on them; whether a selector can replay such a log is the
replay's decision (replay/__init__.py). `response_entropy` needs one value
per reward of its own row, `prompt_embedding` one width for every row. An
optional column present in some rows must be present in
all; booleans count as 0/1 rewards; `(step, prompt_id)` must be unique,
except in a log with a `round` column (a backend's refill rounds can roll a
prompt out twice in one step): there the first round's group of each prompt is
the one replayed, the others are dropped before the checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lze_bench.errors import LzeBenchError

REQUIRED = ("step", "prompt_id", "rewards")
OPTIONAL_LISTS = ("response_entropy", "prompt_embedding")


@dataclass
class RolloutLogData:
    """A checked log: the rows as read plus typed arrays, one entry per row."""

    path: Path
    frame: pd.DataFrame  # the rows as read (output = these + rolled_out, kept)
    records: list[dict] | None  # JSONL rows as read (key order kept for JSONL output)
    row_names: list[str]  # "line 3" / "row 3", for messages
    step: np.ndarray  # int64[R]
    prompt_id: np.ndarray  # int64[R]
    rewards: np.ndarray  # float32[R, n_max], NaN beyond a row's own count (ragged groups)
    lengths: np.ndarray  # int64[R]: rewards of each row
    epoch: np.ndarray | None = None  # int64[R]
    response_entropy: np.ndarray | None = None  # float32[R, n_max], padded as rewards
    prompt_entropy: np.ndarray | None = None  # float32[R]
    prompt_embedding: np.ndarray | None = None  # float32[R, d]

    @property
    def num_prompts(self) -> int:
        return int(self.prompt_id.max()) + 1

    @property
    def valid(self) -> np.ndarray:
        """bool[R, n_max]: the entries of `rewards` that a row really holds."""
        return np.arange(self.rewards.shape[1])[None, :] < self.lengths[:, None]

    @property
    def ragged(self) -> bool:
        """Rows hold different numbers of rewards."""
        return bool(self.lengths.size) and bool((self.lengths != self.lengths[0]).any())


def fail(log_path, row_name: str, field: str, message: str) -> LzeBenchError:
    return LzeBenchError(f"{log_path}: {row_name}: field {field!r}: {message}")


def read_log(path: str | Path) -> RolloutLogData:
    """Read, type and check a rollout log (Parquet file, run directory or JSONL)."""
    path = Path(path)
    if not path.exists():
        raise LzeBenchError(f"{path}: no such file; pass a rollouts.parquet, a run directory or a JSONL log")
    records = None
    if path.is_dir():
        from lze_bench.ledger import read_rollouts

        frame = read_rollouts(path)
        names = [f"row {i + 1}" for i in range(len(frame))]
    elif path.suffix == ".parquet":
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # a truncated or foreign file: one line
            raise LzeBenchError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from exc
        names = [f"row {i + 1}" for i in range(len(frame))]
    else:
        records, names = _read_jsonl(path)
        frame = pd.DataFrame.from_records(records)
    if len(frame) == 0:
        raise LzeBenchError(f"{path}: the log has no rows")
    if "round" in frame and {"step", "prompt_id"} <= set(frame.columns):
        first = ~frame.sort_values(["step", "round"], kind="stable").duplicated(["step", "prompt_id"])
        keep = first.reindex(frame.index).to_numpy()
        frame = frame[keep].reset_index(drop=True)
        names = [name for name, k in zip(names, keep) if k]
        records = [r for r, k in zip(records, keep) if k] if records is not None else None
    return _typed(path, frame, records, names)


def _read_jsonl(path: Path) -> tuple[list[dict], list[str]]:
    from lze_bench.jsonl import iter_objects

    records, names = [], []
    for number, row in iter_objects(path, "a JSON object with step, prompt_id, rewards"):
        records.append(row)
        names.append(f"line {number}")
    return records, names


def _typed(path, frame, records, names) -> RolloutLogData:
    for field in REQUIRED:
        _require_column(path, frame, names, field)
    rewards, lengths = _matrix(path, frame["rewards"], names, "rewards", ragged=True)
    log = RolloutLogData(
        path=path, frame=frame, records=records, row_names=names,
        step=_integers(path, frame["step"], names, "step"),
        prompt_id=_integers(path, frame["prompt_id"], names, "prompt_id"),
        rewards=rewards, lengths=lengths,
    )
    if "epoch" in frame:
        _require_column(path, frame, names, "epoch")
        log.epoch = _integers(path, frame["epoch"], names, "epoch")
    for field in OPTIONAL_LISTS:
        if field in frame:
            _require_column(path, frame, names, field)
            values, widths = _matrix(path, frame[field], names, field, ragged=field == "response_entropy")
            setattr(log, field, values)
            if field == "response_entropy":
                differs = np.flatnonzero(widths != log.lengths)
                if differs.size:
                    row = differs[0]
                    raise fail(path, names[row], field, f"needs one value per response ({log.lengths[row]} rewards), "
                                                        f"got {widths[row]}")
    if "prompt_entropy" in frame:
        _require_column(path, frame, names, "prompt_entropy")
        log.prompt_entropy = _numbers(path, frame["prompt_entropy"], names, "prompt_entropy")
    _check_unique_and_epochs(log)
    return log


def _require_column(path, frame, names, field) -> None:
    if field not in frame:
        raise fail(path, names[0], field, f"missing column; the log needs {', '.join(REQUIRED)}")
    missing = np.flatnonzero(frame[field].isna().to_numpy())
    if missing.size:
        raise fail(path, names[missing[0]], field, "missing or null")


def _check_scalar_types(path, values, names, field, what) -> None:
    """A numeric column passes at once; a mixed (object) one is checked row by row for the message."""
    if values.dtype.kind in "iuf":
        return
    for i, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
            raise fail(path, names[i], field, f"must be {what}, got {value!r}")


def _integers(path, series, names, field) -> np.ndarray:
    values = series.to_numpy()
    _check_scalar_types(path, values, names, field, "a non-negative integer")
    numbers = values.astype(np.float64)
    bad = np.flatnonzero((numbers < 0) | (numbers != np.floor(numbers)))
    if bad.size:
        raise fail(path, names[bad[0]], field, f"must be a non-negative integer, got {values[bad[0]]!r}")
    return numbers.astype(np.int64)


def _numbers(path, series, names, field) -> np.ndarray:
    values = series.to_numpy()
    _check_scalar_types(path, values, names, field, "a number")
    numbers = values.astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(numbers))
    if bad.size:
        raise fail(path, names[bad[0]], field, f"must be finite, got {values[bad[0]]!r}")
    return numbers


def _matrix(path, series, names, field, ragged: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(float32[R, width], int64[R] lengths) from a column of numeric lists; `ragged`: rows may differ in
    length and are padded with NaN to the longest, else one differing row fails."""
    rows, width = [], None
    for i, value in enumerate(series.to_numpy()):
        if not isinstance(value, (list, tuple, np.ndarray)):
            raise fail(path, names[i], field, f"must be a list of numbers, got {value!r}")
        odd = _first_non_number(value)
        if odd is not _NONE:
            raise fail(path, names[i], field, f"non-numeric value {odd!r}")
        array = np.asarray(value)
        if array.ndim != 1 or array.size == 0:
            raise fail(path, names[i], field, f"must be a non-empty flat list, got shape {array.shape}")
        if width is None:
            width = array.size
        elif array.size != width and not ragged:
            raise fail(path, names[i], field, f"ragged: {array.size} values where {names[0]} has {width}")
        if not np.all(np.isfinite(array.astype(np.float64))):
            raise fail(path, names[i], field, "contains NaN or inf")
        rows.append(array)
    lengths = np.fromiter((row.size for row in rows), dtype=np.int64, count=len(rows))
    if not (lengths == lengths[0]).all():
        padded = np.full((lengths.size, int(lengths.max())), np.nan, dtype=np.float32)
        padded[np.arange(padded.shape[1])[None, :] < lengths[:, None]] = np.concatenate(rows).astype(np.float32)
        return padded, lengths
    return np.asarray(np.stack(rows), dtype=np.float32), lengths


_NONE = object()


def _first_non_number(value):
    """The first element of a list that is not a number (the original, not NumPy's coercion), else _NONE."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return _NONE
    for item in value:
        if not isinstance(item, (bool, int, float, np.bool_, np.integer, np.floating)):
            return item.item() if isinstance(item, np.generic) else item
    return _NONE


def _check_unique_and_epochs(log: RolloutLogData) -> None:
    keys = pd.DataFrame({"step": log.step, "prompt_id": log.prompt_id})
    repeated = np.flatnonzero(keys.duplicated().to_numpy())
    if repeated.size:
        row = repeated[0]
        raise fail(log.path, log.row_names[row], "prompt_id",
                   f"prompt {log.prompt_id[row]} appears twice in step {log.step[row]}; one group per prompt per step")
    if log.epoch is not None:
        frame = pd.DataFrame({"step": log.step, "epoch": log.epoch})
        first = frame.groupby("step")["epoch"].transform("first").to_numpy()
        differs = np.flatnonzero(first != log.epoch)
        if differs.size:
            row = differs[0]
            raise fail(log.path, log.row_names[row], "epoch", f"differs from the other rows of step {log.step[row]}")
