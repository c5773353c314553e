"""Load a benchmark by name -> rows {id, problem, answer} (design.md "Data").

Where rows come from, first match wins:
1. the data root: `data.root`, else env LZE_BENCH_DATA (config.env_data_root);
   layout as tests/data: `<root>/<name>/<split>.jsonl` (or `.parquet`);
2. a generated source (`BenchmarkSpec.loader`, e.g. the synthetic task);
3. the Hugging Face hub (`datasets` imported here only; install the `hub` extra).
Nothing is downloaded when the local file exists, so tests and CI never touch
the network.

Every row is checked as it is read: a row that is not JSON, lacks a field, has
an empty problem or a gold answer its normalizer rejects raises one
LzeBenchError naming the file, the line (1-based) and the field. `answer` is
the normalized gold string (lze_bench.grading.normalize_gold); ids are strings
(the id field, else the row's 0-based position). Field names may be dotted
paths with list indexes (`reward_model.ground_truth`, `prompt.0.content`).
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Iterable

from lze_bench.errors import LzeBenchError, missing_dependency
from lze_bench.grading import normalize_gold
from lze_bench.registry import BENCHMARKS

logger = logging.getLogger(__name__)


def get_spec(name: str):
    import lze_bench.benchmarks  # noqa: F401  (fills BENCHMARKS)

    return BENCHMARKS[name]


def local_path(root: str | Path, name: str, split: str) -> Path | None:
    """`<root>/<name>/<split>.jsonl` or `.parquet`, whichever exists (None if neither)."""
    for suffix in (".jsonl", ".parquet"):
        path = Path(root) / name / f"{split}{suffix}"
        if path.is_file():
            return path
    return None


def load_benchmark(name: str, *, root: str | None = None, split: str | None = None, limit: int | None = None,
                   cfg: Any = None) -> list[dict]:
    """Rows {id, problem, answer} of benchmark `name` (first `limit` rows in file order)."""
    from lze_bench.config import env_data_root

    spec = get_spec(name)
    split = split or spec.split
    root = env_data_root(root)
    path = local_path(root, name, split) if root else None
    if path is not None:
        rows = read_file(path, spec)
    elif spec.loader:
        rows = _from_loader(spec, split, cfg)
    elif spec.hub_id:
        rows = _from_hub(spec, root, split)
    else:
        raise LzeBenchError(f"benchmark {name!r}: no file {root}/{name}/{split}.jsonl and no hub id; set data.root")
    if spec.expected_rows and split == spec.split and len(rows) != spec.expected_rows:
        logger.warning("benchmark %s has %d rows (expected %d)", name, len(rows), spec.expected_rows)
    return rows[:limit] if limit else rows


def read_file(path: Path, spec) -> list[dict]:
    """Rows of a local .jsonl or .parquet file, checked one by one."""
    path = Path(path)
    fields = {"problem": spec.problem_field, "answer": spec.answer_field, "id": spec.id_field}
    if path.suffix == ".parquet":
        import pandas as pd

        records = pd.read_parquet(path).to_dict("records")
        return [to_row(r, fields, spec.gold_style, f"{path}: row {i}", i) for i, r in enumerate(records)]
    from lze_bench.jsonl import iter_objects

    rows = []
    for line_number, record in iter_objects(path):
        rows.append(to_row(record, fields, spec.gold_style, f"{path}:{line_number}", len(rows)))
    return rows


def to_row(record: Any, fields: dict, gold_style: str, where: str, position: int) -> dict:
    """One checked row {id, problem, answer}; `where` names the file and line in errors."""
    if not isinstance(record, dict):
        raise LzeBenchError(f"{where}: expected a JSON object, got {type(record).__name__}")
    problem = _field(record, fields["problem"], where)
    if not isinstance(problem, str) or not problem.strip():
        raise LzeBenchError(f"{where}: field {fields['problem']!r} (the problem) must be a non-empty string")
    raw_answer = _field(record, fields["answer"], where)
    try:
        answer = normalize_gold(raw_answer, gold_style)
    except ValueError as exc:
        raise LzeBenchError(f"{where}: field {fields['answer']!r} (the gold answer): {exc}") from None
    row_id = _field(record, fields["id"], where) if fields.get("id") else position
    from lze_bench.metadata import row_columns

    # fixed per-prompt columns the data carries (MATH's level and subject): selectors may read them
    return {"id": str(row_id), "problem": problem, "answer": answer, **row_columns(record)}


def _field(record: dict, dotted: str, where: str):
    value: Any = record
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, (list, tuple)) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif hasattr(value, "__getitem__") and not isinstance(value, (str, dict)) and part.isdigit():
            try:  # numpy arrays from parquet
                value = value[int(part)]
            except (IndexError, KeyError):
                raise LzeBenchError(f"{where}: field {dotted!r} is missing") from None
        else:
            keys = ", ".join(sorted(map(str, record))) if isinstance(record, dict) else ""
            raise LzeBenchError(f"{where}: field {dotted!r} is missing (row has: {keys})")
    return value


def _from_loader(spec, split: str, cfg) -> list[dict]:
    module_name, function_name = spec.loader.split(":")
    module = importlib.import_module(module_name)
    function = getattr(module, function_name, None)
    if function is None:
        raise LzeBenchError(f"benchmark {spec.name!r} needs {module_name}.{function_name}, which this version lacks")
    fields = {"problem": "problem", "answer": "answer", "id": "id"}
    return [to_row(r, fields, spec.gold_style, f"{spec.loader} row {i}", i) for i, r in enumerate(function(split, cfg))]


def _from_hub(spec, root: str | None, split: str) -> list[dict]:
    where_local = f"{root}/{spec.name}/{split}.jsonl" if root else f"<data.root>/{spec.name}/{split}.jsonl"
    try:
        import datasets
    except ImportError:
        raise missing_dependency(
            "datasets", extra="hub", why=f"benchmark {spec.name!r} is not at {where_local}; set data.root or LZE_BENCH_DATA"
        ) from None
    fields = {"problem": spec.problem_field, "answer": spec.answer_field, "id": spec.id_field, **spec.hub_fields}
    rows: list[dict] = []
    for config in spec.hub_configs:
        try:
            # the spec's hub split stands for its default split; other splits keep their name
            table = datasets.load_dataset(spec.hub_id, config, split=spec.hub_split if split == spec.split else split)
        except Exception as exc:  # offline, unknown id, gated: one line with the fix
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise LzeBenchError(
                f"benchmark {spec.name!r}: could not load {spec.hub_id} from the Hugging Face hub ({first}); "
                f"put the file at {where_local} or set data.root / LZE_BENCH_DATA"
            ) from None
        rows += _rows(table, fields, spec.gold_style, f"hub {spec.hub_id}" + (f"[{config}]" if config else ""), len(rows))
    return rows


def _rows(records: Iterable[dict], fields: dict, gold_style: str, source: str, offset: int) -> list[dict]:
    return [to_row(r, fields, gold_style, f"{source} row {i}", offset + i) for i, r in enumerate(records)]
