"""`lze-bench grade FILE.jsonl --out OUT.jsonl`: re-grade any predictions file.

Rows are JSON objects with `response` (the model's full text) and `gold` (a
string or number; normalized with style "auto": `#### 72` -> 72, `27.0` ->
27). Other fields are kept; each output row gains `extracted`, `correct` and
`grade_status`. So the outputs of other harnesses are graded exactly like our
own evals and training rewards; `--grading math_verify` reads answers the way
lighteval does (lze_bench.grading.math_verify_extraction) instead of from the
last `\\boxed{}`. The accuracy (and counts of timeouts, errors
and answers without a box) is printed; with `--out` the graded rows are
written atomically. A malformed row fails with the file, line and field.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from lze_bench.errors import LzeBenchError


def read_predictions(path: Path) -> list[dict]:
    if Path(path).is_dir():
        raise LzeBenchError(f"predictions file {str(path)!r} is a directory; pass the JSONL file in it "
                            "(one {response, gold} object a line), e.g. an eval run's predictions .jsonl")
    if not Path(path).is_file():
        raise LzeBenchError(f"predictions file {str(path)!r} does not exist")
    from lze_bench.jsonl import iter_objects

    rows = []
    for line_number, row in iter_objects(path, "a JSON object with fields response and gold"):
        where = f"{path}:{line_number}"
        for key in ("response", "gold"):
            if key not in row or row[key] is None:
                raise LzeBenchError(f"{where}: field {key!r} is missing (rows need response and gold)")
        if not isinstance(row["response"], str):
            raise LzeBenchError(f"{where}: field 'response' must be a string")
        _check_gold(row["gold"], where)
        rows.append(row)
    return rows


def _check_gold(gold, where: str) -> None:
    from lze_bench.grading import normalize_gold

    if isinstance(gold, (dict, list)):
        raise LzeBenchError(f"{where}: field 'gold' must be a string or a number")
    try:
        normalize_gold(gold, "auto")
    except ValueError as exc:
        raise LzeBenchError(f"{where}: field 'gold': {exc}") from None


def grade_file(path: Path, out: Path | None = None, *, timeout_s: float = 5.0, workers: int = 0,
               mode: str = "boxed") -> dict:
    """Grade every row; print and return {graded, correct, accuracy, timeouts, errors, no_answer}."""
    import typer

    from lze_bench.grading import GRADING_MODES, Grader
    from lze_bench.rundir import atomic_write_text

    if mode not in GRADING_MODES:
        raise LzeBenchError(f"--grading: unknown grading mode {mode!r}; use one of {', '.join(GRADING_MODES)}")
    rows = read_predictions(Path(path))
    if timeout_s <= 0:
        raise LzeBenchError(f"--timeout must be > 0, got {timeout_s}")
    with Grader(timeout_s=timeout_s, workers=workers, mode=mode) as grader:
        grades = grader.grade([r["response"] for r in rows], [r["gold"] for r in rows])
    statuses = [g.status for g in grades]
    correct = sum(g.correct for g in grades)
    result = {
        "graded": len(rows), "correct": correct, "accuracy": correct / len(rows) if rows else float("nan"),
        "timeouts": statuses.count("timeout"), "errors": statuses.count("error"),
        "no_answer": statuses.count("no_answer"),
    }
    if out is not None:
        buffer = io.StringIO()
        for row, grade in zip(rows, grades):
            graded = {**row, "extracted": grade.extracted, "correct": grade.correct, "grade_status": grade.status}
            buffer.write(json.dumps(graded, ensure_ascii=False) + "\n")
        atomic_write_text(out, buffer.getvalue())
    typer.echo(
        f"accuracy: {result['accuracy']:.4f} ({correct}/{len(rows)}); timeouts {result['timeouts']}, "
        f"errors {result['errors']}, {'no boxed answer' if mode == 'boxed' else 'no answer'} {result['no_answer']}"
        + (f" (grading {mode})" if mode != "boxed" else "") + (f"; graded rows: {out}" if out else "")
    )
    return result
