"""Fixed per-prompt columns a selector may read at construction (a difficulty level, a subject, a label).

A column is one value per train prompt (index = prompt id), known before step 0 and never changed by
training. Two sources:

* the dataset's own rows: `level` (MATH "Level 3" -> 3; the synthetic task's level 1-6), `subject`
  (MATH's `type` / `subject`), and `difficulty` where the rows carry one. The synthetic task also
  defines `difficulty` = its level on AdaRFT's 0-100 scale (`synthetic_difficulty`). These come with
  the data: "external, not charged";
* a labels file a selector names (`selector.labels=FILE`, adarft and sec), JSON
  `{"columns": {"difficulty": [N numbers]}, "flops": F | null, "source": "how it was made"}`. A label that
  cost compute to make (AdaRFT's difficulty from a reference model's rollouts; `lze-bench label` makes
  them on the local backend and measures it, lze_bench/backends/local/labels.py) declares it in `flops`;
  a run whose selector reads it books F as offline FLOPs in `offline_flops.json` (the `(+offline)`
  report rows, as ASTRAL's head; lze_bench/report/offline.py); `flops: null` is external, not charged.
  The file is named by the selector, not the task, so runs of other selectors neither load nor pay for it.

The run directory records every column a run had (`prompt_metadata.json`: values, source, charge) and
which of them its selector read; the OpenRLHF trainer actor reads the columns back from that file, so
both backends hand the selector the same arrays.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from lze_bench.errors import LzeBenchError

METADATA_FILE = "prompt_metadata.json"
OFFLINE_FILE = "offline_flops.json"  # lze_bench.predictor.OFFLINE_FILE (not imported: that package loads torch)
EXTERNAL = "external, not charged"
SYNTHETIC_LEVELS = (1, 6)  # lze_bench.tasks.synthetic.LEVELS: the easiest and hardest level


def synthetic_difficulty(level: np.ndarray) -> np.ndarray:
    """The synthetic task's level 1..6 on AdaRFT's 0-100 difficulty scale, linearly (1 -> 0, 6 -> 100).

    AdaRFT's labels are 100 x (1 - a reference model's success rate); the synthetic levels order the
    problems the same way (more addition steps fail more, lze_bench.tasks.synthetic), so the linear map
    keeps the authors' target update (eta = 50 moves about 2.5 levels) meaningful without a labelling pass."""
    low, high = SYNTHETIC_LEVELS
    return (np.asarray(level, dtype=np.float64) - low) * (100.0 / (high - low))


def _level(value) -> int | None:
    """MATH's "Level 3" -> 3, an int (or integral float) -> itself, anything else ("Level ?") -> None."""
    if isinstance(value, str):
        tail = value.strip().rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def row_columns(record: dict) -> dict:
    """The per-prompt columns a dataset row carries: {"level": int, "subject": str} where present."""
    out = {}
    if "level" in record and (level := _level(record["level"])) is not None:
        out["level"] = level
    subject = record.get("subject", record.get("type"))
    if isinstance(subject, str) and subject.strip():
        out["subject"] = subject.strip()
    difficulty = record.get("difficulty")
    if isinstance(difficulty, (int, float, np.integer, np.floating)) and not isinstance(difficulty, bool):
        out["difficulty"] = float(difficulty)
    return out


def dataset_columns(rows: list[dict], task_name: str) -> dict[str, np.ndarray]:
    """Columns every row has (a column some rows lack is left out), as arrays indexed by prompt id."""
    columns = {}
    for key in ("level", "subject", "difficulty"):
        values = [row.get(key) for row in rows]
        if rows and all(v is not None for v in values):
            columns[key] = np.asarray(values, dtype=object if key == "subject" else np.float64)
    if "level" in columns:
        columns["level"] = columns["level"].astype(np.int64)
        if task_name == "synthetic" and "difficulty" not in columns:
            columns["difficulty"] = synthetic_difficulty(columns["level"])
    return columns


class PromptMetadata:
    """The columns of one run: {name: array[N]}, each with its source and offline FLOPs (0: not charged)."""

    def __init__(self, num_prompts: int):
        self.num_prompts = int(num_prompts)
        self.columns: dict[str, np.ndarray] = {}
        self.sources: dict[str, str] = {}
        self.flops: dict[str, float] = {}  # per labels file: its declared cost, charged once per run
        self.labels: tuple[str, list[str]] | None = None  # (the labels file, its column names) when one was read

    def add(self, name: str, values, source: str, flops: float = 0.0) -> None:
        values = np.asarray(values)
        if values.shape != (self.num_prompts,):
            raise LzeBenchError(f"{source}: column {name!r} has {values.size} values for {self.num_prompts} "
                                "train prompts; give one per prompt, in prompt-id order")
        self.columns[name], self.sources[name], self.flops[name] = values, source, float(flops)

    @classmethod
    def for_run(cls, rows: list[dict], task_name: str, selector_cfg) -> "PromptMetadata":
        """The dataset's columns plus the labels file the selector names (`selector.labels`), if any."""
        meta = cls(len(rows))
        for name, values in dataset_columns(rows, task_name).items():
            meta.add(name, values, f"task {task_name}")
        path = getattr(selector_cfg, "labels", None)
        if path:
            meta.add_labels(path, rows)
        return meta

    def add_labels(self, path: str, rows: list[dict] | None = None) -> None:
        """Read a labels file (module docstring); its columns replace the dataset's of the same name."""
        where = f"selector.labels={path}"
        try:
            record = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise LzeBenchError(f"{where}: no such file; give the JSON labels file's path") from None
        except (OSError, ValueError) as exc:
            raise LzeBenchError(f"{where}: not readable as JSON ({exc}); write "
                                '{"columns": {"difficulty": [...]}, "flops": null}') from None
        columns = record.get("columns") if isinstance(record, dict) else None
        if not isinstance(columns, dict) or not columns:
            raise LzeBenchError(f'{where}: needs an object "columns" mapping a name to one value per prompt')
        made_for = record.get("train_fingerprint")
        if made_for and rows is not None:  # `lze-bench label` records the data it labelled: same count is not enough
            from lze_bench.fingerprint import fingerprint

            if fingerprint(rows) != made_for:
                raise LzeBenchError(f"{where}: labels made for another train split ({made_for.get('rows')} prompts, "
                                    "sha256 " + str(made_for.get("sha256"))[:12] + "); make them for this task's "
                                    "settings with lze-bench label")
        flops = record.get("flops")
        if flops is not None and not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops >= 0):
            raise LzeBenchError(f'{where}: "flops" must be a number >= 0 (the labels\' cost) or null (external)')
        for name, values in columns.items():
            try:
                array = np.asarray(values, dtype=np.float64)
            except (TypeError, ValueError):
                raise LzeBenchError(f"{where}: column {name!r} must be numbers") from None
            if array.ndim != 1 or not np.all(np.isfinite(array)):
                raise LzeBenchError(f"{where}: column {name!r} must be a flat list of finite numbers")
            self.add(name, array, f"selector.labels={path}", float(flops or 0.0))
        self.label_source = str(record.get("source") or "")
        self.labels = (path, list(columns))

    def require(self, names, selector: str) -> dict[str, np.ndarray]:
        """The columns a selector reads, or one line naming the missing one and the columns there are.

        A labels file none of whose columns the selector reads is refused too: it would be ignored without a
        word (a misspelt column name: the selector then reads the task's own column of that name)."""
        if self.labels is not None and names and not set(names) & set(self.labels[1]):
            path, have = self.labels
            expected = ", ".join(map(repr, names))
            raise LzeBenchError(f"selector.labels={path}: has column(s) {', '.join(map(repr, have))}, but selector="
                                f"{selector} reads {expected}; rename the file's column to {expected}, or point the "
                                "selector's column key (selector.column / selector.columns) at one of the file's")
        for name in names:
            if name not in self.columns:
                have = ", ".join(sorted(self.columns)) or "none"
                raise LzeBenchError(f"selector.column={name!r}: {selector} reads a per-prompt column this task does "
                                    f"not have (it has: {have}); pick one of those or give selector.labels=FILE")
        return {name: self.columns[name] for name in names}

    def offline_flops(self, read: list[str]) -> float:
        """The charged cost of the columns read: each labels file once."""
        charged = {self.sources[name]: self.flops[name] for name in read if self.flops.get(name, 0.0) > 0}
        return float(sum(charged.values()))

    def write(self, run_dir, read: list[str]) -> None:
        """`prompt_metadata.json` (every column), and `offline_flops.json` when a charged column is read."""
        from lze_bench.rundir import atomic_write_json

        def plain(values):
            return [v if isinstance(v, str) else (int(v) if float(v).is_integer() else float(v)) for v in values.tolist()]

        record = {"prompts": self.num_prompts, "read_by_selector": list(read), "columns": {
            name: {"source": self.sources[name],
                   "charge": (f"offline, {self.flops[name]:.6g} FLOPs" if self.flops[name] > 0 else EXTERNAL),
                   "dtype": "str" if values.dtype == object else str(values.dtype),
                   "values": plain(values)}
            for name, values in self.columns.items()}}
        run_dir = Path(run_dir)
        atomic_write_json(run_dir / METADATA_FILE, record)
        total = self.offline_flops(read)
        if total > 0:
            sources = sorted({self.sources[name] for name in read if self.flops[name] > 0})
            atomic_write_json(run_dir / OFFLINE_FILE, {
                "predictor": "labels", "labels": sources, "source": getattr(self, "label_source", ""),
                "flops": {"labeling": total, "total": total}})


def read_columns(run_dir) -> dict[str, np.ndarray]:
    """The columns a run recorded (`prompt_metadata.json`), {} when it has none."""
    path = Path(run_dir) / METADATA_FILE
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
        return {name: np.asarray(col["values"], dtype=object if col["dtype"] == "str" else col["dtype"])
                for name, col in record["columns"].items()}
    except (ValueError, KeyError, TypeError) as exc:
        from lze_bench.errors import damaged_file

        raise damaged_file(path, exc, "delete it and start the run again to rewrite it") from exc
