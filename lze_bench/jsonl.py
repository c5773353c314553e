"""Reading JSONL files whose every line must be a JSON object, with one-line errors.

Shared by dataset loading, `lze-bench grade` and `lze-bench replay`: each says
which fields it needs; this module only guarantees that a bad line fails with
its file and 1-based line number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from lze_bench.errors import LzeBenchError


def iter_objects(path: str | Path, expected: str = "a JSON object") -> Iterator[tuple[int, dict]]:
    """(line number, record) for every non-blank line; `expected` describes a valid line in errors."""
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise LzeBenchError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise LzeBenchError(f"{path}:{number}: expected {expected}, got {type(record).__name__}")
            yield number, record
