"""What a run's data was: a fingerprint of its rows in `<run_dir>/data.json`, checked on every resume.

A resume replays the saved data order (data_order.py: a permutation of prompt
ids 0..N-1) against the rows loaded *now*. The config alone does not pin those
rows: a dataset file under `data.root` can be replaced, a hub copy updated, a
generator's code changed. Resuming on other rows would silently train the
second half of a run on other prompts (or, with another N, on a different
permutation). So the first start writes, per part (`train`, and the held-out
or benchmark rows the run's own evals read), the number of rows and a SHA-256
of the rows' (id, problem, answer), and every later start compares.

Choices:
* the hash covers exactly what a step sees (id, problem, answer), in row order
  (ids are row positions); extra fields (level, solution) only label results;
* a run directory written before this file existed gets one on its next start
  (there is nothing to compare against then);
* a part the new start does not load is not checked (it is kept as recorded).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from lze_bench.errors import LzeBenchError, damaged_file

DATA_FILE = "data.json"


def fingerprint(rows) -> dict:
    """{"rows": N, "sha256": hex} of rows {id, problem, answer}, in order."""
    digest = hashlib.sha256()
    for row in rows:
        line = json.dumps([str(row["id"]), str(row["problem"]), str(row["answer"])], ensure_ascii=False)
        digest.update(line.encode("utf-8") + b"\n")
    return {"rows": len(rows), "sha256": digest.hexdigest()}


def check_data(run_dir: str | os.PathLike, parts: dict[str, dict], where: str) -> None:
    """Refuse a start whose data differs from the one the run directory recorded, else (re)write the record.

    `parts`: part name -> {"rows", "sha256"} (fingerprint); `where`: the config keys that chose the data
    (`task=math data.root=...`), for the message."""
    from lze_bench.rundir import atomic_write_json

    path = Path(run_dir) / DATA_FILE
    recorded = _read(path)
    for part, now in parts.items():
        was = recorded.get(part)
        if was is not None and (was.get("rows"), was.get("sha256")) != (now["rows"], now["sha256"]):
            raise LzeBenchError(
                f"{path}: the run started on {_describe(was)} {part} rows and {where} now gives {_describe(now)}; "
                "resuming would train on other data: restore the data it started with, or start over in a new "
                "run_dir=PATH")
    if {**recorded, **parts} != recorded:
        atomic_write_json(path, {**recorded, **parts})


def _describe(part: dict) -> str:
    return f"{part.get('rows')} (sha256 {str(part.get('sha256'))[:12]})"


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError("not an object of {rows, sha256} objects")
    except (ValueError, UnicodeDecodeError) as exc:
        raise damaged_file(path, exc, "restore it from a copy, or delete it to accept the data as it is now "
                                      "(nothing then checks that it is the data the run started on)") from exc
    return data
