"""`lze-bench eval`: generate, grade and score every benchmark of a suite.

    lze-bench eval model=PATH_OR_HF_ID eval=math_suite     one checkpoint
    lze-bench eval run=RUN_DIR eval=math_suite             every complete checkpoint of a run

Outputs per checkpoint (design.md "The run directory"): `<out>/<benchmark>.jsonl`
(one row per sample: prompt, response, extracted answer, correct, tokens) and
`<out>/summary.json` + `summary.csv` (one entry per benchmark: metrics, the
sampling settings, token and time counts). `<out>` is `<run>/evals/<checkpoint>/`
for a run, else `out_dir` or `runs/eval/<model>/`. For a run, each checkpoint's
rows are appended to `<run>/evals.parquet` (ledger.append_eval_rows) with the
run's `cum_flops` at that step, so reports plot accuracy against FLOPs.

Resumable: a (checkpoint, benchmark) pair whose summary entry has the same
settings hash and whose JSONL exists is skipped; the model is not even loaded
when every pair of a checkpoint is done. One Grader (process pool) serves the
whole command.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import re
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.rundir import EVALS, atomic_write_json, atomic_write_text, list_checkpoints

logger = logging.getLogger(__name__)

SUMMARY = "summary.json"
SUMMARY_CSV = "summary.csv"


@dataclass(frozen=True)
class Target:
    step: int | None  # training step of a run's checkpoint; None for model=PATH
    checkpoint: str  # checkpoint directory name, or the model path / hub id
    path: str
    out_dir: Path


def run_eval(cfg, show: bool = True) -> list[dict]:
    """Evaluate; returns one summary entry per (checkpoint, benchmark).

    show=False (library callers) hides the progress bars and the final table.
    """
    from lze_bench.config import to_objects
    from lze_bench.grading import Grader

    options = to_objects(cfg)
    targets = find_targets(options)
    settings = eval_settings(options)
    entries: list[dict] = []
    with Grader(timeout_s=options.grading.timeout_s, workers=options.grading.workers) as grader, _progress(show) as progress:
        for target in targets:
            done = evaluate_target(target, options, settings, grader, progress)
            entries += done
            if options.run:
                append_to_run(Path(options.run), target, done)
    if show:
        print_summary(entries, targets)
    return entries


def find_targets(options) -> list[Target]:
    if options.run:
        if options.model.path:
            raise LzeBenchError("pass either model=PATH_OR_HF_ID or run=RUN_DIR, not both")
        run = Path(options.run)
        if not run.is_dir():
            raise LzeBenchError(f"run={options.run!r} is not a directory")
        found = list_checkpoints(run)
        if not found:
            raise LzeBenchError(f"run {options.run!r} has no complete checkpoint (checkpoints/step_*/COMPLETE)")
        root = Path(options.out_dir) if options.out_dir else run / EVALS
        return [Target(step, path.name, str(path), root / path.name) for step, path in found]
    if not options.model.path:
        raise LzeBenchError("nothing to evaluate: pass model=PATH_OR_HF_ID (a checkpoint or hub id) or run=RUN_DIR")
    path = options.model.path
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.strip("/"))[-80:] or "model"
    out = Path(options.out_dir) if options.out_dir else Path("runs") / "eval" / tag
    return [Target(None, path, path, out)]


def eval_settings(options) -> dict:
    """Everything that changes a benchmark's result (recorded, and hashed for resuming)."""
    suite = asdict(options.eval)
    suite.pop("benchmarks")
    suite["limit"] = options.limit or options.eval.limit
    return {
        "suite": suite, "seed": options.seed, "generation_backend": options.generation.backend,
        "dtype": options.generation.dtype, "grading_timeout_s": options.grading.timeout_s,
    }


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def evaluate_target(target: Target, options, settings: dict, grader, progress) -> list[dict]:
    summary = read_summary(target.out_dir)
    digest = settings_hash(settings)
    todo = [
        name for name in options.eval.benchmarks
        if summary.get(name, {}).get("settings_hash") != digest or not (target.out_dir / f"{name}.jsonl").exists()
    ]
    skipped = [name for name in options.eval.benchmarks if name not in todo]
    if skipped:
        logger.info("%s: already evaluated with these settings: %s", target.checkpoint, ", ".join(skipped))
    if todo:
        from lze_bench.evaluation.generation import load_generator

        generator = load_generator(
            target.path, backend=options.generation.backend, device=options.device, dtype=options.generation.dtype,
            batch_size=options.generation.batch_size, use_chat_template=options.eval.use_chat_template,
            seed=options.seed,
        )
        try:
            for name in todo:
                entry = evaluate_benchmark(name, target, generator, options, settings, grader, progress)
                summary[name] = {**entry, "settings_hash": digest}
                write_summary(target.out_dir, summary)
        finally:
            generator.close()
    return [summary[name] for name in options.eval.benchmarks]


def evaluate_benchmark(name: str, target: Target, generator, options, settings: dict, grader, progress) -> dict:
    from lze_bench.data import get_spec, load_benchmark
    from lze_bench.evaluation.generation import Sampling
    from lze_bench.evaluation.metrics import summarize

    suite = options.eval
    spec = get_spec(name)
    rows = load_benchmark(name, root=options.data.root, split=suite.split, limit=settings["suite"]["limit"])
    messages = [spec.prompt(row["problem"], suite.prompt_template) for row in rows]
    seed = options.seed * 1_000_003 + zlib.crc32(name.encode())  # per benchmark: resumable and independent
    sampling = Sampling(suite.n_samples, suite.temperature, suite.top_p, suite.max_new_tokens, seed % 2**31)
    task = progress.add_task(f"{target.checkpoint[-40:]} {name}", total=len(rows))
    tokens_before, time_before = generator.generated_tokens, generator.generate_s
    results = generator.generate(messages, sampling, progress=lambda done: progress.advance(task, done))
    started = time.perf_counter()
    responses = [c.text for result in results for c in result.completions]
    golds = [row["answer"] for row in rows for _ in range(suite.n_samples)]
    grades = grader.grade(responses, golds)
    grade_s = time.perf_counter() - started
    correct = np.array([g.correct for g in grades], dtype=bool).reshape(len(rows), suite.n_samples)
    answers = [[g.extracted for g in grades[i * suite.n_samples : (i + 1) * suite.n_samples]] for i in range(len(rows))]
    write_samples(target.out_dir / f"{name}.jsonl", name, rows, results, grades)
    generated = generator.generated_tokens - tokens_before
    generate_s = generator.generate_s - time_before
    statuses = [g.status for g in grades]
    return {
        "benchmark": name, "checkpoint": target.checkpoint, "step": target.step, "model": target.path,
        "suite": suite.name, **summarize(correct, answers, suite.ks, seed=options.seed),
        "generated_tokens": generated, "generate_s": generate_s,
        "tokens_per_s": generated / generate_s if generate_s > 0 else None, "grade_s": grade_s,
        "grade_timeouts": statuses.count("timeout"), "grade_errors": statuses.count("error"),
        "no_answer": statuses.count("no_answer"), "truncated_prompts": sum(r.truncated for r in results),
        "max_new_tokens_used": min((r.max_new_tokens for r in results), default=None),
        "generation_backend": generator.name, "device": options.device, "settings": settings,
    }


def write_samples(path: Path, name: str, rows: list[dict], results, grades) -> None:
    buffer = io.StringIO()
    position = 0
    for row, result in zip(rows, results):
        for sample, completion in enumerate(result.completions):
            grade = grades[position]
            position += 1
            record = {
                "benchmark": name, "id": row["id"], "sample": sample, "prompt": result.prompt,
                "response": completion.text, "gold": row["answer"], "extracted": grade.extracted,
                "correct": grade.correct, "grade_status": grade.status, "prompt_tokens": result.prompt_tokens,
                "response_tokens": completion.tokens, "finish": completion.finish, "prompt_truncated": result.truncated,
            }
            buffer.write(json.dumps(record, ensure_ascii=False) + "\n")
    atomic_write_text(path, buffer.getvalue())


def read_summary(out_dir: Path) -> dict:
    path = out_dir / SUMMARY
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        logger.warning("%s is not valid JSON; evaluating again", path)
        return {}


CSV_COLUMNS = ("benchmark", "checkpoint", "step", "num_problems", "samples_per_problem", "accuracy", "ci_low",
               "ci_high", "ci_method", "generated_tokens", "tokens_per_s", "grade_timeouts", "grade_errors")


def write_summary(out_dir: Path, summary: dict) -> None:
    atomic_write_json(out_dir / SUMMARY, summary)
    metric_keys = sorted({k for entry in summary.values() for k in entry if k.startswith(("pass@", "maj@"))})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*CSV_COLUMNS, *metric_keys], extrasaction="ignore")
    writer.writeheader()
    for entry in summary.values():
        writer.writerow(entry)
    atomic_write_text(out_dir / SUMMARY_CSV, buffer.getvalue())


def append_to_run(run: Path, target: Target, entries: list[dict]) -> None:
    """One evals.parquet row per benchmark (EVAL_COLUMNS + suite, settings_hash, cum_flops)."""
    from lze_bench.ledger import append_eval_rows, read_evals

    cum_flops = _cum_flops_at(run, target.step)
    rows = []
    for entry in entries:
        k = max(int(key.split("@")[1]) for key in entry if key.startswith("pass@"))
        rows.append({
            "step": target.step, "checkpoint": target.checkpoint, "benchmark": entry["benchmark"],
            "num_problems": entry["num_problems"], "samples_per_problem": entry["samples_per_problem"],
            "accuracy": entry["accuracy"], "ci_low": entry["ci_low"], "ci_high": entry["ci_high"],
            "pass_at_k": entry[f"pass@{k}"], "maj_at_k": entry[f"maj@{k}"], "k": k,
            "suite": entry["suite"], "settings_hash": entry["settings_hash"], "cum_flops": cum_flops,
        })
    from lze_bench.tracking import log_evals

    old = read_evals(run)  # to the run's logger=[...]: only rows evals.parquet does not hold yet
    log_evals(run, rows, recorded=zip(old["checkpoint"], old["benchmark"],
                                      old.get("settings_hash", [None] * len(old))))
    append_eval_rows(run, rows)


def _cum_flops_at(run: Path, step: int | None) -> float:
    """The run's cumulative FLOPs when checkpoint `step_K` was saved (K = `step` updates done).

    Ledger steps count from 0 and checkpoint step_K holds the policy after K
    updates, i.e. after ledger row K-1; K = 0 (the initial policy) costs 0.
    NaN without a ledger.
    """
    from lze_bench.ledger import LEDGER_FILE, read_ledger

    if step is None or not (run / LEDGER_FILE).exists():
        return float("nan")
    ledger = read_ledger(run)
    done = ledger[ledger["step"] < step]
    return float(done["cum_flops"].iloc[-1]) if len(done) else 0.0


def _progress(show: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, disable=not show)


def print_summary(entries: list[dict], targets: list[Target]) -> None:
    """CLI-facing: one table row per (checkpoint, benchmark), then where the files are."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lze-bench eval")
    for column in ("checkpoint", "benchmark", "problems", "n", "accuracy", "95% CI", "tokens/s"):
        table.add_column(column, justify="right")
    for e in entries:
        speed = f"{e['tokens_per_s']:.1f}" if e.get("tokens_per_s") else "-"
        table.add_row(str(e["checkpoint"])[-40:], e["benchmark"], str(e["num_problems"]), str(e["samples_per_problem"]),
                      f"{e['accuracy']:.4f}", f"[{e['ci_low']:.3f}, {e['ci_high']:.3f}]", speed)
    console = Console(width=max(120, Console().width))
    console.print(table)
    for target in targets:
        console.print(f"outputs: {target.out_dir}")
