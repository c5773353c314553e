"""Training tasks from real math datasets: rows {id, problem, answer} for the scale path.

Registered names (`task=NAME`):

* `math`          MATH train (Hendrycks et al.), 7,500 problems: the set the LZE
                  launcher trains Qwen2.5-Math-1.5B on (selectors.md §5 "Launcher
                  facts"). Our choice of copy: the hub dataset
                  `DigitalLearningGmbH/MATH-lighteval` (split `train`, fields
                  problem/solution/level/type), because the PRM800K split is only a
                  Git LFS pointer (shared/data/README.md). The gold answer is the
                  last `\\boxed{}` of `solution`, extracted with the grading module's
                  own extractor so training and evaluation read answers alike.
* `dapo_math_17k` DAPO-Math-17k, deduplicated (17,917 rows, integer answers), local
                  parquet copy in shared/data: the **local fallback** when the hub is
                  unreachable (this machine, CI).
* `gsm8k`         GSM8K train (7,473 rows), local JSONL copy in shared/data.

Where rows come from: `data.root` (else env LZE_BENCH_DATA) holding
`<root>/<task folder>/<split>.jsonl|.parquet`; else the Hugging Face hub through
the `datasets` package when the task names a hub id. The evaluation issue's
`lze_bench/data.py` (load by name) did not exist when this was written, so this
module has its own minimal reader; switch to it once it lands.

Prompt ids are row indices 0..N-1 of the loaded (and `limit`-cut) rows, stable
across epochs (selectors.md notation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.registry import TASKS


@dataclass
class DatasetTaskConfig:
    name: str = "math"
    dataset: str = "DigitalLearningGmbH/MATH-lighteval"  # hub id (used when no local copy exists)
    folder: str = "math"  # local copy: <data.root>/<folder>/<split>.jsonl or .parquet
    split: str = "train"
    limit: Optional[int] = None  # first `limit` rows only (null = all)

    def __post_init__(self):
        if self.limit is not None:
            require(self.limit > 0, "task.limit", f"must be > 0 or null, got {self.limit}")


@dataclass
class MathTaskConfig(DatasetTaskConfig):
    name: str = "math"


@dataclass
class DapoMathTaskConfig(DatasetTaskConfig):
    name: str = "dapo_math_17k"
    dataset: str = ""  # the hub original repeats each prompt 100x; only the deduplicated local copy is supported
    folder: str = "dapo_math_17k"


@dataclass
class Gsm8kTaskConfig(DatasetTaskConfig):
    name: str = "gsm8k"
    dataset: str = "openai/gsm8k"
    folder: str = "gsm8k"


def _gold_from_solution(solution: str) -> str:
    from lze_bench.grading import extract_answer

    return extract_answer(solution) or ""


def _row_math(raw: dict) -> tuple[str, str]:
    answer = raw.get("answer") or _gold_from_solution(str(raw.get("solution", "")))
    return str(raw["problem"]), str(answer)


def _row_dapo(raw: dict) -> tuple[str, str]:
    prompt = raw["prompt"]
    text = prompt[0]["content"] if not isinstance(prompt, str) else prompt
    return str(text), str(raw["reward_model"]["ground_truth"])


def _row_gsm8k(raw: dict) -> tuple[str, str]:
    answer = str(raw["answer"]).rsplit("####", 1)[-1].strip().replace(",", "")
    return str(raw["question"]), answer


class DatasetTask:
    """A prompt set with verifiable answers; `load(cfg, root)` -> [{id, problem, answer}]."""

    Config = DatasetTaskConfig
    parse_row = staticmethod(_row_math)
    hub_config: Optional[str] = None  # `datasets.load_dataset(name, hub_config)`

    @classmethod
    def load(cls, task_cfg, data_root: Optional[str]) -> list[dict]:
        raws = cls._read_raw(task_cfg, data_root)
        rows = []
        for index, raw in enumerate(raws):
            problem, answer = cls.parse_row(raw)
            if not answer:
                raise LzeBenchError(f"task {task_cfg.name}: row {index} has no gold answer; fix the data file")
            rows.append({"id": index, "problem": problem, "answer": answer})
            if task_cfg.limit is not None and len(rows) >= task_cfg.limit:
                break
        if not rows:
            raise LzeBenchError(f"task {task_cfg.name}: no rows loaded")
        return rows

    @classmethod
    def _read_raw(cls, task_cfg, data_root: Optional[str]):
        if data_root:
            base = Path(data_root) / task_cfg.folder
            for path in (base / f"{task_cfg.split}.jsonl", base / f"{task_cfg.split}.parquet"):
                if path.exists():
                    return _read_file(path)
        if not task_cfg.dataset:
            raise LzeBenchError(
                f"task {task_cfg.name}: no local copy at {data_root or '(data.root unset)'}/{task_cfg.folder}/"
                f"{task_cfg.split}.jsonl|.parquet; set data.root=DIR to the folder that holds it"
            )
        return _read_hub(task_cfg, cls.hub_config, data_root)


def _read_file(path: Path):
    if path.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _read_hub(task_cfg, hub_config, data_root):
    try:
        import datasets
    except ModuleNotFoundError as exc:
        raise LzeBenchError(
            f"task {task_cfg.name}: no local copy under data.root={data_root!r} and the `datasets` package is not "
            f"installed to fetch {task_cfg.dataset!r}; set data.root=DIR or pip install datasets"
        ) from exc
    try:
        return list(datasets.load_dataset(task_cfg.dataset, hub_config, split=task_cfg.split))
    except Exception as exc:  # no network, unknown split: one line
        raise LzeBenchError(
            f"task {task_cfg.name}: could not load {task_cfg.dataset!r} split {task_cfg.split!r} from the hub "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); set data.root=DIR to a local copy"
        ) from exc


@TASKS.add("math")
class MathTask(DatasetTask):
    Config = MathTaskConfig


@TASKS.add("dapo_math_17k")
class DapoMathTask(DatasetTask):
    Config = DapoMathTaskConfig
    parse_row = staticmethod(_row_dapo)


@TASKS.add("gsm8k")
class Gsm8kTask(DatasetTask):
    Config = Gsm8kTaskConfig
    parse_row = staticmethod(_row_gsm8k)
    hub_config = "main"
