"""Training tasks from real math datasets: rows {id, problem, answer} for the scale path.

Registered names (`task=NAME`):

* `math`          MATH train (Hendrycks et al.), 7,500 problems: the set the LZE
                  launcher trains Qwen2.5-Math-1.5B on (selectors.md §5 "Launcher
                  facts"); hub copy `DigitalLearningGmbH/MATH-lighteval`, gold = the
                  last `\\boxed{}` of the solution.
* `dapo_math_17k` DAPO-Math-17k, deduplicated (17,917 rows, integer answers), local
                  parquet copy under data.root (tests/data/dapo_math_17k/SOURCE.md): the offline fallback.
* `gsm8k`         GSM8K train (7,473 rows).

Rows come from `lze_bench.data.load_benchmark`, the loader `lze-bench eval`
uses (the dataset entries live in lze_bench/benchmarks.py):
`data.root` (else env LZE_BENCH_DATA) holding `<root>/<dataset>/<split>.jsonl|.parquet`,
else the Hugging Face hub. Every row is checked with file, line and field.

Prompt ids are row indices 0..N-1 of the loaded (and `limit`-cut) rows, stable
across epochs (selectors.md notation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.registry import TASKS


@dataclass
class DatasetTaskConfig:
    name: str = "math"
    dataset: str = "math"  # entry of the benchmark registry: <data.root>/<dataset>/<split>.*, else its hub id
    split: str = "train"
    limit: Optional[int] = None  # first `limit` rows only (null = all)

    def __post_init__(self):
        if self.limit is not None:
            require(self.limit > 0, "task.limit", f"must be > 0 or null, got {self.limit}")


@dataclass
class MathTaskConfig(DatasetTaskConfig):
    name: str = "math"
    dataset: str = "math"


@dataclass
class DapoMathTaskConfig(DatasetTaskConfig):
    name: str = "dapo_math_17k"
    dataset: str = "dapo_math_17k"


@dataclass
class Gsm8kTaskConfig(DatasetTaskConfig):
    name: str = "gsm8k"
    dataset: str = "gsm8k"


class DatasetTask:
    """A prompt set with verifiable answers; `load(cfg, root)` -> [{id, problem, answer}]."""

    Config = DatasetTaskConfig

    @classmethod
    def load(cls, task_cfg, data_root: Optional[str]) -> list[dict]:
        from lze_bench.data import load_benchmark

        rows = load_benchmark(task_cfg.dataset, root=data_root, split=task_cfg.split, limit=task_cfg.limit)
        if not rows:
            raise LzeBenchError(f"task {task_cfg.name}: no rows loaded from {task_cfg.dataset!r} ({task_cfg.split})")
        keep = ("level", "subject", "difficulty")  # per-prompt columns (lze_bench.metadata), where the data has them
        return [{"id": index, "problem": row["problem"], "answer": row["answer"], **{k: row[k] for k in keep if k in row}}
                for index, row in enumerate(rows)]


@TASKS.add("math")
class MathTask(DatasetTask):
    Config = MathTaskConfig


@TASKS.add("dapo_math_17k")
class DapoMathTask(DatasetTask):
    Config = DapoMathTaskConfig


@TASKS.add("gsm8k")
class Gsm8kTask(DatasetTask):
    Config = Gsm8kTaskConfig
