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
    with open(path, "rb") as handle:  # bytes: a line that is not UTF-8 is named by its number, not a traceback
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise LzeBenchError(f"{path}:{number}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                                    f"{exc.start + 1}); save the file as UTF-8") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise LzeBenchError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise LzeBenchError(f"{path}:{number}: expected {expected}, got {type(record).__name__}")
            yield number, record
